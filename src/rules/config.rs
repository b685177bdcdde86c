// SPDX-License-Identifier: GPL-2.0

//! What fastreg's configfs directories take (`/sys/kernel/config/fastreg/`): an interface's
//! attributes, their ranges, and the reading of a value written to one.
//!
//! Pure logic: no `kernel::`, compiled by the host tests too. The ranges are those of the
//! `iface add` command ([`crate::rules::command`]), defined once here.

use crate::rules::command::{
    parse_ipv4,
    parse_key,
    parse_size,
    MAX_DEV_NAME, //
};

/// A numeric attribute of an interface: its name (the file's) and its range.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Knob {
    /// The attribute's file name.
    pub(crate) name: &'static str,
    /// Least value.
    pub(crate) min: u64,
    /// Largest value.
    pub(crate) max: u64,
}

/// The port the interface listens on and connects to.
pub(crate) const PORT: Knob = Knob {
    name: "port",
    min: 1,
    max: 65535,
};
/// Transfers in flight per connection.
pub(crate) const QUEUE_DEPTH: Knob = Knob {
    name: "queue_depth",
    min: 1,
    max: 256,
};
/// Largest transfer, bytes.
pub(crate) const MAX_PAYLOAD: Knob = Knob {
    name: "max_payload",
    min: 4096,
    max: 64 << 20,
};
/// Registrations per transfer message.
pub(crate) const MAX_REGS: Knob = Knob {
    name: "max_regs",
    min: 1,
    max: 32,
};
/// Pages per registration of the buffers the interface serves.
pub(crate) const MR_PAGES: Knob = Knob {
    name: "mr_pages",
    min: 1,
    max: 65536,
};
/// Most bytes of a transfer carried inline.
pub(crate) const MAX_INLINE: Knob = Knob {
    name: "max_inline",
    min: 0,
    max: 16384,
};

/// Most bytes a value written to an attribute may have (its newline included).
pub(crate) const MAX_VALUE: usize = 80;

/// Why a value written to an attribute was refused (`EINVAL`, with one log line).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// Longer than [`MAX_VALUE`], or more than one line.
    TooLong,
    /// Not text (not UTF-8).
    NotText,
    /// Not a number (decimal, or with a K/M/G suffix).
    NotANumber,
    /// A number out of the attribute's range.
    OutOfRange,
    /// Not an IPv4 address in dotted decimal.
    BadAddress,
    /// Not a device name (printable, no spaces, at most [`MAX_DEV_NAME`] bytes).
    BadName,
    /// Not 0 or 1 (or y, n).
    NotBoolean,
    /// Not a key (64 hex digits) nor `none`.
    BadKey,
}

impl Refusal {
    /// What the log line says.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Refusal::TooLong => "too long",
            Refusal::NotText => "not text",
            Refusal::NotANumber => "not a number",
            Refusal::OutOfRange => "out of range",
            Refusal::BadAddress => "not an IPv4 address",
            Refusal::BadName => "not a device name",
            Refusal::NotBoolean => "not 0 or 1",
            Refusal::BadKey => "not 64 hex digits nor none",
        }
    }
}

/// The text written to an attribute: one line, without its newline.
pub(crate) fn text(page: &[u8]) -> Result<&str, Refusal> {
    if page.len() > MAX_VALUE {
        return Err(Refusal::TooLong);
    }
    let s = core::str::from_utf8(page).map_err(|_| Refusal::NotText)?;
    let s = s.strip_suffix('\n').unwrap_or(s);
    if s.contains('\n') {
        return Err(Refusal::TooLong);
    }
    Ok(s.trim())
}

/// A number for `knob`.
pub(crate) fn number(knob: &Knob, page: &[u8]) -> Result<u64, Refusal> {
    let n = parse_size(text(page)?).ok_or(Refusal::NotANumber)?;
    if n < knob.min || n > knob.max {
        return Err(Refusal::OutOfRange);
    }
    Ok(n)
}

/// An IPv4 address.
pub(crate) fn address(page: &[u8]) -> Result<[u8; 4], Refusal> {
    parse_ipv4(text(page)?).ok_or(Refusal::BadAddress)
}

/// A device name.
pub(crate) fn device(page: &[u8]) -> Result<&str, Refusal> {
    let s = text(page)?;
    if s.is_empty() || s.len() > MAX_DEV_NAME || !s.bytes().all(|c| c.is_ascii_graphic()) {
        return Err(Refusal::BadName);
    }
    Ok(s)
}

/// `1`, `y` or `Y` (true), `0`, `n` or `N` (false).
pub(crate) fn boolean(page: &[u8]) -> Result<bool, Refusal> {
    match text(page)? {
        "1" | "y" | "Y" => Ok(true),
        "0" | "n" | "N" => Ok(false),
        _ => Err(Refusal::NotBoolean),
    }
}

/// A console key (64 hex digits), or `none` (no key).
pub(crate) fn key(page: &[u8]) -> Result<Option<[u8; 32]>, Refusal> {
    match text(page).map_err(|_| Refusal::BadKey)? {
        "none" => Ok(None),
        s => parse_key(s).map(Some).ok_or(Refusal::BadKey),
    }
}

/// What a refused value is shown as in the log: printable ASCII, at most 32 bytes of it.
pub(crate) fn shown(page: &[u8]) -> impl core::fmt::Display + '_ {
    struct Shown<'a>(&'a [u8]);
    impl core::fmt::Display for Shown<'_> {
        fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
            let v = self.0.strip_suffix(b"\n").unwrap_or(self.0);
            for &c in v.iter().take(32) {
                if c.is_ascii_graphic() || c == b' ' {
                    core::fmt::Write::write_char(f, c as char)?;
                } else {
                    write!(f, "\\x{:02x}", c)?;
                }
            }
            if v.len() > 32 {
                f.write_str("...")?;
            }
            Ok(())
        }
    }
    Shown(page)
}
