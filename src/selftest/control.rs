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

/// The test of a START.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum Test {
    /// Round trips.
    Ping = 0,
    /// brw read (GET).
    Read = 1,
    /// brw write (PUT).
    Write = 2,
}

/// How long a test runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Span {
    /// This many transfers in all (over every peer).
    Count(u64),
    /// This many seconds.
    Seconds(u64),
}

/// A START's test.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Start {
    /// The test.
    pub(crate) test: Test,
    /// Data check: 0 none, 1 simple, 2 full (`wire::Check`).
    pub(crate) check: u8,
    /// Transfers in flight per peer.
    pub(crate) concurrency: u16,
    /// Offset of each buffer into its first page.
    pub(crate) offset: u32,
    /// Bytes per transfer (1 for a ping).
    pub(crate) size: u64,
    /// How long.
    pub(crate) span: Span,
    /// The peers (port: the node's interface's).
    pub(crate) peers: [[u8; 4]; MAX_PEERS],
    /// How many of `peers` are used (1..=MAX_PEERS).
    pub(crate) npeers: u8,
}

impl Start {
    /// The peers given.
    pub(crate) fn peers(&self) -> &[[u8; 4]] {
        &self.peers[..usize::from(self.npeers).min(MAX_PEERS)]
    }

    /// Whether every field is within its limits.
    pub(crate) fn valid(&self) -> bool {
        let span = match self.span {
            Span::Count(n) => (1..=MAX_COUNT).contains(&n),
            Span::Seconds(s) => (1..=MAX_SECONDS).contains(&s),
        };
        span && self.check <= 2
            && (1..=MAX_CONCURRENCY).contains(&self.concurrency)
            && self.offset <= MAX_OFFSET
            && (1..=MAX_SIZE).contains(&self.size)
            && (1..=MAX_PEERS).contains(&usize::from(self.npeers))
            && (self.test != Test::Ping || (self.size == 1 && self.offset == 0))
            && self.buffers() <= MAX_BUFFERS
    }

    /// Bytes of buffers the test allocates (bounded by the fields' own limits: no overflow).
    pub(crate) fn buffers(&self) -> u64 {
        if self.test == Test::Ping {
            return 0;
        }
        (self.size + u64::from(self.offset)) * u64::from(self.concurrency) * u64::from(self.npeers)
    }
}

/// A request of a console.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Request {
    /// What it asks.
    pub(crate) op: Op,
    /// The session (never 0, but for a read-only QUERY).
    pub(crate) session: u64,
    /// JOIN: the lease asked for, in milliseconds (0 otherwise).
    pub(crate) lease_ms: u32,
    /// START: the test.
    pub(crate) start: Option<Start>,
    /// HELLO: the console's nonce; a challenged JOIN or QUERY: the node's, echoed.
    pub(crate) nonce: Option<Nonce>,
    /// Its sequence number in its session (0: HELLO, a challenged request).
    pub(crate) seq: u64,
    /// Its tag (none for HELLO): see [`Request::sealed`].
    pub(crate) tag: Tag,
}

/// Why a request or a reply was refused by its decoder.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Bad {
    /// Not the length its operation has.
    Length,
    /// An operation this side does not know.
    Op,
    /// A reserved byte not zero.
    Reserved,
    /// A field out of its limits.
    Limit,
    /// A reply to another operation than the one asked.
    Answer,
}

impl Bad {
    /// What a log line says.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Bad::Length => "bad length",
            Bad::Op => "unknown operation",
            Bad::Reserved => "reserved bytes not zero",
            Bad::Limit => "field beyond its limits",
            Bad::Answer => "reply to another operation",
        }
    }
}

fn put(b: &mut [u8], at: usize, v: &[u8]) {
    b[at..at + v.len()].copy_from_slice(v);
}

fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut v = [0u8; 8];
    v.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(v)
}

fn zero(b: &[u8]) -> bool {
    b.iter().all(|x| *x == 0)
}

impl Request {
    /// Whether it is a challenged JOIN or QUERY (it echoes the node's nonce).
    pub(crate) fn challenged(&self) -> bool {
        self.op != Op::Hello && self.nonce.is_some()
    }

    /// Bytes of its encoding.
    pub(crate) fn len(&self) -> usize {
        if self.op == Op::Hello {
            return HELLO_LEN;
        }
        let body = match &self.start {
            Some(s) => START_LEN + 4 * s.peers().len(),
            None => REQ_LEN,
        };
        body + if self.challenged() { NONCE_LEN } else { 0 } + TRAILER_LEN
    }

    /// Encodes it into `out` (at least [`MAX_PAYLOAD`] bytes), its tag as it is; returns
    /// the length.
    pub(crate) fn encode(&self, out: &mut [u8]) -> usize {
        let len = self.len();
        let out = &mut out[..len];
        out.fill(0);
        out[0] = self.op as u8;
        put(out, 4, &self.lease_ms.to_le_bytes());
        put(out, 8, &self.session.to_le_bytes());
        if self.op == Op::Hello {
            put(out, REQ_LEN, self.nonce.as_ref().unwrap_or(&[0; NONCE_LEN]));
            return len;
        }
        let mut at = REQ_LEN;
        if let Some(s) = &self.start {
            out[16] = s.test as u8;
            out[17] = s.check;
            put(out, 18, &s.concurrency.to_le_bytes());
            put(out, 20, &s.offset.to_le_bytes());
            put(out, 24, &s.size.to_le_bytes());
            let (secs, v) = match s.span {
                Span::Count(n) => (0, n),
                Span::Seconds(n) => (1, n),
            };
            out[32] = secs;
            out[33] = s.npeers;
            put(out, 40, &v.to_le_bytes());
            for (i, p) in s.peers().iter().enumerate() {
                put(out, START_LEN + 4 * i, p);
            }
            at = START_LEN + 4 * s.peers().len();
        }
        if let (true, Some(n)) = (self.challenged(), &self.nonce) {
            out[1] = CHALLENGED;
            put(out, at, n);
            at += NONCE_LEN;
        }
        put(out, at, &self.seq.to_le_bytes());
        put(out, at + 8, &self.tag);
        len
    }

