// SPDX-License-Identifier: GPL-2.0

//! Interfaces and connections: negotiation, messages and credits.
//!
//! An [`Iface`] is an RDMA device and a local IPv4 address (and port) that fastreg listens
//! on, with its own tunables. A [`Conn`] is a connection between two interfaces (of this
//! node or another): its state follows [`crate::conn_state`], its parameters are negotiated
//! with [`crate::negotiate`] through rdma_cm private data, and its messages are
//! [`crate::wire`] messages over SEND/RECV, under credit flow control.
//!
//! Credits: each side posts `queue_depth + 2` receive buffers. A message costs the sender a
//! credit; the receiver reposts the buffer and returns the credit in the header of its next
//! message, or in a NOOP when `queue_depth / 2` credits are owed and nothing else goes out.
//! Ordinary messages never take the last credit, which is kept for a NOOP, so both sides can
//! always return credits to each other.
//!
//! Work that must not run in a completion or rdma_cm handler (draining a QP, destroying an
//! endpoint, reconnecting) is done by the thread that asked for the connection, or by the
//! interface's teardown; handlers only record what happened and wake it.

use kernel::{
    new_condvar, new_mutex,
    page::PAGE_SIZE,
    prelude::*,
    sync::{
        atomic::{
            Atomic,
            Relaxed, //
        },
        lock::mutex::MutexGuard,
        Arc,
        ArcBorrow,
        CondVar,
        Mutex, //
    },
    time::{
        msecs_to_jiffies,
        Delta,
        Instant,
        Jiffies,
        Monotonic, //
    },
};

use crate::{
    conn_state::{
        self,
        Action,
        Event,
        State, //
    },
    device::DevRes,
    mr_state::state::{
        Free,
        Invalidating,
        Registered, //
    },
    negotiate::{
        self,
        Answer,
        Reason,
        Retry, //
    },
    region::{
        self,
        Region, //
    },
    report::Show,
    verbs::{
        self,
        Access,
        CmEvent,
        CmHandler,
        Completion,
        ConnParam,
        ConnRequest,
        Endpoint,
        FrMr,
        Handler,
        MsgBuf,
        QpCaps,
        SendChain,
        SockAddr,
        Wc, //
    },
    wait,
    wire::{
        self,
        Body,
        Check,
        ConnParams,
        Limits,
        Msg,
        Regs, //
    },
};

/// Receive buffers and message slots beyond the queue depth (for NOOPs and replies).
const EXTRA: u32 = 2;
/// How long connecting may take.
const CONNECT_MS: u32 = 10_000;
/// rdma_cm resolution timeout.
const RESOLVE_MS: u16 = 2000;
/// Connection attempts (negotiation rounds) before giving up.
const MAX_ATTEMPTS: u32 = 6;
/// Idle buffers an interface keeps for serving transfers, and their most bytes in all.
const SPARE_REGIONS: usize = 32;
const SPARE_BYTES: usize = 64 << 20;

/// Tunables of an interface.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Tunables {
    /// Transfers (and credits) per connection.
    pub(crate) queue_depth: u16,
    /// Largest transfer.
    pub(crate) max_payload: u32,
    /// Registrations per transfer message.
    pub(crate) max_regs: u16,
    /// rdma_cm service port.
    pub(crate) port: u16,
}

impl Tunables {
    /// Registrations per transfer message when not given.
    pub(crate) const DEFAULT_MAX_REGS: u16 = 16;

    /// The module parameters' values.
    pub(crate) fn defaults(p: &crate::params::Params) -> Self {
        Self {
            queue_depth: p.queue_depth as u16,
            max_payload: p.max_payload,
            max_regs: Self::DEFAULT_MAX_REGS,
            port: p.port,
        }
    }
}

struct IfaceState {
    listener: Option<Arc<Endpoint<Ctx>>>,
    conns: KVec<Arc<Conn>>,
    closed: bool,
    /// Peers the last connection attempts to failed: consecutive failures, when, and the
    /// error. Connecting again waits out a backoff ([`conn_state::backoff_ms`]).
    failed: KVec<Failed>,
}

/// Failed connection attempts to a peer.
#[derive(Clone, Copy)]
struct Failed {
    peer: SockAddr,
    n: u32,
    at: Instant<Monotonic>,
    err: Error,
}

/// Rejects by reason (index: the reason's number).
struct RejectCounts([Atomic<u64>; 10]);

impl RejectCounts {
    const fn new() -> Self {
        Self([const { Atomic::new(0) }; 10])
    }

    fn count(&self, why: Reason) {
        if let Some(n) = self.0.get(why as usize) {
            n.fetch_add(1, Relaxed);
        }
    }

    fn write(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let mut any = false;
        for (i, n) in self.0.iter().enumerate() {
            let n = n.load(Relaxed);
            if n == 0 {
                continue;
            }
            let name = Reason::from_u8(i as u8)
                .map(|r| r.name())
                .unwrap_or("other");
            write!(f, "{}{}:{}", if any { "," } else { "" }, name, n)?;
            any = true;
        }
        if !any {
            f.write_str("none")?;
        }
        Ok(())
    }
}

/// A local interface.
#[pin_data]
pub(crate) struct Iface {
    res: Arc<DevRes>,
    addr: SockAddr,
    tun: Tunables,
    stamp: u64,
    timeout_ms: u32,
    rejects_sent: RejectCounts,
    rejects_received: RejectCounts,
    /// Seeds of the transfers this interface starts.
    seeds: Atomic<u32>,
    /// Held while connecting, so that threads asking for the same peer at once share one
    /// connection.
    #[pin]
    connecting: Mutex<()>,
    /// Buffers (allocated and DMA-mapped) of transfers served, kept for the next ones of
    /// the same size: serving allocates nothing at steady state.
    #[pin]
    spare: Mutex<KVec<Region>>,
    /// Test hook: transfers this interface serves next whose data it corrupts.
    corrupt_next: Atomic<u32>,
    #[pin]
    st: Mutex<IfaceState>,
}

/// The context of every endpoint of the transport.
pub(crate) enum Ctx {
    /// A listening endpoint of an interface.
    Listener(Arc<Iface>),
    /// The endpoint of a connection.
    Conn(Arc<Conn>),
}

#[derive(Clone, Copy, Default)]
struct Stats {
    tx: u64,
    rx: u64,
    noops_tx: u64,
    noops_rx: u64,
    attempts: u32,
    /// Bulk transfers served as sink (PUT) or source (GET), and those found corrupt.
    served: u64,
    corrupt: u64,
    remote_inv: u64,
    /// Requests this side refused for want of MRs or memory (`-EAGAIN`).
    busy: u64,
    /// Requests this side retried after the peer was busy.
    retries: u64,
}

struct ConnState {
    state: State,
    ep: Option<Arc<Endpoint<Ctx>>>,
    asked: ConnParams,
    params: Option<ConnParams>,
    peer_stamp: u64,
    retry: Option<Retry>,
    reason: Option<&'static str>,
    /// Why connecting failed, when rdma_cm said (a negative errno).
    connect_err: Option<i32>,
    credits: u32,
    outstanding: u32,
    /// Idle send slots, each with its chain storage.
    tx_free: KVec<(Arc<Completion<TxSlot>>, SendChain)>,
    rx: KVec<Arc<Completion<RxSlot>>>,
    /// Messages owed to the peer (answers and requests to serve), sent in order as credits
    /// allow.
    owed: KVec<Owed>,
    next_cookie: u64,
    /// When this side last sent a message.
    last_tx: Instant<Monotonic>,
    /// When this side last received one.
    last_rx: Instant<Monotonic>,
    /// Test hook: corrupt the next message sent (see the `fault` command).
    mangle: Option<wire::Mangle>,
    /// Transfers this side started.
    xfers: KVec<Xfer>,
    /// PUTs this side is the sink of, registered and waiting for PUT_DONE.
    sinks: KVec<Sink>,
    /// Chains in flight whose completion finishes a transfer step.
    tagged: KVec<Tagged>,
    stats: Stats,
}

/// Something owed to the peer, waiting for a credit and a send slot.
// A GET carries its registrations inline (544 bytes): the queue's room is reserved at
// setup, and boxing them would allocate per request in completion context.
#[allow(clippy::large_enum_variant)]
enum Owed {
    /// The answer to a ping.
    Pong(u64),
    /// The verdict on a PUT's data.
    Result(u64, i32),
    /// A PUT to serve as the sink.
    Put {
        cookie: u64,
        size: u64,
        seed: u32,
        check: Check,
    },
    /// A GET to serve as the source.
    Get {
        cookie: u64,
        size: u64,
        seed: u32,
        check: Check,
        regs: Regs,
    },
}

/// Where a transfer this side started stands.
#[derive(Clone, Copy)]
enum Step {
    /// The request is out.
    Waiting,
    /// PUT: the sink's registrations arrived (in [`Xfer::regs`]), with its cookie.
    Acked(u64),
    /// The peer refused or failed it.
    Failed(i32),
    /// GET: the data is in, with the rkey the peer invalidated (ping: the pong arrived).
    Done(Option<u32>),
    /// This side's last chain of the transfer completed (`true`) or failed.
    ChainDone(bool),
}

/// What the thread of one transfer sleeps on: woken alone when its transfer moves, so
/// that many transfers in flight on a connection do not all wake at every completion.
#[pin_data]
struct Waiter {
    #[pin]
    cv: CondVar,
}

struct Xfer {
    cookie: u64,
    waiter: Arc<Waiter>,
    /// Its step or verdict changed since its thread was last woken.
    moved: bool,
    /// When its request went out (the transfer timeout runs from there).
    sent: Option<Instant<Monotonic>>,
    step: Step,
    /// PUT with a check: the sink's verdict.
    verdict: Option<i32>,
    /// PUT: the sink's registrations.
    regs: Regs,
}

/// How the sink of a PUT checks its data, and whom it tells.
#[derive(Clone, Copy)]
struct SinkCheck {
    /// The source's cookie, for the verdict.
    cookie: u64,
    seed: u32,
    check: Check,
}

/// The sink of a PUT.
struct Sink {
    since: Instant<Monotonic>,
    sink_cookie: u64,
    how: SinkCheck,
    region: Region,
    regs: KVec<FrMr<Registered>>,
}

/// What completes with a chain.
enum Finishing {
    /// The source side of a GET this side serves: its MRs are invalidated.
    ServedGet(Region, KVec<FrMr<Invalidating>>),
    /// The sink side of a PUT: the LOCAL_INVs of its other MRs; then the data is checked.
    ServedPut(Region, KVec<FrMr<Invalidating>>, SinkCheck),
    /// A chain of a transfer this side started (its MRs, invalidated in the chain).
    Mine(u64, KVec<FrMr<Invalidating>>),
}

struct Tagged {
    slot: Arc<Completion<TxSlot>>,
    what: Finishing,
}

