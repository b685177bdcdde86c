// SPDX-License-Identifier: GPL-2.0

//! Messages to and from bytes: encoding, and decoding that validates every field against
//! the connection's negotiated limits before anything acts on it; the test-only
//! corruptions that prove a receiver refuses a bad message.

use super::{
    msg::*,
    HDR_LEN,
    MAX_CONTROL,
    MAX_MSG,
    MSG_MAGIC,
    REG_LEN,
    VERSION, //
};

pub(super) fn get_u16(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

pub(super) fn get_u32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

pub(super) fn get_u64(b: &[u8], at: usize) -> u64 {
    let mut x = [0u8; 8];
    x.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(x)
}

pub(super) fn put(b: &mut [u8], at: usize, v: &[u8]) {
    b[at..at + v.len()].copy_from_slice(v);
}

/// The checksum of a message: a rotate-and-add over its bytes with the checksum field taken
/// as zero. Never 0 (0 means "no checksum").
pub(crate) fn checksum(msg: &[u8]) -> u32 {
    let mut sum = 0u32;
    for (i, &b) in msg.iter().enumerate() {
        let b = if (12..16).contains(&i) { 0 } else { b };
        sum = sum.rotate_left(1).wrapping_add(u32::from(b));
    }
    if sum == 0 {
        1
    } else {
        sum
    }
}

/// Size of the body of each type, without registrations or payload.
const fn fixed_body(t: Type) -> usize {
    match t {
        Type::Noop => 0,
        Type::Immediate | Type::Control | Type::ControlReply => 8,
        Type::PutReq => 24,
        Type::PutNak | Type::PutResult => 16,
        Type::PutAck => 24,
        Type::PutDone | Type::GetDone => 16,
        Type::GetReq => 32,
        Type::PutInline | Type::GetInline => 24,
        Type::GetData => 16,
    }
}

/// Where the data of an inline message ([`Type::PutInline`], [`Type::GetData`]) starts.
pub(crate) const fn payload_at(t: Type) -> usize {
    HDR_LEN + fixed_body(t)
}

/// The data of a decoded inline message `msg`, received in `buf` (empty for other types).
pub(crate) fn payload<'a>(buf: &'a [u8], msg: &Msg<'_>) -> &'a [u8] {
    let len = match msg.body {
        Body::PutInline { len, .. } | Body::GetData { len, .. } => len as usize,
        _ => 0,
    };
    let at = payload_at(msg.kind());
    buf.get(at..at + len).unwrap_or(&[])
}

/// Encodes `msg` into `out`; returns its length, or `None` if `out` is too small or the
/// message does not fit `max_msg`. With `checksum`, fills the checksum field. The data of
/// an inline message is left zero: see [`encode_with`].
// The module encodes through `encode_with`; the host tests (golden vectors) use this.
#[allow(dead_code)]
pub(crate) fn encode(msg: &Msg<'_>, out: &mut [u8], checksum_on: bool) -> Option<usize> {
    encode_with(msg, out, checksum_on, |_| {})
}

/// [`encode`], with `fill` writing the data of an inline message (given exactly its `len`
/// bytes, before the checksum is taken; not called for other types).
pub(crate) fn encode_with(
    msg: &Msg<'_>,
    out: &mut [u8],
    checksum_on: bool,
    fill: impl FnOnce(&mut [u8]),
) -> Option<usize> {
    let t = msg.kind();
    let (extra, regs): (usize, Option<&Regs>) = match &msg.body {
        Body::Immediate { payload, .. } | Body::Control { payload, .. } => (payload.len(), None),
        Body::PutAck { regs, .. } | Body::GetReq { regs, .. } => {
            (regs.as_slice().len() * REG_LEN, Some(regs))
        }
        Body::PutInline { len, .. } | Body::GetData { len, .. } => (*len as usize, None),
        _ => (0, None),
    };
    let len = HDR_LEN + fixed_body(t) + extra;
    if len > out.len() || len > MAX_MSG as usize {
        return None;
    }
    let out = &mut out[..len];
    out.fill(0);
    put(out, 0, &MSG_MAGIC.to_le_bytes());
    put(out, 4, &VERSION.to_le_bytes());
    out[6] = t as u8;
    out[7] = msg.credits;
    put(out, 8, &(len as u32).to_le_bytes());
    put(out, 16, &msg.src_stamp.to_le_bytes());
    put(out, 24, &msg.dst_stamp.to_le_bytes());
    let b = HDR_LEN;
    match msg.body {
        Body::Noop => {}
        Body::Immediate { cookie, payload }
        | Body::Control {
            cookie, payload, ..
        } => {
            put(out, b, &cookie.to_le_bytes());
            put(out, b + 8, payload);
        }
        Body::PutReq {
            cookie,
            size,
            seed,
            check,
        }
        | Body::GetReq {
            cookie,
            size,
            seed,
            check,
            ..
        }
        | Body::GetInline {
            cookie,
            size,
            seed,
            check,
        } => {
            put(out, b, &cookie.to_le_bytes());
            put(out, b + 8, &size.to_le_bytes());
            put(out, b + 16, &seed.to_le_bytes());
            out[b + 20] = check as u8;
        }
        Body::PutInline {
            cookie,
            len,
            seed,
            check,
        } => {
            put(out, b, &cookie.to_le_bytes());
            put(out, b + 8, &u64::from(len).to_le_bytes());
            put(out, b + 16, &seed.to_le_bytes());
            out[b + 20] = check as u8;
            fill(&mut out[payload_at(t)..]);
        }
        Body::PutNak { cookie, status }
        | Body::PutResult { cookie, status }
        | Body::Done { cookie, status, .. } => {
            put(out, b, &cookie.to_le_bytes());
            put(out, b + 8, &status.to_le_bytes());
        }
        Body::GetData { cookie, status, .. } => {
            put(out, b, &cookie.to_le_bytes());
            put(out, b + 8, &status.to_le_bytes());
            fill(&mut out[payload_at(t)..]);
        }
        Body::PutAck {
            cookie,
            sink_cookie,
            ..
        } => {
            put(out, b, &cookie.to_le_bytes());
            put(out, b + 8, &sink_cookie.to_le_bytes());
        }
    }
    if let Some(regs) = regs {
        // The registration count sits in the last 8 bytes of the fixed body.
        let at = b + fixed_body(t) - 8;
        put(out, at, &(regs.as_slice().len() as u16).to_le_bytes());
        let mut at = b + fixed_body(t);
        for r in regs.as_slice() {
            put(out, at, &r.addr.to_le_bytes());
            put(out, at + 8, &r.len.to_le_bytes());
            put(out, at + 12, &r.rkey.to_le_bytes());
            at += REG_LEN;
        }
    }
    if checksum_on {
        let c = checksum(out);
        put(out, 12, &c.to_le_bytes());
    }
    Some(len)
}

/// Decodes and validates a received message of `buf.len()` bytes against `lim`.
pub(crate) fn decode<'a>(buf: &'a [u8], lim: &Limits) -> Result<Msg<'a>, WireError> {
    if buf.len() < HDR_LEN {
        return Err(WireError::Short);
    }
    if get_u32(buf, 0) != MSG_MAGIC {
        return Err(WireError::Magic);
    }
    if get_u16(buf, 4) != VERSION {
        return Err(WireError::Version);
    }
    let t = Type::from_u8(buf[6]).ok_or(WireError::Type)?;
    let credits = buf[7];
    let len = get_u32(buf, 8) as usize;
    if len != buf.len() || len > lim.max_msg as usize {
        return Err(WireError::Length);
    }
    let ck = get_u32(buf, 12);
    if ck != 0 && ck != checksum(buf) {
        return Err(WireError::Checksum);
    }
    if lim.checksum && ck == 0 {
        return Err(WireError::Checksum);
    }
    let src_stamp = get_u64(buf, 16);
    let dst_stamp = get_u64(buf, 24);
    if src_stamp != lim.peer_stamp || dst_stamp != lim.local_stamp {
        return Err(WireError::Stale);
    }
    if u32::from(credits) > lim.max_credits {
        return Err(WireError::Credits);
    }
    let b = HDR_LEN;
    let fixed = fixed_body(t);
    if len < b + fixed {
        return Err(WireError::Short);
    }
    let cookie = if fixed >= 8 { get_u64(buf, b) } else { 0 };
    let regs = |size: Option<u64>| -> Result<Regs, WireError> {
        let n = usize::from(get_u16(buf, b + fixed - 8));
        if get_u16(buf, b + fixed - 6) != 0 || get_u32(buf, b + fixed - 4) != 0 {
            return Err(WireError::Reserved);
        }
        if n == 0 || n > usize::from(lim.max_regs) || n > MAX_REGS {
            return Err(WireError::Limit);
        }
        if len != b + fixed + n * REG_LEN {
            return Err(WireError::Length);
        }
        let mut regs = Regs::new();
        for i in 0..n {
            let at = b + fixed + i * REG_LEN;
            let r = Reg {
                addr: get_u64(buf, at),
                len: get_u32(buf, at + 8),
                rkey: get_u32(buf, at + 12),
            };
            if r.len == 0 || r.addr.checked_add(u64::from(r.len)).is_none() {
                return Err(WireError::Regs);
            }
            regs.push(r);
        }
        if regs.bytes() > u64::from(lim.max_payload) {
            return Err(WireError::Limit);
        }
        if let Some(size) = size {
            if regs.bytes() != size {
                return Err(WireError::Regs);
            }
        }
        Ok(regs)
    };
    let size_ok = |size: u64| {
        if size == 0 || size > u64::from(lim.max_payload) {
            Err(WireError::Limit)
        } else {
            Ok(size)
        }
    };
    let status = |at: usize| -> Result<i32, WireError> {
        let s = get_u32(buf, at) as i32;
        if get_u32(buf, at + 4) != 0 {
            return Err(WireError::Reserved);
        }
        // 0, or a negative errno.
        if !(-4095..=0).contains(&s) {
            return Err(WireError::Limit);
        }
        Ok(s)
    };
    // Seed and check of PUT_REQ and GET_REQ: bytes 16..24 of the body.
    let seed_check = || -> Result<(u32, Check), WireError> {
        if buf[b + 21] != 0 || buf[b + 22] != 0 || buf[b + 23] != 0 {
            return Err(WireError::Reserved);
        }
        let check = Check::from_u8(buf[b + 20]).ok_or(WireError::Limit)?;
        Ok((get_u32(buf, b + 16), check))
    };
    // The size of an inline transfer: within the negotiated inline size, never 0.
    let inline_ok = |size: u64| {
        if size == 0 || size > u64::from(lim.max_inline) {
            Err(WireError::Limit)
        } else {
            Ok(size)
        }
    };
    let exact = |extra: usize| {
        if len == b + fixed + extra {
            Ok(())
        } else {
            Err(WireError::Length)
        }
    };
    let body = match t {
        Type::Noop => {
            exact(0)?;
            Body::Noop
        }
        Type::Immediate => Body::Immediate {
            cookie,
            payload: &buf[b + fixed..len],
        },
        Type::Control | Type::ControlReply => {
            let payload = &buf[b + fixed..len];
            if payload.is_empty() || payload.len() > MAX_CONTROL {
                return Err(WireError::Length);
            }
            Body::Control {
                reply: t == Type::ControlReply,
                cookie,
                payload,
            }
        }
        Type::PutReq => {
            exact(0)?;
            let (seed, check) = seed_check()?;
            Body::PutReq {
                cookie,
                size: size_ok(get_u64(buf, b + 8))?,
                seed,
                check,
            }
        }
        Type::PutInline => {
            let size = inline_ok(get_u64(buf, b + 8))?;
            exact(size as usize)?;
            let (seed, check) = seed_check()?;
            Body::PutInline {
                cookie,
                len: size as u32,
                seed,
                check,
            }
        }
        Type::GetInline => {
            exact(0)?;
            let (seed, check) = seed_check()?;
            Body::GetInline {
                cookie,
                size: inline_ok(get_u64(buf, b + 8))?,
                seed,
                check,
            }
        }
        Type::GetData => {
            let status = status(b + 8)?;
            let extra = len - (b + fixed);
            // Data only with success, and then at least a byte.
            if status == 0 {
                inline_ok(extra as u64)?;
            } else if extra != 0 {
                return Err(WireError::Length);
            }
            Body::GetData {
                cookie,
                status,
                len: extra as u32,
            }
        }
        Type::PutResult => {
            exact(0)?;
            Body::PutResult {
                cookie,
                status: status(b + 8)?,
            }
        }
        Type::PutNak => {
            exact(0)?;
            let status = status(b + 8)?;
            if status == 0 {
                return Err(WireError::Limit);
            }
            Body::PutNak { cookie, status }
        }
        Type::PutDone | Type::GetDone => {
            exact(0)?;
            Body::Done {
                get: t == Type::GetDone,
                cookie,
                status: status(b + 8)?,
            }
        }
        Type::PutAck => Body::PutAck {
            cookie,
            sink_cookie: get_u64(buf, b + 8),
            regs: regs(None)?,
        },
        Type::GetReq => {
            let size = size_ok(get_u64(buf, b + 8))?;
            let (seed, check) = seed_check()?;
            Body::GetReq {
                cookie,
                size,
                seed,
                check,
                regs: regs(Some(size))?,
            }
        }
    };
    Ok(Msg {
        credits,
        src_stamp,
        dst_stamp,
        body,
    })
}

