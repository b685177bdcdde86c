// SPDX-License-Identifier: GPL-2.0

//! Negotiation of connection parameters.
//!
//! Pure logic: no `kernel::`, compiled by the host tests too.
//!
//! The active side asks for its values ([`wire::ConnParams`]). The passive side accepts when
//! every value is within its own limits and answers with what it grants (the same values);
//! otherwise it rejects with the reason AND its own limits. The active side then lowers its
//! values to the peer's and reconnects: values only ever go down, so negotiation ends. An
//! accept is checked to grant no more than was asked.

use crate::rules::wire::{
    inline_fits,
    ConnParams,
    FEATURES,
    VERSION, //
};

/// Why a connection request was rejected (carried in the reject's `reason`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum Reason {
    /// The request's private data is not fastreg connection parameters.
    Malformed = 1,
    /// Unsupported protocol version.
    Version = 2,
    /// Queue depth above the passive side's.
    QueueDepth = 3,
    /// Maximum payload above the passive side's.
    Payload = 4,
    /// More registrations per transfer than the passive side takes.
    Regs = 5,
    /// Message size above the passive side's.
    MsgSize = 6,
    /// The requester believes it talks to an older incarnation of this node.
    Stale = 7,
    /// Both sides connect to each other at once and this one wins.
    Race = 8,
    /// Out of resources.
    NoResources = 9,
    /// The request came from a source port of 1024 or above, which any local user can
    /// bind (`require_privileged_port`): not from a peer's kernel.
    Unprivileged = 10,
}

impl Reason {
    /// Decodes a reject reason.
    pub(crate) fn from_u8(v: u8) -> Option<Reason> {
        Some(match v {
            1 => Reason::Malformed,
            2 => Reason::Version,
            3 => Reason::QueueDepth,
            4 => Reason::Payload,
            5 => Reason::Regs,
            6 => Reason::MsgSize,
            7 => Reason::Stale,
            8 => Reason::Race,
            9 => Reason::NoResources,
            10 => Reason::Unprivileged,
            _ => return None,
        })
    }

    /// A short name for logs and statistics.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Reason::Malformed => "malformed",
            Reason::Version => "version",
            Reason::QueueDepth => "queue_depth",
            Reason::Payload => "max_payload",
            Reason::Regs => "max_regs",
            Reason::MsgSize => "max_msg",
            Reason::Stale => "stale",
            Reason::Race => "race",
            Reason::NoResources => "no_resources",
            Reason::Unprivileged => "unprivileged_port",
        }
    }
}

/// Local limits of an interface.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Local {
    /// Queue depth.
    pub(crate) queue_depth: u16,
    /// Registrations per transfer.
    pub(crate) max_regs: u16,
    /// Largest transfer.
    pub(crate) max_payload: u32,
    /// Largest message.
    pub(crate) max_msg: u32,
    /// Most bytes of a transfer inline (within what `max_msg` leaves).
    pub(crate) max_inline: u16,
    /// `PAGE_SIZE`.
    pub(crate) page_size: u32,
    /// Feature bits offered.
    pub(crate) features: u32,
    /// Incarnation.
    pub(crate) stamp: u64,
    /// Listening port.
    pub(crate) port: u16,
}

impl Local {
    /// The parameters that state these limits (a request, or a reject's limits).
    pub(crate) fn params(&self, dst_stamp: u64, reason: u8) -> ConnParams {
        ConnParams {
            version: VERSION,
            queue_depth: self.queue_depth,
            max_regs: self.max_regs,
            max_payload: self.max_payload,
            max_msg: self.max_msg,
            max_inline: self.max_inline,
            page_size: self.page_size,
            features: self.features & FEATURES,
            reason,
            port: self.port,
            stamp: self.stamp,
            dst_stamp,
        }
    }
}

/// The passive side's answer to a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Answer {
    /// Accept with these values (to send back).
    Accept(ConnParams),
    /// Reject with this reason; send `limits` (the passive side's own).
    Reject(Reason, ConnParams),
}

/// Decides on a request (`req` decoded from the private data) with local limits `me`.
pub(crate) fn answer(req: &ConnParams, me: &Local) -> Answer {
    let reject = |why: Reason| Answer::Reject(why, me.params(req.stamp, why as u8));
    if req.version != VERSION {
        return reject(Reason::Version);
    }
    if req.dst_stamp != 0 && req.dst_stamp != me.stamp {
        return reject(Reason::Stale);
    }
    if req.queue_depth > me.queue_depth {
        return reject(Reason::QueueDepth);
    }
    if req.max_payload > me.max_payload {
        return reject(Reason::Payload);
    }
    if req.max_regs > me.max_regs {
        return reject(Reason::Regs);
    }
    if req.max_msg > me.max_msg {
        return reject(Reason::MsgSize);
    }
    Answer::Accept(ConnParams {
        version: VERSION,
        queue_depth: req.queue_depth,
        max_regs: req.max_regs,
        max_payload: req.max_payload,
        max_msg: req.max_msg,
        // The smaller of the two, as the features: no reason to reject. The request's own
        // fits its `max_msg` and `max_payload` (checked when decoded), so the grant does too.
        max_inline: req.max_inline.min(me.max_inline),
        page_size: me.page_size,
        features: req.features & me.features & FEATURES,
        reason: 0,
        port: me.port,
        stamp: me.stamp,
        dst_stamp: req.stamp,
    })
}

