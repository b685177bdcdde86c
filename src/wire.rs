// SPDX-License-Identifier: GPL-2.0

//! fastreg's wire format: messages on a connection, and connection parameters carried in
//! rdma_cm private data. Documented field by field in `Documentation/wire.rst`.
//!
//! Pure logic: no `kernel::`, compiled by the host tests too (golden vectors, fuzzing).
//!
//! Everything is little-endian, packed, at fixed offsets. Nothing counts pages: sizes are
//! bytes, so peers with different `PAGE_SIZE` interoperate by construction. Every field
//! received from a peer is validated by [`decode`] against the connection's negotiated
//! limits before anything acts on it.

/// `"FRGM"`: first bytes of every message.
pub(crate) const MSG_MAGIC: u32 = 0x4d47_5246;
/// `"FRGC"`: first bytes of connection parameters and rejects.
pub(crate) const CONN_MAGIC: u32 = 0x4347_5246;
/// The protocol version this code speaks: 2 since inline transfers (a version 1 peer
/// rejects a version 2 request, and the reason says so).
pub(crate) const VERSION: u16 = 2;
/// Size of the message header.
pub(crate) const HDR_LEN: usize = 32;
/// Most bytes of a control payload: it fits in the smallest message ([`MIN_MSG`]).
pub(crate) const MAX_CONTROL: usize = MIN_MSG as usize - HDR_LEN - 8;
/// Size of one registration descriptor.
pub(crate) const REG_LEN: usize = 16;
/// Smallest message size a connection may negotiate.
pub(crate) const MIN_MSG: u32 = 256;
/// Most bytes a transfer may carry inline, in its messages (the `inline` parameter's
/// ceiling).
pub(crate) const MAX_INLINE: u32 = 16384;
/// Bytes of a message around the data of an inline transfer: the header and the largest
/// fixed body of [`Type::PutInline`] and [`Type::GetData`].
pub(crate) const INLINE_OVERHEAD: u32 = (HDR_LEN + 24) as u32;
/// The message size without inline data, and the least any interface uses.
pub(crate) const BASE_MSG: u32 = 4096;
/// Largest message size: room for [`MAX_INLINE`] bytes inline.
pub(crate) const MAX_MSG: u32 = INLINE_OVERHEAD + MAX_INLINE;

/// The message size an interface needs to carry `inline` bytes inline.
pub(crate) const fn msg_size(inline: u32) -> u32 {
    let need = INLINE_OVERHEAD + inline;
    if need > BASE_MSG {
        need
    } else {
        BASE_MSG
    }
}

/// The most bytes inline that messages of `max_msg` bytes carry.
pub(crate) const fn inline_fits(max_msg: u32) -> u32 {
    max_msg.saturating_sub(INLINE_OVERHEAD)
}

/// Message types.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum Type {
    /// Returns credits, keeps the connection alive.
    Noop = 0xd0,
    /// A small message, payload inline.
    Immediate = 0xd1,
    /// The source asks the sink for registrations of `size` bytes.
    PutReq = 0xd2,
    /// The sink refuses a PUT.
    PutNak = 0xd3,
    /// The sink's registrations for a PUT.
    PutAck = 0xd4,
    /// The source has written the data (or failed).
    PutDone = 0xd5,
    /// The sink asks the source to write `size` bytes into its registrations.
    GetReq = 0xd6,
    /// The source has written the data (or failed).
    GetDone = 0xd7,
    /// The sink's verdict on the data of a PUT that asked for a check, or of any inline
    /// PUT (for which it is also the acknowledgement).
    PutResult = 0xd8,
    /// A PUT whose data travels in the message (within the negotiated inline size).
    PutInline = 0xd9,
    /// A GET whose data is to come back in a message ([`Type::GetData`]).
    GetInline = 0xda,
    /// The data of a [`Type::GetInline`] (or why there is none).
    GetData = 0xdb,
    /// A console's request to the node (`crate::control`'s payload).
    Control = 0xdc,
    /// The node's answer to a [`Type::Control`].
    ControlReply = 0xdd,
}

