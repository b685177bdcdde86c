// SPDX-License-Identifier: GPL-2.0

//! The selftest engine, in the manner of lnet_selftest: every node with fastreg loaded serves
//! tests (the transport serves PUT, GET and pings as it is), and a client runs them against
//! one or more peers through the `lst` debugfs file, which the `fastreg-lst` tool drives.
//!
//! A run has `concurrency` slots per peer, each with one operation in flight at a time and
//! its own buffer (`size` bytes at `offset` into its first page, mapped once). A slot
//! claims a transfer (of the run's count, or until its time is up) and submits it through
//! the transport's callback API ([`api::submit`]) with a fresh seed, so every transfer's
//! pattern differs from the last; the completion callback ([`Client::done`]) counts the
//! outcome per peer and starts the slot's next transfer. No thread waits per transfer:
//! the only one is the writer of the command (or, for a test a console started, its work
//! item: `crate::selftest::console`), which waits until every slot has ended (so no callback
//! outlives the module) and restarts, after a pause, the slots whose last transfer failed
//! (so a peer that refuses at once is not spun on).

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
        Delta,
        Instant,
        Monotonic, //
    },
};

use crate::{
    api::{
        self,
        Client,
        Outcome,
        Request, //
    },
    reg::region::Region,
    rules::command::{
        Lst,
        LstOp,
        Span, //
    },
    selftest::stats::{
        ErrKind,
        Stats, //
    },
    transport::{
        Iface,
        Ifaces, //
    },
    verbs::SockAddr, //
};

/// What the slots share.
struct Shared {
    /// The counts of every peer (each slot adds to its peer's under the lock).
    per_peer: KVec<Stats>,
    /// The first error each peer gave (a negative errno), for the report.
    first_error: KVec<i32>,
    /// Slots that have finished.
    finished: u32,
    /// Slots whose last transfer failed, waiting for the writer to restart them after a
    /// pause (room for every slot is reserved: the callback never allocates).
    paused: KVec<(usize, Option<Region>)>,
}

/// One run of a test.
#[pin_data]
pub(crate) struct Run {
    t: Lst,
    iface: Arc<Iface>,
    peers: KVec<SockAddr>,
    timeout_ms: u32,
    start: Instant<Monotonic>,
    /// Count mode: transfers not yet claimed.
    left: Atomic<u64>,
    /// Set to stop the slots early (the writer was interrupted, [`Run::stop`]).
    stop: Atomic<u32>,
    /// Slots started.
    workers: Atomic<u32>,
    #[pin]
    shared: Mutex<Shared>,
    #[pin]
    cv: CondVar,
    /// Its buffers' bytes, counted in the node's budget for tests until the run goes.
    _mem: MemTicket,
}

/// Bytes of test buffers the node's tests (local and consoles') hold.
static TEST_MEM: core::sync::atomic::AtomicU64 = core::sync::atomic::AtomicU64::new(0);

/// The most bytes of buffers one test may take (`test_mem`), set at load.
static TEST_LIMIT: core::sync::atomic::AtomicU64 =
    core::sync::atomic::AtomicU64::new((crate::rules::params::TEST_MEM.default as u64) << 20);

/// The most bytes of buffers the node's tests may hold at once (`tests_mem`), set at load;
/// 0 for an eighth of the node's memory.
static NODE_LIMIT: core::sync::atomic::AtomicU64 = core::sync::atomic::AtomicU64::new(0);

/// Takes the limits on tests' buffers from the module parameters.
pub(crate) fn set_limits(p: &crate::rules::params::Params) {
    use core::sync::atomic::Ordering::Relaxed as R;
    TEST_LIMIT.store(u64::from(p.test_mem) << 20, R);
    NODE_LIMIT.store(u64::from(p.tests_mem) << 20, R);
}

