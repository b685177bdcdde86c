// SPDX-License-Identifier: GPL-2.0

//! Parsing of the commands written to fastreg's debugfs control files.
//!
//! Pure logic: no `kernel::`, compiled by the host tests too.

use crate::rules::config;

/// Parses a size: decimal digits with an optional binary suffix `k`, `m` or `g` (either case,
/// 1024-based), for example `4095`, `4k`, `1M`.
pub(crate) fn parse_size(s: &str) -> Option<u64> {
    let (digits, mult) = match s.as_bytes().last()? {
        b'k' | b'K' => (&s[..s.len() - 1], 1u64 << 10),
        b'm' | b'M' => (&s[..s.len() - 1], 1 << 20),
        b'g' | b'G' => (&s[..s.len() - 1], 1 << 30),
        _ => (s, 1),
    };
    if digits.is_empty() || !digits.bytes().all(|c| c.is_ascii_digit()) {
        return None;
    }
    digits.parse::<u64>().ok()?.checked_mul(mult)
}

/// Parses a dotted IPv4 address.
pub(crate) fn parse_ipv4(s: &str) -> Option<[u8; 4]> {
    let mut out = [0u8; 4];
    let mut parts = s.split('.');
    for o in out.iter_mut() {
        let p = parts.next()?;
        if p.is_empty() || p.len() > 3 || !p.bytes().all(|c| c.is_ascii_digit()) {
            return None;
        }
        *o = p.parse().ok()?;
    }
    if parts.next().is_some() {
        return None;
    }
    Some(out)
}

/// Most a count of a control command may be (`ping`, `put`, `get`, `corrupt`, `misbehave`).
pub(crate) const MAX_COUNT: u32 = 1_000_000;
/// Most transfers in flight in one selftest, per peer.
pub(crate) const MAX_CONCURRENCY: u32 = 256;
/// Largest buffer offset accepted.
pub(crate) const MAX_OFFSET: u64 = 1 << 20;

/// Why a command was refused: a message for the kernel log.
pub(crate) type ParseError = &'static str;

/// Most characters of a device name (`IB_DEVICE_NAME_MAX` - 1).
pub(crate) const MAX_DEV_NAME: usize = 63;

/// Per-interface tunables given to `iface add`; unset ones take the module parameters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct IfaceTunables {
    /// Queue depth.
    pub(crate) queue_depth: Option<u16>,
    /// Largest transfer.
    pub(crate) max_payload: Option<u32>,
    /// Registrations per transfer message.
    pub(crate) max_regs: Option<u16>,
    /// Service port.
    pub(crate) port: Option<u16>,
    /// Pages per registration of the buffers the interface serves (default: what the
    /// device's MRs map).
    pub(crate) mr_pages: Option<u32>,
    /// Most bytes of a transfer carried inline (0: none).
    pub(crate) max_inline: Option<u32>,
}

