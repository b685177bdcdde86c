// SPDX-License-Identifier: GPL-2.0

//! Send-queue budget: the exact work requests a transfer needs, the send queue depth they
//! add up to, and admission so the send queue can never overflow.
//!
//! Pure logic: no `kernel::`, compiled by the host tests too.
//!
//! o2iblnd sizes a send queue as `(1 + max_frags + 2) * queue_depth` work requests (2,080 at
//! queue depth 8 with 257 fragments), because it assumes every transfer may need one RDMA
//! work request per page. With fast registration a transfer needs one REG and one
//! LOCAL_INV per MR, the RDMA work requests between its registrations and the peer's (one
//! per peer registration when it fits in one work request's scatter/gather list), and one
//! message: 4 for a 1 MiB transfer on rxe. fastreg sizes the send queue from that count,
//! and admits a transfer only when its work requests fit in what is left.

/// Work requests one side posts for one transfer, by kind.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Wrs {
    /// `IB_WR_REG_MR`, one per local MR.
    pub(crate) reg: u32,
    /// `IB_WR_RDMA_WRITE` / `IB_WR_RDMA_READ`.
    pub(crate) rdma: u32,
    /// `IB_WR_LOCAL_INV`, one per local MR not invalidated by the peer.
    pub(crate) inv: u32,
    /// `IB_WR_SEND` / `IB_WR_SEND_WITH_INV`: the message.
    pub(crate) send: u32,
}

impl Wrs {
    /// All of them.
    pub(crate) const fn total(&self) -> u32 {
        self.reg
            .saturating_add(self.rdma)
            .saturating_add(self.inv)
            .saturating_add(self.send)
    }

    /// The larger of two counts, kind by kind.
    pub(crate) const fn max(self, o: Wrs) -> Wrs {
        const fn m(a: u32, b: u32) -> u32 {
            if a > b {
                a
            } else {
                b
            }
        }
        Wrs {
            reg: m(self.reg, o.reg),
            rdma: m(self.rdma, o.rdma),
            inv: m(self.inv, o.inv),
            send: m(self.send, o.send),
        }
    }
}

/// The data source of a transfer: registers its `mrs` local MRs, moves the data with `rdma`
/// work requests, invalidates its MRs, and sends the completion message (which may carry
/// the remote invalidation of one of the sink's registrations: no extra work request).
pub(crate) const fn source(mrs: u32, rdma: u32) -> Wrs {
    Wrs {
        reg: mrs,
        rdma,
        inv: mrs,
        send: 1,
    }
}

/// The data sink of a transfer: registers its `mrs` MRs, advertises them in one message,
/// and invalidates those the source did not invalidate remotely (a `SEND_WITH_INV` carries
/// one rkey, so at most one).
pub(crate) const fn sink(mrs: u32, remote_inv: bool) -> Wrs {
    let remote = if remote_inv && mrs > 0 { 1 } else { 0 };
    Wrs {
        reg: mrs,
        rdma: 0,
        inv: mrs - remote,
        send: 1,
    }
}

/// The most work requests one transfer can need on a connection whose transfers use at
/// most `local` registrations on this side and whose peer may advertise up to `peer`
/// (the negotiated `max_regs`): as source, one RDMA work request per piece, and pieces
/// are at most `local + peer - 1`, however the two sides cut the buffer.
pub(crate) const fn per_transfer_with(local: u32, peer: u32) -> Wrs {
    let pieces = local.saturating_add(peer).saturating_sub(1);
    source(local, pieces).max(sink(local, false))
}

/// Work requests kept for messages that are not transfers (credit returns, keepalives),
/// so a peer can always be answered.
pub(crate) const RESERVED_WRS: u32 = 2;

/// Send queue depth for `queue_depth` transfers in flight of at most `per_transfer` work
/// requests each, the reserved ones, and one for `ib_drain_sq()`. `None` on overflow.
pub(crate) const fn sq_depth(queue_depth: u32, per_transfer: u32) -> Option<u32> {
    match queue_depth.checked_mul(per_transfer) {
        Some(n) => match n.checked_add(RESERVED_WRS + 1) {
            Some(d) => Some(d),
            None => None,
        },
        None => None,
    }
}

/// Admission to a send queue: work requests in flight never exceed its capacity.
///
/// # Invariants
///
/// `used <= capacity`.
#[derive(Debug)]
pub(crate) struct SqBudget {
    capacity: u32,
    used: u32,
}

/// Why a chain of work requests was not admitted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Refused {
    /// Not now: wait for completions to free room.
    Busy,
    /// Never: the chain is larger than the whole queue.
    TooLarge,
}

impl SqBudget {
    /// A budget for a send queue of `capacity` work requests, of which one is kept for
    /// draining.
    pub(crate) const fn new(capacity: u32) -> Self {
        // INVARIANT: `used` starts at 0.
        Self {
            capacity: capacity.saturating_sub(1),
            used: 0,
        }
    }

    /// Takes room for `n` work requests, if there is.
    pub(crate) fn admit(&mut self, n: u32) -> Result<(), Refused> {
        if n > self.capacity {
            return Err(Refused::TooLarge);
        }
        if n > self.capacity - self.used {
            return Err(Refused::Busy);
        }
        // INVARIANT: `used + n <= capacity` by the checks above.
        self.used += n;
        Ok(())
    }

    /// Gives back room for `n` work requests that completed (or were never posted).
    ///
    /// Returns `false`, and frees nothing, if more is given back than was taken.
    pub(crate) fn release(&mut self, n: u32) -> bool {
        if n > self.used {
            return false;
        }
        self.used -= n;
        true
    }

    /// Work requests in flight.
    pub(crate) const fn used(&self) -> u32 {
        self.used
    }

    /// Work requests that may be in flight at once (excluding the drain slot).
    pub(crate) const fn capacity(&self) -> u32 {
        self.capacity
    }
}

/// What the budget means for a connection: the figures fastreg reports per device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Figures {
    /// Most MRs a `max_payload` transfer needs on each side.
    pub(crate) mrs: u32,
    /// Most work requests such a transfer needs on one side.
    pub(crate) wrs: u32,
    /// Send queue depth at `queue_depth`.
    pub(crate) sq_depth: u32,
    /// What o2iblnd would use for the same payload and queue depth:
    /// `(1 + max_frags + 2) * queue_depth`, with one fragment per page plus one.
    pub(crate) o2iblnd_sq_depth: u64,
}

/// The figures for MRs of `geo`, transfers of up to `max_payload` bytes, `queue_depth` of
/// them in flight, a peer advertising up to `max_regs` registrations. `None` on overflow.
pub(crate) fn figures(
    geo: &crate::rules::frag::Geometry,
    max_payload: u64,
    queue_depth: u32,
    max_regs: u32,
) -> Option<Figures> {
    let mrs = geo.max_mrs_for(max_payload);
    let wrs = per_transfer_with(mrs, max_regs).total();
    let max_frags = geo.pages_of(max_payload) + 1;
    Some(Figures {
        mrs,
        wrs,
        sq_depth: sq_depth(queue_depth, wrs)?,
        o2iblnd_sq_depth: (1 + max_frags + 2) * u64::from(queue_depth),
    })
}
