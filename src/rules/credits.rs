// SPDX-License-Identifier: GPL-2.0

//! Credit rules: when a side gives the peer's credits back in a NOOP.
//!
//! Pure logic: no `kernel::`, compiled by the host tests too.
//!
//! Each side of a connection posts `queue_depth + 2` receive buffers; a message costs its
//! sender one credit, and the receiver owes it back (`outstanding`) until a message of its
//! own carries it. Ordinary messages need two credits and so never take the last one, which
//! is kept for a NOOP: both sides can always give credits back.

/// Receive buffers (and credits) beyond the queue depth: room for NOOPs and replies.
pub(crate) const EXTRA: u32 = 2;

/// The credits of a connection negotiated at `queue_depth`: its receive buffers. Counted
/// in 32 bits (256 + 2 does not fit the header's byte).
pub(crate) const fn limit(queue_depth: u16) -> u32 {
    queue_depth as u32 + EXTRA
}

/// Credits owed at which an idle side gives them back in a NOOP: half the queue depth,
/// never fewer than 2. A NOOP costs its sender a credit, which the receiver then owes: a
/// NOOP giving back a single credit is answered by another, and so on for ever (at queue
/// depths 1 to 3 two sides once did exactly that, and transfers waiting for two credits
/// never saw them). Giving back at least two, an exchange of NOOPs dies out.
pub(crate) const fn noop_threshold(queue_depth: u16) -> u32 {
    let half = queue_depth as u32 / 2;
    if half < 2 {
        2
    } else {
        half
    }
}

/// Whether a side sends a NOOP now, having `credits` and owing `outstanding`, with
/// messages of its own waiting to go (`owed`, which would carry the credits) or not.
///
/// Idle, it gives credits back once they reach [`noop_threshold`]. With messages waiting
/// for want of credits, its last credit goes in a NOOP that gives the peer's back, so the
/// peer can give its own back.
pub(crate) const fn noop_now(queue_depth: u16, credits: u32, outstanding: u32, owed: bool) -> bool {
    if credits == 0 || outstanding == 0 {
        return false;
    }
    if owed {
        credits < 2
    } else {
        outstanding >= noop_threshold(queue_depth)
    }
}