/// Test-only corruptions of an encoded message (the `fault` control command), to prove
/// that a receiver refuses them. The test build only.
#[cfg(fastreg_test)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Mangle {
    /// Flip the magic.
    Magic,
    /// Claim more registrations than any connection allows (PUT_ACK and GET_REQ).
    Regs,
    /// Claim 4 bytes more than were sent.
    Length,
    /// Return more credits than any queue depth allows (255).
    Credits,
}

/// Applies `m` to the message of `len` bytes in `buf`.
#[cfg(fastreg_test)]
pub(crate) fn mangle(m: Mangle, buf: &mut [u8]) {
    match m {
        Mangle::Magic => buf[0] ^= 0xff,
        Mangle::Regs => {
            let Some(t) = buf.get(6).and_then(|&t| Type::from_u8(t)) else {
                return;
            };
            let at = HDR_LEN + fixed_body(t);
            if matches!(t, Type::PutAck | Type::GetReq) && buf.len() >= at {
                put(buf, at - 8, &((MAX_REGS as u16) + 1).to_le_bytes());
            }
        }
        Mangle::Length => {
            let len = get_u32(buf, 8).wrapping_add(4);
            put(buf, 8, &len.to_le_bytes());
        }
        Mangle::Credits => buf[7] = u8::MAX,
    }
}
