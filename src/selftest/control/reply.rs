// SPDX-License-Identifier: GPL-2.0

//! A node's replies: where its test stands, its counters, and the encoding and checked
//! decoding of a reply.

use super::*;

/// Where a node's test stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum RunState {
    /// No test since the module was loaded.
    None = 0,
    /// Accepted, being set up.
    Starting = 1,
    /// Running.
    Running = 2,
    /// Over: it ran its count or its time.
    Done = 3,
    /// Stopped before its end (STOP, LEAVE, the lease, the interface gone).
    Stopped = 4,
    /// It could not start (`first_error` says why).
    Failed = 5,
}

impl RunState {
    /// The state of wire value `v`.
    pub(crate) fn from_u8(v: u8) -> Option<RunState> {
        Some(match v {
            0 => RunState::None,
            1 => RunState::Starting,
            2 => RunState::Running,
            3 => RunState::Done,
            4 => RunState::Stopped,
            5 => RunState::Failed,
            _ => return None,
        })
    }

    /// Its name in results.
    pub(crate) fn name(self) -> &'static str {
        match self {
            RunState::None => "none",
            RunState::Starting => "starting",
            RunState::Running => "running",
            RunState::Done => "done",
            RunState::Stopped => "stopped",
            RunState::Failed => "failed",
        }
    }
}

/// A node's counters, as a QUERY reports them (every reply carries them).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Counters {
    /// The node's monotonic clock, in microseconds (rates are taken on it).
    pub(crate) now_us: u64,
    /// The last (or current) test's transfers that succeeded.
    pub(crate) ops: u64,
    /// Their bytes.
    pub(crate) bytes: u64,
    /// Its transfers that failed, by kind: timeout, connection, refused, other.
    pub(crate) errors: [u32; 4],
    /// Its transfers whose data was bad.
    pub(crate) corrupt: u64,
    /// Microseconds it has run.
    pub(crate) usecs: u64,
    /// Its first error (a negative errno, or 0).
    pub(crate) first_error: i32,
    /// Transfers that brought data into the node, as initiator or server, since load.
    pub(crate) rx_ops: u64,
    /// Their bytes.
    pub(crate) rx_bytes: u64,
    /// Transfers that took data out of the node.
    pub(crate) tx_ops: u64,
    /// Their bytes.
    pub(crate) tx_bytes: u64,
}

/// A node's answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Reply {
    /// The operation answered.
    pub(crate) op: Op,
    /// 0, or why it was refused (a negative errno: [`EPERM`], [`EBUSY`], ...).
    pub(crate) status: i32,
    /// The node's session after the request (0: none).
    pub(crate) session: u64,
    /// The console holding that session.
    pub(crate) holder: [u8; 4],
    /// Milliseconds left of its lease.
    pub(crate) lease_left_ms: u32,
    /// The last (or current) test's state.
    pub(crate) run: RunState,
    /// The counters.
    pub(crate) counters: Counters,
    /// The sequence number of the request answered (0: HELLO, challenged, refused before
    /// its proof).
    pub(crate) seq: u64,
    /// HELLO's answer: the node's nonce. Otherwise the tag under the request's key (zero
    /// when the request's proof failed or was not checked): see [`Reply::sealed`].
    pub(crate) tag: Tag,
}

impl Reply {
    /// Its encoding, tagged under `key` (`None`: as it is).
    pub(crate) fn sealed(&self, mac: Mac, key: Option<&Key>) -> Payload {
        let mut p = Payload::reply(self);
        if let Some(t) = key.and_then(|k| auth::tag(mac, k, Dir::Reply, &p.b[..REPLY_TAGGED])) {
            p.b[REPLY_TAGGED..REPLY_LEN].copy_from_slice(&t);
        }
        p
    }

    /// Whether it carries the tag of a reply under `key`.
    pub(crate) fn tag_ok(&self, mac: Mac, key: &Key) -> bool {
        let mut b = [0u8; REPLY_LEN];
        self.encode(&mut b);
        auth::check(mac, key, Dir::Reply, &b[..REPLY_TAGGED], &self.tag)
    }

    /// Encodes it into `out` (at least [`REPLY_LEN`] bytes); returns the length.
    pub(crate) fn encode(&self, out: &mut [u8]) -> usize {
        let out = &mut out[..REPLY_LEN];
        out.fill(0);
        let c = &self.counters;
        out[0] = self.op as u8;
        put(out, 4, &self.status.to_le_bytes());
        put(out, 8, &self.session.to_le_bytes());
        put(out, 16, &self.holder);
        out[20] = self.run as u8;
        put(out, 24, &self.lease_left_ms.to_le_bytes());
        put(out, 32, &c.now_us.to_le_bytes());
        put(out, 40, &c.ops.to_le_bytes());
        put(out, 48, &c.bytes.to_le_bytes());
        put(out, 56, &c.corrupt.to_le_bytes());
        put(out, 64, &c.usecs.to_le_bytes());
        put(out, 72, &c.first_error.to_le_bytes());
        for (i, e) in c.errors.iter().enumerate() {
            put(out, 80 + 4 * i, &e.to_le_bytes());
        }
        put(out, 96, &c.rx_ops.to_le_bytes());
        put(out, 104, &c.rx_bytes.to_le_bytes());
        put(out, 112, &c.tx_ops.to_le_bytes());
        put(out, 120, &c.tx_bytes.to_le_bytes());
        put(out, 128, &self.seq.to_le_bytes());
        put(out, REPLY_TAGGED, &self.tag);
        REPLY_LEN
    }

    /// Decodes and checks the reply to a request of `asked`.
    pub(crate) fn decode(b: &[u8], asked: Op) -> Result<Reply, Bad> {
        if b.len() != REPLY_LEN {
            return Err(Bad::Length);
        }
        let op = Op::from_u8(b[0]).ok_or(Bad::Op)?;
        if op != asked {
            return Err(Bad::Answer);
        }
        if !zero(&b[1..4]) || !zero(&b[21..24]) || !zero(&b[28..32]) || !zero(&b[76..80]) {
            return Err(Bad::Reserved);
        }
        let status = u32_at(b, 4) as i32;
        let first_error = u32_at(b, 72) as i32;
        if !(-4095..=0).contains(&status) || !(-4095..=0).contains(&first_error) {
            return Err(Bad::Limit);
        }
        let run = RunState::from_u8(b[20]).ok_or(Bad::Limit)?;
        let mut holder = [0u8; 4];
        holder.copy_from_slice(&b[16..20]);
        let mut errors = [0u32; 4];
        for (i, e) in errors.iter_mut().enumerate() {
            *e = u32_at(b, 80 + 4 * i);
        }
        let mut tag = [0u8; TAG_LEN];
        tag.copy_from_slice(&b[REPLY_TAGGED..REPLY_LEN]);
        Ok(Reply {
            op,
            status,
            session: u64_at(b, 8),
            holder,
            lease_left_ms: u32_at(b, 24),
            run,
            counters: Counters {
                now_us: u64_at(b, 32),
                ops: u64_at(b, 40),
                bytes: u64_at(b, 48),
                errors,
                corrupt: u64_at(b, 56),
                usecs: u64_at(b, 64),
                first_error,
                rx_ops: u64_at(b, 96),
                rx_bytes: u64_at(b, 104),
                tx_ops: u64_at(b, 112),
                tx_bytes: u64_at(b, 120),
            },
            seq: u64_at(b, 128),
            tag,
        })
    }
}