impl Type {
    /// The type of byte `v`, if it names one.
    pub(crate) fn from_u8(v: u8) -> Option<Type> {
        Some(match v {
            0xd0 => Type::Noop,
            0xd1 => Type::Immediate,
            0xd2 => Type::PutReq,
            0xd3 => Type::PutNak,
            0xd4 => Type::PutAck,
            0xd5 => Type::PutDone,
            0xd6 => Type::GetReq,
            0xd7 => Type::GetDone,
            0xd8 => Type::PutResult,
            0xd9 => Type::PutInline,
            0xda => Type::GetInline,
            0xdb => Type::GetData,
            0xdc => Type::Control,
            0xdd => Type::ControlReply,
            _ => return None,
        })
    }
}

/// One registration a peer may RDMA into: `len` bytes at `addr` under `rkey`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Reg {
    /// Address (iova) of the first byte.
    pub(crate) addr: u64,
    /// Bytes.
    pub(crate) len: u32,
    /// Remote key.
    pub(crate) rkey: u32,
}

/// The most registrations one message can carry (a fixed array on the stack: kept small).
pub(crate) const MAX_REGS: usize = 32;

/// Registrations carried by a message (a fixed array: decoding allocates nothing).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Regs {
    n: usize,
    regs: [Reg; MAX_REGS],
}

impl Regs {
    /// No registration.
    pub(crate) const fn new() -> Self {
        Self {
            n: 0,
            regs: [Reg {
                addr: 0,
                len: 0,
                rkey: 0,
            }; MAX_REGS],
        }
    }

    /// Appends one; `false` if full.
    pub(crate) fn push(&mut self, r: Reg) -> bool {
        if self.n == MAX_REGS {
            return false;
        }
        self.regs[self.n] = r;
        self.n += 1;
        true
    }

    /// The registrations.
    pub(crate) fn as_slice(&self) -> &[Reg] {
        &self.regs[..self.n]
    }

    /// Total bytes.
    pub(crate) fn bytes(&self) -> u64 {
        self.as_slice().iter().map(|r| u64::from(r.len)).sum()
    }

    /// Test hook ([`Misbehave::Short`]): the same registrations, one byte shorter.
    pub(crate) fn shorten(&mut self) {
        if let Some(last) = self.regs[..self.n].last_mut() {
            last.len = last.len.saturating_sub(1).max(1);
        }
    }
}

/// Statuses a peer may report for a transfer (PUT_NAK, DONE, PUT_RESULT): 0 or one of
/// these (Linux's generic errno values, negated). See [`remote_error`].
pub(crate) mod status {
    /// Busy: no MR or memory now; the requester retries.
    pub(crate) const EAGAIN: i32 = -11;
    /// Out of memory.
    pub(crate) const ENOMEM: i32 = -12;
    /// The data was checked and differs.
    pub(crate) const EBADMSG: i32 = -74;
    /// Beyond what the peer can register or carry.
    pub(crate) const EMSGSIZE: i32 = -90;
    /// Any other failure at the peer.
    pub(crate) const EREMOTEIO: i32 = -121;
}

/// The error a transfer reports for a peer's `status`: 0 and the few errors of
/// [`status`] as they are, anything else as `EREMOTEIO`, so that a peer cannot make a
/// call fail with an error of its choosing (`ERESTARTSYS` with no signal pending, say).
pub(crate) const fn remote_error(s: i32) -> i32 {
    match s {
        0 | status::EAGAIN | status::ENOMEM | status::EBADMSG | status::EMSGSIZE => s,
        _ => status::EREMOTEIO,
    }
}

