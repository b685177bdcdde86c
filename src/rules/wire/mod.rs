// SPDX-License-Identifier: GPL-2.0

//! fastreg's wire format: messages on a connection, and connection parameters carried in
//! rdma_cm private data. Documented field by field in `Documentation/wire.rst`.
//!
//! Pure logic: no `kernel::`, compiled by the host tests too (golden vectors, fuzzing).
//!
//! Everything is little-endian, packed, at fixed offsets. Nothing counts pages: sizes are
//! bytes, so peers with different `PAGE_SIZE` interoperate by construction. Every field
//! received from a peer is validated by [`decode`] against the connection's negotiated
//! limits before anything acts on it.

/// `"FRGM"`: first bytes of every message.
pub(crate) const MSG_MAGIC: u32 = 0x4d47_5246;
/// `"FRGC"`: first bytes of connection parameters and rejects.
pub(crate) const CONN_MAGIC: u32 = 0x4347_5246;
/// The protocol version this code speaks: 2 since inline transfers (a version 1 peer
/// rejects a version 2 request, and the reason says so).
pub(crate) const VERSION: u16 = 2;
/// Size of the message header.
pub(crate) const HDR_LEN: usize = 32;
/// Most bytes of a control payload: it fits in the smallest message ([`MIN_MSG`]).
pub(crate) const MAX_CONTROL: usize = MIN_MSG as usize - HDR_LEN - 8;
/// Size of one registration descriptor.
pub(crate) const REG_LEN: usize = 16;
/// Smallest message size a connection may negotiate.
pub(crate) const MIN_MSG: u32 = 256;
/// Most bytes a transfer may carry inline, in its messages (the `inline` parameter's
/// ceiling).
pub(crate) const MAX_INLINE: u32 = 16384;
/// Bytes of a message around the data of an inline transfer: the header and the largest
/// fixed body of [`Type::PutInline`] and [`Type::GetData`].
pub(crate) const INLINE_OVERHEAD: u32 = (HDR_LEN + 24) as u32;
/// The message size without inline data, and the least any interface uses.
pub(crate) const BASE_MSG: u32 = 4096;
/// Largest message size: room for [`MAX_INLINE`] bytes inline.
pub(crate) const MAX_MSG: u32 = INLINE_OVERHEAD + MAX_INLINE;

/// The message size an interface needs to carry `inline` bytes inline.
pub(crate) const fn msg_size(inline: u32) -> u32 {
    let need = INLINE_OVERHEAD + inline;
    if need > BASE_MSG {
        need
    } else {
        BASE_MSG
    }
}

/// The most bytes inline that messages of `max_msg` bytes carry.
pub(crate) const fn inline_fits(max_msg: u32) -> u32 {
    max_msg.saturating_sub(INLINE_OVERHEAD)
}

mod codec;
mod conn;
mod msg;

// The wire's items, wherever they are defined, are `wire::Item` to its users.
pub(crate) use self::{
    codec::*,
    conn::*,
    msg::*, //
};
