// SPDX-License-Identifier: GPL-2.0

//! The fast-registration pool of one device.
//!
//! MRs are allocated with `ib_alloc_mr` when the device is added (`pool_size` of them),
//! grown on demand up to `pool_max`, and MRs beyond `pool_size` that stay idle for
//! `pool_idle` seconds are released (checked whenever the pool is used). The pool only
//! hands out MRs in the `Free` state and only takes back `Invalidated` ones
//! ([`crate::rules::mr_state`]); an MR whose registration or invalidation failed is destroyed,
//! never reused. A transfer takes all the MRs it needs at once, so transfers waiting for
//! MRs cannot deadlock each other; when the pool is exhausted its connection waits in a
//! line, without a thread, served first come, first served ([`Waiter`]).
//!
//! The pool's lock is a spinlock, taken by completion handlers: MRs are allocated with it
//! released, and MRs that go are deregistered by [`Pool::reap`] in process context.
//!
//! This file holds the pool, its MRs allocated, taken and released when idle; [`line`] has
//! the line of connections waiting for MRs, and [`returns`] the MRs that come back or go.

mod line;
mod returns;

use kernel::{
    alloc::kvec::PushError,
    prelude::*,
    sync::{
        atomic::{
            Atomic,
            Relaxed, //
        },
        Arc,
    },
    time::{
        Delta,
        Instant,
        Monotonic, //
    },
};

use crate::verbs::{
    new_bh_spinlock,
    BhSpinLock, //
};

use crate::{
    room::swap_bigger,
    rules::mr_state::state::{
        Free,
        Invalidated,
        Invalidating,
        Mapped,
        Registered, //
    },
    verbs::{
        trace,
        FrMr,
        Mr,
        Pd,
        Tally, //
    },
};

/// A connection whose transfers wait for MRs ([`Pool::try_get`]): told when MRs come
/// back and it is first in line.
pub(crate) trait Waiter: Send + Sync {
    /// MRs came back: try again. Called with pool (and maybe connection) locks held: it
    /// must only schedule the retry, never take a lock.
    fn mrs_back(self: Arc<Self>);
}

/// Connections the pool's line has room for at first (it grows where it may allocate).
const LINE_ROOM: usize = 16;

/// [`Pool::try_get`] without `grow`: MRs must be allocated (or room made in the line)
/// first, where that may be done.
pub(crate) const GROW: Error = ENOSPC;

/// Pool sizing.
#[derive(Clone, Copy, Debug)]
pub(crate) struct PoolConfig {
    /// MRs kept allocated.
    pub(crate) size: u32,
    /// Most MRs allocated at once.
    pub(crate) max: u32,
    /// Seconds an MR beyond `size` may stay idle.
    pub(crate) idle_secs: u32,
    /// Pages each MR maps.
    pub(crate) mr_pages: u32,
}

/// Event counters of a pool.
pub(crate) struct Counters {
    /// `ib_alloc_mr` calls that succeeded.
    pub(crate) allocated: Atomic<u64>,
    /// MRs released because they were idle beyond `pool_size`.
    pub(crate) released: Atomic<u64>,
    /// REG_MR work requests built.
    pub(crate) registrations: Atomic<u64>,
    /// LOCAL_INV work requests built.
    pub(crate) local_invalidations: Atomic<u64>,
    /// Registrations invalidated by a peer (`SEND_WITH_INV`).
    pub(crate) remote_invalidations: Atomic<u64>,
    /// MRs destroyed because a work request on them failed.
    pub(crate) errors: Atomic<u64>,
    /// Times a transfer waited for MRs.
    pub(crate) waits: Atomic<u64>,
    /// Times a transfer gave up waiting for MRs.
    pub(crate) timeouts: Atomic<u64>,
    /// `ib_alloc_mr` calls that failed.
    pub(crate) alloc_failures: Atomic<u64>,
}