/// The most bytes of buffers the node's tests may hold at once: `tests_mem`, or an eighth
/// of its memory, so that no test, nor any console's, can push the node into the OOM killer.
pub(crate) fn mem_budget() -> u64 {
    match NODE_LIMIT.load(core::sync::atomic::Ordering::Relaxed) {
        0 => crate::verbs::total_ram() / 8,
        n => n,
    }
}

/// Whether a test of `bytes` of buffers is within the limits (`test_mem` for one test, the
/// node's budget for all of them, whatever the others hold now); logged, rate-limited, when
/// it is not, naming `who` asked.
pub(crate) fn within_limits(bytes: u64, who: impl kernel::fmt::Display) -> bool {
    let (one, all) = (
        TEST_LIMIT.load(core::sync::atomic::Ordering::Relaxed),
        mem_budget(),
    );
    if bytes <= one.min(all) {
        return true;
    }
    crate::show::pr_limited!(
        pr_warn,
        "lst: refused a test from {}: its buffers ({} MiB) pass what the node allows a test \
         ({} MiB, test_mem) or all its tests ({} MiB, tests_mem)\n",
        who,
        bytes >> 20,
        one >> 20,
        all >> 20
    );
    false
}

/// Bytes of a test's buffers held in the node's budget ([`mem_budget`]), given back when
/// dropped.
struct MemTicket(u64);

impl MemTicket {
    /// `bytes` more of the budget, or `ENOMEM` (logged, rate-limited) past it or past one
    /// test's limit.
    fn take(bytes: u64) -> Result<Self> {
        use core::sync::atomic::Ordering::Relaxed as R;
        if !within_limits(bytes, "this node") {
            return Err(ENOMEM);
        }
        let budget = mem_budget();
        TEST_MEM
            .fetch_update(R, R, |held| {
                held.checked_add(bytes).filter(|b| *b <= budget)
            })
            .map(|_| MemTicket(bytes))
            .map_err(|held| {
                crate::show::pr_limited!(
                    pr_err,
                    "lst: a test needs {} MiB of buffers; the node allows its tests {} MiB \
                     (tests_mem), {} MiB of which are held\n",
                    bytes >> 20,
                    budget >> 20,
                    held >> 20
                );
                ENOMEM
            })
    }
}

impl Drop for MemTicket {
    fn drop(&mut self) {
        TEST_MEM.fetch_sub(self.0, core::sync::atomic::Ordering::Relaxed);
    }
}

impl Run {
    /// Claims the next transfer; `false` when the run is over.
    fn claim(&self) -> bool {
        // Stopped, or the interface went away (removed, its device removed, or the module
        // unloading): nothing more can succeed.
        if self.stop.load(Relaxed) != 0 || self.iface.is_closed() {
            return false;
        }
        match self.t.span {
            Span::Seconds(s) => self.start.elapsed() < Delta::from_secs(s.into()),
            Span::Count(_) => {
                let mut n = self.left.load(Relaxed);
                while n > 0 {
                    match self.left.cmpxchg(n, n - 1, Relaxed) {
                        Ok(_) => return true,
                        Err(now) => n = now,
                    }
                }
                false
            }
        }
    }

    /// The next operation, with a fresh seed.
    fn request(&self) -> Request {
        let (seed, check) = (self.iface.seed(), self.t.check);
        match self.t.op {
            LstOp::Ping => Request::Ping,
            LstOp::Write => Request::Put { seed, check },
            LstOp::Read => Request::Get { seed, check },
        }
    }

    /// Counts an outcome for peer number `p`; returns whether it was an error.
    fn record(&self, p: usize, usecs: u64, r: &Result) -> bool {
        let mut sh = self.shared.lock();
        match r {
            Ok(()) => {
                sh.per_peer[p].ok(self.t.size, usecs);
                false
            }
            Err(e) if e.to_errno() == -(kernel::bindings::EBADMSG as i32) => {
                sh.per_peer[p].corrupt += 1;
                false
            }
            Err(e) => {
                sh.per_peer[p].error(ErrKind::of_errno(e.to_errno()));
                if sh.first_error[p] == 0 {
                    sh.first_error[p] = e.to_errno();
                }
                true
            }
        }
    }

