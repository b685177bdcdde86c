// SPDX-License-Identifier: GPL-2.0

//! The fast-registration pool of one device.
//!
//! MRs are allocated with `ib_alloc_mr` when the device is added (`pool_size` of them),
//! grown on demand up to `pool_max`, and MRs beyond `pool_size` that stay idle for
//! `pool_idle` seconds are released (checked whenever the pool is used). The pool only
//! hands out MRs in the `Free` state and only takes back `Invalidated` ones
//! ([`crate::mr_state`]); an MR whose registration or invalidation failed is destroyed,
//! never reused. A transfer takes all the MRs it needs at once, so transfers waiting for
//! MRs cannot deadlock each other; it waits (bounded) when the pool is exhausted, and
//! waiting transfers are served first come, first served.

use kernel::{
    new_condvar, new_mutex,
    prelude::*,
    sync::{
        atomic::{
            Atomic,
            Relaxed, //
        },
        Arc,
        CondVar,
        Mutex, //
    },
    time::{
        msecs_to_jiffies,
        Delta,
        Instant,
        Monotonic,
        Msecs, //
    },
};

use crate::{
    mr_state::state::{
        Free,
        Invalidated,
        Invalidating,
        Mapped,
        Registered, //
    },
    verbs::{
        FrMr,
        Mr,
        Pd,
        Tally, //
    },
    wait,
};

/// A connection whose transfers wait for MRs ([`Pool::try_get`]): told when MRs come
/// back and it is first in line.
pub(crate) trait Waiter: Send + Sync {
    /// MRs came back: try again. Called with pool (and maybe connection) locks held: it
    /// must only schedule the retry, never take a lock.
    fn mrs_back(self: Arc<Self>);
}

/// [`Pool::try_get`] without `grow`: MRs must be allocated first, where that may be done.
pub(crate) const GROW: Error = ENOSPC;

/// Whether `a` and `b` are the same waiter.
fn same(a: &Arc<dyn Waiter>, b: &Arc<dyn Waiter>) -> bool {
    core::ptr::eq(Arc::as_ptr(a).cast::<()>(), Arc::as_ptr(b).cast::<()>())
}

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

struct Inner {
    /// Free MRs, oldest first, with the time they became free.
    free: KVec<(FrMr<Free>, Instant<Monotonic>)>,
    /// MRs allocated (free, in use, or being allocated), as of the last [`Inner::count`]:
    /// MRs leave it when their handle is dropped, whatever the path.
    live: u32,
    /// Tickets of the takers waiting for MRs, oldest first: MRs go to the oldest one
    /// (first come, first served), so a taker that gives MRs back and asks again cannot
    /// starve one that has been waiting.
    waiting: KVec<u64>,
    /// The next ticket.
    next_ticket: u64,
    /// The connections whose transfers wait for MRs without a thread, oldest first: the
    /// first is told when MRs come back ([`Waiter`]). Threads that wait (`waiting`) go
    /// first.
    line: KVec<Arc<dyn Waiter>>,
    /// When a failed `ib_alloc_mr` was last logged (at most once a second), and how many
    /// failed since.
    warned: Option<Instant<Monotonic>>,
    unwarned: u64,
}

impl Inner {
    /// Whether the taker holding `ticket` (`None`: not queued yet) may take MRs now.
    fn turn(&self, ticket: Option<u64>) -> bool {
        match ticket {
            None => self.waiting.is_empty(),
            Some(t) => self.waiting.first() == Some(&t),
        }
    }

    /// Queues a new taker; returns its ticket.
    fn enqueue(&mut self) -> Result<u64> {
        let t = self.next_ticket;
        self.waiting.push(t, GFP_KERNEL)?;
        self.next_ticket += 1;
        Ok(t)
    }

    /// Puts a free MR on the free list. Room for every live MR was reserved when it was
    /// allocated, so this does not allocate; if it failed anyway, the MR is freed (and no
    /// longer counted, as every dropped handle).
    fn keep(&mut self, mr: FrMr<Free>, now: Instant<Monotonic>) {
        let _ = self.free.push((mr, now), GFP_NOWAIT);
    }

    /// Takes the MRs whose handles were dropped off the live count.
    fn count(&mut self, tally: &Tally) {
        self.live = self.live.saturating_sub(tally.take());
    }