impl Counters {
    const fn new() -> Self {
        Self {
            allocated: Atomic::new(0),
            released: Atomic::new(0),
            registrations: Atomic::new(0),
            local_invalidations: Atomic::new(0),
            remote_invalidations: Atomic::new(0),
            errors: Atomic::new(0),
            waits: Atomic::new(0),
            timeouts: Atomic::new(0),
            alloc_failures: Atomic::new(0),
        }
    }
}

/// The pool's lists. A spinlock guards them (the completion handlers give MRs back and
/// take them): nothing under it sleeps or allocates, and no MR handle is dropped under it
/// (dropping the last one deregisters the MR, which may sleep).
///
/// # Invariants
///
/// `free` and `dead` each have room for every live MR (reserved before an MR is counted
/// in `live`, [`Pool::count_in`]), so putting an MR on either never allocates.
struct Inner {
    /// Free MRs, oldest first, with the time they became free.
    free: KVec<(FrMr<Free>, Instant<Monotonic>)>,
    /// MRs that go (idle beyond `pool_size`, or destroyed after a failure), deregistered by
    /// [`Pool::reap`] in process context, without the lock.
    dead: KVec<Mr>,
    /// MRs allocated (free, in use, dead, or being allocated), as of the last
    /// [`Inner::count`]: MRs leave it when their handle is dropped, whatever the path.
    live: u32,
    /// The connections whose transfers wait for MRs, oldest first: the first is told when
    /// MRs come back ([`Waiter`]).
    line: KVec<Arc<dyn Waiter>>,
    /// When a failed `ib_alloc_mr` was last logged (at most once a second), and how many
    /// failed since.
    warned: Option<Instant<Monotonic>>,
    unwarned: u64,
}

impl Inner {
    /// Puts a free MR on the free list (within the room of the type invariant).
    fn keep(&mut self, mr: FrMr<Free>, now: Instant<Monotonic>) {
        if let Err(PushError((mr, _))) = self.free.push_within_capacity((mr, now)) {
            self.bury(mr.into_handle());
        }
    }

    /// Puts an MR that goes on the dead list (within the room of the type invariant).
    fn bury(&mut self, mr: Mr) {
        if let Err(PushError(mr)) = self.dead.push_within_capacity(mr) {
            // Not reached (type invariant); dropping it here could sleep under the lock.
            pr_err!("fast-registration pool: no room for a dead MR: leaking it\n");
            core::mem::forget(mr);
        }
    }

    /// The live MRs that stay: not on the dead list (those still count against
    /// `pool_max` until they are deregistered, but not as the pool's size).
    fn staying(&self) -> u32 {
        self.live.saturating_sub(self.dead.len() as u32)
    }

    /// Takes the MRs whose handles were dropped off the live count.
    fn count(&mut self, tally: &Tally) {
        self.live = self.live.saturating_sub(tally.take());
    }
}

/// A device's fast-registration pool.
#[pin_data]
pub(crate) struct Pool {
    pd: Arc<Pd>,
    cfg: PoolConfig,
    /// Dropped handles of this pool's MRs.
    tally: Arc<Tally>,
    #[pin]
    inner: BhSpinLock<Inner>,
    counters: Counters,
}

fn inc(c: &Atomic<u64>, n: u64) {
    c.fetch_add(n, Relaxed);
}

impl Pool {
    /// A pool on `pd` with `cfg.size` MRs allocated now.
    pub(crate) fn new(pd: Arc<Pd>, cfg: PoolConfig) -> Result<Arc<Self>> {
        let tally = Tally::new()?;
        let line = KVec::with_capacity(LINE_ROOM, GFP_KERNEL)?;
        let pool = Arc::pin_init(
            pin_init!(Self {
                pd,
                cfg,
                tally,
                inner <- new_bh_spinlock!(
                    Inner {
                        free: KVec::new(),
                        dead: KVec::new(),
                        live: 0,
                        warned: None,
                        unwarned: 0,
                        line,
                    },
                    "fastreg::Pool::inner"
                ),
                counters: Counters::new(),
            }),
            GFP_KERNEL,
        )?;
        let mut fresh = KVec::with_capacity(cfg.size as usize, GFP_KERNEL)?;
        pool.allocate(cfg.size, &mut fresh)?;
        let mut inner = pool.inner.lock();
        let now = Instant::now();
        for mr in fresh.drain_all() {
            inner.keep(mr, now);
        }
        drop(inner);
        Ok(pool)
    }

