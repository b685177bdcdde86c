// SPDX-License-Identifier: GPL-2.0

//! The control device's messages (`/dev/fastreg`, `Documentation/device.rst`): what
//! `fastreg-lst` writes to it and reads back.
//!
//! One `write(2)` carries one request, whole: a 16-byte head and a body of at most
//! [`MAX_BODY`] bytes. The next `read(2)` on the same open file returns its reply, whole: a
//! 24-byte head and a body. Every field is little-endian and every reserved field zero; a
//! request is checked entirely before anything is done, as the wire protocol's messages
//! are (`crate::rules::wire`), and refused with the errno of [`Refusal::errno`].
//!
//! ```text
//! request   0 magic "FRRQ"   4 version u16   6 op u16   8 flags u32 (0)
//!          12 body length u32   16 body (UTF-8 text: the op's words)
//! reply     0 magic "FRRP"   4 version u16   6 op u16   8 status i32 (0 or -errno)
//!          12 state u32   16 body length u32   20 reserved u32 (0)   24 body (UTF-8 text)
//! ```
//!
//! Pure logic: no `kernel::`, compiled by the host tests too.

/// A request's first four bytes.
pub(crate) const REQUEST_MAGIC: [u8; 4] = *b"FRRQ";
/// A reply's first four bytes.
pub(crate) const REPLY_MAGIC: [u8; 4] = *b"FRRP";
/// The version of this format.
pub(crate) const VERSION: u16 = 1;
/// Bytes of a request's head.
pub(crate) const HEAD_LEN: usize = 16;
/// Bytes of a reply's head.
pub(crate) const REPLY_HEAD_LEN: usize = 24;
/// Most bytes of a request's body (the longest command the text interfaces take is 640).
pub(crate) const MAX_BODY: usize = 1024;
/// Most bytes of a request.
pub(crate) const MAX_REQUEST: usize = HEAD_LEN + MAX_BODY;

// errno values, as the kernel's (include/uapi/asm-generic/errno*.h): positive here.
const E2BIG: i32 = 7;
const EINVAL: i32 = 22;
const EPROTONOSUPPORT: i32 = 93;
const EOPNOTSUPP: i32 = 95;

/// What a request asks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u16)]
pub(crate) enum Op {
    /// Starts a selftest from this node; body: the test's words (`brw write size=1M
    /// peers=A,B ...`, `crate::rules::command::Lst`). It runs on while the file that
    /// started it is open; the reply comes at once.
    Start = 1,
    /// Waits (interruptibly) until the test is over; replies with its report.
    Wait = 2,
    /// The test's state: running, with its counts so far, or over, with its report.
    Poll = 3,
    /// Stops the test (its transfers end after the current one); does not wait.
    Stop = 4,
    /// The report of the last test that ended.
    Result = 5,
    /// The statistics snapshot: devices, pools, interfaces and connections, parameters.
    Stat = 6,
    /// A console request to other nodes; body: its words (`join nodes=A,B ...`,
    /// `crate::selftest::console_cmd`); replies when every node answered or timed out.
    Console = 7,
}

impl Op {
    /// Every op, in the order of their numbers.
    pub(crate) const ALL: [Op; 7] = [
        Op::Start,
        Op::Wait,
        Op::Poll,
        Op::Stop,
        Op::Result,
        Op::Stat,
        Op::Console,
    ];

    /// The op numbered `n`.
    pub(crate) fn from_u16(n: u16) -> Option<Op> {
        Op::ALL.iter().copied().find(|o| *o as u16 == n)
    }

    /// Whether its request carries words (the others have an empty body).
    pub(crate) fn takes_body(self) -> bool {
        matches!(self, Op::Start | Op::Console)
    }
}

/// A reply's `state`: where the node's selftest stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub(crate) enum TestState {
    /// No test since the module loaded.
    Idle = 0,
    /// A test is running.
    Running = 1,
    /// The last test is over (its report is [`Op::Result`]'s).
    Over = 2,
}

impl TestState {
    /// The state numbered `n` (a client's side).
    #[allow(dead_code)]
    pub(crate) fn from_u32(n: u32) -> Option<TestState> {
        [TestState::Idle, TestState::Running, TestState::Over]
            .into_iter()
            .find(|s| *s as u32 == n)
    }
}

/// Why a request (or a reply, as a client reads it) is refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// Fewer bytes than a head, or than the head's length says.
    Truncated,
    /// More bytes than the head's length says.
    Trailing,
    /// A body longer than [`MAX_BODY`] (or a write longer than [`MAX_REQUEST`]).
    Oversized,
    /// Not this format's magic.
    Magic,
    /// Another version of the format.
    Version(u16),
    /// No such op.
    UnknownOp(u16),
    /// A reserved field that is not zero.
    Reserved,
    /// A body where the op takes none, or none where it needs one.
    Body,
    /// A body that is not UTF-8 text.
    NotText,
}

impl Refusal {
    /// The errno (positive) a write refused for this fails with: `E2BIG` for a request too
    /// long, `EPROTONOSUPPORT` for another version, `EOPNOTSUPP` for an unknown op,
    /// `EINVAL` for everything else.
    pub(crate) fn errno(self) -> i32 {
        match self {
            Refusal::Oversized => E2BIG,
            Refusal::Version(_) => EPROTONOSUPPORT,
            Refusal::UnknownOp(_) => EOPNOTSUPP,
            _ => EINVAL,
        }
    }
}