    /// Its encoding, tagged under `key` (HELLO: untagged).
    pub(crate) fn sealed(&self, mac: Mac, key: &Key) -> Payload {
        let mut p = Payload::new();
        let n = self.encode(&mut p.b);
        if self.op != Op::Hello {
            if let Some(t) = auth::tag(mac, key, Dir::Request, &p.b[..n - TAG_LEN]) {
                p.b[n - TAG_LEN..n].copy_from_slice(&t);
            }
        }
        p.len = n as u8;
        p
    }

    /// Whether `bytes` (its encoding, as received) carry the tag of a request under `key`.
    pub(crate) fn tag_ok(bytes: &[u8], mac: Mac, key: &Key) -> bool {
        let Some(n) = bytes.len().checked_sub(TAG_LEN) else {
            return false;
        };
        let mut t = [0u8; TAG_LEN];
        t.copy_from_slice(&bytes[n..]);
        auth::check(mac, key, Dir::Request, &bytes[..n], &t)
    }

    /// Decodes and checks a request (its layout and limits; not its tag).
    pub(crate) fn decode(b: &[u8]) -> Result<Request, Bad> {
        if b.len() < REQ_LEN {
            return Err(Bad::Length);
        }
        let op = Op::from_u8(b[0]).ok_or(Bad::Op)?;
        let flags = b[1];
        if !zero(&b[2..4]) || flags & !CHALLENGED != 0 {
            return Err(Bad::Reserved);
        }
        let lease_ms = u32_at(b, 4);
        let session = u64_at(b, 8);
        let nonce_at = |at: usize| {
            let mut n = [0u8; NONCE_LEN];
            n.copy_from_slice(&b[at..at + NONCE_LEN]);
            n
        };
        if op == Op::Hello {
            if b.len() != HELLO_LEN {
                return Err(Bad::Length);
            }
            if flags != 0 || lease_ms != 0 {
                return Err(Bad::Limit);
            }
            return Ok(Request {
                op,
                session,
                lease_ms,
                start: None,
                nonce: Some(nonce_at(REQ_LEN)),
                seq: 0,
                tag: [0; TAG_LEN],
            });
        }
        let challenged = flags & CHALLENGED != 0;
        let mut start = None;
        let mut body = REQ_LEN;
        if op == Op::Start {
            if b.len() < START_LEN {
                return Err(Bad::Length);
            }
            let npeers = b[33];
            if !(1..=MAX_PEERS).contains(&usize::from(npeers)) {
                return Err(Bad::Limit);
            }
            body = START_LEN + 4 * usize::from(npeers);
            if !zero(&b[34..40]) {
                return Err(Bad::Reserved);
            }
            let test = match b[16] {
                0 => Test::Ping,
                1 => Test::Read,
                2 => Test::Write,
                _ => return Err(Bad::Limit),
            };
            let v = u64_at(b, 40);
            let span = match b[32] {
                0 => Span::Count(v),
                1 => Span::Seconds(v),
                _ => return Err(Bad::Limit),
            };
            if b.len() < body {
                return Err(Bad::Length);
            }
            let mut peers = [[0u8; 4]; MAX_PEERS];
            for (i, p) in peers.iter_mut().take(usize::from(npeers)).enumerate() {
                p.copy_from_slice(&b[START_LEN + 4 * i..START_LEN + 4 * i + 4]);
            }
            let s = Start {
                test,
                check: b[17],
                concurrency: u16_at(b, 18),
                offset: u32_at(b, 20),
                size: u64_at(b, 24),
                span,
                peers,
                npeers,
            };
            if !s.valid() {
                return Err(Bad::Limit);
            }
            start = Some(s);
        }
        let nonce_len = if challenged { NONCE_LEN } else { 0 };
        if b.len() != body + nonce_len + TRAILER_LEN {
            return Err(Bad::Length);
        }
        let nonce = challenged.then(|| nonce_at(body));
        let seq = u64_at(b, body + nonce_len);
        let mut tag = [0u8; TAG_LEN];
        tag.copy_from_slice(&b[b.len() - TAG_LEN..]);
        // A lease only with JOIN, within its limits; a session but for a read-only QUERY,
        // which is challenged; challenged: a JOIN or a read-only QUERY, with no sequence
        // number; in a session: a sequence number.
        let lease_ok = match op {
            Op::Join => LEASE_MS.contains(&lease_ms),
            _ => lease_ms == 0,
        };
        let session_ok = if op == Op::Query {
            (session == 0) == challenged
        } else {
            session != 0
        };
        let challenge_ok = !challenged || matches!(op, Op::Join | Op::Query);
        let seq_ok = (seq == 0) == challenged;
        if !lease_ok || !session_ok || !challenge_ok || !seq_ok {
            return Err(Bad::Limit);
        }
        Ok(Request {
            op,
            session,
            lease_ms,
            start,
            nonce,
            seq,
            tag,
        })
    }
}

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
