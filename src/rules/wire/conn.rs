// SPDX-License-Identifier: GPL-2.0

//! Connection parameters, carried in rdma_cm private data: what a requester asks, what an
//! accept grants, and a reject's own limits.

use super::{
    codec::{
        get_u16,
        get_u32,
        get_u64,
        put, //
    },
    inline_fits,
    msg::WireError,
    CONN_MAGIC,
    MAX_INLINE,
    MAX_MSG,
    MIN_MSG, //
};

/// Feature bit: the sender can be remotely invalidated (`IB_WR_SEND_WITH_INV`).
pub(crate) const FEATURE_REMOTE_INV: u32 = 1 << 0;
/// Feature bit: the sender checksums its messages.
pub(crate) const FEATURE_CHECKSUM: u32 = 1 << 1;
/// Every feature this code knows.
pub(crate) const FEATURES: u32 = FEATURE_REMOTE_INV | FEATURE_CHECKSUM;

/// Connection parameters: carried in the private data of a connection request (what the
/// requester asks for), of the accept (what was granted), and of a reject (the rejecting
/// side's own limits). 48 bytes: within the 56 bytes of an IB/RoCE REQ.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ConnParams {
    /// Protocol version.
    pub(crate) version: u16,
    /// Transfers in flight (and credits).
    pub(crate) queue_depth: u16,
    /// Most registrations in one transfer message.
    pub(crate) max_regs: u16,
    /// Largest transfer in bytes.
    pub(crate) max_payload: u32,
    /// Largest message in bytes.
    pub(crate) max_msg: u32,
    /// The sender's `PAGE_SIZE`: informational, nothing depends on it.
    pub(crate) page_size: u32,
    /// Feature bits.
    pub(crate) features: u32,
    /// Reject reason (0 in requests and accepts).
    pub(crate) reason: u8,
    /// The port the sender's interface listens on (0: unknown). With the source address
    /// of the connection, it names the interface that connects, so the receiver can tell
    /// a restarted peer (same interface, new `stamp`) and close its stale connections.
    pub(crate) port: u16,
    /// Most bytes of a transfer carried inline, in its messages (0: none), within what
    /// `max_msg` leaves ([`inline_fits`]) and within `max_payload`.
    pub(crate) max_inline: u16,
    /// The sender's incarnation.
    pub(crate) stamp: u64,
    /// The incarnation of the receiver the sender believes it talks to (0 if unknown).
    pub(crate) dst_stamp: u64,
}

/// Size of encoded [`ConnParams`].
pub(crate) const CONN_LEN: usize = 48;

impl ConnParams {
    /// Encodes into 48 bytes.
    pub(crate) fn encode(&self) -> [u8; CONN_LEN] {
        let mut b = [0u8; CONN_LEN];
        put(&mut b, 0, &CONN_MAGIC.to_le_bytes());
        b[4] = CONN_LEN as u8;
        b[5] = self.reason;
        put(&mut b, 6, &self.version.to_le_bytes());
        put(&mut b, 8, &self.queue_depth.to_le_bytes());
        put(&mut b, 10, &self.max_regs.to_le_bytes());
        put(&mut b, 12, &self.max_payload.to_le_bytes());
        put(&mut b, 16, &self.max_msg.to_le_bytes());
        put(&mut b, 20, &self.page_size.to_le_bytes());
        put(&mut b, 24, &self.features.to_le_bytes());
        put(&mut b, 28, &self.port.to_le_bytes());
        put(&mut b, 30, &self.max_inline.to_le_bytes());
        put(&mut b, 32, &self.stamp.to_le_bytes());
        put(&mut b, 40, &self.dst_stamp.to_le_bytes());
        b
    }

    /// Decodes from private data (which rdma_cm pads to the size of its slot).
    pub(crate) fn decode(b: &[u8]) -> Result<Self, WireError> {
        if b.len() < CONN_LEN {
            return Err(WireError::Short);
        }
        if get_u32(b, 0) != CONN_MAGIC {
            return Err(WireError::Magic);
        }
        if usize::from(b[4]) != CONN_LEN {
            return Err(WireError::Length);
        }
        let p = ConnParams {
            reason: b[5],
            version: get_u16(b, 6),
            queue_depth: get_u16(b, 8),
            max_regs: get_u16(b, 10),
            max_payload: get_u32(b, 12),
            max_msg: get_u32(b, 16),
            page_size: get_u32(b, 20),
            features: get_u32(b, 24),
            port: get_u16(b, 28),
            max_inline: get_u16(b, 30),
            stamp: get_u64(b, 32),
            dst_stamp: get_u64(b, 40),
        };
        if p.version == 0 {
            return Err(WireError::Version);
        }
        if p.queue_depth == 0
            || p.max_regs == 0
            || p.max_payload == 0
            || p.max_msg < MIN_MSG
            || p.max_msg > MAX_MSG
            || !p.page_size.is_power_of_two()
            || u32::from(p.max_inline) > MAX_INLINE
            || u32::from(p.max_inline) > inline_fits(p.max_msg)
            || u32::from(p.max_inline) > p.max_payload
        {
            return Err(WireError::Limit);
        }
        Ok(p)
    }
}
