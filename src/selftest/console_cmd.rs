// SPDX-License-Identifier: GPL-2.0

//! Parsing of the commands written to the `console` debugfs file: one control request
//! (`crate::selftest::control`) sent to one or more nodes at once.
//!
//! `OP nodes=IP[,IP...] [from=IP] [session=N] [lease=MS] [timeout=MS]`, where OP is `join`
//! (needs `lease`), `leave`, `stop` or `query` (`session` 0 or none: read only); and
//! `start nodes=IP session=N test=ping|read|write [size=N] [offset=N]
//! [check=none|simple|full] [concurrency=N] count=N|seconds=S peers=IP[,IP...]`.
//!
//! Pure logic: no `kernel::`, compiled by the host tests too.

use crate::{
    rules::command::{
        parse_ipv4,
        parse_num,
        ParseError, //
    },
    selftest::control::{
        Op,
        Request,
        Span,
        Start,
        Test,
        LEASE_MS,
        MAX_PEERS, //
    },
};

/// Most nodes one command goes to.
pub(crate) const MAX_NODES: usize = 64;
/// Default and longest wait for a node's answer, in milliseconds.
pub(crate) const TIMEOUT_MS: u32 = 5000;
/// Longest wait for an answer a command may ask for.
pub(crate) const MAX_TIMEOUT_MS: u32 = 60_000;

/// A console command.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ConsoleCmd {
    /// The local interface it goes out of (default: the first).
    pub(crate) from: Option<[u8; 4]>,
    nodes: [[u8; 4]; MAX_NODES],
    nnodes: usize,
    /// The request.
    pub(crate) req: Request,
    /// How long each node's answer is waited for.
    pub(crate) timeout_ms: u32,
}

/// Fills `out` with the comma-separated addresses of `v`; returns how many.
fn addrs(v: &str, out: &mut [[u8; 4]]) -> Result<usize, ParseError> {
    let mut n = 0;
    for a in v.split(',') {
        let slot = out.get_mut(n).ok_or("too many addresses")?;
        *slot = parse_ipv4(a).ok_or("bad IPv4 address")?;
        n += 1;
    }
    Ok(n)
}

impl ConsoleCmd {
    /// The nodes it goes to.
    pub(crate) fn nodes(&self) -> &[[u8; 4]] {
        &self.nodes[..self.nnodes]
    }

    /// Parses a console command.
    pub(crate) fn parse(line: &str) -> Result<Self, ParseError> {
        let mut w = line.split_ascii_whitespace();
        let op = w
            .next()
            .and_then(Op::parse)
            .ok_or("unknown console operation")?;
        let mut c = ConsoleCmd {
            from: None,
            nodes: [[0; 4]; MAX_NODES],
            nnodes: 0,
            req: Request {
                op,
                session: 0,
                lease_ms: 0,
                start: None,
                nonce: None,
                seq: 0,
                tag: [0; crate::selftest::auth::TAG_LEN],
            },
            timeout_ms: TIMEOUT_MS,
        };
        let mut st = Start {
            test: Test::Ping,
            check: 0,
            concurrency: 1,
            offset: 0,
            size: 0,
            span: Span::Count(0),
            peers: [[0; 4]; MAX_PEERS],
            npeers: 0,
        };
        let (mut test, mut span) = (None, None);
        for kv in w {
            let (k, v) = kv.split_once('=').ok_or("console settings are key=value")?;
            let start_only = matches!(
                k,
                "test"
                    | "size"
                    | "offset"
                    | "check"
                    | "concurrency"
                    | "count"
                    | "seconds"
                    | "peers"
            );
            if start_only && op != Op::Start {
                return Err("test settings go with start only");
            }
            match k {
                "nodes" => c.nnodes = addrs(v, &mut c.nodes)?,
                "from" => c.from = Some(parse_ipv4(v).ok_or("bad IPv4 address")?),
                "session" => c.req.session = parse_num(v, 0, u64::MAX)?,
                "lease" => {
                    let (lo, hi) = (*LEASE_MS.start(), *LEASE_MS.end());
                    c.req.lease_ms = parse_num(v, lo.into(), hi.into())?;
                }
                "timeout" => c.timeout_ms = parse_num(v, 100, MAX_TIMEOUT_MS.into())?,
                "test" => {
                    test = Some(match v {
                        "ping" => Test::Ping,
                        "read" => Test::Read,
                        "write" => Test::Write,
                        _ => return Err("test is ping, read or write"),
                    })
                }
                "size" => st.size = parse_num(v, 1, crate::selftest::control::MAX_SIZE)?,
                "offset" => {
                    st.offset = parse_num(v, 0, crate::selftest::control::MAX_OFFSET.into())?
                }
                "check" => {
                    st.check = match v {
                        "none" => 0,
                        "simple" => 1,
                        "full" => 2,
                        _ => return Err("check is none, simple or full"),
                    }
                }
                "concurrency" => {
                    st.concurrency =
                        parse_num(v, 1, crate::selftest::control::MAX_CONCURRENCY.into())?
                }
                "count" => {
                    span = Some(Span::Count(parse_num(
                        v,
                        1,
                        crate::selftest::control::MAX_COUNT,
                    )?))
                }
                "seconds" => {
                    span = Some(Span::Seconds(parse_num(
                        v,
                        1,
                        crate::selftest::control::MAX_SECONDS,
                    )?))
                }
                "peers" => st.npeers = addrs(v, &mut st.peers)? as u8,
                _ => return Err("unknown console setting"),
            }
        }
        if c.nnodes == 0 {
            return Err("missing nodes");
        }
        match op {
            Op::Join if c.req.lease_ms == 0 => return Err("join needs a lease"),
            Op::Join => {}
            _ if c.req.lease_ms != 0 => return Err("a lease goes with join only"),
            Op::Query => {}
            _ if c.req.session == 0 => return Err("missing session"),
            _ => {}
        }
        if c.req.session == 0 && op != Op::Query {
            return Err("missing session");
        }
        if op == Op::Start {
            st.test = test.ok_or("missing test")?;
            st.span = span.ok_or("missing count or seconds")?;
            if st.test == Test::Ping {
                if st.size > 1 || st.offset != 0 {
                    return Err("a ping has no size nor offset");
                }
                st.size = 1;
            } else if st.size == 0 {
                return Err("missing size");
            }
            if st.npeers == 0 {
                return Err("missing peers");
            }
            if !st.valid() {
                return Err("value out of range");
            }
            c.req.start = Some(st);
        }
        Ok(c)
    }
}
