// SPDX-License-Identifier: GPL-2.0

//! The selftest console's control protocol, and a node's side of its trust model.
//!
//! A console (a node where `fastreg-lst run` is typed) drives the tests of other nodes with
//! requests carried in CONTROL messages and answered in CONTROL_REPLY messages
//! (`Documentation/wire.rst`, "Control"): join a session, start a test towards given peers,
//! stop it, query the counters, leave. Both payloads have fixed layouts, little-endian, with
//! every reserved byte zero; a node checks a request against the limits here before it acts
//! on it, and a console checks a reply the same way.
//!
//! Who may ask what of a node is `crate::selftest::session`'s; the proofs of the cluster key that
//! requests and replies carry (nonces, sequence numbers, tags) are `crate::selftest::auth`'s.
//!
//! Pure logic: no `kernel::`, compiled by the host tests too.

use crate::selftest::auth::{
    self,
    Dir,
    Key,
    Mac,
    Nonce,
    Tag,
    NONCE_LEN,
    TAG_LEN, //
};

/// Most bytes of a control payload (fits the smallest message any connection negotiates).
pub(crate) const MAX_PAYLOAD: usize = crate::rules::wire::MAX_CONTROL;
/// Bytes of every request's head (operation, flags, lease, session).
pub(crate) const REQ_LEN: usize = 16;
/// Bytes of a HELLO: the head and the console's nonce.
pub(crate) const HELLO_LEN: usize = REQ_LEN + NONCE_LEN;
/// Bytes of a START request's head and test, before its peers.
pub(crate) const START_LEN: usize = 48;
/// Bytes after a request's body: its sequence number and tag.
pub(crate) const TRAILER_LEN: usize = 8 + TAG_LEN;
/// Most peers of one START.
pub(crate) const MAX_PEERS: usize = 32;
/// Bytes of a reply before its tag.
pub(crate) const REPLY_TAGGED: usize = 136;
/// Bytes of a reply.
pub(crate) const REPLY_LEN: usize = REPLY_TAGGED + TAG_LEN;
/// Request flag: a challenged JOIN or QUERY (it echoes the node's nonce and is tagged with
/// the challenge's key, `crate::selftest::auth`).
pub(crate) const CHALLENGED: u8 = 1;

const _: () = assert!(START_LEN + 4 * MAX_PEERS + TRAILER_LEN <= MAX_PAYLOAD);

/// Shortest and longest session lease, in milliseconds.
pub(crate) const LEASE_MS: core::ops::RangeInclusive<u32> = 1000..=600_000;
/// Largest transfer a START may ask for (the transport refuses, per transfer, what is beyond
/// the negotiated limit).
pub(crate) const MAX_SIZE: u64 = 64 << 20;
/// Largest buffer offset a START may ask for.
pub(crate) const MAX_OFFSET: u32 = 1 << 20;
/// Most transfers in flight per peer.
pub(crate) const MAX_CONCURRENCY: u16 = 256;
/// Most bytes of buffers one START may make a node allocate (every worker's buffer:
/// offset and size, times the concurrency, times the peers).
pub(crate) const MAX_BUFFERS: u64 = 1 << 30;
/// Longest timed test, in seconds.
pub(crate) const MAX_SECONDS: u64 = 86_400;
/// Most transfers of a counted test.
pub(crate) const MAX_COUNT: u64 = 1 << 40;

// Errnos of replies (negative, as on the wire).
/// The console is not allowed on this node.
pub(crate) const EPERM: i32 = -1;
/// The node has no console key: it refuses every console.
pub(crate) const ENOKEY: i32 = -126;
/// The request's proof of the key failed (a wrong key, a forgery).
pub(crate) const EKEYREJECTED: i32 = -129;
/// A request replayed (its sequence number was used), or a challenge unknown, used or
/// expired.
pub(crate) const ESTALE: i32 = -116;
/// Not in this session (never joined, left, or the lease expired).
pub(crate) const ESRCH: i32 = -3;
/// No memory to start the test.
pub(crate) const ENOMEM: i32 = -12;
/// The node is in another console's session.
pub(crate) const EBUSY: i32 = -16;
/// A request out of its limits.
pub(crate) const EINVAL: i32 = -22;
/// A test is running already.
pub(crate) const EALREADY: i32 = -114;

/// A control payload as carried in a message: up to [`MAX_PAYLOAD`] bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Payload {
    b: [u8; MAX_PAYLOAD],
    len: u8,
}

impl Payload {
    /// An empty payload.
    pub(crate) const fn new() -> Self {
        Self {
            b: [0; MAX_PAYLOAD],
            len: 0,
        }
    }

    /// A copy of `s`; `None` when it is longer than [`MAX_PAYLOAD`].
    pub(crate) fn from_slice(s: &[u8]) -> Option<Self> {
        let mut p = Self::new();
        p.b.get_mut(..s.len())?.copy_from_slice(s);
        p.len = s.len() as u8;
        Some(p)
    }

    /// The encoding of `req`.
    pub(crate) fn request(req: &Request) -> Self {
        let mut p = Self::new();
        p.len = req.encode(&mut p.b) as u8;
        p
    }

    /// The encoding of `reply`.
    pub(crate) fn reply(reply: &Reply) -> Self {
        let mut p = Self::new();
        p.len = reply.encode(&mut p.b) as u8;
        p
    }

    /// Its bytes.
    pub(crate) fn as_slice(&self) -> &[u8] {
        &self.b[..usize::from(self.len)]
    }
}

/// What a request asks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum Op {
    /// Join (or renew) a session.
    Join = 1,
    /// Leave the session: the test stops.
    Leave = 2,
    /// Start a test.
    Start = 3,
    /// Stop the test.
    Stop = 4,
    /// The counters (with session 0: read only, outside any session, challenged).
    Query = 5,
    /// Ask for a challenge (the node's nonce), before a JOIN or a read-only QUERY.
    Hello = 6,
}

impl Op {
    /// The operation of wire value `v`.
    pub(crate) fn from_u8(v: u8) -> Option<Op> {
        Some(match v {
            1 => Op::Join,
            2 => Op::Leave,
            3 => Op::Start,
            4 => Op::Stop,
            5 => Op::Query,
            6 => Op::Hello,
            _ => return None,
        })
    }

    /// Its name in commands and results.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Op::Join => "join",
            Op::Leave => "leave",
            Op::Start => "start",
            Op::Stop => "stop",
            Op::Query => "query",
            Op::Hello => "hello",
        }
    }

    /// The operation named `s`.
    pub(crate) fn parse(s: &str) -> Option<Op> {
        [Op::Join, Op::Leave, Op::Start, Op::Stop, Op::Query]
            .into_iter()
            .find(|o| o.name() == s)
    }
}

pub(super) fn put(b: &mut [u8], at: usize, v: &[u8]) {
    b[at..at + v.len()].copy_from_slice(v);
}

pub(super) fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

pub(super) fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

pub(super) fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut v = [0u8; 8];
    v.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(v)
}

pub(super) fn zero(b: &[u8]) -> bool {
    b.iter().all(|x| *x == 0)
}

mod reply;
mod request;

// The protocol's items, wherever they are defined, are `control::Item` to its users.
pub(crate) use self::{
    reply::*,
    request::*, //
};
