// SPDX-License-Identifier: GPL-2.0

//! A console's requests: what a START asks, and the encoding and checked decoding of every
//! request.

use super::*;

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