    /// A slot is over.
    fn finish(&self) {
        let mut sh = self.shared.lock();
        sh.finished += 1;
        self.cv.notify_all();
    }

    /// Starts the next operation of a slot to peer number `p` with the slot's buffer, or
    /// ends the slot when the run is over. `me` is this run, as the transport's client.
    fn next(&self, me: &Arc<dyn Client>, p: usize, region: Option<Region>) {
        if !self.claim() {
            drop(region);
            self.finish();
            return;
        }
        let submitted = api::submit(
            &self.iface,
            self.peers[p],
            self.request(),
            region,
            self.timeout_ms,
            me.clone(),
            p,
        );
        if let Err(e) = submitted {
            self.record(p, 0, &Err(e));
            self.finish();
        }
    }
}

impl Client for Run {
    /// A slot's operation ended: counts it and starts the next (after a failure, the
    /// writer does, after a pause).
    fn done(&self, me: &Arc<dyn Client>, p: usize, o: Outcome) {
        if self.record(p, o.usecs, &o.result) {
            let mut sh = self.shared.lock();
            // Within the room reserved for every slot.
            if sh.paused.push((p, o.region), GFP_NOWAIT).is_err() {
                sh.finished += 1;
            }
            self.cv.notify_all();
            return;
        }
        self.next(me, p, o.region);
    }
}

/// A test's results: the whole run, then each peer.
pub(crate) struct Report {
    t: Lst,
    usecs: u64,
    workers: u32,
    total: Stats,
    peers: KVec<(SockAddr, Stats, i32)>,
}

struct Fields<'a>(&'a Stats, u64);

impl core::fmt::Display for Fields<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        self.0.write(f, self.1)
    }
}

impl Report {
    /// Whether anything failed or was corrupt.
    #[cfg(fastreg_test)]
    pub(crate) fn clean(&self) -> bool {
        self.total.errors_total() == 0 && self.total.corrupt == 0
    }

    /// The result lines: `test=...` with the whole run, then one `peer=...` per peer.
    pub(crate) fn write(&self, f: &mut impl core::fmt::Write) -> core::fmt::Result {
        let t = &self.t;
        writeln!(
            f,
            "test={} size={} offset={} check={} concurrency={} peers={} workers={} {}",
            t.op.name(),
            t.size,
            t.offset,
            t.check.name(),
            t.concurrency,
            self.peers.len(),
            self.workers,
            Fields(&self.total, self.usecs)
        )?;
        for (addr, s, e) in self.peers.iter() {
            let [a, b, c, d] = addr.ip;
            writeln!(
                f,
                "peer={a}.{b}.{c}.{d} {} first_error={}",
                Fields(s, self.usecs),
                e
            )?;
        }
        Ok(())
    }
}

/// The interface test `t` runs from: the one it names, else the first (`ENOENT` when there
/// is none).
pub(crate) fn local_iface(ifaces: &Ifaces, t: &Lst) -> Result<Arc<Iface>> {
    iface_from(ifaces, t.from, "lst")
}

/// The interface at address `from`, else the first (`ENOENT` when there is none, logged
/// for `who` at a limited rate: whoever may ask can repeat it).
pub(crate) fn iface_from(
    ifaces: &Ifaces,
    from: Option<[u8; 4]>,
    who: &'static str,
) -> Result<Arc<Iface>> {
    match from {
        Some(ip) => ifaces.find(ip),
        None => ifaces.first(),
    }
    .ok_or_else(|| {
        crate::show::pr_limited!(pr_err, "{}: no such local interface\n", who);
        ENOENT
    })
}

