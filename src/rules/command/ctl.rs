// SPDX-License-Identifier: GPL-2.0

//! The commands of the debugfs `ctl` file (test build only): interfaces by hand, pings and
//! bulk transfers, test hooks (faults, corruption, misbehaving, the fuzzing peer), the
//! console's allowlist and key.
//!
//! Pure logic: no `kernel::`, compiled by the host tests too.

use super::*;
use crate::rules::config;

/// Most a count of a control command may be (`ping`, `put`, `get`, `corrupt`, `misbehave`).
pub(crate) const MAX_COUNT: u32 = 1_000_000;

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
    /// `ping LOCAL[:PORT] PEER[:PORT] [COUNT]`: IMMEDIATE round trips from interface LOCAL
    /// to PEER (the ports default to the local interface's).
    Ping {
        /// Local interface address.
        local: [u8; 4],
        /// Peer address (an interface of any node, this one included).
        peer: [u8; 4],
        /// Round trips.
        count: u32,
        /// The ports given.
        ports: Ports,
    },
    /// `put|get LOCAL[:PORT] PEER[:PORT] OFFSET LENGTH [COUNT]`: bulk transfers of LENGTH
    /// bytes at OFFSET into the local buffer's first page, to (put) or from (get) the peer,
    /// each checked.
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
        /// The ports given.
        ports: Ports,
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
    /// `close LOCAL[:PORT] PEER[:PORT]`: closes the connection between them.
    Close {
        /// Local interface address.
        local: [u8; 4],
        /// Peer address.
        peer: [u8; 4],
        /// The ports given.
        ports: Ports,
    },
    /// `dial LOCAL[:PORT] PEER[:PORT]`: starts connecting from LOCAL to PEER and answers at
    /// once (the connection comes up in the background; many dials at once test setup at
    /// scale).
    Dial {
        /// Local interface address.
        local: [u8; 4],
        /// Peer address.
        peer: [u8; 4],
        /// The ports given.
        ports: Ports,
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

/// The ports a command gave with its addresses (`IP:PORT`): an interface among several on
/// one address, and a peer's port other than the local interface's.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Ports {
    /// The local interface's.
    pub(crate) local: Option<u16>,
    /// The peer's.
    pub(crate) peer: Option<u16>,
}

/// `IP` or `IP:PORT` (port 1 to 65535).
fn parse_end(s: Option<&str>) -> Result<([u8; 4], Option<u16>), ParseError> {
    let s = s.ok_or("missing address")?;
    let (ip, port) = match s.split_once(':') {
        Some((ip, port)) => (ip, Some(parse_num(port, 1, 65535)?)),
        None => (s, None),
    };
    Ok((parse_ipv4(ip).ok_or("bad IPv4 address")?, port))
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
                let (local, lport) = parse_end(local)?;
                let (peer, pport) = parse_end(w.next())?;
                let count = match w.next() {
                    Some(c) => parse_num(c, 1, u64::from(MAX_COUNT))?,
                    None => 1,
                };
                if w.next().is_some() {
                    return Err("too many words");
                }
                let ports = Ports {
                    local: lport,
                    peer: pport,
                };
                Ok(Ctl::Ping {
                    local,
                    peer,
                    count,
                    ports,
                })
            }
            (Some(cmd @ ("dial" | "close")), local) => {
                let (local, lport) = parse_end(local)?;
                let (peer, pport) = parse_end(w.next())?;
                if w.next().is_some() {
                    return Err("too many words");
                }
                let ports = Ports {
                    local: lport,
                    peer: pport,
                };
                Ok(if cmd == "dial" {
                    Ctl::Dial { local, peer, ports }
                } else {
                    Ctl::Close { local, peer, ports }
                })
            }
            (Some(op @ ("put" | "get")), local) => {
                let (local, lport) = parse_end(local)?;
                let (peer, pport) = parse_end(w.next())?;
                let ports = Ports {
                    local: lport,
                    peer: pport,
                };
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
                    ports,
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