impl core::fmt::Display for Refusal {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Refusal::Truncated => f.write_str("truncated"),
            Refusal::Trailing => f.write_str("bytes after the body"),
            Refusal::Oversized => write!(f, "oversized (a body holds at most {MAX_BODY} bytes)"),
            Refusal::Magic => f.write_str("not a fastreg request (bad magic)"),
            Refusal::Version(v) => write!(f, "version {v} (this module speaks {VERSION})"),
            Refusal::UnknownOp(o) => write!(f, "unknown op {o}"),
            Refusal::Reserved => f.write_str("a reserved field is not zero"),
            Refusal::Body => {
                f.write_str("a body where the op takes none, or none where it needs one")
            }
            Refusal::NotText => f.write_str("the body is not UTF-8 text"),
        }
    }
}

fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// The fields a request's and a reply's heads share, checked in that order: `magic`, the
/// version, the op. `b` holds at least a head.
fn check_head(b: &[u8], magic: [u8; 4]) -> Result<Op, Refusal> {
    if b[0..4] != magic {
        return Err(Refusal::Magic);
    }
    let version = u16_at(b, 4);
    if version != VERSION {
        return Err(Refusal::Version(version));
    }
    let n = u16_at(b, 6);
    Op::from_u16(n).ok_or(Refusal::UnknownOp(n))
}

/// Whether the `have` bytes after a head are exactly the body of `len` bytes it announces.
fn check_body_len(have: usize, len: u32) -> Result<(), Refusal> {
    // Compared as u64: no length read from the bytes is added to anything.
    match (have as u64).cmp(&u64::from(len)) {
        core::cmp::Ordering::Less => Err(Refusal::Truncated),
        core::cmp::Ordering::Greater => Err(Refusal::Trailing),
        core::cmp::Ordering::Equal => Ok(()),
    }
}

/// A request, read and checked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Request<'a> {
    /// What it asks.
    pub(crate) op: Op,
    /// Its words (empty for the ops that take none).
    pub(crate) body: &'a str,
}

/// Reads request `b` (the bytes of one write, whole) and checks every field of it.
pub(crate) fn parse(b: &[u8]) -> Result<Request<'_>, Refusal> {
    if b.len() > MAX_REQUEST {
        return Err(Refusal::Oversized);
    }
    if b.len() < HEAD_LEN {
        return Err(Refusal::Truncated);
    }
    let op = check_head(b, REQUEST_MAGIC)?;
    if u32_at(b, 8) != 0 {
        return Err(Refusal::Reserved);
    }
    let len = u32_at(b, 12);
    if u64::from(len) > MAX_BODY as u64 {
        return Err(Refusal::Oversized);
    }
    check_body_len(b.len() - HEAD_LEN, len)?;
    let body = core::str::from_utf8(&b[HEAD_LEN..]).map_err(|_| Refusal::NotText)?;
    if op.takes_body() == body.is_empty() {
        return Err(Refusal::Body);
    }
    Ok(Request { op, body })
}

/// Writes the request of `op` with `body` into `out`; returns its length, or `None` when
/// `out` is too small or the body too long (a client's side; the host tests use it).
#[allow(dead_code)]
pub(crate) fn request(op: Op, body: &str, out: &mut [u8]) -> Option<usize> {
    let n = HEAD_LEN + body.len();
    if body.len() > MAX_BODY || out.len() < n {
        return None;
    }
    out[0..4].copy_from_slice(&REQUEST_MAGIC);
    out[4..6].copy_from_slice(&VERSION.to_le_bytes());
    out[6..8].copy_from_slice(&(op as u16).to_le_bytes());
    out[8..12].copy_from_slice(&0u32.to_le_bytes());
    out[12..16].copy_from_slice(&(body.len() as u32).to_le_bytes());
    out[HEAD_LEN..n].copy_from_slice(body.as_bytes());
    Some(n)
}

/// A reply's head.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ReplyHead {
    /// The op it answers.
    pub(crate) op: Op,
    /// 0, or the negative errno of what failed.
    pub(crate) status: i32,
    /// Where the node's selftest stands.
    pub(crate) state: TestState,
    /// Bytes of its body.
    pub(crate) len: u32,
}

impl ReplyHead {
    /// Its bytes.
    pub(crate) fn bytes(&self) -> [u8; REPLY_HEAD_LEN] {
        let mut b = [0u8; REPLY_HEAD_LEN];
        b[0..4].copy_from_slice(&REPLY_MAGIC);
        b[4..6].copy_from_slice(&VERSION.to_le_bytes());
        b[6..8].copy_from_slice(&(self.op as u16).to_le_bytes());
        b[8..12].copy_from_slice(&self.status.to_le_bytes());
        b[12..16].copy_from_slice(&(self.state as u32).to_le_bytes());
        b[16..20].copy_from_slice(&self.len.to_le_bytes());
        b
    }

    /// Reads a reply's head from `b` (a client's side; the host tests use it), and checks
    /// that `b` holds exactly its body after it.
    #[allow(dead_code)]
    pub(crate) fn parse(b: &[u8]) -> Result<ReplyHead, Refusal> {
        if b.len() < REPLY_HEAD_LEN {
            return Err(Refusal::Truncated);
        }
        let op = check_head(b, REPLY_MAGIC)?;
        let status = i32::from_le_bytes([b[8], b[9], b[10], b[11]]);
        let state = TestState::from_u32(u32_at(b, 12)).ok_or(Refusal::Reserved)?;
        let len = u32_at(b, 16);
        if u32_at(b, 20) != 0 || status > 0 {
            return Err(Refusal::Reserved);
        }
        check_body_len(b.len() - REPLY_HEAD_LEN, len)?;
        Ok(ReplyHead {
            op,
            status,
            state,
            len,
        })
    }
}