/// A connection.
#[pin_data]
pub(crate) struct Conn {
    iface: Arc<Iface>,
    peer: SockAddr,
    active: bool,
    /// The peer's interface (its address and listening port), when known: `peer` for a
    /// connection this side opened, the request's source address and port field for one
    /// it accepted.
    peer_iface: Option<SockAddr>,
    #[pin]
    st: Mutex<ConnState>,
    #[pin]
    cv: CondVar,
}

/// A message slot for sending.
pub(crate) struct TxSlot {
    conn: Arc<Conn>,
    buf: Arc<MsgBuf>,
}

/// A receive buffer.
pub(crate) struct RxSlot {
    conn: Arc<Conn>,
    buf: Arc<MsgBuf>,
}

/// Destroys MRs registered for a chain that was not posted (or whose state is unknown):
/// deregistering kills their keys; they are never reused.
fn give_up(res: &DevRes, regs: &mut KVec<FrMr<Registered>>, inv: &mut KVec<FrMr<Invalidating>>) {
    for r in regs.drain_all() {
        res.pool.destroy(r.into_handle());
    }
    for i in inv.drain_all() {
        res.pool.destroy(i.into_handle());
    }
}

fn refused() -> Error {
    Error::from_errno(-(kernel::bindings::ECONNREFUSED as i32))
}

fn not_connected() -> Error {
    Error::from_errno(-(kernel::bindings::ENOTCONN as i32))
}

impl Iface {
    /// A buffer of `size` bytes (at offset 0) to serve a transfer with: an idle one of that
    /// size, else a new one.
    fn serving_region(&self, size: usize) -> Result<Region> {
        let mut spare = self.spare.lock();
        if let Some(i) = spare.iter().rposition(|r| r.buffer().len() == size) {
            if let Ok(r) = spare.remove(i) {
                return Ok(r);
            }
        }
        drop(spare);
        Region::new(&self.res, 0, size)
    }

    /// Keeps a served transfer's buffer for the next one of its size; the oldest go when
    /// more than [`SPARE_REGIONS`] or [`SPARE_BYTES`] are kept.
    fn recycle(&self, region: Region) {
        let mut spare = self.spare.lock();
        let mut gone = KVec::new();
        let mut bytes: usize = spare.iter().map(|r| r.buffer().len()).sum();
        while !spare.is_empty()
            && (spare.len() >= SPARE_REGIONS || bytes + region.buffer().len() > SPARE_BYTES)
        {
            if let Ok(old) = spare.remove(0) {
                bytes -= old.buffer().len();
                let _ = gone.push(old, GFP_KERNEL);
            }
        }
        if region.buffer().len() <= SPARE_BYTES {
            let _ = spare.push(region, GFP_KERNEL);
        }
        drop(spare);
        // Unmapped and freed here, without the lock.
        drop(gone);
    }

    /// A new seed for a transfer's pattern.
    pub(crate) fn seed(&self) -> u32 {
        let n = self.seeds.fetch_add(1, Relaxed);
        (self.stamp as u32) ^ n.wrapping_mul(0x9e37_79b9)
    }

    /// Test hook (`fault IFACE corrupt N`): the next `n` transfers this interface serves
    /// get one byte of their data inverted, at the sink before it checks (PUT) or at the
    /// source before it writes (GET).
    pub(crate) fn corrupt_served(&self, n: u32) {
        self.corrupt_next.store(n, Relaxed);
    }

    /// Applies the corruption hook to a served transfer's data, if armed.
    fn corrupt_hook(&self, region: &Region) -> Result {
        let mut n = self.corrupt_next.load(Relaxed);
        while n > 0 {
            match self.corrupt_next.cmpxchg(n, n - 1, Relaxed) {
                Ok(_) => {
                    let len = region.buffer().len();
                    pr_info!(
                        "{}: corrupting byte {} of a served transfer\n",
                        self.addr,
                        len / 2
                    );
                    return region.buffer().flip(len / 2);
                }
                Err(now) => n = now,
            }
        }
        Ok(())
    }

    /// Creates an interface on `res` at `addr` and starts listening.
    pub(crate) fn new(
        res: Arc<DevRes>,
        addr: SockAddr,
        tun: Tunables,
        timeout_ms: u32,
    ) -> Result<Arc<Self>> {
        let iface = Arc::pin_init(
            pin_init!(Self {
                res,
                addr,
                tun,
                stamp: verbs::incarnation(),
                timeout_ms,
                rejects_sent: RejectCounts::new(),
                rejects_received: RejectCounts::new(),
                seeds: Atomic::new(0),
                connecting <- new_mutex!((), "fastreg::Iface::connecting"),
                spare <- new_mutex!(KVec::new(), "fastreg::Iface::spare"),
                corrupt_next: Atomic::new(0),
                st <- new_mutex!(IfaceState {
                    listener: None,
                    conns: KVec::new(),
                    closed: false,
                    failed: KVec::new(),
                }, "fastreg::Iface::st"),
            }),
            GFP_KERNEL,
        )?;
        let listener = Endpoint::new(Ctx::Listener(iface.clone()))?;
        let bound = listener.listen(addr, 64).and_then(|()| {
            let on_dev = listener.device().map(|d| iface.res.is(d)).unwrap_or(false);
            if on_dev {
                Ok(())
            } else {
                pr_err!("{}: address is not on device {}\n", addr, iface.res.name());
                Err(EINVAL)
            }
        });
        if let Err(e) = bound {
            // The listener refers to the interface: break the cycle before dropping it.
            drop(listener);
            return Err(e);
        }
        iface.st.lock().listener = Some(listener);
        pr_info!(
            "{}: interface {} up: queue_depth={} max_payload={} max_regs={}\n",
            iface.res.name(),
            addr,
            tun.queue_depth,
            tun.max_payload,
            tun.max_regs
        );
        Ok(iface)
    }

    /// The address.
    pub(crate) fn addr(&self) -> SockAddr {
        self.addr
    }

    /// What this interface offers in negotiation.
    fn local(&self) -> negotiate::Local {
        negotiate::Local {
            queue_depth: self.tun.queue_depth,
            max_regs: self.tun.max_regs,
            max_payload: self.tun.max_payload,
            max_msg: wire::MAX_MSG,
            page_size: PAGE_SIZE as u32,
            features: wire::FEATURE_REMOTE_INV,
            stamp: self.stamp,
            port: self.addr.port,
        }
    }

    /// Closes every connection and the listener; the interface is unusable afterwards.
    pub(crate) fn shutdown(&self) {
        let (listener, conns) = {
            let mut st = self.st.lock();
            st.closed = true;
            (st.listener.take(), core::mem::take(&mut st.conns))
        };
        // The listener first: no new connection while the others go.
        drop(listener);
        for c in conns.iter() {
            c.teardown("interface removed");
        }
        // Their DMA mappings must not outlive the interface's use of the device.
        let spare = core::mem::take(&mut *self.spare.lock());
        drop(spare);
        pr_info!("{}: interface {} down\n", self.res.name(), self.addr);
    }

    /// Drops connections that are closed (their teardown happens here, in process context).
    pub(crate) fn reap(&self) {
        let dead: KVec<Arc<Conn>> = {
            let mut st = self.st.lock();
            let mut dead = KVec::new();
            let mut i = 0;
            while i < st.conns.len() {
                let closed = matches!(st.conns[i].state(), State::Closing | State::Closed);
                if closed {
                    if let Ok(c) = st.conns.remove(i) {
                        let _ = dead.push(c, GFP_KERNEL);
                    }
                } else {
                    i += 1;
                }
            }
            dead
        };
        for c in dead.iter() {
            c.teardown("closed");
        }
    }

    /// The established connection to `peer`, connecting (and negotiating) if needed.
    ///
    /// After a failed attempt, attempts within the backoff (100 ms doubling with each
    /// consecutive failure, at most 10 s) fail at once with the same error, so callers that
    /// retry in a loop do not hammer an unreachable peer.
    pub(crate) fn connect(self: &Arc<Self>, peer: SockAddr) -> Result<Arc<Conn>> {
        if let Some(c) = self.established(peer)? {
            return Ok(c);
        }
        let _one = self.connecting.lock();
        self.reap();
        if let Some(c) = self.established(peer)? {
            return Ok(c);
        }
        {
            let st = self.st.lock();
            if let Some(f) = st.failed.iter().find(|f| f.peer == peer) {
                let wait = Delta::from_millis(conn_state::backoff_ms(f.n - 1).into());
                if f.at.elapsed() < wait {
                    return Err(f.err);
                }
            }
        }
        let r = self.connect_new(peer);
        let mut st = self.st.lock();
        let pos = st.failed.iter().position(|f| f.peer == peer);
        match (&r, pos) {
            (Ok(_), Some(i)) => {
                let _ = st.failed.remove(i);
            }
            (Err(e), Some(i)) => {
                let f = &mut st.failed[i];
                f.n = f.n.saturating_add(1);
                f.at = Instant::now();
                f.err = *e;
            }
            (Err(e), None) => {
                let f = Failed {
                    peer,
                    n: 1,
                    at: Instant::now(),
                    err: *e,
                };
                // Without memory the backoff is skipped, nothing else.
                let _ = st.failed.push(f, GFP_KERNEL);
            }
            (Ok(_), None) => {}
        }
        r
    }

    /// Connects (and negotiates) a new connection to `peer`.
    fn connect_new(self: &Arc<Self>, peer: SockAddr) -> Result<Arc<Conn>> {
        let mut asked = self.local().params(0, 0);
        for attempt in 0..MAX_ATTEMPTS {
            let conn = Conn::new(self.clone(), peer, true, Some(peer), asked)?;
            conn.st.lock().stats.attempts = attempt + 1;
            self.st.lock().conns.push(conn.clone(), GFP_KERNEL)?;
            let r = conn.start_active();
            let outcome = match r {
                Ok(()) => conn.wait_connected(),
                Err(e) => Err(e),
            };
            if outcome.is_ok() {
                return Ok(conn);
            }
            let retry = conn.st.lock().retry.take();
            self.forget(&conn);
            conn.teardown("connect failed");
            match retry {
                Some(Retry::With(lower)) => {
                    pr_info!(
                        "{} -> {}: retrying with queue_depth={} max_payload={} max_regs={}\n",
                        self.addr,
                        peer,
                        lower.queue_depth,
                        lower.max_payload,
                        lower.max_regs
                    );
                    asked = lower;
                }
                Some(Retry::Again(p)) => {
                    asked = p;
                    kernel::time::delay::fsleep(kernel::time::Delta::from_millis(
                        conn_state::backoff_ms(attempt).into(),
                    ));
                }
                Some(Retry::Fail) | None => return Err(outcome.err().unwrap_or(refused())),
            }
        }
        pr_err!(
            "{} -> {}: no agreement after {} attempts\n",
            self.addr,
            peer,
            MAX_ATTEMPTS
        );
        Err(refused())
    }

