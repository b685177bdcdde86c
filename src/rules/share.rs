// SPDX-License-Identifier: GPL-2.0

//! A fair share for every peer: what one peer (one remote address, all its connections
//! together) may hold on this node's interface.
//!
//! A peer holds connections, and, while this node serves its transfers, the MRs and the
//! bytes of the sinks and sources of those transfers. Past its share its new connections
//! are rejected (`NoResources`) and its new PUTs and GETs answered busy (`-EAGAIN`: its
//! side waits and retries), while other peers are served. The MRs the node serves with,
//! all peers together, always leave the node's own transfers a reserve of the pool
//! ([`serve_reserve`]), as the node's own transfers leave the serving side half of it
//! (`Pool::reserve`).
//!
//! The counts are atomics: charges are taken on the receive path of any of the peer's
//! connections at once, and given back when the served transfer's keys are dead.
//!
//! Pure logic: no `kernel::`, compiled by the host tests too.

use core::sync::atomic::{
    AtomicU32,
    AtomicU64,
    Ordering::Relaxed, //
};

/// MRs of a pool of `pool_max` that serving a transfer of `n` MRs leaves to the node's
/// own transfers: a quarter of the pool, less when the transfer could never be served
/// otherwise (a pool smaller than one transfer and the reserve: served as before).
pub(crate) const fn serve_reserve(pool_max: u32, n: u32) -> u32 {
    let r = pool_max / 4;
    let room = pool_max.saturating_sub(n);
    if r < room {
        r
    } else {
        room
    }
}

/// What one peer may hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Limits {
    /// Connections (both directions).
    pub(crate) conns: u32,
    /// MRs of the transfers this node serves for it.
    pub(crate) mrs: u32,
    /// Bytes of the buffers of those transfers.
    pub(crate) bytes: u64,
}

/// Most of a pool's serving MRs (those it does not leave to the node's own transfers) one
/// peer may hold: a quarter.
const MR_SHARE: u32 = 4;
/// Full queues of transfers of the largest size one peer may have served at once.
const BYTE_QUEUES: u64 = 4;

/// A peer's share on an interface with these parameters: a quarter of the connections
/// (at least 2) and of the MRs the serving side may use (at least those of one transfer
/// of `max_payload` in `max_regs` registrations), and the bytes of 4 full queues of
/// `max_payload` transfers.
pub(crate) fn limits(
    pool_max: u32,
    max_conns: u32,
    queue_depth: u32,
    max_payload: u32,
    max_regs: u32,
) -> Limits {
    let serving = pool_max - pool_max / 4;
    Limits {
        conns: (max_conns / 4).max(2),
        mrs: (serving / MR_SHARE).max(max_regs),
        bytes: BYTE_QUEUES * u64::from(queue_depth) * u64::from(max_payload),
    }
}

/// Why a charge was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Over {
    /// Its connections.
    Conns,
    /// Its MRs.
    Mrs,
    /// Its bytes.
    Bytes,
}

impl Over {
    /// What a log line says.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Over::Conns => "connections",
            Over::Mrs => "MRs",
            Over::Bytes => "bytes of buffers",
        }
    }
}

/// What one peer holds.
///
/// # Invariants
///
/// Each count is the sum of the charges taken ([`Usage::charge`], [`Usage::connect`]) and
/// not yet given back; a charge is given back exactly once.
#[derive(Default)]
pub(crate) struct Usage {
    conns: AtomicU32,
    mrs: AtomicU32,
    bytes: AtomicU64,
}

impl Usage {
    /// Nothing held.
    pub(crate) const fn new() -> Self {
        Self {
            conns: AtomicU32::new(0),
            mrs: AtomicU32::new(0),
            bytes: AtomicU64::new(0),
        }
    }

    /// One more connection, within `lim`.
    pub(crate) fn connect(&self, lim: &Limits) -> Result<(), Over> {
        self.conns
            .fetch_update(Relaxed, Relaxed, |n| (n < lim.conns).then_some(n + 1))
            .map(|_| ())
            .map_err(|_| Over::Conns)
    }

    /// A connection gone.
    pub(crate) fn disconnect(&self) {
        let _ = self
            .conns
            .fetch_update(Relaxed, Relaxed, |n| n.checked_sub(1));
    }

    /// `mrs` MRs and `bytes` bytes more, within `lim`; nothing taken when either would pass
    /// it. ([`limits`] leaves room for one transfer of the largest size in every share.)
    pub(crate) fn charge(&self, lim: &Limits, mrs: u32, bytes: u64) -> Result<(), Over> {
        self.mrs
            .fetch_update(Relaxed, Relaxed, |n| {
                n.checked_add(mrs).filter(|m| *m <= lim.mrs)
            })
            .map_err(|_| Over::Mrs)?;
        let b = self.bytes.fetch_update(Relaxed, Relaxed, |n| {
            n.checked_add(bytes).filter(|b| *b <= lim.bytes)
        });
        if b.is_err() {
            self.release(mrs, 0);
            return Err(Over::Bytes);
        }
        Ok(())
    }

    /// Gives back a charge of `mrs` and `bytes`.
    pub(crate) fn release(&self, mrs: u32, bytes: u64) {
        let _ = self
            .mrs
            .fetch_update(Relaxed, Relaxed, |n| Some(n.saturating_sub(mrs)));
        let _ = self
            .bytes
            .fetch_update(Relaxed, Relaxed, |n| Some(n.saturating_sub(bytes)));
    }

    /// `(conns, mrs, bytes)` held.
    pub(crate) fn held(&self) -> (u32, u32, u64) {
        (
            self.conns.load(Relaxed),
            self.mrs.load(Relaxed),
            self.bytes.load(Relaxed),
        )
    }

    /// Whether it holds nothing (its entry may go).
    pub(crate) fn idle(&self) -> bool {
        self.held() == (0, 0, 0)
    }
}