/// Whether a peer's registrations `regs` are fit to move a transfer of exactly `size`
/// bytes: they add up to `size`, no range wraps, and each is a registration of its own
/// (no rkey twice, so no byte of a registration is advertised twice). Ranges of different
/// rkeys are in different address spaces (each MR's iova space is its own) and may
/// overlap as numbers. What the decoder cannot check alone: it does not know what was
/// asked.
pub(crate) fn regs_cover(regs: &Regs, size: u64) -> bool {
    let r = regs.as_slice();
    if r.is_empty() || regs.bytes() != size {
        return false;
    }
    for (i, a) in r.iter().enumerate() {
        if a.addr.checked_add(u64::from(a.len)).is_none() {
            return false;
        }
        if r[i + 1..].iter().any(|b| b.rkey == a.rkey) {
            return false;
        }
    }
    true
}

/// Test-only misbehaviours of an interface towards its peers (the `misbehave` control
/// command), to prove that a peer closes the connection naming the reason.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub(crate) enum Misbehave {
    /// As the sink of a PUT, advertise one byte less than asked.
    Short = 1,
    /// As the source of a PUT, send PUT_DONE for a sink cookie that was never given.
    UnknownDone = 2,
    /// As the source of a GET, send GET_DONE twice.
    DupDone = 3,
    /// As the source of a GET, remember its registrations (for `fault ... stale_get`).
    RecordGet = 4,
    /// As the source of a GET of several registrations, invalidate the last one remotely
    /// instead of the first (the one the requester asked to be invalidated).
    BogusInv = 5,
    /// As a client, start requests beyond the negotiated queue depth.
    Flood = 6,
    /// As the source of an inline GET, claim more credits than the queue depth in its
    /// GET_DATA.
    Credits = 7,
}

impl Misbehave {
    /// The name used by the control command.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Misbehave::Short => "short",
            Misbehave::UnknownDone => "unknown_done",
            Misbehave::DupDone => "dup_done",
            Misbehave::RecordGet => "record_get",
            Misbehave::BogusInv => "bogus_inv",
            Misbehave::Flood => "flood",
            Misbehave::Credits => "credits",
        }
    }

    /// Every misbehaviour.
    pub(crate) const ALL: [Misbehave; 7] = [
        Misbehave::Short,
        Misbehave::UnknownDone,
        Misbehave::DupDone,
        Misbehave::RecordGet,
        Misbehave::BogusInv,
        Misbehave::Flood,
        Misbehave::Credits,
    ];

    /// Parses a name.
    pub(crate) fn parse(s: &str) -> Option<Misbehave> {
        Self::ALL.into_iter().find(|m| m.name() == s)
    }
}

/// How the data of a transfer is checked against its pattern (see
/// `Documentation/selftest.rst`): the source writes the pattern of the transfer's seed, the
/// sink compares.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum Check {
    /// Nothing is written or compared.
    #[default]
    None = 0,
    /// The first and last 8 bytes of every 4 KiB block (and of the transfer) are compared.
    Simple = 1,
    /// Every byte is compared.
    Full = 2,
}

impl Check {
    /// The check of a wire value.
    pub(crate) fn from_u8(v: u8) -> Option<Check> {
        Some(match v {
            0 => Check::None,
            1 => Check::Simple,
            2 => Check::Full,
            _ => return None,
        })
    }

    /// Its name.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Check::None => "none",
            Check::Simple => "simple",
            Check::Full => "full",
        }
    }

    /// Whether byte `off` of a transfer of `len` bytes is compared.
    pub(crate) fn covers(self, off: usize, len: usize) -> bool {
        match self {
            Check::None => false,
            Check::Simple => off % 4096 < 8 || off % 4096 >= 4088 || off + 8 >= len,
            Check::Full => true,
        }
    }
}