/// Starts test `t` from `iface` to `peers` (none: the interface itself): every slot's
/// buffer is made and its first transfer submitted. The run goes on by itself, advanced by
/// its completions, but for the slots whose transfer failed, which whoever waits for it
/// restarts after a pause ([`Run::wait`]).
pub(crate) fn start(
    iface: Arc<Iface>,
    peers: &[[u8; 4]],
    t: &Lst,
    timeout_ms: u32,
) -> Result<Arc<Run>> {
    let port = iface.addr().port;
    let mut addrs = KVec::new();
    if peers.is_empty() {
        addrs.push(iface.addr(), GFP_KERNEL)?;
    }
    for &ip in peers {
        addrs.push(SockAddr { ip, port }, GFP_KERNEL)?;
    }
    let n = addrs.len();
    let mut per_peer = KVec::with_capacity(n, GFP_KERNEL)?;
    let mut first_error = KVec::with_capacity(n, GFP_KERNEL)?;
    for _ in 0..n {
        per_peer.push(Stats::new(), GFP_KERNEL)?;
        first_error.push(0, GFP_KERNEL)?;
    }
    let count = match t.span {
        Span::Count(c) => c,
        Span::Seconds(_) => 0,
    };
    // In count mode, no more workers than transfers.
    let per_peer_workers = match t.span {
        Span::Count(c) => {
            let per_peer = c.checked_div(n as u64).unwrap_or(c) + 1;
            u64::from(t.concurrency).min(per_peer) as u32
        }
        Span::Seconds(_) => t.concurrency,
    };
    // Every slot's buffer, within the node's budget for tests.
    let bytes = match t.op {
        LstOp::Ping => 0,
        _ => (t.offset + t.size).saturating_mul(u64::from(per_peer_workers) * n as u64),
    };
    let mem = MemTicket::take(bytes)?;
    let run = Arc::pin_init(
        pin_init!(Run {
            t: *t,
            iface,
            peers: addrs,
            timeout_ms,
            start: Instant::now(),
            left: Atomic::new(count),
            stop: Atomic::new(0),
            workers: Atomic::new(0),
            shared <- new_mutex!(
                Shared { per_peer, first_error, finished: 0, paused: KVec::new() },
                "fastreg::lst::Run"
            ),
            cv <- new_condvar!("fastreg::lst::Run::cv"),
            _mem: mem,
        }),
        GFP_KERNEL,
    )?;
    // Every slot's buffer first (`size` bytes at `offset`, mapped once), then the slots.
    let mut slots = KVec::with_capacity((per_peer_workers as usize) * n, GFP_KERNEL)?;
    for _ in 0..per_peer_workers {
        for p in 0..n {
            let region = match t.op {
                LstOp::Ping => None,
                _ => match run.iface.res().region(t.offset as usize, t.size as usize) {
                    Ok(r) => Some(r),
                    // Out of memory: the test stops before it starts (its buffers so far
                    // are freed), with that reason.
                    Err(e) if e == ENOMEM => return Err(e),
                    Err(e) => {
                        run.record(p, 0, &Err(e));
                        continue;
                    }
                },
            };
            slots.push((p, region), GFP_KERNEL)?;
        }
    }
    run.workers.store(slots.len() as u32, Relaxed);
    run.shared.lock().paused.reserve(slots.len(), GFP_KERNEL)?;
    let me: Arc<dyn Client> = run.clone();
    for (p, region) in slots.drain_all() {
        run.next(&me, p, region);
    }
    Ok(run)
}

/// What a run has counted so far (every peer's counts together).
pub(crate) struct Progress {
    /// Transfers with good data, and their bytes.
    pub(crate) ops: u64,
    pub(crate) bytes: u64,
    /// Failed transfers, by [`ErrKind`].
    pub(crate) errors: [u64; crate::selftest::stats::ERR_KINDS],
    /// Transfers with bad data.
    pub(crate) corrupt: u64,
    /// Microseconds since it started.
    pub(crate) usecs: u64,
    /// The first error of the first peer that had one (a negative errno, or 0).
    pub(crate) first_error: i32,
}

impl Run {
    /// Stops the run: its slots end after their current transfer.
    pub(crate) fn stop(&self) {
        self.stop.store(1, Relaxed);
        let _sh = self.shared.lock();
        self.cv.notify_all();
    }

