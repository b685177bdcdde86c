// SPDX-License-Identifier: GPL-2.0

//! The messages of a connection as types: their kinds, bodies, registrations, statuses,
//! and what a receiver checks them against (the connection's negotiated limits) and why it
//! refuses one.

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
    /// A console's request to the node (`crate::selftest::control`'s payload).
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
#[cfg(fastreg_test)]
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

#[cfg(fastreg_test)]
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
    /// and the payload (1 to [`MAX_CONTROL`] bytes, decoded by `crate::selftest::control`).
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