/// A control command (`/sys/kernel/debug/fastreg/ctl`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Ctl<'a> {
    /// `iface add DEV IP [queue_depth=N] [max_payload=N] [max_regs=N] [port=N]
    /// [mr_pages=N] [max_inline=N]`.
    IfaceAdd {
        /// RDMA device name.
        dev: &'a str,
        /// Local IPv4 address.
        ip: [u8; 4],
        /// Tunables.
        tun: IfaceTunables,
    },
    /// `iface del IP [port=N]`.
    IfaceDel {
        /// Local IPv4 address.
        ip: [u8; 4],
        /// Port, if not the default.
        port: Option<u16>,
    },
    /// `ping LOCAL PEER [COUNT]`: IMMEDIATE round trips from interface LOCAL to PEER.
    Ping {
        /// Local interface address.
        local: [u8; 4],
        /// Peer address (an interface of any node, this one included).
        peer: [u8; 4],
        /// Round trips.
        count: u32,
    },
    /// `put|get LOCAL PEER OFFSET LENGTH [COUNT]`: bulk transfers of LENGTH bytes at OFFSET
    /// into the local buffer's first page, to (put) or from (get) the peer, each checked.
    Bulk {
        /// GET rather than PUT.
        get: bool,
        /// Local interface address.
        local: [u8; 4],
        /// Peer address.
        peer: [u8; 4],
        /// Offset of the local buffer.
        offset: u64,
        /// Bytes per transfer.
        len: u64,
        /// Transfers.
        count: u32,
    },
    /// `fault LOCAL PEER magic|regs|length|credits|stale_rkey|stale_get`: test hooks. The first
    /// three send a GET whose request is corrupted that way (the peer must close the
    /// connection); `stale_rkey` does a PUT, then RDMA-writes with the sink's old rkey;
    /// `stale_get` RDMA-writes with the registrations of the last GET that LOCAL served to
    /// PEER (recorded with `misbehave LOCAL record_get`). Both writes must fail.
    Fault {
        /// Local interface address.
        local: [u8; 4],
        /// Peer address.
        peer: [u8; 4],
        /// What to do.
        what: Fault,
    },
    /// `corrupt LOCAL N`: test hook: the next N transfers interface LOCAL serves get one
    /// byte of their data inverted (PUT: at the sink before it checks; GET: at the source
    /// before it writes). 0 disarms it.
    Corrupt {
        /// Local interface address.
        local: [u8; 4],
        /// Transfers to corrupt.
        n: u32,
    },
    /// `misbehave LOCAL short|unknown_done|dup_done|record_get|bogus_inv|flood|credits [N]`: test
    /// hook: the next N times
    /// (default 1) interface LOCAL is in that role it misbehaves towards its peer, as a
    /// hostile peer would (see [`crate::rules::wire::Misbehave`]). 0 disarms it.
    Misbehave {
        /// Local interface address.
        local: [u8; 4],
        /// How.
        how: crate::rules::wire::Misbehave,
        /// How many times.
        n: u32,
    },
    /// `close LOCAL PEER`: closes the connection between them.
    Close {
        /// Local interface address.
        local: [u8; 4],
        /// Peer address.
        peer: [u8; 4],
    },
    /// `console allow|deny ADDR`, `console list`: the consoles that may drive this node's
    /// tests (`crate::selftest::session`), and the session it is in.
    Console {
        /// Allow (`Some(true)`), deny (`Some(false)`) or list (`None`).
        allow: Option<bool>,
        /// The console's address (allow, deny).
        ip: [u8; 4],
    },
    /// `console key HEX|none`: installs the cluster key (64 hex digits: the SHA-256 of the
    /// site's key file, as `fastreg-lst console key FILE` writes it), or removes it
    /// (`crate::selftest::auth`). Never shown back, nor logged.
    ConsoleKey {
        /// The key, or none.
        key: Option<[u8; 32]>,
    },
    /// `fuzz LOCAL [seed=S] [rate=PPM] count=N`: test hook. Interface LOCAL mutates what
    /// it sends (messages and connection parameters), `rate` per million (default all of
    /// them), until it made `count` mutations, reproducibly from `seed` (default 1); see
    /// [`crate::rules::fuzz`]. `fuzz LOCAL off` (or `count=0`) stops it.
    Fuzz {
        /// Local interface address.
        local: [u8; 4],
        /// Seed of the mutations.
        seed: u64,
        /// Mutations per million things sent.
        rate: u32,
        /// Mutations to make (0: stop).
        count: u64,
    },
}

/// What the `fault` command does (see [`Ctl::Fault`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Fault {
    /// A GET whose request is corrupted this way.
    Mangle(crate::rules::wire::Mangle),
    /// A PUT, then an RDMA WRITE with the sink's old rkey.
    StaleRkey,
    /// An RDMA WRITE with the registrations of the last GET served (recorded).
    StaleGet,
}

/// Parses a number (with [`parse_size`]'s suffixes) within `min..=max`, as a `T`.
pub(crate) fn parse_num<T: TryFrom<u64>>(v: &str, min: u64, max: u64) -> Result<T, ParseError> {
    let n = parse_size(v).ok_or("bad number")?;
    if n < min || n > max {
        return Err("value out of range");
    }
    T::try_from(n).map_err(|_| "value out of range")
}