    /// Whether it was stopped ([`Run::stop`]) or lost its interface.
    pub(crate) fn stopped(&self) -> bool {
        self.stop.load(Relaxed) != 0 || self.iface.is_closed()
    }

    /// What it has counted so far.
    pub(crate) fn progress(&self) -> Progress {
        let sh = self.shared.lock();
        let mut p = Progress {
            ops: 0,
            bytes: 0,
            errors: [0; crate::selftest::stats::ERR_KINDS],
            corrupt: 0,
            usecs: self.start.elapsed().as_micros_ceil() as u64,
            first_error: sh
                .first_error
                .iter()
                .copied()
                .find(|e| *e != 0)
                .unwrap_or(0),
        };
        for s in sh.per_peer.iter() {
            p.ops += s.ops;
            p.bytes += s.bytes;
            p.corrupt += s.corrupt;
            for (t, e) in p.errors.iter_mut().zip(s.errors) {
                *t += e;
            }
        }
        p
    }

    /// Waits until every slot has finished, restarting those whose transfer failed after a
    /// pause; then reports. Called by a work item (the node's test, a console's): no signal
    /// comes to it, and the run ends by itself or by [`Run::stop`].
    pub(crate) fn wait(self: &Arc<Self>) -> Result<KBox<Report>> {
        let me: Arc<dyn Client> = self.clone();
        let started = self.workers.load(Relaxed);
        let mut sh = self.shared.lock();
        // Rounds of restarts in a row with no good transfer since, and the good ones then.
        let (mut fruitless, mut good) = (0u32, 0u64);
        while sh.finished < started {
            if !sh.paused.is_empty() && self.stop.load(Relaxed) == 0 {
                // Slots whose transfer failed: restarted after a pause, from here; a longer
                // one while restarts bring nothing good.
                let now: u64 = sh.per_peer.iter().map(|s| s.ops).sum();
                fruitless = if now > good {
                    0
                } else {
                    fruitless.saturating_add(1)
                };
                good = now;
                drop(sh);
                let pause = crate::selftest::stats::restart_pause_ms(fruitless);
                kernel::time::delay::fsleep(Delta::from_millis(pause.into()));
                loop {
                    let Some((p, region)) = self.shared.lock().paused.pop() else {
                        break;
                    };
                    self.next(&me, p, region);
                }
                sh = self.shared.lock();
                continue;
            }
            // A stopped run's paused slots end here.
            if self.stop.load(Relaxed) != 0 {
                while let Some((_, region)) = sh.paused.pop() {
                    drop(region);
                    sh.finished += 1;
                }
                if sh.finished >= started {
                    break;
                }
            }
            // An interruptible sleep, as long as the run, is not a hung task; a second at a
            // time (no signal comes to a work item).
            let _ = self
                .cv
                .wait_interruptible_timeout(&mut sh, kernel::time::msecs_to_jiffies(1000));
        }
        self.report(&sh, started)
    }

    /// The report of a run whose slots have all ended, boxed. Apart from [`Run::wait`],
    /// whose frame (and its caller's) stays on the stack under every transfer it restarts
    /// (the submission path, completions included, runs on it): the counts it copies are
    /// large (a [`Stats`] is about 2 KiB), and only a pointer goes back.
    #[inline(never)]
    fn report(&self, sh: &Shared, started: u32) -> Result<KBox<Report>> {
        let usecs = self.start.elapsed().as_micros_ceil() as u64;
        let mut total = Stats::new();
        let mut out = KVec::with_capacity(self.peers.len(), GFP_KERNEL)?;
        for (p, s) in sh.per_peer.iter().enumerate() {
            total.merge(s);
            out.push((self.peers[p], s.clone(), sh.first_error[p]), GFP_KERNEL)?;
        }
        Ok(KBox::new(
            Report {
                t: self.t,
                usecs,
                workers: started,
                total,
                peers: out,
            },
            GFP_KERNEL,
        )?)
    }
}