/// A message body.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Body<'a> {
    /// [`Type::Noop`].
    Noop,
    /// [`Type::Immediate`]: the sender's cookie and the payload.
    Immediate {
        /// Identifies the message for its completion.
        cookie: u64,
        /// Payload.
        payload: &'a [u8],
    },
    /// [`Type::Control`] or [`Type::ControlReply`]: the cookie of the console's record
    /// and the payload (1 to [`MAX_CONTROL`] bytes, decoded by `crate::control`).
    Control {
        /// Which of the two.
        reply: bool,
        /// The console's cookie, echoed in the reply.
        cookie: u64,
        /// Payload.
        payload: &'a [u8],
    },
    /// [`Type::PutReq`].
    PutReq {
        /// The source's cookie.
        cookie: u64,
        /// Bytes to put.
        size: u64,
        /// Seed of the data's pattern.
        seed: u32,
        /// What the sink checks; anything but [`Check::None`] asks for a `PutResult`.
        check: Check,
    },
    /// [`Type::PutNak`].
    PutNak {
        /// The source's cookie.
        cookie: u64,
        /// Why (a negative errno).
        status: i32,
    },
    /// [`Type::PutAck`].
    PutAck {
        /// The source's cookie.
        cookie: u64,
        /// The sink's cookie, echoed in `PutDone`.
        sink_cookie: u64,
        /// Where to write.
        regs: Regs,
    },
    /// [`Type::PutResult`].
    PutResult {
        /// The source's cookie.
        cookie: u64,
        /// 0, or a negative errno (`-EBADMSG`: the data differ from the pattern).
        status: i32,
    },
    /// [`Type::PutDone`] or [`Type::GetDone`].
    Done {
        /// Which of the two.
        get: bool,
        /// The sink's cookie.
        cookie: u64,
        /// 0, or a negative errno.
        status: i32,
    },
    /// [`Type::PutInline`]: followed by `len` bytes of data, which [`payload`] returns
    /// (the sender fills them with [`encode_with`]). Always answered by a `PutResult`.
    PutInline {
        /// The source's cookie.
        cookie: u64,
        /// Bytes of data (at least 1, at most the negotiated inline size).
        len: u32,
        /// Seed of the data's pattern.
        seed: u32,
        /// What the sink checks.
        check: Check,
    },
    /// [`Type::GetInline`].
    GetInline {
        /// The sink's cookie, echoed in `GetData`.
        cookie: u64,
        /// Bytes to get (at least 1, at most the negotiated inline size).
        size: u64,
        /// Seed of the data's pattern.
        seed: u32,
        /// Whether the source writes the pattern ([`Check::None`]: any bytes).
        check: Check,
    },
    /// [`Type::GetData`]: followed by `len` bytes of data when `status` is 0 (none
    /// otherwise).
    GetData {
        /// The sink's cookie.
        cookie: u64,
        /// 0, or a negative errno.
        status: i32,
        /// Bytes of data.
        len: u32,
    },
    /// [`Type::GetReq`].
    GetReq {
        /// The sink's cookie, echoed in `GetDone`.
        cookie: u64,
        /// Bytes to get.
        size: u64,
        /// Seed of the data's pattern.
        seed: u32,
        /// Whether the source writes the pattern ([`Check::None`]: any bytes).
        check: Check,
        /// Where to write.
        regs: Regs,
    },
}

/// A message: header fields and body.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Msg<'a> {
    /// Credits returned to the receiver.
    pub(crate) credits: u8,
    /// The sender's incarnation.
    pub(crate) src_stamp: u64,
    /// The incarnation of the receiver the sender believes it talks to.
    pub(crate) dst_stamp: u64,
    /// The body.
    pub(crate) body: Body<'a>,
}

impl Msg<'_> {
    /// The message type.
    pub(crate) fn kind(&self) -> Type {
        match self.body {
            Body::Noop => Type::Noop,
            Body::Immediate { .. } => Type::Immediate,
            Body::Control { reply: false, .. } => Type::Control,
            Body::Control { reply: true, .. } => Type::ControlReply,
            Body::PutReq { .. } => Type::PutReq,
            Body::PutNak { .. } => Type::PutNak,
            Body::PutAck { .. } => Type::PutAck,
            Body::Done { get: false, .. } => Type::PutDone,
            Body::Done { get: true, .. } => Type::GetDone,
            Body::GetReq { .. } => Type::GetReq,
            Body::PutResult { .. } => Type::PutResult,
            Body::PutInline { .. } => Type::PutInline,
            Body::GetInline { .. } => Type::GetInline,
            Body::GetData { .. } => Type::GetData,
        }
    }
}