/// [`parse_num`] within a configfs attribute's range (the same in both places).
fn knob<T: TryFrom<u64>>(k: &config::Knob, v: &str) -> Result<T, ParseError> {
    parse_num(v, k.min, k.max)
}

impl<'a> Ctl<'a> {
    /// Parses a control command.
    pub(crate) fn parse(line: &'a str) -> Result<Self, ParseError> {
        let mut w = line.split_ascii_whitespace();
        let ip =
            |s: Option<&str>| parse_ipv4(s.ok_or("missing address")?).ok_or("bad IPv4 address");
        match (w.next(), w.next()) {
            (Some("iface"), Some("add")) => {
                let dev = w.next().ok_or("missing device")?;
                if dev.len() > MAX_DEV_NAME || !dev.bytes().all(|c| c.is_ascii_graphic()) {
                    return Err("bad device name");
                }
                let ip = ip(w.next())?;
                let mut tun = IfaceTunables::default();
                for kv in w {
                    let (k, v) = kv.split_once('=').ok_or("tunables are key=value")?;
                    match k {
                        "queue_depth" => tun.queue_depth = Some(knob(&config::QUEUE_DEPTH, v)?),
                        "max_payload" => tun.max_payload = Some(knob(&config::MAX_PAYLOAD, v)?),
                        "max_regs" => tun.max_regs = Some(knob(&config::MAX_REGS, v)?),
                        "port" => tun.port = Some(knob(&config::PORT, v)?),
                        "mr_pages" => tun.mr_pages = Some(knob(&config::MR_PAGES, v)?),
                        "max_inline" => tun.max_inline = Some(knob(&config::MAX_INLINE, v)?),
                        _ => return Err("unknown tunable"),
                    }
                }
                Ok(Ctl::IfaceAdd { dev, ip, tun })
            }
            (Some("iface"), Some("del")) => {
                let ip = ip(w.next())?;
                let port = match w.next() {
                    Some(kv) => match kv.split_once('=') {
                        Some(("port", v)) => Some(parse_num(v, 1, 65535)?),
                        _ => return Err("unknown tunable"),
                    },
                    None => None,
                };
                if w.next().is_some() {
                    return Err("too many words");
                }
                Ok(Ctl::IfaceDel { ip, port })
            }
            (Some("ping"), local) => {
                let local = ip(local)?;
                let peer = ip(w.next())?;
                let count = match w.next() {
                    Some(c) => parse_num(c, 1, u64::from(MAX_COUNT))?,
                    None => 1,
                };
                if w.next().is_some() {
                    return Err("too many words");
                }
                Ok(Ctl::Ping { local, peer, count })
            }
            (Some(op @ ("put" | "get")), local) => {
                let local = ip(local)?;
                let peer = ip(w.next())?;
                let offset = parse_num(w.next().ok_or("missing offset")?, 0, MAX_OFFSET)?;
                let len = parse_num(w.next().ok_or("missing length")?, 1, 64 << 20)?;
                let count = match w.next() {
                    Some(c) => parse_num(c, 1, u64::from(MAX_COUNT))?,
                    None => 1,
                };
                if w.next().is_some() {
                    return Err("too many words");
                }
                Ok(Ctl::Bulk {
                    get: op == "get",
                    local,
                    peer,
                    offset,
                    len,
                    count,
                })
            }
            (Some("fault"), local) => {
                let local = ip(local)?;
                let peer = ip(w.next())?;
                let what = match w.next() {
                    Some("magic") => Fault::Mangle(crate::rules::wire::Mangle::Magic),
                    Some("regs") => Fault::Mangle(crate::rules::wire::Mangle::Regs),
                    Some("length") => Fault::Mangle(crate::rules::wire::Mangle::Length),
                    Some("credits") => Fault::Mangle(crate::rules::wire::Mangle::Credits),
                    Some("stale_rkey") => Fault::StaleRkey,
                    Some("stale_get") => Fault::StaleGet,
                    _ => return Err("unknown fault"),
                };
                if w.next().is_some() {
                    return Err("too many words");
                }
                Ok(Ctl::Fault { local, peer, what })
            }
            (Some("corrupt"), local) => {
                let local = ip(local)?;
                let n = parse_num(w.next().ok_or("missing count")?, 0, u64::from(MAX_COUNT))?;
                if w.next().is_some() {
                    return Err("too many words");
                }
                Ok(Ctl::Corrupt { local, n })
            }
            (Some("misbehave"), local) => {
                let local = ip(local)?;
                let how = w
                    .next()
                    .and_then(crate::rules::wire::Misbehave::parse)
                    .ok_or("unknown misbehaviour")?;
                let n = match w.next() {
                    Some(v) => parse_num(v, 0, u64::from(MAX_COUNT))?,
                    None => 1,
                };
                if w.next().is_some() {
                    return Err("too many words");
                }
                Ok(Ctl::Misbehave { local, how, n })
            }
            (Some("close"), local) => {
                let local = ip(local)?;
                let peer = ip(w.next())?;
                if w.next().is_some() {
                    return Err("too many words");
                }
                Ok(Ctl::Close { local, peer })
            }
            (Some("console"), Some(what @ ("allow" | "deny"))) => {
                let ip = ip(w.next())?;
                if w.next().is_some() {
                    return Err("too many words");
                }
                Ok(Ctl::Console {
                    allow: Some(what == "allow"),
                    ip,
                })
            }
            (Some("console"), Some("list")) if w.next().is_none() => Ok(Ctl::Console {
                allow: None,
                ip: [0; 4],
            }),
            (Some("console"), Some("key")) => {
                let v = w.next().ok_or("console key takes HEX or none")?;
                if w.next().is_some() {
                    return Err("too many words");
                }
                let key = match v {
                    "none" => None,
                    _ => Some(parse_key(v).ok_or("a console key is 64 hex digits")?),
                };
                Ok(Ctl::ConsoleKey { key })
            }
            (Some("console"), _) => {
                Err("console takes allow ADDR, deny ADDR, list, or key HEX|none")
            }
            (Some("fuzz"), local) => {
                let local = ip(local)?;
                let (mut seed, mut rate, mut count) = (1, 1_000_000, None);
                for kv in w {
                    if kv == "off" && count.is_none() {
                        count = Some(0);
                        continue;
                    }
                    let (k, v) = kv.split_once('=').ok_or("fuzz takes key=value or off")?;
                    match k {
                        "seed" => seed = parse_num(v, 0, u64::MAX)?,
                        "rate" => rate = parse_num(v, 1, 1_000_000)?,
                        "count" => count = Some(parse_num(v, 0, MAX_FUZZ)?),
                        _ => return Err("unknown fuzz setting"),
                    }
                }
                let count = count.ok_or("missing count")?;
                Ok(Ctl::Fuzz {
                    local,
                    seed,
                    rate,
                    count,
                })
            }
            _ => Err("unknown command"),
        }
    }
}

/// Most mutations one `fuzz` command may ask for.
pub(crate) const MAX_FUZZ: u64 = 1 << 32;

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

/// The 32 bytes of a key given as 64 hex digits.
pub(crate) fn parse_key(v: &str) -> Option<[u8; 32]> {
    let b = v.as_bytes();
    if b.len() != 64 {
        return None;
    }
    let digit = |c: u8| (c as char).to_digit(16).map(|d| d as u8);
    let mut key = [0u8; 32];
    for (k, pair) in key.iter_mut().zip(b.chunks_exact(2)) {
        *k = digit(pair[0])? << 4 | digit(pair[1])?;
    }
    Some(key)
}

/// A command line as a log line may show it: a console key's value never is.
pub(crate) fn shown(line: &str) -> &str {
    let t = line.trim();
    let mut w = t.split_ascii_whitespace();
    match (w.next(), w.next()) {
        (Some("console"), Some("key")) => "console key (value not shown)",
        _ => t,
    }
}