    /// The established connection this interface made to `peer`, if any.
    fn established(&self, peer: SockAddr) -> Result<Option<Arc<Conn>>> {
        let st = self.st.lock();
        if st.closed {
            return Err(ENODEV);
        }
        Ok(st
            .conns
            .iter()
            .find(|c| c.peer == peer && c.active && c.state() == State::Established)
            .cloned())
    }

    /// `conn` has just learned that its peer interface is incarnation `stamp`: fails the
    /// other connections to or from that interface that know it by another incarnation.
    /// The peer restarted; they will never hear from it again, and transfers on them
    /// would only time out. Their teardown happens in [`Iface::reap`].
    fn close_stale(&self, conn: &Arc<Conn>, stamp: u64) {
        let Some(peer) = conn.peer_iface else {
            return;
        };
        let stale: KVec<(Arc<Conn>, u64)> = {
            let st = self.st.lock();
            let mut v = KVec::new();
            for c in st.conns.iter() {
                if Arc::ptr_eq(c, conn) || c.peer_iface != Some(peer) {
                    continue;
                }
                let known = c.st.lock().peer_stamp;
                if negotiate::stale(known, stamp) {
                    // Under memory pressure the keepalive finds the others.
                    let _ = v.push((c.clone(), known), GFP_KERNEL);
                }
            }
            v
        };
        for (c, known) in stale.iter() {
            pr_info!(
                "{} {} {}: peer {} restarted (incarnation {:#x}, was {:#x})\n",
                self.addr,
                c.dir(),
                c.peer,
                peer,
                stamp,
                known
            );
            c.fail("stale incarnation: the peer restarted");
        }
    }

    /// Whether the interface was shut down.
    pub(crate) fn is_closed(&self) -> bool {
        self.st.lock().closed
    }

    /// Its device's resources.
    pub(crate) fn res(&self) -> &Arc<DevRes> {
        &self.res
    }

    fn forget(&self, conn: &Arc<Conn>) {
        self.st.lock().conns.retain(|c| !Arc::ptr_eq(c, conn));
    }

    /// The connection to `peer` this interface initiated, if any.
    pub(crate) fn find(&self, peer: SockAddr) -> Option<Arc<Conn>> {
        self.st
            .lock()
            .conns
            .iter()
            .find(|c| c.peer == peer && c.active)
            .cloned()
    }

    /// Closes the connection to `peer`, if any.
    pub(crate) fn close(&self, peer: SockAddr) -> Result {
        let c = self.find(peer).ok_or(ENOENT)?;
        self.forget(&c);
        c.teardown("closed by request");
        Ok(())
    }

    /// Writes the interface and its connections, for debugfs.
    pub(crate) fn write(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let st = self.st.lock();
        write!(
            f,
            "iface {} {} queue_depth={} max_payload={} max_regs={} stamp={:#x} rejects_sent=",
            self.res.name(),
            self.addr,
            self.tun.queue_depth,
            self.tun.max_payload,
            self.tun.max_regs,
            self.stamp
        )?;
        self.rejects_sent.write(f)?;
        f.write_str(" rejects_received=")?;
        self.rejects_received.write(f)?;
        writeln!(f)?;
        for c in st.conns.iter() {
            c.write(f)?;
        }
        Ok(())
    }
}

impl Conn {
    fn new(
        iface: Arc<Iface>,
        peer: SockAddr,
        active: bool,
        peer_iface: Option<SockAddr>,
        asked: ConnParams,
    ) -> Result<Arc<Self>> {
        Arc::pin_init(
            pin_init!(Self {
                iface,
                peer,
                active,
                peer_iface,
                st <- new_mutex!(ConnState {
                    state: State::Idle,
                    ep: None,
                    asked,
                    params: None,
                    peer_stamp: 0,
                    retry: None,
                    reason: None,
                    connect_err: None,
                    credits: 0,
                    outstanding: 0,
                    tx_free: KVec::new(),
                    rx: KVec::new(),
                    owed: KVec::new(),
                    next_cookie: 1,
                    last_tx: Instant::now(),
                    last_rx: Instant::now(),
                    mangle: None,
                    xfers: KVec::new(),
                    sinks: KVec::new(),
                    tagged: KVec::new(),
                    stats: Stats::default(),
                }, "fastreg::Conn::st"),
                cv <- new_condvar!("fastreg::Conn::cv"),
            }),
            GFP_KERNEL,
        )
    }

    /// The state.
    pub(crate) fn state(&self) -> State {
        self.st.lock().state
    }

    /// Most work requests one transfer's chain takes on a connection of `max_payload` on
    /// `res` (see [`crate::budget`]).
    fn chain_wrs(res: &DevRes, max_payload: u32) -> u32 {
        crate::budget::per_transfer(res.geo.max_mrs_for(max_payload.into())).total()
    }

    /// Queue sizes for `qd` transfers of up to `max_payload` bytes: the send queue holds
    /// `qd` transfers' chains and the reserved messages ([`crate::budget::sq_depth`]).
    fn caps(res: &DevRes, qd: u16, max_payload: u32) -> QpCaps {
        let slots = u32::from(qd) + EXTRA;
        let chain = Self::chain_wrs(res, max_payload);
        QpCaps {
            send_wr: crate::budget::sq_depth(qd.into(), chain).unwrap_or(u32::MAX),
            recv_wr: slots + 1,
            send_sge: 1,
            recv_sge: 1,
        }
    }

    /// Allocates message slots and buffers for queue depth `qd`, and posts the receives.
    fn setup(self: &Arc<Self>, ep: &Arc<Endpoint<Ctx>>, qd: u16) -> Result {
        let slots = (u32::from(qd) + EXTRA) as usize;
        let pd = &self.iface.res.pd;
        let mut tx = KVec::with_capacity(slots, GFP_KERNEL)?;
        let mut rx = KVec::with_capacity(slots, GFP_KERNEL)?;
        for _ in 0..slots {
            tx.push(
                (
                    Completion::new(TxSlot {
                        conn: self.clone(),
                        buf: MsgBuf::new(pd, wire::MAX_MSG as usize)?,
                    })?,
                    SendChain::with_capacity(1, 1)?,
                ),
                GFP_KERNEL,
            )?;
            rx.push(
                Completion::new(RxSlot {
                    conn: self.clone(),
                    buf: MsgBuf::new(pd, wire::MAX_MSG as usize)?,
                })?,
                GFP_KERNEL,
            )?;
        }
        for r in rx.iter() {
            ep.post_recv(&r.value().buf, r)?;
        }
        let mut st = self.st.lock();
        st.owed.reserve(slots, GFP_KERNEL)?;
        st.tx_free = tx;
        st.rx = rx;
        Ok(())
    }

    /// Starts an active connection.
    fn start_active(self: &Arc<Self>) -> Result {
        let ep = Endpoint::new(Ctx::Conn(self.clone()))?;
        let mut st = self.st.lock();
        st.ep = Some(ep.clone());
        let (s, a) = conn_state::next(st.state, Event::Connect);
        st.state = s;
        drop(st);
        if a == Action::ResolveAddr {
            ep.resolve_addr(Some(self.iface.addr), self.peer, RESOLVE_MS)?;
        }
        Ok(())
    }

    fn wait_connected(&self) -> Result {
        let mut left = msecs_to_jiffies(CONNECT_MS);
        let mut st = self.st.lock();
        loop {
            match st.state {
                State::Established => return Ok(()),
                State::Closing | State::Closed => {
                    pr_err!(
                        "{} -> {}: connection failed: {}\n",
                        self.iface.addr,
                        self.peer,
                        st.reason.unwrap_or("?")
                    );
                    return Err(st.connect_err.map(Error::from_errno).unwrap_or(refused()));
                }
                _ => {}
            }
            if left == 0 {
                st.reason = Some("connect timed out");
                st.retry = Some(Retry::Fail);
                pr_err!(
                    "{} -> {}: connect timed out ({})\n",
                    self.iface.addr,
                    self.peer,
                    st.state.name()
                );
                return Err(ETIMEDOUT);
            }
            if !wait::step(&self.cv, &mut st, &mut left) {
                return Err(ERESTARTSYS);
            }
        }
    }

    /// Applies `event`; records `reason` when it ends the connection. Returns the action.
    fn on(&self, st: &mut ConnState, event: Event, reason: &'static str) -> Action {
        let (s, a) = conn_state::next(st.state, event);
        if matches!(a, Action::Teardown | Action::TeardownAndRetry) {
            if st.reason.is_none() {
                st.reason = Some(reason);
            }
            if st.state == State::Established {
                pr_info!(
                    "{} {} {}: closing: {}\n",
                    self.iface.addr,
                    self.dir(),
                    self.peer,
                    reason
                );
            }
            // Flush everything posted; the owner drains and frees later, outside handlers.
            if let Some(ep) = &st.ep {
                ep.disconnect();
            }
        }
        st.state = s;
        Self::wake_all(st);
        self.cv.notify_all();
        a
    }

    /// Wakes the threads whose transfer moved, and those waiting for room.
    fn wake(&self, st: &mut ConnState) {
        for x in st.xfers.iter_mut().filter(|x| x.moved) {
            x.moved = false;
            x.waiter.cv.notify_all();
        }
        self.cv.notify_all();
    }

    /// Wakes the thread of every transfer (the connection's state changed).
    fn wake_all(st: &mut ConnState) {
        for x in st.xfers.iter_mut() {
            x.moved = false;
            x.waiter.cv.notify_all();
        }
    }