    /// The configuration.
    pub(crate) fn config(&self) -> PoolConfig {
        self.cfg
    }

    /// The counters.
    pub(crate) fn counters(&self) -> &Counters {
        &self.counters
    }

    /// (MRs live, MRs free): the MRs allocated and not going (those on the dead list,
    /// released or destroyed, are deregistered by the next [`Pool::reap`] and never used
    /// again).
    pub(crate) fn occupancy(&self) -> (u32, u32) {
        let mut inner = self.inner.lock();
        inner.count(&self.tally);
        (inner.staying(), inner.free.len() as u32)
    }

    /// Counts `n` more live MRs, once `free` and `dead` have room for all of them (the
    /// type invariant of [`Inner`]); the room is allocated with the lock released.
    fn count_in(&self, n: u32) -> Result {
        loop {
            let want = {
                let mut inner = self.inner.lock();
                inner.count(&self.tally);
                let want = (inner.live + n) as usize;
                if inner.free.capacity() >= want && inner.dead.capacity() >= want {
                    inner.live += n;
                    return Ok(());
                }
                want
            };
            let mut free = KVec::with_capacity(want, GFP_KERNEL)?;
            let mut dead = KVec::with_capacity(want, GFP_KERNEL)?;
            let mut inner = self.inner.lock();
            swap_bigger(&mut inner.free, &mut free);
            swap_bigger(&mut inner.dead, &mut dead);
            drop(inner);
            // The old vectors (empty) are freed here.
        }
    }

    /// Allocates `n` MRs into `out`, counting them as live. On failure, what was
    /// allocated is freed and not counted. Process context, no lock held.
    fn allocate(&self, n: u32, out: &mut KVec<FrMr<Free>>) -> Result {
        // Room for every live MR to come back or go, so `put` and `destroy` never
        // allocate; counted only once the room is there.
        self.count_in(n)?;
        let start = out.len();
        // On failure the MRs not allocated leave the count here, the allocated ones (whose
        // handles are counted) as they drop.
        let fail = |out: &mut KVec<FrMr<Free>>, not_allocated: u32, e: Error| {
            self.inner.lock().live -= not_allocated;
            out.truncate(start);
            Err(e)
        };
        for i in 0..n {
            let mr = match Mr::alloc(&self.pd, self.cfg.mr_pages) {
                Ok(mr) => mr.counted(&self.tally),
                Err(e) => {
                    self.alloc_failed(e);
                    return fail(out, n - i, e);
                }
            };
            inc(&self.counters.allocated, 1);
            if let Err(e) = out.push(FrMr::new(mr), GFP_KERNEL) {
                return fail(out, n - i - 1, e.into());
            }
        }
        if trace::pool_on() {
            let live = self.inner.lock().live;
            self.trace("grow", n, live);
        }
        Ok(())
    }

    /// Fires the `pool` tracepoint: `what` happened to `count` MRs, leaving `live`.
    fn trace(&self, what: &str, count: u32, live: u32) {
        trace::pool(
            self.pd.device().name().to_str().unwrap_or("?"),
            what,
            count,
            live,
        );
    }