/// What a receiver checks a message against (the connection's negotiated values).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Limits {
    /// Largest message.
    pub(crate) max_msg: u32,
    /// Largest transfer.
    pub(crate) max_payload: u32,
    /// Most registrations in one message.
    pub(crate) max_regs: u16,
    /// Most bytes of a transfer inline (0: no inline transfers).
    pub(crate) max_inline: u32,
    /// Most credits one message may return (the queue depth).
    pub(crate) max_credits: u32,
    /// Whether checksums are on.
    pub(crate) checksum: bool,
    /// The local incarnation (a message's `dst_stamp` must match).
    pub(crate) local_stamp: u64,
    /// The peer's incarnation (a message's `src_stamp` must match).
    pub(crate) peer_stamp: u64,
}

/// Why a received message was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum WireError {
    /// Shorter than its header or than its type needs.
    Short,
    /// Wrong magic.
    Magic,
    /// Unknown version.
    Version,
    /// Unknown type.
    Type,
    /// The length field disagrees with the bytes received.
    Length,
    /// The checksum does not match.
    Checksum,
    /// Stamps of another incarnation.
    Stale,
    /// More credits than the queue depth.
    Credits,
    /// A size or registration count beyond the negotiated limits.
    Limit,
    /// Registrations that do not add up (zero length, sum differs from the size).
    Regs,
    /// A reserved field is not zero.
    Reserved,
}

impl core::fmt::Display for WireError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(match self {
            WireError::Short => "message too short",
            WireError::Magic => "bad magic",
            WireError::Version => "unsupported version",
            WireError::Type => "unknown message type",
            WireError::Length => "length field does not match the bytes received",
            WireError::Checksum => "bad checksum",
            WireError::Stale => "stale incarnation stamps",
            WireError::Credits => "more credits than the queue depth",
            WireError::Limit => "size or registration count beyond the negotiated limits",
            WireError::Regs => "registrations do not add up",
            WireError::Reserved => "reserved field not zero",
        })
    }
}

impl WireError {
    /// Why a connection that received such a message was closed (the connection's reason,
    /// counted by interface).
    pub(crate) fn closing(self) -> &'static str {
        match self {
            WireError::Short => "invalid message: too short",
            WireError::Magic => "invalid message: bad magic",
            WireError::Version => "invalid message: unsupported version",
            WireError::Type => "invalid message: unknown type",
            WireError::Length => "invalid message: bad length",
            WireError::Checksum => "invalid message: bad checksum",
            WireError::Stale => "invalid message: stale stamps",
            WireError::Credits => "invalid message: too many credits",
            WireError::Limit => "invalid message: beyond the negotiated limits",
            WireError::Regs => "invalid message: registrations do not add up",
            WireError::Reserved => "invalid message: reserved field not zero",
        }
    }
}