/// What the active side does after a reject.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Retry {
    /// Reconnect with these (lower) values.
    With(ConnParams),
    /// Reconnect with the same values, the peer's incarnation updated (stale).
    Again(ConnParams),
    /// Give up.
    Fail,
}

/// The active side's reaction to a reject of `asked` carrying the peer's `limits`.
pub(crate) fn on_reject(asked: &ConnParams, limits: &ConnParams) -> Retry {
    let Some(why) = Reason::from_u8(limits.reason) else {
        return Retry::Fail;
    };
    let lowered = ConnParams {
        queue_depth: asked.queue_depth.min(limits.queue_depth),
        max_regs: asked.max_regs.min(limits.max_regs),
        max_payload: asked.max_payload.min(limits.max_payload),
        max_msg: asked.max_msg.min(limits.max_msg),
        // Within what the lowered message size leaves, and the lowered largest transfer.
        max_inline: asked.max_inline.min(
            u16::try_from(
                inline_fits(asked.max_msg.min(limits.max_msg))
                    .min(asked.max_payload.min(limits.max_payload)),
            )
            .unwrap_or(u16::MAX),
        ),
        ..*asked
    };
    match why {
        Reason::QueueDepth | Reason::Payload | Reason::Regs | Reason::MsgSize => {
            // Only ever down, and only if that changes something: negotiation ends.
            if lowered != *asked {
                Retry::With(lowered)
            } else {
                Retry::Fail
            }
        }
        Reason::Stale => Retry::Again(ConnParams {
            dst_stamp: limits.stamp,
            ..*asked
        }),
        Reason::Race | Reason::NoResources => Retry::Again(*asked),
        Reason::Malformed | Reason::Version | Reason::Unprivileged => Retry::Fail,
    }
}

/// Errnos of a connect that the network failed (no answer, refused, reset, unreachable).
const NET_ERRNOS: [i32; 5] = [
    -110, // ETIMEDOUT
    -111, // ECONNREFUSED
    -104, // ECONNRESET
    -113, // EHOSTUNREACH
    -101, // ENETUNREACH
];

/// The active side's reaction to `RDMA_CM_EVENT_CONNECT_ERROR` with `status` after asking
/// `asked`. Unless the network failed the connect, the peer answered and this side could
/// not act on the reply: rdma_cm could not move the QP to RTR or RTS, or send the RTU (seen
/// on rxe, rarely, as -EINVAL when two interfaces connect to each other at once). The next
/// round asks the same after a pause, within the run's rounds.
pub(crate) fn on_connect_error(asked: &ConnParams, status: i32) -> Retry {
    if status < 0 && status > -4096 && !NET_ERRNOS.contains(&status) {
        Retry::Again(*asked)
    } else {
        Retry::Fail
    }
}

/// Checks an accept: it may grant no more than `asked`, and must be for this requester.
pub(crate) fn check_accept(asked: &ConnParams, granted: &ConnParams) -> bool {
    granted.version == asked.version
        && granted.queue_depth <= asked.queue_depth
        && granted.max_regs <= asked.max_regs
        && granted.max_payload <= asked.max_payload
        && granted.max_msg <= asked.max_msg
        && granted.max_inline <= asked.max_inline
        && granted.features & !asked.features == 0
        && granted.dst_stamp == asked.stamp
        && granted.queue_depth > 0
        && granted.max_regs > 0
}

/// Two nodes connecting to each other at once: the side with the larger `(address, port)`
/// keeps its active connection and rejects the other's request with [`Reason::Race`]; the
/// smaller accepts. Deterministic, and the same answer on both sides; an interface
/// connecting to itself never wins against itself, so it accepts its own request.
pub(crate) fn wins_race(local: (u32, u16), remote: (u32, u16)) -> bool {
    local > remote
}

/// Whether a connection to a peer interface whose incarnation was `known` is stale now
/// that the same interface shows up as `seen` (in a connection request or an accept): a
/// peer that restarted comes back with a new stamp, and whatever was connected to its
/// old incarnation will never hear from it again. 0 is "not known yet".
pub(crate) fn stale(known: u64, seen: u64) -> bool {
    known != 0 && seen != 0 && known != seen
}
