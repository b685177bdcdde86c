// SPDX-License-Identifier: GPL-2.0

//! The grammar of what a user writes: the selftest's test words (`lst`, also the body of the
//! control device's Start request) and, in the test build, the debugfs `ctl` file's commands
//! (`ctl`), with the parsing both share: numbers, sizes, addresses, keys.
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

/// Parses a number (with [`parse_size`]'s suffixes) within `min..=max`, as a `T`.
pub(crate) fn parse_num<T: TryFrom<u64>>(v: &str, min: u64, max: u64) -> Result<T, ParseError> {
    let n = parse_size(v).ok_or("bad number")?;
    if n < min || n > max {
        return Err("value out of range");
    }
    T::try_from(n).map_err(|_| "value out of range")
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

mod lst;
pub(crate) use lst::*;

// The debugfs `ctl` file's commands exist in the test build only (Documentation/testing.rst,
// "The test build").
#[cfg(fastreg_test)]
mod ctl;
#[cfg(fastreg_test)]
pub(crate) use ctl::*;