fn get_u16(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

fn get_u32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

fn get_u64(b: &[u8], at: usize) -> u64 {
    let mut x = [0u8; 8];
    x.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(x)
}

fn put(b: &mut [u8], at: usize, v: &[u8]) {
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
        Body::PutAck { regs, .. } | Body::GetReq { regs, .. } => (regs.n * REG_LEN, Some(regs)),
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
        put(out, at, &(regs.n as u16).to_le_bytes());
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

/// Feature bit: the sender can be remotely invalidated (`IB_WR_SEND_WITH_INV`).
pub(crate) const FEATURE_REMOTE_INV: u32 = 1 << 0;
/// Feature bit: the sender checksums its messages.
pub(crate) const FEATURE_CHECKSUM: u32 = 1 << 1;
/// Every feature this code knows.
pub(crate) const FEATURES: u32 = FEATURE_REMOTE_INV | FEATURE_CHECKSUM;

/// Connection parameters: carried in the private data of a connection request (what the
/// requester asks for), of the accept (what was granted), and of a reject (the rejecting
/// side's own limits). 48 bytes: within the 56 bytes of an IB/RoCE REQ.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ConnParams {
    /// Protocol version.
    pub(crate) version: u16,
    /// Transfers in flight (and credits).
    pub(crate) queue_depth: u16,
    /// Most registrations in one transfer message.
    pub(crate) max_regs: u16,
    /// Largest transfer in bytes.
    pub(crate) max_payload: u32,
    /// Largest message in bytes.
    pub(crate) max_msg: u32,
    /// The sender's `PAGE_SIZE`: informational, nothing depends on it.
    pub(crate) page_size: u32,
    /// Feature bits.
    pub(crate) features: u32,
    /// Reject reason (0 in requests and accepts).
    pub(crate) reason: u8,
    /// The port the sender's interface listens on (0: unknown). With the source address
    /// of the connection, it names the interface that connects, so the receiver can tell
    /// a restarted peer (same interface, new `stamp`) and close its stale connections.
    pub(crate) port: u16,
    /// Most bytes of a transfer carried inline, in its messages (0: none), within what
    /// `max_msg` leaves ([`inline_fits`]) and within `max_payload`.
    pub(crate) max_inline: u16,
    /// The sender's incarnation.
    pub(crate) stamp: u64,
    /// The incarnation of the receiver the sender believes it talks to (0 if unknown).
    pub(crate) dst_stamp: u64,
}

/// Size of encoded [`ConnParams`].
pub(crate) const CONN_LEN: usize = 48;

impl ConnParams {
    /// Encodes into 48 bytes.
    pub(crate) fn encode(&self) -> [u8; CONN_LEN] {
        let mut b = [0u8; CONN_LEN];
        put(&mut b, 0, &CONN_MAGIC.to_le_bytes());
        b[4] = CONN_LEN as u8;
        b[5] = self.reason;
        put(&mut b, 6, &self.version.to_le_bytes());
        put(&mut b, 8, &self.queue_depth.to_le_bytes());
        put(&mut b, 10, &self.max_regs.to_le_bytes());
        put(&mut b, 12, &self.max_payload.to_le_bytes());
        put(&mut b, 16, &self.max_msg.to_le_bytes());
        put(&mut b, 20, &self.page_size.to_le_bytes());
        put(&mut b, 24, &self.features.to_le_bytes());
        put(&mut b, 28, &self.port.to_le_bytes());
        put(&mut b, 30, &self.max_inline.to_le_bytes());
        put(&mut b, 32, &self.stamp.to_le_bytes());
        put(&mut b, 40, &self.dst_stamp.to_le_bytes());
        b
    }

    /// Decodes from private data (which rdma_cm pads to the size of its slot).
    pub(crate) fn decode(b: &[u8]) -> Result<Self, WireError> {
        if b.len() < CONN_LEN {
            return Err(WireError::Short);
        }
        if get_u32(b, 0) != CONN_MAGIC {
            return Err(WireError::Magic);
        }
        if usize::from(b[4]) != CONN_LEN {
            return Err(WireError::Length);
        }
        let p = ConnParams {
            reason: b[5],
            version: get_u16(b, 6),
            queue_depth: get_u16(b, 8),
            max_regs: get_u16(b, 10),
            max_payload: get_u32(b, 12),
            max_msg: get_u32(b, 16),
            page_size: get_u32(b, 20),
            features: get_u32(b, 24),
            port: get_u16(b, 28),
            max_inline: get_u16(b, 30),
            stamp: get_u64(b, 32),
            dst_stamp: get_u64(b, 40),
        };
        if p.version == 0 {
            return Err(WireError::Version);
        }
        if p.queue_depth == 0
            || p.max_regs == 0
            || p.max_payload == 0
            || p.max_msg < MIN_MSG
            || p.max_msg > MAX_MSG
            || !p.page_size.is_power_of_two()
            || u32::from(p.max_inline) > MAX_INLINE
            || u32::from(p.max_inline) > inline_fits(p.max_msg)
            || u32::from(p.max_inline) > p.max_payload
        {
            return Err(WireError::Limit);
        }
        Ok(p)
    }
}

/// Test-only corruptions of an encoded message (the `fault` control command), to prove
/// that a receiver refuses them.
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