    /// Takes `ticket` (if any) out of the queue.
    fn dequeue(&mut self, ticket: Option<u64>) {
        if let Some(t) = ticket {
            self.waiting.retain(|w| *w != t);
        }
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
    inner: Mutex<Inner>,
    #[pin]
    freed: CondVar,
    counters: Counters,
}

fn inc(c: &Atomic<u64>, n: u64) {
    c.fetch_add(n, Relaxed);
}

impl Pool {
    /// A pool on `pd` with `cfg.size` MRs allocated now.
    pub(crate) fn new(pd: Arc<Pd>, cfg: PoolConfig) -> Result<Arc<Self>> {
        let tally = Tally::new()?;
        let pool = Arc::pin_init(
            pin_init!(Self {
                pd,
                cfg,
                tally,
                inner <- new_mutex!(
                    Inner {
                        free: KVec::new(),
                        live: 0,
                        waiting: KVec::new(),
                        next_ticket: 0,
                        warned: None,
                        unwarned: 0,
                        line: KVec::new(),
                    },
                    "fastreg::Pool::inner"
                ),
                freed <- new_condvar!("fastreg::Pool::freed"),
                counters: Counters::new(),
            }),
            GFP_KERNEL,
        )?;
        let mut fresh = KVec::with_capacity(cfg.size as usize, GFP_KERNEL)?;
        pool.allocate(cfg.size, &mut fresh)?;
        let mut inner = pool.inner.lock();
        let now = Instant::now();
        for mr in fresh.drain_all() {
            inner.free.push((mr, now), GFP_KERNEL)?;
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

    /// (MRs allocated, MRs free).
    pub(crate) fn occupancy(&self) -> (u32, u32) {
        let mut inner = self.inner.lock();
        inner.count(&self.tally);
        (inner.live, inner.free.len() as u32)
    }

    /// Allocates `n` MRs into `out`, counting them as live. On failure, what was
    /// allocated is freed and not counted.
    fn allocate(&self, n: u32, out: &mut KVec<FrMr<Free>>) -> Result {
        {
            let mut inner = self.inner.lock();
            inner.count(&self.tally);
            // Room for every live MR to come back, so `put` never allocates; counted only
            // once the room is there.
            let want = (inner.live + n) as usize;
            let have = inner.free.len();
            inner.free.reserve(want.saturating_sub(have), GFP_KERNEL)?;
            inner.live += n;
        }
        let start = out.len();
        // On failure the MRs not allocated leave the count here, the allocated ones (whose
        // handles are counted) as they drop.
        let fail = |out: &mut KVec<FrMr<Free>>, not_allocated: u32, e: Error| {
            self.inner.lock().live -= not_allocated;
            out.truncate(start);
            self.freed.notify_all();
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
        Ok(())
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
    /// allocatable after the take: from the free list, allocating up to `pool_max`, or
    /// waiting up to `wait_ms` for MRs to come back (`None`: not waiting, `EAGAIN` if none
    /// can be had now).
    pub(crate) fn get_leaving(
        &self,
        n: u32,
        reserve: u32,
        out: &mut KVec<FrMr<Free>>,
        wait_ms: Option<Msecs>,
    ) -> Result {
        self.can_ever(n, reserve)?;
        out.reserve(n as usize, GFP_KERNEL)?;
        let mut left = msecs_to_jiffies(wait_ms.unwrap_or(0));
        // Takers that wait are served in arrival order; one that does not wait (serving)
        // only takes what the waiting takers leave (their `reserve`).
        let mut ticket = None;
        let mut waited = false;
        let mut inner = self.inner.lock();
        loop {
            self.shrink(&mut inner);
            let free = inner.free.len() as u32;
            let room = free + self.cfg.max.saturating_sub(inner.live);
            let turn = wait_ms.is_none() || inner.turn(ticket);
            if !turn || room < n + reserve {
                // Wait below.
            } else {
                inner.dequeue(ticket);
                let next = !inner.waiting.is_empty();
                let r = if free >= n {
                    let at = inner.free.len() - n as usize;
                    // Newest first: the oldest stay idle and can be released.
                    while inner.free.len() > at {
                        if let Some((mr, _)) = inner.free.pop() {
                            out.push(mr, GFP_KERNEL)?;
                        }
                    }
                    drop(inner);
                    Ok(())
                } else {
                    let missing = n - free;
                    // Growing by a quarter of the pool at least: a load that ramps up
                    // reaches its working set in a few steps, not one `ib_alloc_mr` at a
                    // time on the data path. Within `pool_max` (`room` covers `missing`).
                    let spare = (inner.live / 4).min(self.cfg.max - inner.live - missing);
                    // Take what is free, allocate the rest without holding the lock.
                    while let Some((mr, _)) = inner.free.pop() {
                        out.push(mr, GFP_KERNEL)?;
                    }
                    drop(inner);
                    match self.allocate(missing + spare, out) {
                        Ok(()) => {
                            let mut inner = self.inner.lock();
                            let now = Instant::now();
                            for _ in 0..spare {
                                if let Some(mr) = out.pop() {
                                    inner.keep(mr, now);
                                }
                            }
                            Ok(())
                        }
                        Err(e) => {
                            // Give back what was taken.
                            let mut inner = self.inner.lock();
                            let now = Instant::now();
                            for mr in out.drain_all() {
                                inner.keep(mr, now);
                            }
                            Err(e)
                        }
                    }
                };
                if next {
                    // The next taker in line may be served by what is left.
                    self.freed.notify_all();
                }
                return r;
            }
            if !waited {
                waited = true;
                inc(&self.counters.waits, 1);
            }
            if wait_ms.is_none() {
                return Err(EAGAIN);
            }
            if ticket.is_none() {
                ticket = Some(inner.enqueue()?);
            }
            let gone = if left == 0 {
                inc(&self.counters.timeouts, 1);
                Some(ETIMEDOUT)
            } else if !wait::step(&self.freed, &mut inner, &mut left) {
                Some(ERESTARTSYS)
            } else {
                None
            };
            if let Some(e) = gone {
                // Leaving the line may make the next taker the first.
                inner.dequeue(ticket);
                drop(inner);
                self.freed.notify_all();
                return Err(e);
            }
        }
    }

    /// [`Pool::get_leaving`] without waiting, for a transfer advanced by events: when the
    /// MRs cannot be had now, or others wait for them first, `me` joins the line (once)
    /// and this returns `EAGAIN`; `me` is told when MRs come back and it is first. Its
    /// place is kept until it takes MRs or [`Pool::leave`]s. Without `grow` (a completion
    /// handler) it allocates nothing: when its turn needs MRs allocated it returns
    /// [`GROW`], keeping its place, for the caller to try again where it may allocate.
    pub(crate) fn try_get(
        &self,
        n: u32,
        reserve: u32,
        out: &mut KVec<FrMr<Free>>,
        me: &Arc<dyn Waiter>,
        grow: bool,
    ) -> Result {
        self.can_ever(n, reserve)?;
        {
            let mut inner = self.inner.lock();
            self.shrink(&mut inner);
            let pos = inner.line.iter().position(|w| same(w, me));
            let turn = inner.waiting.is_empty() && pos.is_none_or(|p| p == 0);
            let turn = turn && (pos.is_some() || inner.line.is_empty());
            let room = inner.free.len() as u32 + self.cfg.max.saturating_sub(inner.live);
            if !turn || room < n.saturating_add(reserve) {
                if pos.is_none() {
                    inc(&self.counters.waits, 1);
                    inner.line.push(me.clone(), GFP_KERNEL)?;
                }
                return Err(EAGAIN);
            }
            if !grow && (inner.free.len() as u32) < n {
                return Err(GROW);
            }
            if !grow && out.capacity() - out.len() < n as usize {
                return Err(GROW);
            }
            if let Some(p) = pos {
                let _ = inner.line.remove(p);
            }
        }
        let r = self.get_leaving(n, reserve, out, None);
        if let Err(e) = &r {
            if *e == EAGAIN {
                // A taker that does not wait (serving) came first: first in line again.
                let mut inner = self.inner.lock();
                if inner.line.reserve(1, GFP_KERNEL).is_ok() {
                    let _ = inner.line.insert_within_capacity(0, me.clone());
                }
                return r;
            }
        }
        self.wake_line();
        r
    }

    /// `me` no longer waits for MRs: out of the line (the next one is told).
    // Not inlined: its call through `dyn Waiter` stays in a frame of the pool's, which
    // `scripts/stack-depth.py` resolves to the waiters' methods.
    #[inline(never)]
    pub(crate) fn leave(&self, me: &Arc<dyn Waiter>) {
        let mut inner = self.inner.lock();
        let Some(p) = inner.line.iter().position(|w| same(w, me)) else {
            return;
        };
        let _ = inner.line.remove(p);
        drop(inner);
        if p == 0 {
            self.wake_line();
        }
    }

    /// Counts a transfer that gave up waiting for MRs.
    pub(crate) fn timed_out(&self) {
        inc(&self.counters.timeouts, 1);
    }

    /// Tells the first connection in line that MRs came back.
    fn wake_line(&self) {
        let first = self.inner.lock().line.first().cloned();
        if let Some(w) = first {
            w.mrs_back();
        }
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
        while inner.live > self.cfg.size {
            match inner.free.first() {
                Some((_, since)) if since.elapsed() >= idle => {}
                _ => break,
            }
            if let Ok((mr, _)) = inner.free.remove(0) {
                drop(mr.into_handle());
            }
            inner.count(&self.tally);
            inc(&self.counters.released, 1);
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

    /// Takes back an MR whose key is dead.
    pub(crate) fn put(&self, mr: FrMr<Invalidated>) {
        let mut inner = self.inner.lock();
        inner.keep(mr.recycle(), Instant::now());
        self.shrink(&mut inner);
        let first = inner.line.first().cloned();
        drop(inner);
        self.freed.notify_all();
        if let Some(w) = first {
            w.mrs_back();
        }
    }

    /// Gives back a free MR that was not used (the transfer failed before mapping it).
    pub(crate) fn put_free(&self, mr: FrMr<Free>) {
        self.inner.lock().keep(mr, Instant::now());
        self.freed.notify_all();
        self.wake_line();
    }

    /// Destroys an MR whose state is unknown (a work request on it failed): it is never
    /// reused. It is deregistered when the last work request chain naming it is gone.
    pub(crate) fn destroy(&self, mr: Mr) {
        // Dropping the handle takes it off the live count.
        drop(mr);
        inc(&self.counters.errors, 1);
        self.freed.notify_all();
        self.wake_line();
    }
}