    /// Counts a failed `ib_alloc_mr` and logs it, at most once a second per pool.
    fn alloc_failed(&self, e: Error) {
        inc(&self.counters.alloc_failures, 1);
        let (live, more) = {
            let mut inner = self.inner.lock();
            if inner
                .warned
                .is_some_and(|t| t.elapsed() < Delta::from_millis(1000))
            {
                inner.unwarned += 1;
                return;
            }
            inner.warned = Some(Instant::now());
            (inner.live, core::mem::take(&mut inner.unwarned))
        };
        pr_warn!(
            "{}: ib_alloc_mr failed ({:?}) with {} MRs live of at most {}; {} more failed \
             since the last such message\n",
            self.pd.device().name(),
            e,
            live,
            self.cfg.max,
            more
        );
    }

    /// MRs a transfer this node starts must leave for the transfers it serves: half the
    /// pool. Serving never waits for MRs (it runs in completion context), so without this
    /// transfers started on a node could hold every MR while the transfers they wait for
    /// find none on the same node.
    pub(crate) fn reserve(&self) -> u32 {
        self.cfg.max / 2
    }

    /// The most MRs the pool may hold (`pool_max`).
    pub(crate) fn max(&self) -> u32 {
        self.cfg.max
    }

    /// Takes `n` free MRs into `out`, all or none, leaving at least `reserve` MRs free or
    /// allocatable after the take: from the free list, or allocating up to `pool_max`;
    /// `EAGAIN` if none can be had now. Process context (it may allocate).
    pub(crate) fn get_leaving(&self, n: u32, reserve: u32, out: &mut KVec<FrMr<Free>>) -> Result {
        self.can_ever(n, reserve)?;
        out.reserve(n as usize, GFP_KERNEL)?;
        self.take_leaving(n, reserve, out, true)
    }

    /// Takes `n` free MRs into `out`, all or none, leaving `reserve` (as
    /// [`Pool::get_leaving`]), without allocating: into the room `out` has, from the free
    /// list; `EAGAIN` when they are not free now. It may run under a spinlock.
    pub(crate) fn take_now(&self, n: u32, reserve: u32, out: &mut KVec<FrMr<Free>>) -> Result {
        self.can_ever(n, reserve)?;
        if out.capacity() - out.len() < n as usize {
            return Err(EAGAIN);
        }
        match self.take_leaving(n, reserve, out, false) {
            Err(e) if e == GROW => {
                inc(&self.counters.waits, 1);
                Err(EAGAIN)
            }
            r => r,
        }
    }

    /// [`Pool::get_leaving`] into room `out` already has; without `grow`, [`GROW`] when
    /// the free list holds too few (nothing is allocated: it may run under a spinlock).
    fn take_leaving(&self, n: u32, reserve: u32, out: &mut KVec<FrMr<Free>>, grow: bool) -> Result {
        let mut inner = self.inner.lock();
        self.shrink(&mut inner);
        let free = inner.free.len() as u32;
        let room = free + self.cfg.max.saturating_sub(inner.live);
        if room < n + reserve {
            drop(inner);
            inc(&self.counters.waits, 1);
            return Err(EAGAIN);
        }
        if free >= n {
            // Newest first: the oldest stay idle and can be released.
            for _ in 0..n {
                if let Some((mr, _)) = inner.free.pop() {
                    // Within the room reserved above.
                    let _ = out.push_within_capacity(mr);
                }
            }
            return Ok(());
        }
        if !grow {
            return Err(GROW);
        }
        let missing = n - free;
        // Growing by a quarter of the pool at least: a load that ramps up reaches its
        // working set in a few steps, not one `ib_alloc_mr` at a time on the data path.
        // Within `pool_max` (`room` covers `missing`).
        let spare = (inner.staying() / 4).min(self.cfg.max - inner.live - missing);
        // Take what is free, allocate the rest without holding the lock.
        while let Some((mr, _)) = inner.free.pop() {
            // Within the room reserved above (`free < n`).
            let _ = out.push_within_capacity(mr);
        }
        drop(inner);
        let r = self.allocate(missing + spare, out);
        let mut inner = self.inner.lock();
        let now = Instant::now();
        match r {
            Ok(()) => {
                for _ in 0..spare {
                    if let Some(mr) = out.pop() {
                        inner.keep(mr, now);
                    }
                }
                Ok(())
            }
            Err(e) => {
                // Give back what was taken.
                for mr in out.drain_all() {
                    inner.keep(mr, now);
                }
                Err(e)
            }
        }
    }