    /// `->` for a connection this side opened, `<-` for one it accepted (for logs).
    fn dir(&self) -> &'static str {
        if self.active {
            "->"
        } else {
            "<-"
        }
    }

    /// A work request of the connection completed in error: unless the connection is
    /// already going down (its work requests flush), log it and fail the connection.
    fn wr_failed(&self, st: &mut ConnState, wc: &Wc<'_>, reason: &'static str) {
        if matches!(st.state, State::Closing | State::Closed) {
            return;
        }
        pr_err!(
            "{} {}: {}: {}\n",
            self.iface.addr,
            self.peer,
            reason,
            wc.status_msg().to_str().unwrap_or("?")
        );
        self.on(st, Event::Error, reason);
    }

    /// Fails the connection with `reason`.
    fn fail(&self, reason: &'static str) {
        let mut st = self.st.lock();
        self.on(&mut st, Event::Error, reason);
    }

    /// Disconnects, drains, and frees the endpoint and the buffers. Process context only.
    fn teardown(&self, reason: &'static str) {
        let ep = {
            let mut st = self.st.lock();
            self.on(&mut st, Event::Close, reason);
            st.ep.take()
        };
        if let Some(ep) = ep {
            // Every posted work request completes (flushed) before this returns.
            ep.close();
            drop(ep);
        }
        let mut st = self.st.lock();
        // The slots refer to the connection: break the cycle.
        st.tx_free.clear();
        st.rx.clear();
        st.owed.clear();
        // Everything in flight has completed or flushed: MRs whose keys may still be valid
        // are destroyed, never reused; transfers waiting on the peer fail.
        let res = self.iface.res.clone();
        for s in st.sinks.drain_all() {
            for r in s.regs {
                res.pool.destroy(r.into_handle());
            }
        }
        for t in st.tagged.drain_all() {
            let (Finishing::ServedGet(_, inv)
            | Finishing::ServedPut(_, inv, _)
            | Finishing::Mine(_, inv)) = t.what;
            for r in inv {
                res.pool.destroy(r.into_handle());
            }
        }
        for x in st.xfers.iter_mut() {
            if matches!(x.step, Step::Waiting | Step::Acked(..)) {
                x.step = Step::Failed(-(kernel::bindings::ECONNABORTED as i32));
            }
        }
        let (s, _) = conn_state::next(st.state, Event::Drained);
        st.state = s;
        Self::wake_all(&mut st);
        self.cv.notify_all();
    }

    fn limits(&self, st: &ConnState) -> Option<Limits> {
        let p = st.params?;
        Some(Limits {
            max_msg: p.max_msg,
            max_payload: p.max_payload,
            max_regs: p.max_regs,
            max_credits: p.queue_depth.min(255) as u8 + EXTRA as u8,
            checksum: false,
            local_stamp: self.iface.stamp,
            peer_stamp: st.peer_stamp,
        })
    }

    /// Sends a message; `noop` may take the last credit. `EAGAIN` when no credit or slot.
    fn send_locked(&self, st: &mut ConnState, body: Body<'_>, noop: bool) -> Result {
        self.post_locked(st, noop, |_| Ok(None), |_| body, None)
            .map(|_| ())
    }

    /// Posts one chain: the work requests `pre` appends (REG_MR, RDMA, LOCAL_INV), then the
    /// message `body` makes (from the registrations `pre` may return), sent with
    /// invalidation of `invalidate` at the peer if given. Returns the send slot, whose
    /// completion is the chain's. On failure nothing was posted.
    fn post_locked<'a>(
        &self,
        st: &mut ConnState,
        noop: bool,
        pre: impl FnOnce(&mut SendChain) -> Result<Option<Regs>>,
        body: impl FnOnce(Option<&Regs>) -> Body<'a>,
        invalidate: Option<u32>,
    ) -> Result<Arc<Completion<TxSlot>>> {
        if st.state != State::Established
            && !(st.state == State::PassiveWait && st.params.is_some())
        {
            return Err(not_connected());
        }
        let need = if noop { 1 } else { 2 };
        if st.credits < need {
            return Err(EAGAIN);
        }
        let ep = st.ep.clone().ok_or_else(not_connected)?;
        let (slot, mut chain) = st.tx_free.pop().ok_or(EAGAIN)?;
        let returned = st.outstanding.min(255);
        chain.clear();
        let buf = &slot.value().buf;
        let mangle = st.mangle.take();
        let built = pre(&mut chain).and_then(|regs| {
            let msg = Msg {
                credits: returned as u8,
                src_stamp: self.iface.stamp,
                dst_stamp: st.peer_stamp,
                body: body(regs.as_ref()),
            };
            let n = buf
                .with(|b| {
                    let n = wire::encode(&msg, b, false)?;
                    if let Some(m) = mangle {
                        wire::mangle(m, &mut b[..n]);
                    }
                    Some(n)
                })
                .ok_or(EMSGSIZE)?;
            chain.send(buf, n as u32, invalidate)
        });
        if let Err(e) = built {
            chain.clear();
            st.tx_free.push((slot, chain), GFP_NOWAIT)?;
            return Err(e);
        }
        // Never wait for room here (the lock is held, completions need it): callers wait
        // for room in `wait_room` or retry from `pump`.
        match ep.post(chain, &slot, 0) {
            Ok(()) => {
                st.credits -= 1;
                st.outstanding -= returned;
                st.stats.tx += 1;
                st.last_tx = Instant::now();
                if noop {
                    st.stats.noops_tx += 1;
                }
                Ok(slot)
            }
            Err((e, chain)) => {
                if let Some(mut chain) = chain {
                    chain.clear();
                    st.tx_free.push((slot, chain), GFP_NOWAIT)?;
                }
                match e {
                    verbs::PostError::Timeout => Err(EAGAIN),
                    e => Err(e.to_error()),
                }
            }
        }
    }

    /// Sends what is owed to the peer (answers, requests to serve) as credits and send
    /// slots allow, then a NOOP if credits are owed and nothing went.
    fn pump(&self, st: &mut ConnState) {
        while !st.owed.is_empty() && st.credits >= 2 && !st.tx_free.is_empty() && self.sq_room(st) {
            let Ok(o) = st.owed.remove(0) else { break };
            let r = match o {
                Owed::Pong(cookie) => self.send_locked(
                    st,
                    Body::Immediate {
                        cookie,
                        payload: b"pong",
                    },
                    false,
                ),
                Owed::Result(cookie, status) => {
                    self.send_locked(st, Body::PutResult { cookie, status }, false)
                }
                Owed::Put {
                    cookie,
                    size,
                    seed,
                    check,
                } => self.serve_put(
                    st,
                    cookie,
                    size,
                    SinkCheck {
                        cookie,
                        seed,
                        check,
                    },
                ),
                Owed::Get {
                    cookie,
                    size,
                    seed,
                    check,
                    regs,
                } => self.serve_get(st, cookie, size, seed, check, &regs),
            };
            if let Err(e) = r {
                pr_err!(
                    "{} {} {}: cannot answer: {:?}\n",
                    self.iface.addr,
                    self.dir(),
                    self.peer,
                    e
                );
                self.on(st, Event::Error, "cannot answer");
                return;
            }
        }
        let Some(p) = st.params else { return };
        let hiw = (u32::from(p.queue_depth) / 2).max(1);
        // Owed messages would carry the credits, unless they are stuck for want of credits
        // themselves: then the last credit returns ours, so the peer can return its own.
        let stuck = !st.owed.is_empty() && st.credits < 2;
        if (st.outstanding >= hiw && st.owed.is_empty()) || (stuck && st.outstanding > 0) {
            let _ = self.send_locked(st, Body::Noop, true);
        }
    }

    /// Handles a received message of `len` bytes in `slot` (`inv`: the rkey the peer
    /// invalidated with it), and reposts the buffer.
    fn receive(self: &Arc<Self>, slot: &Arc<Completion<RxSlot>>, len: u32, inv: Option<u32>) {
        let mut st = self.st.lock();
        let Some(limits) = self.limits(&st) else {
            drop(st);
            return self.fail("message before the connection parameters");
        };
        // What to do, copied out while the buffer is borrowed.
        enum Todo {
            Nothing,
            Pong(u64),
            PongSeen(u64),
            Serve(Owed),
            PutAck(u64, u64, Regs),
            Verdict(u64, i32),
            Failed(u64, i32),
            PutDone(u64, i32),
            GetDone(u64, i32),
        }
        let decoded = slot.value().buf.with(|b| {
            let b = &b[..(len as usize).min(b.len())];
            wire::decode(b, &limits).map(|m| {
                let todo = match m.body {
                    Body::Noop => Todo::Nothing,
                    Body::Immediate { cookie, payload } if payload == b"ping" => Todo::Pong(cookie),
                    Body::Immediate { cookie, payload } if payload == b"pong" => {
                        Todo::PongSeen(cookie)
                    }
                    Body::Immediate { .. } => Todo::Nothing,
                    Body::PutReq {
                        cookie,
                        size,
                        seed,
                        check,
                    } => Todo::Serve(Owed::Put {
                        cookie,
                        size,
                        seed,
                        check,
                    }),
                    Body::GetReq {
                        cookie,
                        size,
                        seed,
                        check,
                        regs,
                    } => Todo::Serve(Owed::Get {
                        cookie,
                        size,
                        seed,
                        check,
                        regs,
                    }),
                    Body::PutResult { cookie, status } => Todo::Verdict(cookie, status),
                    Body::PutAck {
                        cookie,
                        sink_cookie,
                        regs,
                    } => Todo::PutAck(cookie, sink_cookie, regs),
                    Body::PutNak { cookie, status } => Todo::Failed(cookie, status),
                    Body::Done {
                        get: false,
                        cookie,
                        status,
                    } => Todo::PutDone(cookie, status),
                    Body::Done {
                        get: true,
                        cookie,
                        status,
                    } => Todo::GetDone(cookie, status),
                };
                (m.credits, m.kind(), todo)
            })
        });
        let (credits, kind, todo) = match decoded {
            Ok(d) => d,
            Err(e) => {
                pr_err!(
                    "{} {} {}: invalid message: {}\n",
                    self.iface.addr,
                    self.dir(),
                    self.peer,
                    Show(e)
                );
                self.on(&mut st, Event::Error, "invalid message");
                return;
            }
        };
        st.stats.rx += 1;
        st.last_rx = Instant::now();
        if kind == wire::Type::Noop {
            st.stats.noops_rx += 1;
        }
        st.credits += u32::from(credits);
        let max = u32::from(limits.max_credits);
        if st.credits > max {
            pr_err!(
                "{} {}: peer returned too many credits\n",
                self.iface.addr,
                self.peer
            );
            self.on(&mut st, Event::Error, "too many credits");
            return;
        }
        // Only a message of ours may be invalidated remotely, and only a PUT_DONE does it.
        if inv.is_some() && !matches!(todo, Todo::PutDone(..) | Todo::GetDone(..)) {
            self.on(&mut st, Event::Error, "unexpected remote invalidation");
            return;
        }
        let r = match todo {
            Todo::Nothing => Ok(()),
            Todo::Pong(cookie) => st
                .owed
                .push(Owed::Pong(cookie), GFP_KERNEL)
                .map_err(Into::into),
            Todo::PongSeen(cookie) => {
                // A pong whose ping gave up waiting is dropped.
                let _ = Self::step(&mut st, cookie, Step::Done(None));
                Ok(())
            }
            Todo::Serve(o) => st.owed.push(o, GFP_KERNEL).map_err(Into::into),
            Todo::Verdict(cookie, status) => st
                .xfers
                .iter_mut()
                .find(|x| x.cookie == cookie && x.verdict.is_none())
                .map(|x| {
                    x.verdict = Some(status);
                    x.moved = true;
                })
                .ok_or(EINVAL),
            Todo::PutAck(cookie, sink_cookie, regs) => {
                Self::step(&mut st, cookie, Step::Acked(sink_cookie)).map(|()| {
                    if let Some(x) = st.xfers.iter_mut().find(|x| x.cookie == cookie) {
                        x.regs = regs;
                    }
                })
            }
            Todo::Failed(cookie, status) => Self::step(&mut st, cookie, Step::Failed(status)),
            Todo::GetDone(cookie, 0) => Self::step(&mut st, cookie, Step::Done(inv)),
            Todo::GetDone(cookie, status) => Self::step(&mut st, cookie, Step::Failed(status)),
            Todo::PutDone(sink_cookie, status) => self.sink_done(&mut st, sink_cookie, status, inv),
        };
        if let Err(e) = r {
            pr_err!(
                "{} {}: {:?} handling a {:?}\n",
                self.iface.addr,
                self.peer,
                e,
                kind
            );
            self.on(&mut st, Event::Error, "protocol error");
            return;
        }
        // Repost the buffer: one more credit owed to the peer.
        if let Some(ep) = st.ep.clone() {
            if ep.post_recv(&slot.value().buf, slot).is_ok() {
                st.outstanding += 1;
            }
        }
        self.pump(&mut st);
        self.wake(&mut st);
    }

    /// Moves the transfer `cookie` this side started to `step`; a cookie it does not know
    /// is a protocol error.
    fn step(st: &mut ConnState, cookie: u64, step: Step) -> Result {
        let x = st
            .xfers
            .iter_mut()
            .find(|x| x.cookie == cookie)
            .ok_or(EINVAL)?;
        if !matches!(x.step, Step::Waiting) {
            return Err(EINVAL);
        }
        x.step = step;
        x.moved = true;
        Ok(())
    }

    fn remote_inv(st: &ConnState) -> bool {
        st.params
            .map(|p| p.features & wire::FEATURE_REMOTE_INV != 0)
            .unwrap_or(false)
    }

    /// The sink of a PUT: registers a buffer and answers PUT_ACK with its registrations
    /// (the REG_MRs go first in the same chain). Without MRs or memory it answers PUT_NAK
    /// (`-EAGAIN`: busy, the source retries).
    fn serve_put(&self, st: &mut ConnState, cookie: u64, size: u64, how: SinkCheck) -> Result {
        let res = self.iface.res.clone();
        let sink_cookie = st.next_cookie;
        st.next_cookie += 1;
        let mut regs = KVec::new();
        let access = Access::REMOTE_WRITE.with(Access::LOCAL_WRITE);
        let r = self.iface.serving_region(size as usize).and_then(|region| {
            self.post_locked(
                st,
                false,
                |chain| {
                    region.register(&res, access, chain, &mut regs, None)?;
                    Ok(Some(region::advertise(&regs)?))
                },
                |r| Body::PutAck {
                    cookie,
                    sink_cookie,
                    regs: r.copied().unwrap_or(Regs::new()),
                },
                None,
            )
            .map(|_| region)
        });
        match r {
            Ok(region) => {
                st.sinks.push(
                    Sink {
                        since: Instant::now(),
                        sink_cookie,
                        how,
                        region,
                        regs,
                    },
                    GFP_KERNEL,
                )?;
                Ok(())
            }
            Err(e) => {
                for reg in regs.drain_all() {
                    res.pool.destroy(reg.into_handle());
                }
                st.stats.busy += u64::from(e == EAGAIN);
                let status = e.to_errno();
                self.send_locked(st, Body::PutNak { cookie, status }, false)
            }
        }
    }

    /// The source of a GET: writes a buffer (holding the pattern of `seed` unless `check`
    /// is none) into the requester's registrations, invalidates its own, and answers
    /// GET_DONE with the remote invalidation of the requester's first registration.
    fn serve_get(
        &self,
        st: &mut ConnState,
        cookie: u64,
        size: u64,
        seed: u32,
        check: Check,
        regs: &Regs,
    ) -> Result {
        let res = self.iface.res.clone();
        let mut local = KVec::new();
        let mut inv = KVec::new();
        let remote_inv = Self::remote_inv(st).then(|| regs.as_slice()[0].rkey);
        let r = self.iface.serving_region(size as usize).and_then(|region| {
            region::write_pattern(&region, seed, check)?;
            self.iface.corrupt_hook(&region)?;
            self.post_locked(
                st,
                false,
                |chain| {
                    let (remote, none) = (regs.as_slice(), KVec::new());
                    region::source_chain(&res, &region, remote, none, chain, &mut local, &mut inv)?;
                    Ok(None)
                },
                |_| Body::Done {
                    get: true,
                    cookie,
                    status: 0,
                },
                remote_inv,
            )
            .map(|slot| (slot, region))
        });
        match r {
            Ok((slot, region)) => {
                st.tagged.push(
                    Tagged {
                        slot,
                        what: Finishing::ServedGet(region, inv),
                    },
                    GFP_KERNEL,
                )?;
                Ok(())
            }
            Err(e) => {
                give_up(&res, &mut local, &mut inv);
                st.stats.busy += u64::from(e == EAGAIN);
                let status = e.to_errno();
                self.send_locked(
                    st,
                    Body::Done {
                        get: true,
                        cookie,
                        status,
                    },
                    false,
                )
            }
        }
    }

    /// PUT_DONE at the sink: the registration the source invalidated is dead; the others
    /// are invalidated here (LOCAL_INV, chained before a NOOP) before the data is checked.
    fn sink_done(
        &self,
        st: &mut ConnState,
        sink_cookie: u64,
        status: i32,
        inv: Option<u32>,
    ) -> Result {
        let pos = st
            .sinks
            .iter()
            .position(|s| s.sink_cookie == sink_cookie)
            .ok_or(EINVAL)?;
        let mut sink = st.sinks.remove(pos).map_err(|_| EINVAL)?;
        if status != 0 {
            pr_err!(
                "{} {}: the source failed a PUT: {}\n",
                self.iface.addr,
                self.peer,
                status
            );
        }
        if inv.is_some() {
            st.stats.remote_inv += 1;
        }
        let res = self.iface.res.clone();
        let mut pending = KVec::new();
        let mut regs = core::mem::take(&mut sink.regs);
        let mut chain_r = Ok(());
        if regs.len() > 1 || inv.is_none() || inv != Some(regs[0].rkey()) {
            // LOCAL_INV of what the peer did not invalidate, completed by a NOOP.
            let r = self.post_locked(
                st,
                true,
                |chain| {
                    region::invalidate(&res, &mut regs, inv, chain, &mut pending)?;
                    Ok(None)
                },
                |_| Body::Noop,
                None,
            );
            match r {
                Ok(slot) => {
                    return st
                        .tagged
                        .push(
                            Tagged {
                                slot,
                                what: Finishing::ServedPut(sink.region, pending, sink.how),
                            },
                            GFP_KERNEL,
                        )
                        .map_err(Into::into);
                }
                Err(e) => chain_r = Err(e),
            }
        } else {
            // The only registration was invalidated by the peer.
            region::invalidate(&res, &mut regs, inv, &mut SendChain::empty(), &mut pending)?;
        }
        give_up(&res, &mut regs, &mut pending);
        chain_r?;
        let r = self.check_sink(st, &sink.region, sink.how);
        self.iface.recycle(sink.region);
        r
    }

    /// Checks the data of a PUT this side received (its registrations are dead) and owes
    /// the source the verdict if it asked for a check.
    fn check_sink(&self, st: &mut ConnState, region: &Region, how: SinkCheck) -> Result {
        st.stats.served += 1;
        self.iface.corrupt_hook(region)?;
        let status = match region::verify(region, how.seed, how.check) {
            Ok(None) => 0,
            Ok(Some(off)) => {
                st.stats.corrupt += 1;
                pr_err!(
                    "{} <- {}: PUT data differs from the pattern at byte {}\n",
                    self.iface.addr,
                    self.peer,
                    off
                );
                -(kernel::bindings::EBADMSG as i32)
            }
            Err(e) => e.to_errno(),
        };
        if how.check != Check::None {
            st.owed.push(Owed::Result(how.cookie, status), GFP_KERNEL)?;
        }
        Ok(())
    }

    /// A chain tagged with `slot` completed (`ok`) or failed.
    fn finish(&self, st: &mut ConnState, slot: &Arc<Completion<TxSlot>>, ok: bool) {
        let Some(pos) = st.tagged.iter().position(|t| Arc::ptr_eq(&t.slot, slot)) else {
            return;
        };
        let Ok(t) = st.tagged.remove(pos) else { return };
        let res = self.iface.res.clone();
        let settle = |inv: KVec<FrMr<Invalidating>>| {
            for i in inv {
                if ok {
                    res.pool.put(i.invalidated());
                } else {
                    res.pool.destroy(i.into_handle());
                }
            }
        };
        match t.what {
            Finishing::ServedGet(region, inv) => {
                settle(inv);
                st.stats.served += u64::from(ok);
                self.iface.recycle(region);
            }
            Finishing::ServedPut(region, inv, how) => {
                settle(inv);
                if ok && self.check_sink(st, &region, how).is_err() {
                    self.on(st, Event::Error, "out of memory");
                }
                self.iface.recycle(region);
            }
            Finishing::Mine(cookie, inv) => {
                settle(inv);
                if let Some(x) = st.xfers.iter_mut().find(|x| x.cookie == cookie) {
                    x.step = Step::ChainDone(ok);
                    x.moved = true;
                }
            }
        }
    }

    /// Periodic checks: fails the connection when a transfer waits on the peer longer than
    /// `timeout_ms`, and sends a NOOP after `keepalive` idle seconds (0: never), which
    /// also finds out that a silent peer is gone (the send fails).
    fn tick(&self, keepalive: u32, timeout_ms: u32) {
        let mut st = self.st.lock();
        if st.state != State::Established {
            return;
        }
        let limit = Delta::from_millis(timeout_ms.into());
        let late = st.xfers.iter().any(|x| {
            matches!(x.step, Step::Waiting | Step::Acked(_))
                && x.sent.is_some_and(|t| t.elapsed() > limit)
        }) || st.sinks.iter().any(|s| s.since.elapsed() > limit);
        if late {
            pr_err!(
                "{} {} {}: transfer timed out\n",
                self.iface.addr,
                self.dir(),
                self.peer
            );
            self.on(&mut st, Event::Error, "transfer timed out");
            return;
        }
        if keepalive == 0 {
            return;
        }
        // A live peer sends at least a keepalive every `keepalive` seconds.
        let silent = Delta::from_millis(i64::from(timeout_ms).max(3000 * i64::from(keepalive)));
        if st.last_rx.elapsed() > silent {
            pr_err!(
                "{} {} {}: nothing heard for {} s\n",
                self.iface.addr,
                self.dir(),
                self.peer,
                silent.as_millis() / 1000
            );
            self.on(&mut st, Event::Error, "peer silent");
            return;
        }
        if st.last_tx.elapsed() >= Delta::from_secs(keepalive.into()) {
            let _ = self.send_locked(&mut st, Body::Noop, true);
        }
    }

    /// Starts tracking a transfer this side initiates; returns its cookie.
    fn new_xfer(st: &mut ConnState) -> Result<u64> {
        let cookie = st.next_cookie;
        st.next_cookie += 1;
        let waiter = Arc::pin_init(
            pin_init!(Waiter {
                cv <- new_condvar!("fastreg::Conn::xfer"),
            }),
            GFP_KERNEL,
        )?;
        st.xfers.push(
            Xfer {
                cookie,
                waiter,
                moved: false,
                sent: None,
                step: Step::Waiting,
                verdict: None,
                regs: Regs::new(),
            },
            GFP_KERNEL,
        )?;
        Ok(cookie)
    }

    /// The request of transfer `cookie` went out: its timeout starts.
    fn sent(st: &mut ConnState, cookie: u64) {
        if let Some(x) = st.xfers.iter_mut().find(|x| x.cookie == cookie) {
            x.sent = Some(Instant::now());
        }
    }

    /// Refuses a transfer of `region` that the connection's negotiated limits do not allow
    /// (`EMSGSIZE`), before the peer would have to.
    fn fits(&self, st: &ConnState, region: &Region) -> Result {
        let p = st.params.ok_or_else(not_connected)?;
        let size: u64 = region.lens().iter().sum();
        if size > u64::from(p.max_payload) || region.nmrs() > u32::from(p.max_regs) {
            pr_err!(
                "{} -> {}: a transfer of {} bytes in {} registrations exceeds the connection's \
                 max_payload={} max_regs={}\n",
                self.iface.addr,
                self.peer,
                size,
                region.nmrs(),
                p.max_payload,
                p.max_regs
            );
            return Err(EMSGSIZE);
        }
        Ok(())
    }

    /// Whether the send queue has room for a transfer's chain.
    fn sq_room(&self, st: &ConnState) -> bool {
        let need = st
            .params
            .map(|p| Self::chain_wrs(&self.iface.res, p.max_payload))
            .unwrap_or(1);
        st.ep.as_ref().is_some_and(|ep| ep.sq_room() >= need)
    }

    /// Waits up to `left` until a request can go: two credits, a send slot, room in the
    /// send queue for a transfer, and nothing owed to the peer (answers go first).
    fn wait_room(&self, st: &mut MutexGuard<'_, ConnState>, left: &mut Jiffies) -> Result {
        while st.credits < 2 || st.tx_free.is_empty() || !st.owed.is_empty() || !self.sq_room(st) {
            if st.state != State::Established {
                return Err(not_connected());
            }
            if *left == 0 {
                return Err(ETIMEDOUT);
            }
            if !wait::step(&self.cv, st, left) {
                return Err(ERESTARTSYS);
            }
        }
        Ok(())
    }

    /// Waits up to `left` until transfer `cookie` is as `done` wants it; returns its step
    /// and verdict.
    fn wait_xfer(
        &self,
        st: &mut MutexGuard<'_, ConnState>,
        cookie: u64,
        left: &mut Jiffies,
        done: impl Fn(&Xfer) -> bool,
    ) -> Result<(Step, Option<i32>)> {
        let waiter = st
            .xfers
            .iter()
            .find(|x| x.cookie == cookie)
            .map(|x| x.waiter.clone())
            .ok_or(EINVAL)?;
        loop {
            let x = st.xfers.iter().find(|x| x.cookie == cookie).ok_or(EINVAL)?;
            if done(x) {
                return Ok((x.step, x.verdict));
            }
            if matches!(st.state, State::Closing | State::Closed) {
                return Err(not_connected());
            }
            if *left == 0 {
                pr_err!("{} -> {}: transfer timed out\n", self.iface.addr, self.peer);
                return Err(ETIMEDOUT);
            }
            if !wait::step(&waiter.cv, st, left) {
                return Err(ERESTARTSYS);
            }
        }
    }

    /// Runs `once` (given the milliseconds left) until it succeeds, fails for a reason
    /// other than a busy peer (`EAGAIN`), or `timeout_ms` passed; pauses between tries.
    fn retry_busy(&self, timeout_ms: u32, mut once: impl FnMut(u32) -> Result) -> Result {
        let start = Instant::<Monotonic>::now();
        let mut pause_us = 50i64;
        loop {
            let spent = u32::try_from(start.elapsed().as_millis()).unwrap_or(u32::MAX);
            let left_ms = timeout_ms.saturating_sub(spent);
            match once(left_ms) {
                Err(e) if e == EAGAIN && left_ms > 0 => {
                    self.st.lock().stats.retries += 1;
                    kernel::time::delay::fsleep(Delta::from_micros(pause_us));
                    pause_us = (pause_us * 2).min(5000);
                }
                Err(e) if e == EAGAIN => return Err(ETIMEDOUT),
                r => return r,
            }
        }
    }

    /// PUT: moves `region` to the peer. Unless `check` is none the region is first filled
    /// with the pattern of `seed`, and the peer checks what arrived and reports:
    /// `EBADMSG` means the peer found the data corrupt. Retried while the peer is busy.
    pub(crate) fn put_region(
        &self,
        region: &Region,
        seed: u32,
        check: Check,
        timeout_ms: u32,
    ) -> Result {
        region::write_pattern(region, seed, check)?;
        self.retry_busy(timeout_ms, |ms| {
            self.put_once(region, seed, check, ms).map(|_| ())
        })
    }

    /// One try of a transfer of `region`: takes its MRs first, without the lock (serving
    /// never waits for MRs, so a transfer that holds the peer's MRs must not wait for its
    /// own), then runs `steps` under the lock with a new transfer's cookie, the time left
    /// and those MRs; forgets the transfer and gives back the MRs `steps` did not use.
    fn one_try<T>(
        &self,
        region: &Region,
        ms: u32,
        steps: impl FnOnce(
            &mut MutexGuard<'_, ConnState>,
            &Arc<DevRes>,
            u64,
            &mut Jiffies,
            &mut KVec<FrMr<Free>>,
        ) -> Result<T>,
    ) -> Result<T> {
        let res = self.iface.res.clone();
        let mut free = region.take(&res, res.pool.reserve(), Some(ms))?;
        let mut left = msecs_to_jiffies(ms);
        let mut st = self.st.lock();
        let r = Self::new_xfer(&mut st).and_then(|cookie| {
            let r = steps(&mut st, &res, cookie, &mut left, &mut free);
            st.xfers.retain(|x| x.cookie != cookie);
            r
        });
        drop(st);
        for mr in free.drain_all() {
            res.pool.put_free(mr);
        }
        r
    }

    /// One PUT try; returns the sink's registrations (for the stale rkey test).
    fn put_once(&self, region: &Region, seed: u32, check: Check, ms: u32) -> Result<Regs> {
        self.one_try(region, ms, |st, res, cookie, left, free| {
            self.put_steps(st, res, region, cookie, (seed, check), left, free)
        })
    }

    #[allow(clippy::too_many_arguments)]
    fn put_steps(
        &self,
        st: &mut MutexGuard<'_, ConnState>,
        res: &Arc<DevRes>,
        region: &Region,
        cookie: u64,
        (seed, check): (u32, Check),
        left: &mut Jiffies,
        free: &mut KVec<FrMr<Free>>,
    ) -> Result<Regs> {
        self.fits(st, region)?;
        self.wait_room(st, left)?;
        let size = region.lens().iter().sum();
        let req = Body::PutReq {
            cookie,
            size,
            seed,
            check,
        };
        self.send_locked(st, req, false)?;
        Self::sent(st, cookie);
        let sink_cookie =
            match self.wait_xfer(st, cookie, left, |x| !matches!(x.step, Step::Waiting))? {
                (Step::Acked(s), _) => s,
                (Step::Failed(e), _) => return Err(Error::from_errno(e)),
                _ => return Err(EINVAL),
            };
        let regs = st
            .xfers
            .iter()
            .find(|x| x.cookie == cookie)
            .map(|x| x.regs)
            .ok_or(EINVAL)?;
        self.wait_room(st, left)?;
        let mut local = KVec::new();
        let mut inv = KVec::new();
        let remote_inv = Self::remote_inv(st).then(|| regs.as_slice()[0].rkey);
        let taken = core::mem::take(free);
        let r = self.post_locked(
            st,
            false,
            |chain| {
                let remote = regs.as_slice();
                region::source_chain(res, region, remote, taken, chain, &mut local, &mut inv)?;
                Ok(None)
            },
            |_| Body::Done {
                get: false,
                cookie: sink_cookie,
                status: 0,
            },
            remote_inv,
        );
        match r {
            Ok(slot) => st.tagged.push(
                Tagged {
                    slot,
                    what: Finishing::Mine(cookie, inv),
                },
                GFP_KERNEL,
            )?,
            Err(e) => {
                give_up(res, &mut local, &mut inv);
                return Err(e);
            }
        }
        // Done when the chain completed and, with a check, the sink's verdict is in (in
        // either order: they complete on different queues).
        let (step, verdict) = self.wait_xfer(st, cookie, left, |x| match x.step {
            Step::ChainDone(true) => check == Check::None || x.verdict.is_some(),
            Step::ChainDone(false) | Step::Failed(_) => true,
            _ => false,
        })?;
        match (step, verdict) {
            (Step::ChainDone(true), None | Some(0)) => Ok(regs),
            (Step::ChainDone(true), Some(e)) => Err(Error::from_errno(e)),
            _ => Err(EIO),
        }
    }

    /// Test hook (`fault` command). With `mangle`, sends a GET whose request is corrupted
    /// that way: the peer must refuse it and close the connection, so the GET must fail.
    /// Without, does a PUT and then RDMA-writes with the sink's old rkey: the write must
    /// fail (the key died with the transfer). `Ok` means the peer behaved.
    pub(crate) fn fault(&self, mangle: Option<wire::Mangle>, timeout_ms: u32) -> Result {
        if let Some(m) = mangle {
            self.st.lock().mangle = Some(m);
            return match self.get(0, 4096, timeout_ms) {
                Ok(()) => {
                    pr_err!(
                        "{} -> {}: a corrupted GET_REQ was served\n",
                        self.iface.addr,
                        self.peer
                    );
                    Err(EIO)
                }
                Err(_) => Ok(()),
            };
        }
        let res = self.iface.res.clone();
        let region = Region::new(&res, 0, 4096)?;
        let seed = self.iface.seed();
        region::write_pattern(&region, seed, Check::Full)?;
        let old = self.put_once(&region, seed, Check::Full, timeout_ms)?;
        let mut left = msecs_to_jiffies(timeout_ms);
        let mut st = self.st.lock();
        let cookie = Self::new_xfer(&mut st)?;
        self.wait_room(&mut st, &mut left)?;
        let mut local = KVec::new();
        let mut inv = KVec::new();
        let r = self.post_locked(
            &mut st,
            true,
            |chain| {
                let (remote, none) = (old.as_slice(), KVec::new());
                region::source_chain(&res, &region, remote, none, chain, &mut local, &mut inv)?;
                Ok(None)
            },
            |_| Body::Noop,
            None,
        );
        let slot = match r {
            Ok(slot) => slot,
            Err(e) => {
                give_up(&res, &mut local, &mut inv);
                return Err(e);
            }
        };
        st.tagged.push(
            Tagged {
                slot,
                what: Finishing::Mine(cookie, inv),
            },
            GFP_KERNEL,
        )?;
        let outcome = self.wait_xfer(&mut st, cookie, &mut left, |x| {
            matches!(x.step, Step::ChainDone(_) | Step::Failed(_))
        });
        st.xfers.retain(|x| x.cookie != cookie);
        match outcome {
            Ok((Step::ChainDone(true), _)) => {
                pr_err!(
                    "{} -> {}: an RDMA WRITE with a dead rkey succeeded\n",
                    self.iface.addr,
                    self.peer
                );
                Err(EIO)
            }
            _ => {
                pr_info!(
                    "{} -> {}: the sink's old rkey {:#x} was refused\n",
                    self.iface.addr,
                    self.peer,
                    old.as_slice()[0].rkey
                );
                Ok(())
            }
        }
    }

    /// PUT of `len` bytes at `offset` into the first page of a new buffer, fully checked.
    pub(crate) fn put(&self, offset: usize, len: usize, timeout_ms: u32) -> Result {
        let region = Region::new(&self.iface.res, offset, len)?;
        self.put_region(&region, self.iface.seed(), Check::Full, timeout_ms)
    }

    /// GET of `len` bytes into a new buffer at `offset` into its first page, fully checked.
    pub(crate) fn get(&self, offset: usize, len: usize, timeout_ms: u32) -> Result {
        let region = Region::new(&self.iface.res, offset, len)?;
        self.get_region(&region, self.iface.seed(), Check::Full, timeout_ms)
    }

    /// GET: moves `len(region)` bytes from the peer into `region`. Unless `check` is none
    /// the peer writes the pattern of `seed` and it is checked here: `EBADMSG` means the
    /// data is corrupt. The local registrations are dead before this returns. Retried
    /// while the peer is busy.
    pub(crate) fn get_region(
        &self,
        region: &Region,
        seed: u32,
        check: Check,
        timeout_ms: u32,
    ) -> Result {
        self.retry_busy(timeout_ms, |ms| self.get_once(region, seed, check, ms))?;
        if let Some(off) = region::verify(region, seed, check)? {
            pr_err!(
                "{} -> {}: GET data differs from the pattern at byte {} of {}\n",
                self.iface.addr,
                self.peer,
                off,
                region.buffer().len()
            );
            return Err(Error::from_errno(-(kernel::bindings::EBADMSG as i32)));
        }
        Ok(())
    }

    /// One GET try.
    fn get_once(&self, region: &Region, seed: u32, check: Check, ms: u32) -> Result {
        self.one_try(region, ms, |st, res, cookie, left, free| {
            let mut local = KVec::new();
            let r = self.get_steps(
                st,
                res,
                region,
                cookie,
                (seed, check),
                left,
                &mut local,
                free,
            );
            let inv = r.as_ref().ok().copied().flatten();
            // Whatever happened, the registrations die before the transfer is reported.
            let k = self.kill_mine(st, res, cookie, &mut local, inv, left);
            r.and(k)
        })
    }

    #[allow(clippy::too_many_arguments)]
    fn get_steps(
        &self,
        st: &mut MutexGuard<'_, ConnState>,
        res: &Arc<DevRes>,
        region: &Region,
        cookie: u64,
        (seed, check): (u32, Check),
        left: &mut Jiffies,
        local: &mut KVec<FrMr<Registered>>,
        free: &mut KVec<FrMr<Free>>,
    ) -> Result<Option<u32>> {
        self.fits(st, region)?;
        self.wait_room(st, left)?;
        let size = region.lens().iter().sum();
        let access = Access::REMOTE_WRITE.with(Access::LOCAL_WRITE);
        let taken = core::mem::take(free);
        self.post_locked(
            st,
            false,
            |chain| {
                region.register_taken(res, access, chain, local, taken)?;
                Ok(Some(region::advertise(local)?))
            },
            |r| Body::GetReq {
                cookie,
                size,
                seed,
                check,
                regs: r.copied().unwrap_or(Regs::new()),
            },
            None,
        )?;
        Self::sent(st, cookie);
        match self.wait_xfer(st, cookie, left, |x| !matches!(x.step, Step::Waiting))? {
            (Step::Done(inv), _) => Ok(inv),
            (Step::Failed(e), _) => Err(Error::from_errno(e)),
            _ => Err(EINVAL),
        }
    }

    /// Invalidates the registrations of a transfer this side started (the one the peer
    /// invalidated is already dead) and waits for it; MRs of a dead connection are
    /// destroyed instead.
    fn kill_mine(
        &self,
        st: &mut MutexGuard<'_, ConnState>,
        res: &Arc<DevRes>,
        cookie: u64,
        local: &mut KVec<FrMr<Registered>>,
        inv: Option<u32>,
        left: &mut Jiffies,
    ) -> Result {
        if local.is_empty() {
            return Ok(());
        }
        if inv.is_some() {
            st.stats.remote_inv += 1;
        }
        if local.len() == 1 && inv.is_some_and(|rkey| rkey == local[0].rkey()) {
            let mut none = KVec::new();
            return region::invalidate(res, local, inv, &mut SendChain::empty(), &mut none);
        }
        let mut pending = KVec::new();
        let posted = self.wait_room(st, left).and_then(|()| {
            self.post_locked(
                st,
                true,
                |chain| {
                    region::invalidate(res, local, inv, chain, &mut pending)?;
                    Ok(None)
                },
                |_| Body::Noop,
                None,
            )
        });
        match posted {
            Ok(slot) => {
                if let Some(x) = st.xfers.iter_mut().find(|x| x.cookie == cookie) {
                    x.step = Step::Waiting;
                }
                st.tagged.push(
                    Tagged {
                        slot,
                        what: Finishing::Mine(cookie, pending),
                    },
                    GFP_KERNEL,
                )?;
                match self.wait_xfer(st, cookie, left, |x| {
                    matches!(x.step, Step::ChainDone(_) | Step::Failed(_))
                })? {
                    (Step::ChainDone(true), _) => Ok(()),
                    _ => Err(EIO),
                }
            }
            Err(e) => {
                give_up(res, local, &mut pending);
                Err(e)
            }
        }
    }

    /// IMMEDIATE round trips: returns (round trips, min, avg, max microseconds).
    pub(crate) fn ping(&self, count: u32, timeout_ms: u32) -> Result<(u32, u64, u64, u64)> {
        let (mut min, mut max, mut sum) = (u64::MAX, 0u64, 0u64);
        for _ in 0..count {
            let us = self.ping_once(timeout_ms)?;
            min = min.min(us);
            max = max.max(us);
            sum += us;
        }
        Ok((count, min, sum / u64::from(count.max(1)), max))
    }

    /// One IMMEDIATE round trip; returns its microseconds.
    pub(crate) fn ping_once(&self, timeout_ms: u32) -> Result<u64> {
        let start = Instant::<Monotonic>::now();
        let mut left = msecs_to_jiffies(timeout_ms);
        let mut st = self.st.lock();
        let cookie = Self::new_xfer(&mut st)?;
        let r = self.wait_room(&mut st, &mut left).and_then(|()| {
            let ping = Body::Immediate {
                cookie,
                payload: b"ping",
            };
            self.send_locked(&mut st, ping, false)?;
            Self::sent(&mut st, cookie);
            match self.wait_xfer(&mut st, cookie, &mut left, |x| {
                !matches!(x.step, Step::Waiting)
            })? {
                (Step::Done(_), _) => Ok(()),
                (Step::Failed(e), _) => Err(Error::from_errno(e)),
                _ => Err(EINVAL),
            }
        });
        st.xfers.retain(|x| x.cookie != cookie);
        drop(st);
        r?;
        Ok(start.elapsed().as_micros_ceil() as u64)
    }

    fn write(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let st = self.st.lock();
        write!(
            f,
            "  conn {} {} state={} ",
            self.dir(),
            self.peer,
            st.state.name()
        )?;
        match st.params {
            Some(p) => write!(
                f,
                "queue_depth={} max_payload={} max_regs={} max_msg={} peer_page_size={} features={:#x} ",
                p.queue_depth, p.max_payload, p.max_regs, p.max_msg, p.page_size, p.features
            )?,
            None => f.write_str("queue_depth=- ")?,
        }
        writeln!(
            f,
            "credits={} outstanding={} tx={} rx={} noops_tx={} noops_rx={} wrs={} served={} \
             corrupt={} remote_inv={} busy={} retries={} attempts={} peer_stamp={:#x} reason={}",
            st.credits,
            st.outstanding,
            st.stats.tx,
            st.stats.rx,
            st.stats.noops_tx,
            st.stats.noops_rx,
            st.ep.as_ref().map(|e| e.posted_wrs()).unwrap_or(0),
            st.stats.served,
            st.stats.corrupt,
            st.stats.remote_inv,
            st.stats.busy,
            st.stats.retries,
            st.stats.attempts,
            st.peer_stamp,
            st.reason.unwrap_or("-")
        )
    }
}

