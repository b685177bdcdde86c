// SPDX-License-Identifier: GPL-2.0

//! Parsing of the commands written to fastreg's debugfs control files.
//!
//! Pure logic: no `kernel::`, compiled by the host tests too.

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

/// Most transfers one loopback command may run.
pub(crate) const MAX_COUNT: u32 = 1_000_000;
/// Most transfers in flight in one loopback command.
pub(crate) const MAX_CONCURRENCY: u32 = 256;
/// Largest buffer offset accepted.
pub(crate) const MAX_OFFSET: u64 = 1 << 20;

/// `ADDR OFFSET LENGTH [COUNT [CONCURRENCY]]`: RDMA through a connection of the module to
/// itself at `ADDR`, `COUNT` times (default 1), `CONCURRENCY` at a time (default 1), on
/// buffers of `LENGTH` bytes starting `OFFSET` bytes into their first page.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Loopback {
    /// Local IPv4 address of the device to use.
    pub(crate) ip: [u8; 4],
    /// Byte offset of the buffers.
    pub(crate) offset: u64,
    /// Bytes per transfer.
    pub(crate) len: u64,
    /// Transfers.
    pub(crate) count: u32,
    /// Transfers in flight at once.
    pub(crate) concurrency: u32,
}

/// Why a command was refused: a message for the kernel log.
pub(crate) type ParseError = &'static str;

impl Loopback {
    /// Parses a loopback command.
    pub(crate) fn parse(line: &str) -> Result<Self, ParseError> {
        let mut w = line.split_ascii_whitespace();
        let ip = parse_ipv4(w.next().ok_or("missing address")?).ok_or("bad IPv4 address")?;
        let offset = parse_size(w.next().ok_or("missing offset")?).ok_or("bad offset")?;
        let len = parse_size(w.next().ok_or("missing length")?).ok_or("bad length")?;
        let count = match w.next() {
            Some(c) => parse_size(c).ok_or("bad count")?,
            None => 1,
        };
        let concurrency = match w.next() {
            Some(c) => parse_size(c).ok_or("bad concurrency")?,
            None => 1,
        };
        if w.next().is_some() {
            return Err("too many words");
        }
        if len == 0 {
            return Err("length must be at least 1");
        }
        if offset > MAX_OFFSET {
            return Err("offset above 1 MiB");
        }
        if count == 0 || count > u64::from(MAX_COUNT) {
            return Err("count must be 1..1000000");
        }
        if concurrency == 0 || concurrency > u64::from(MAX_CONCURRENCY) {
            return Err("concurrency must be 1..256");
        }
        Ok(Self {
            ip,
            offset,
            len,
            count: count as u32,
            concurrency: concurrency as u32,
        })
    }
}
