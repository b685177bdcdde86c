// SPDX-License-Identifier: GPL-2.0

//! The selftest engine, in the manner of lnet_selftest: every node with fastreg loaded serves
//! tests (the transport serves PUT, GET and pings as it is), and a client runs them against
//! one or more peers through the `lst` debugfs file, which the `fastreg-lst` tool drives.
//!
//! A run starts `concurrency` workers per peer on the long-running unbound system workqueue. Each worker
//! owns one buffer (`size` bytes at `offset` into its first page, mapped once) and loops:
//! it claims a transfer (of the run's count, or until its time is up), connects if needed,
//! and moves the buffer with a fresh seed, so every transfer's pattern differs from the
//! last. Workers count into their own [`Stats`], merged per peer at the end; the writer of
//! the command waits for every worker before it returns, so no worker outlives the module.

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
    command::{
        Lst,
        LstOp,
        Span, //
    },
    conn::{
        Iface,
        Ifaces, //
    },
    region::Region,
    stats::{
        ErrKind,
        Stats, //
    },
    verbs::SockAddr,
};

/// What the workers share.
struct Shared {
    /// Every worker's counts, merged per peer.
    per_peer: KVec<Stats>,
    /// The first error each peer gave (a negative errno), for the report.
    first_error: KVec<i32>,
    /// Workers that have finished.
    finished: u32,
}

/// One run of a test.
#[pin_data]
struct Run {
    t: Lst,
    iface: Arc<Iface>,
    peers: KVec<SockAddr>,
    timeout_ms: u32,
    start: Instant<Monotonic>,
    /// Count mode: transfers not yet claimed.
    left: Atomic<u64>,
    /// Set to stop the workers early (the writer was interrupted).
    stop: Atomic<u32>,
    #[pin]
    shared: Mutex<Shared>,
    #[pin]
    cv: CondVar,
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

    /// One transfer to `peer` with `region`.
    fn one(&self, peer: SockAddr, region: Option<&Region>) -> Result {
        let conn = self.iface.connect(peer)?;
        let t = &self.t;
        match (t.op, region) {
            (LstOp::Ping, _) => conn.ping_once(self.timeout_ms).map(|_| ()),
            (LstOp::Write, Some(r)) => {
                conn.put_region(r, self.iface.seed(), t.check, self.timeout_ms)
            }
            (LstOp::Read, Some(r)) => {
                conn.get_region(r, self.iface.seed(), t.check, self.timeout_ms)
            }
            _ => Err(EINVAL),
        }
    }

    /// A worker: transfers to peer number `p` until the run is over.
    fn work(&self, p: usize) {
        // The counts live on the heap: the data path below is deep (rxe runs it inline).
        let Ok(mut mine) = new_stats() else {
            let mut sh = self.shared.lock();
            sh.per_peer[p].error(ErrKind::Other);
            sh.first_error[p] = ENOMEM.to_errno();
            sh.finished += 1;
            self.cv.notify_all();
            return;
        };
        let mut first_error = 0;
        let peer = self.peers[p];
        let region = match self.t.op {
            LstOp::Ping => Ok(None),
            _ => Region::new(
                self.iface.res(),
                self.t.offset as usize,
                self.t.size as usize,
            )
            .map(Some),
        };
        match &region {
            Err(e) => {
                mine.error(ErrKind::of_errno(e.to_errno()));
                first_error = e.to_errno();
            }
            Ok(region) => {
                while self.claim() {
                    let t0 = Instant::<Monotonic>::now();
                    match self.one(peer, region.as_ref()) {
                        Ok(()) => mine.ok(self.t.size, t0.elapsed().as_micros_ceil() as u64),
                        Err(e) if e.to_errno() == -(kernel::bindings::EBADMSG as i32) => {
                            mine.corrupt += 1;
                        }
                        Err(e) => {
                            mine.error(ErrKind::of_errno(e.to_errno()));
                            if first_error == 0 {
                                first_error = e.to_errno();
                            }
                            // Do not spin on a peer that refuses at once.
                            kernel::time::delay::fsleep(Delta::from_millis(10));
                        }
                    }
                }
            }
        }
        drop(region);
        let mut sh = self.shared.lock();
        sh.per_peer[p].merge(&mine);
        if sh.first_error[p] == 0 {
            sh.first_error[p] = first_error;
        }
        sh.finished += 1;
        self.cv.notify_all();
    }
}

#[inline(never)]
fn new_stats() -> Result<KBox<Stats>> {
    Ok(KBox::new(Stats::new(), GFP_KERNEL)?)
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
    pub(crate) fn clean(&self) -> bool {
        self.total.errors_total() == 0 && self.total.corrupt == 0
    }

    /// The result lines: `test=...` with the whole run, then one `peer=...` per peer.
    pub(crate) fn write(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
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

/// Runs test `t` from one of `ifaces`; returns when every worker has finished.
pub(crate) fn run(ifaces: &Ifaces, t: &Lst, timeout_ms: u32) -> Result<Report> {
    let iface = match t.from {
        Some(ip) => ifaces.find(ip),
        None => ifaces.first(),
    }
    .ok_or_else(|| {
        pr_err!("lst: no such local interface\n");
        ENOENT
    })?;
    let port = iface.addr().port;
    let mut peers = KVec::new();
    if t.peers().is_empty() {
        peers.push(iface.addr(), GFP_KERNEL)?;
    }
    for &ip in t.peers() {
        peers.push(SockAddr { ip, port }, GFP_KERNEL)?;
    }
    let n = peers.len();
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
    let run = Arc::pin_init(
        pin_init!(Run {
            t: *t,
            iface,
            peers,
            timeout_ms,
            start: Instant::now(),
            left: Atomic::new(count),
            stop: Atomic::new(0),
            shared <- new_mutex!(Shared { per_peer, first_error, finished: 0 }, "fastreg::lst::Run"),
            cv <- new_condvar!("fastreg::lst::Run::cv"),
        }),
        GFP_KERNEL,
    )?;
    // In count mode, no more workers than transfers.
    let per_peer_workers = match t.span {
        Span::Count(c) => {
            let per_peer = c.checked_div(n as u64).unwrap_or(c) + 1;
            u64::from(t.concurrency).min(per_peer) as u32
        }
        Span::Seconds(_) => t.concurrency,
    };
    let mut started = 0u32;
    let mut spawn_err: Result = Ok(());
    'spawn: for _ in 0..per_peer_workers {
        for p in 0..n {
            let r = run.clone();
            if let Err(e) = crate::verbs::long_wq().try_spawn(GFP_KERNEL, move || r.work(p)) {
                spawn_err = Err(e.into());
                run.stop.store(1, Relaxed);
                break 'spawn;
            }
            started += 1;
        }
    }
    let mut sh = run.shared.lock();
    while sh.finished < started {
        if run.cv.wait_interruptible(&mut sh) {
            // Interrupted: the workers stop after their current transfer; wait for them,
            // they use the module's code.
            run.stop.store(1, Relaxed);
            while sh.finished < started {
                run.cv.wait(&mut sh);
            }
            return Err(EINTR);
        }
    }
    spawn_err?;
    let usecs = run.start.elapsed().as_micros_ceil() as u64;
    let mut total = Stats::new();
    let mut out = KVec::with_capacity(n, GFP_KERNEL)?;
    for (p, s) in sh.per_peer.iter().enumerate() {
        total.merge(s);
        out.push((run.peers[p], s.clone(), sh.first_error[p]), GFP_KERNEL)?;
    }
    Ok(Report {
        t: *t,
        usecs,
        workers: started,
        total,
        peers: out,
    })
}