impl Handler for TxSlot {
    fn done(this: Arc<Completion<Self>>, wc: &Wc<'_>, mut chain: SendChain) {
        chain.clear();
        let conn = this.value().conn.clone();
        let mut st = conn.st.lock();
        conn.finish(&mut st, &this, wc.ok());
        if !wc.ok() {
            conn.wr_failed(&mut st, wc, "send failed");
            return;
        }
        // Room for every slot was reserved at setup.
        let _ = st.tx_free.push((this, chain), GFP_NOWAIT);
        conn.pump(&mut st);
        conn.wake(&mut st);
    }
}

impl Handler for RxSlot {
    fn done(this: Arc<Completion<Self>>, wc: &Wc<'_>, _chain: SendChain) {
        let conn = this.value().conn.clone();
        if !wc.ok() {
            conn.wr_failed(&mut conn.st.lock(), wc, "receive failed");
            return;
        }
        conn.receive(&this, wc.byte_len(), wc.invalidated_rkey());
    }
}

impl CmHandler for Ctx {
    fn event(ep: ArcBorrow<'_, Endpoint<Self>>, ev: CmEvent<'_>) {
        let Ctx::Conn(conn) = ep.ctx() else { return };
        let mut st = conn.st.lock();
        match ev {
            CmEvent::AddrResolved => {
                if conn_state::next(st.state, Event::AddrResolved).1 == Action::ResolveRoute {
                    st.state = State::ResolvingRoute;
                    if ep.resolve_route(RESOLVE_MS).is_err() {
                        conn.on(&mut st, Event::Failed, "route resolution failed");
                    }
                }
            }
            CmEvent::RouteResolved => {
                if conn_state::next(st.state, Event::RouteResolved).1 != Action::Connect {
                    return;
                }
                st.state = State::Connecting;
                let asked = st.asked;
                drop(st);
                let ep_arc: Arc<Endpoint<Ctx>> = ep.into();
                let r = ep
                    .create_qp(
                        &conn.iface.res.pd,
                        Conn::caps(&conn.iface.res, asked.queue_depth, asked.max_payload),
                    )
                    .and_then(|()| conn.setup(&ep_arc, asked.queue_depth))
                    .and_then(|()| {
                        let private = asked.encode();
                        ep.connect(&ConnParam {
                            private: &private,
                            rd_atomic: 16,
                        })
                    });
                if r.is_err() {
                    conn.fail("connect failed");
                }
            }
            CmEvent::Established(private) => {
                if conn.active {
                    let granted = match ConnParams::decode(private) {
                        Ok(g) if negotiate::check_accept(&st.asked, &g) => g,
                        _ => {
                            pr_err!(
                                "{} -> {}: the accept grants more than asked, or is malformed\n",
                                conn.iface.addr,
                                conn.peer
                            );
                            st.retry = Some(Retry::Fail);
                            conn.on(&mut st, Event::RejectedFinal, "bad accept");
                            return;
                        }
                    };
                    st.params = Some(granted);
                    st.peer_stamp = granted.stamp;
                    st.credits = u32::from(granted.queue_depth) + EXTRA;
                }
                conn.on(&mut st, Event::Established, "");
                if conn.active {
                    // Lock order: the interface's state before a connection's.
                    let stamp = st.peer_stamp;
                    drop(st);
                    conn.iface.close_stale(conn, stamp);
                    st = conn.st.lock();
                }
                pr_info!(
                    "{} {} {}: connected: queue_depth={} max_payload={} max_regs={} sq_depth={}\n",
                    conn.iface.addr,
                    conn.dir(),
                    conn.peer,
                    st.params.map(|p| p.queue_depth).unwrap_or(0),
                    st.params.map(|p| p.max_payload).unwrap_or(0),
                    st.params.map(|p| p.max_regs).unwrap_or(0),
                    ep.caps().map(|c| c.send_wr).unwrap_or(0)
                );
                conn.pump(&mut st);
            }
            CmEvent::Rejected(status, private) => match ConnParams::decode(private) {
                Ok(limits) => {
                    let why = Reason::from_u8(limits.reason);
                    if let Some(r) = why {
                        conn.iface.rejects_received.count(r);
                    }
                    pr_info!(
                        "{} -> {}: rejected ({}); peer limits: queue_depth={} max_payload={} max_regs={}\n",
                        conn.iface.addr,
                        conn.peer,
                        why.map(|r| r.name()).unwrap_or("unknown"),
                        limits.queue_depth,
                        limits.max_payload,
                        limits.max_regs
                    );
                    let retry = negotiate::on_reject(&st.asked, &limits);
                    st.retry = Some(retry);
                    let ev = if matches!(retry, Retry::Fail) {
                        Event::RejectedFinal
                    } else {
                        Event::RejectedRetry
                    };
                    conn.on(&mut st, ev, "rejected by the peer");
                }
                Err(_) => {
                    pr_err!(
                        "{} -> {}: rejected (status {}): no fastreg listener there?\n",
                        conn.iface.addr,
                        conn.peer,
                        status
                    );
                    st.retry = Some(Retry::Fail);
                    conn.on(&mut st, Event::RejectedFinal, "rejected");
                }
            },
            CmEvent::Failed(event, status) => {
                pr_err!(
                    "{} -> {}: {} (status {})\n",
                    conn.iface.addr,
                    conn.peer,
                    verbs::event_name(event).to_str().unwrap_or("?"),
                    status
                );
                st.retry = Some(Retry::Fail);
                // rdma_cm's status is a negative errno for address and route errors.
                st.connect_err = Some(if (-4095..0).contains(&status) {
                    status
                } else {
                    -(kernel::bindings::EHOSTUNREACH as i32)
                });
                conn.on(&mut st, Event::Failed, "unreachable");
            }
            CmEvent::Disconnected => {
                conn.on(&mut st, Event::Disconnected, "disconnected by the peer");
            }
            CmEvent::DeviceRemoval => {
                conn.on(&mut st, Event::DeviceRemoval, "device removed");
            }
            CmEvent::Other(_) => {}
        }
    }

