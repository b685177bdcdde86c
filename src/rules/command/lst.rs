// SPDX-License-Identifier: GPL-2.0

//! The selftest's test words (`ping`, `brw read|write`, and their options), written by
//! `fastreg-lst` in the control device's Start request.
//!
//! Pure logic: no `kernel::`, compiled by the host tests too.

use super::*;

/// Most peers one selftest command may name.
pub(crate) const MAX_PEERS: usize = 8;
/// Longest selftest run, in seconds.
pub(crate) const MAX_SECONDS: u32 = 3600;
/// Most transfers one selftest command may run.
pub(crate) const MAX_TESTS: u64 = 1 << 40;

/// What a selftest command tests.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum LstOp {
    /// IMMEDIATE round trips.
    Ping,
    /// Bulk transfers from the peer's memory into the client's (GET).
    Read,
    /// Bulk transfers from the client's memory into the peer's (PUT).
    Write,
}

impl LstOp {
    /// Its name in results.
    pub(crate) fn name(self) -> &'static str {
        match self {
            LstOp::Ping => "ping",
            LstOp::Read => "read",
            LstOp::Write => "write",
        }
    }
}

/// How long a selftest runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Span {
    /// This many transfers in all (spread over the workers).
    Count(u64),
    /// Transfers for this many seconds.
    Seconds(u32),
}

/// A selftest command (`/sys/kernel/debug/fastreg/lst`):
///
/// `ping [from=IP] [peers=IP[,IP...]] [concurrency=N] [count=N|seconds=S]` or
/// `brw read|write [from=IP] [peers=IP[,IP...]] size=N [offset=N] [check=none|simple|full]
/// [concurrency=N] [count=N|seconds=S]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Lst {
    /// The test.
    pub(crate) op: LstOp,
    /// Local interface (default: the first one).
    pub(crate) from: Option<[u8; 4]>,
    peers: [[u8; 4]; MAX_PEERS],
    npeers: usize,
    /// Bytes per transfer (0 for ping).
    pub(crate) size: u64,
    /// Byte offset of the client's buffers into their first page.
    pub(crate) offset: u64,
    /// How the data are checked.
    pub(crate) check: crate::rules::wire::Check,
    /// Transfers in flight per peer.
    pub(crate) concurrency: u32,
    /// How long it runs.
    pub(crate) span: Span,
}

impl Lst {
    /// The test a console started (`crate::selftest::control::Start`): its peers are given apart.
    pub(crate) fn of_start(st: &crate::selftest::control::Start) -> Self {
        use crate::selftest::control::{Span as S, Test};
        let op = match st.test {
            Test::Ping => LstOp::Ping,
            Test::Read => LstOp::Read,
            Test::Write => LstOp::Write,
        };
        Lst {
            op,
            from: None,
            peers: [[0; 4]; MAX_PEERS],
            npeers: 0,
            size: if op == LstOp::Ping { 0 } else { st.size },
            offset: u64::from(st.offset),
            check: crate::rules::wire::Check::from_u8(st.check)
                .unwrap_or(crate::rules::wire::Check::None),
            concurrency: u32::from(st.concurrency),
            span: match st.span {
                S::Count(n) => Span::Count(n),
                S::Seconds(s) => Span::Seconds(u32::try_from(s).unwrap_or(u32::MAX)),
            },
        }
    }

    /// The peers named (none: the local interface itself).
    pub(crate) fn peers(&self) -> &[[u8; 4]] {
        &self.peers[..self.npeers]
    }

    /// Parses a selftest command.
    pub(crate) fn parse(line: &str) -> Result<Self, ParseError> {
        use crate::rules::wire::Check;
        let mut w = line.split_ascii_whitespace();
        let op = match (w.next(), line.split_ascii_whitespace().nth(1)) {
            (Some("ping"), _) => LstOp::Ping,
            (Some("brw"), Some("read")) => LstOp::Read,
            (Some("brw"), Some("write")) => LstOp::Write,
            (Some("brw"), _) => return Err("brw needs read or write"),
            _ => return Err("unknown test"),
        };
        if op != LstOp::Ping {
            w.next();
        }
        let mut t = Lst {
            op,
            from: None,
            peers: [[0; 4]; MAX_PEERS],
            npeers: 0,
            size: 0,
            offset: 0,
            check: Check::None,
            concurrency: 1,
            span: Span::Count(1),
        };
        let (mut count, mut seconds, mut size) = (None, None, None);
        let mut seen = [false; 8];
        for kv in w {
            let (k, v) = kv.split_once('=').ok_or("options are key=value")?;
            let i = match k {
                "from" => 0,
                "peers" => 1,
                "size" => 2,
                "offset" => 3,
                "check" => 4,
                "concurrency" => 5,
                "count" => 6,
                "seconds" => 7,
                _ => return Err("unknown option"),
            };
            if seen[i] {
                return Err("option given twice");
            }
            seen[i] = true;
            if op == LstOp::Ping && matches!(k, "size" | "offset" | "check") {
                return Err("ping takes no size, offset or check");
            }
            match k {
                "from" => t.from = Some(parse_ipv4(v).ok_or("bad IPv4 address")?),
                "peers" => {
                    for p in v.split(',') {
                        if t.npeers == MAX_PEERS {
                            return Err("more than 8 peers");
                        }
                        t.peers[t.npeers] = parse_ipv4(p).ok_or("bad IPv4 address")?;
                        t.npeers += 1;
                    }
                }
                "size" => size = Some(parse_num(v, 1, 64 << 20)?),
                "offset" => t.offset = parse_num(v, 0, MAX_OFFSET)?,
                "check" => {
                    t.check = match v {
                        "none" => Check::None,
                        "simple" => Check::Simple,
                        "full" => Check::Full,
                        _ => return Err("check is none, simple or full"),
                    }
                }
                "concurrency" => {
                    t.concurrency = parse_num(v, 1, u64::from(MAX_CONCURRENCY))?;
                }
                "count" => count = Some(parse_num(v, 1, MAX_TESTS)?),
                _ => seconds = Some(parse_num(v, 1, u64::from(MAX_SECONDS))?),
            }
        }
        t.span = match (count, seconds) {
            (Some(_), Some(_)) => return Err("count and seconds exclude each other"),
            (Some(c), None) => Span::Count(c),
            (None, Some(s)) => Span::Seconds(s),
            (None, None) => Span::Count(1),
        };
        if op != LstOp::Ping {
            t.size = size.ok_or("brw needs size")?;
        }
        Ok(t)
    }
}