    /// What [`Pool::try_get`] without `grow` said [`GROW`] for, done with no lock held:
    /// room in the line for one more connection, and MRs allocated so that `n` are free
    /// (growing by a quarter of the pool at least, within `pool_max`; when that leaves too
    /// little, none: the taker waits in line). Returns whether anything changed.
    pub(crate) fn grow(&self, n: u32) -> Result<bool> {
        let mut changed = self.line_room()?;
        let more = {
            let mut inner = self.inner.lock();
            self.shrink(&mut inner);
            let free = inner.free.len() as u32;
            let room = self.cfg.max.saturating_sub(inner.live);
            if free >= n || room < n - free {
                return Ok(changed);
            }
            let missing = n - free;
            missing + (inner.staying() / 4).min(room - missing)
        };
        let mut fresh = KVec::with_capacity(more as usize, GFP_KERNEL)?;
        self.allocate(more, &mut fresh)?;
        let mut inner = self.inner.lock();
        let now = Instant::now();
        for mr in fresh.drain_all() {
            inner.keep(mr, now);
            changed = true;
        }
        Ok(changed)
    }

    /// Counts a transfer that gave up waiting for MRs.
    pub(crate) fn timed_out(&self) {
        inc(&self.counters.timeouts, 1);
    }

    /// Refuses (`EMSGSIZE`, with a log line) a take of `n` MRs leaving `reserve` that the
    /// pool can never serve: waiting would be for ever.
    fn can_ever(&self, n: u32, reserve: u32) -> Result {
        if n.saturating_add(reserve) > self.cfg.max {
            pr_err!(
                "a transfer needs {} MRs, more than pool_max={} leaves ({} kept for serving)\n",
                n,
                self.cfg.max,
                reserve
            );
            return Err(EMSGSIZE);
        }
        Ok(())
    }

    /// Releases idle MRs beyond `pool_size` (the oldest first).
    fn shrink(&self, inner: &mut Inner) {
        inner.count(&self.tally);
        let idle = Delta::from_secs(self.cfg.idle_secs.into());
        let mut released = 0;
        while inner.staying() > self.cfg.size {
            match inner.free.first() {
                Some((_, since)) if since.elapsed() >= idle => {}
                _ => break,
            }
            if let Ok((mr, _)) = inner.free.remove(0) {
                // Deregistered by `reap`, without the lock; no longer free, and counted
                // out of `live` then.
                inner.bury(mr.into_handle());
            }
            inc(&self.counters.released, 1);
            released += 1;
        }
        if released > 0 {
            self.trace("shrink", released, inner.staying());
        }
    }

    /// Counts a registration (the caller posts the REG_MR).
    pub(crate) fn register(&self, mr: FrMr<Mapped>) -> (FrMr<Registered>, u32) {
        inc(&self.counters.registrations, 1);
        mr.register()
    }

    /// Counts a local invalidation (the caller posts the LOCAL_INV).
    pub(crate) fn invalidate(&self, mr: FrMr<Registered>) -> (FrMr<Invalidating>, u32) {
        inc(&self.counters.local_invalidations, 1);
        mr.invalidate()
    }

    /// Counts a remote invalidation seen in a receive completion.
    // Used once the transport receives SEND_WITH_INV.
    #[allow(dead_code)]
    pub(crate) fn remotely_invalidated(
        &self,
        mr: FrMr<Registered>,
        rkey: u32,
    ) -> Result<FrMr<Invalidated>, FrMr<Registered>> {
        let r = mr.remotely_invalidated(rkey);
        if r.is_ok() {
            inc(&self.counters.remote_invalidations, 1);
        }
        r
    }
}