    fn connect_request(ep: ArcBorrow<'_, Endpoint<Self>>, req: ConnRequest<'_, Self>) -> Result {
        let Ctx::Listener(iface) = ep.ctx() else {
            return Err(EINVAL);
        };
        let me = iface.local();
        let peer = req.peer().unwrap_or(SockAddr {
            ip: [0; 4],
            port: 0,
        });
        let asked = ConnParams::decode(req.private());
        let answer = match &asked {
            Ok(asked) => negotiate::answer(asked, &me),
            Err(_) => Answer::Reject(Reason::Malformed, me.params(0, Reason::Malformed as u8)),
        };
        // The interface that connects: the request's source address and listening port.
        let peer_iface = asked.ok().filter(|a| a.port != 0).map(|a| SockAddr {
            ip: peer.ip,
            port: a.port,
        });
        match answer {
            Answer::Reject(why, limits) => {
                iface.rejects_sent.count(why);
                pr_info!("{} <- {}: rejecting: {}\n", iface.addr, peer, why.name());
                let _ = req.reject(&limits.encode());
                Err(EINVAL)
            }
            Answer::Accept(granted) => {
                if iface.st.lock().closed {
                    return Err(ENODEV);
                }
                let conn = Conn::new(iface.clone(), peer, false, peer_iface, granted)?;
                {
                    let mut st = conn.st.lock();
                    st.params = Some(granted);
                    st.peer_stamp = granted.dst_stamp;
                    st.credits = u32::from(granted.queue_depth) + EXTRA;
                    conn.on(&mut st, Event::Accepted, "");
                }
                let private = granted.encode();
                let setup_conn = conn.clone();
                let accepted = req.accept(
                    Ctx::Conn(conn.clone()),
                    &iface.res.pd,
                    Conn::caps(&iface.res, granted.queue_depth, granted.max_payload),
                    &ConnParam {
                        private: &private,
                        rd_atomic: 16,
                    },
                    move |ep| setup_conn.setup(ep, granted.queue_depth),
                );
                match accepted {
                    Ok(ep) => {
                        conn.st.lock().ep = Some(ep);
                        iface.st.lock().conns.push(conn.clone(), GFP_KERNEL)?;
                        iface.close_stale(&conn, granted.dst_stamp);
                        Ok(())
                    }
                    Err(e) => {
                        // The slots refer to the connection: break the cycle.
                        let mut st = conn.st.lock();
                        st.tx_free.clear();
                        st.rx.clear();
                        Err(e)
                    }
                }
            }
        }
    }
}

/// The periodic work of the transport: the interfaces and the module's timing parameters.
pub(crate) struct NetTick {
    /// The interfaces.
    pub(crate) ifaces: Arc<Ifaces>,
    /// Idle seconds before a keepalive (0: none).
    pub(crate) keepalive: u32,
    /// Transfer timeout.
    pub(crate) timeout_ms: u32,
}

impl verbs::Tick for NetTick {
    fn tick(&self) {
        self.ifaces.tick(self.keepalive, self.timeout_ms);
    }
}

/// A copy of a list of references, to work on its items without holding its lock. Under
/// memory pressure the copy may be short: the periodic work catches up at the next tick.
fn snapshot<T>(list: &[Arc<T>]) -> KVec<Arc<T>> {
    let mut v = KVec::with_capacity(list.len(), GFP_KERNEL).unwrap_or_default();
    for x in list {
        if v.push(x.clone(), GFP_KERNEL).is_err() {
            break;
        }
    }
    v
}

/// The interfaces of the module.
#[pin_data]
pub(crate) struct Ifaces {
    #[pin]
    list: Mutex<KVec<Arc<Iface>>>,
}

impl Ifaces {
    /// No interface.
    pub(crate) fn new() -> impl PinInit<Self> {
        pin_init!(Self {
            list <- new_mutex!(KVec::new(), "fastreg::Ifaces::list"),
        })
    }

    /// Adds an interface; refuses a second one on the same address and port.
    pub(crate) fn add(&self, iface: Arc<Iface>) -> Result {
        let mut list = self.list.lock();
        if list.iter().any(|i| i.addr == iface.addr) {
            drop(list);
            iface.shutdown();
            return Err(EEXIST);
        }
        list.push(iface, GFP_KERNEL)?;
        Ok(())
    }

    /// Periodic work: tears down closed connections and runs every connection's checks.
    pub(crate) fn tick(&self, keepalive: u32, timeout_ms: u32) {
        self.reap();
        // The copies are taken in `let` statements so no lock is held while working.
        let ifaces = snapshot(&self.list.lock());
        for i in ifaces.iter() {
            let conns = snapshot(&i.st.lock().conns);
            for c in conns.iter() {
                c.tick(keepalive, timeout_ms);
            }
        }
    }

    /// Tears down the connections of every interface that are closing or closed.
    pub(crate) fn reap(&self) {
        let ifaces = snapshot(&self.list.lock());
        for i in ifaces.iter() {
            i.reap();
        }
    }

    /// The first interface (the default one of the first device, unless removed).
    pub(crate) fn first(&self) -> Option<Arc<Iface>> {
        self.list.lock().first().cloned()
    }

    /// The interface at `ip` (any port).
    pub(crate) fn find(&self, ip: [u8; 4]) -> Option<Arc<Iface>> {
        self.list.lock().iter().find(|i| i.addr.ip == ip).cloned()
    }

    /// Removes the interface at `ip` (and `port`, if given).
    pub(crate) fn del(&self, ip: [u8; 4], port: Option<u16>) -> Result {
        let gone = {
            let mut list = self.list.lock();
            let pos = list
                .iter()
                .position(|i| i.addr.ip == ip && port.is_none_or(|p| p == i.addr.port))
                .ok_or(ENOENT)?;
            list.remove(pos).map_err(|_| ENOENT)?
        };
        gone.shutdown();
        Ok(())
    }

    /// Removes every interface on the device `res` (it is going away).
    pub(crate) fn remove_device(&self, res: &DevRes) {
        let mut gone = KVec::new();
        {
            let mut list = self.list.lock();
            let mut i = 0;
            while i < list.len() {
                if core::ptr::eq(&*list[i].res, res) {
                    if let Ok(x) = list.remove(i) {
                        let _ = gone.push(x, GFP_KERNEL);
                    }
                } else {
                    i += 1;
                }
            }
        }
        for i in gone.iter() {
            i.shutdown();
        }
    }

    /// Writes every interface and connection, for debugfs, then the connections by state.
    pub(crate) fn write(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let list = self.list.lock();
        let mut by_state = [0u32; State::ALL.len()];
        for i in list.iter() {
            i.write(f)?;
            for c in i.st.lock().conns.iter() {
                let s = c.state();
                if let Some(n) = State::ALL.iter().position(|x| *x == s) {
                    by_state[n] += 1;
                }
            }
        }
        f.write_str("connections:")?;
        for (s, n) in State::ALL.iter().zip(by_state) {
            write!(f, " {}={}", s.name(), n)?;
        }
        writeln!(f)?;
        writeln!(f, "totals: wrs_posted={}", verbs::posted_wrs())
    }
}
