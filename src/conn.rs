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
    command::Fault,
    conn_state::{
        self,
        Action,
        Event,
        State, //
    },
    credits,
    device::DevRes,
    frag::Geometry,
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
        Misbehave,
        Msg,
        Regs, //
    },
};

/// Receive buffers and message slots beyond the queue depth (for NOOPs and replies).
const EXTRA: u32 = credits::EXTRA;
/// How long a teardown waits for the device to answer a connect ([`Conn::out_of_connect`]).
const OUT_OF_CONNECT_SECS: i64 = 150;
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
    /// Connections accepted at most.
    pub(crate) max_conns: u32,
    /// Pages per registration of the buffers it serves (0: what the device's MRs map).
    pub(crate) mr_pages: u32,
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
            max_conns: p.max_conns,
            mr_pages: 0,
        }
    }
}

struct IfaceState {
    listener: Option<Arc<Endpoint<Ctx>>>,
    conns: KVec<Arc<Conn>>,
    closed: bool,
    /// Peers a connect attempt is under way to: others asking for them wait for it.
    connecting: KVec<SockAddr>,
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
    /// Connections this interface accepts at most (the `max_conns` parameter).
    max_conns: usize,
    /// How the buffers it registers as the sink of a PUT are cut into registrations.
    geo: Geometry,
    /// Test hook: how the interface misbehaves next, and how many times ([`hooks`]).
    hook: Atomic<u32>,
    hook_left: Atomic<u32>,
    /// Signalled when a connect attempt ends (see [`IfaceState::connecting`]).
    #[pin]
    connected: CondVar,
    /// Buffers (allocated and DMA-mapped) of transfers served, kept for the next ones of
    /// the same size: serving allocates nothing at steady state.
    #[pin]
    spare: Mutex<KVec<Region>>,
    /// Test hook: transfers this interface serves next whose data it corrupts.
    corrupt_next: Atomic<u32>,
    /// Test hook ([`Misbehave::RecordGet`]): the registrations of a GET it served.
    #[pin]
    served_get: Mutex<Option<Regs>>,
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
    /// Every send slot, idle or not (teardown takes back those whose completion the
    /// device lost).
    tx_all: KVec<Arc<Completion<TxSlot>>>,
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
    /// Tickets of the new requests waiting for room, in arrival order, with when each
    /// began to wait; and the next ticket.
    room_q: KVec<(u64, Instant<Monotonic>)>,
    room_next: u64,
    /// PUTs this side is the sink of, registered and waiting for PUT_DONE.
    sinks: KVec<Sink>,
    /// PUTs whose PUT_DONE arrived, waiting for a send slot or room to post the LOCAL_INVs
    /// of their registrations (with the rkey the peer invalidated).
    unkey: KVec<(Sink, Option<u32>)>,
    /// Chains in flight whose completion finishes a transfer step.
    tagged: KVec<Tagged>,
    stats: Stats,
    /// The peer is an interface on the same device: both ends take MRs from one pool.
    same_pool: bool,
    /// The connect request is being sent (`rdma_connect`, on the module's workqueue or in
    /// the CM handler, with this lock released), or on iWARP is out and unanswered. On
    /// siw the first is a blocking TCP connect, for about two minutes when the SYN goes
    /// unanswered; the second lasts until the peer answers the MPA request or siw gives
    /// up. Meanwhile iwcm holds `IWCM_F_CONNECT_WAIT`, and both `rdma_disconnect` and
    /// `rdma_destroy_id` wait for it, uninterruptibly: [`Conn::teardown`] waits for this
    /// to clear first, in short sleeps.
    in_connect: bool,
}

/// What a posted chain sends.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Post {
    /// A message other than a NOOP: it never takes the last credit.
    Msg,
    /// A NOOP, which may take the last credit.
    Noop,
    /// No message, only local work requests (LOCAL_INV): no credit needed or returned.
    Local,
}

/// What a transfer waits for before it posts ([`Conn::wait_room`]).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Room {
    /// A new request: a message's room, and a place among the `queue_depth` transfers of
    /// this side in flight (so the peer never holds more of them than it agreed to).
    Request,
    /// A message of a transfer in flight: two credits, a send slot, room in the send queue
    /// for a transfer, and nothing owed to the peer (answers go first).
    Message,
    /// A chain of that many local work requests (LOCAL_INVs): a send slot and room.
    Local(usize),
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
    /// The LOCAL_INVs of this side's registrations are posted: no message from the peer
    /// moves the transfer any more (a second DONE is a protocol violation).
    Invalidating,
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

/// What a transfer this side started is: the answers it may get depend on it.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Ping,
    Put,
    Get,
}

struct Xfer {
    cookie: u64,
    kind: Kind,
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
    /// Bytes of the transfer (set when the request goes out).
    size: u64,
    /// GET: the rkey the peer may invalidate remotely (the first one advertised).
    inv_rkey: Option<u32>,
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
    /// A buffer of `size` bytes (at offset 0) to serve a transfer with, registered in
    /// pieces of `geo`: an idle one of that size and cut, else a new one.
    fn serving_region(&self, size: usize, geo: Geometry) -> Result<Region> {
        let mut spare = self.spare.lock();
        let fits = |r: &Region| r.buffer().len() == size && r.pages() == geo.max_pages();
        if let Some(i) = spare.iter().rposition(fits) {
            if let Ok(r) = spare.remove(i) {
                return Ok(r);
            }
        }
        drop(spare);
        Region::new_in(&self.res, 0, size, geo)
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

    /// Test hook (`misbehave IFACE HOW N`): the next `n` times the interface is in the
    /// role of `how`, it misbehaves that way towards its peer.
    pub(crate) fn misbehave(&self, how: Misbehave, n: u32) {
        self.hook_left.store(0, Relaxed);
        self.hook.store(how as u32, Relaxed);
        self.hook_left.store(n, Relaxed);
    }

    /// Whether the interface is armed to misbehave `how` (without consuming it).
    fn armed(&self, how: Misbehave) -> bool {
        self.hook.load(Relaxed) == how as u32 && self.hook_left.load(Relaxed) > 0
    }

    /// Whether the interface misbehaves `how` now (consumes one of the armed times).
    fn hook(&self, how: Misbehave) -> bool {
        if self.hook.load(Relaxed) != how as u32 {
            return false;
        }
        let mut n = self.hook_left.load(Relaxed);
        while n > 0 {
            match self.hook_left.cmpxchg(n, n - 1, Relaxed) {
                Ok(_) => {
                    pr_info!("{}: test hook: misbehaving ({})\n", self.addr, how.name());
                    return true;
                }
                Err(now) => n = now,
            }
        }
        false
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
                    return region.with_cpu(|b| b.flip(len / 2));
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
        let stamp = res.new_stamp();
        let geo = match tun.mr_pages {
            0 => res.geo,
            n => res.geo.at_most(n),
        };
        let iface = Arc::pin_init(
            pin_init!(Self {
                res,
                addr,
                tun,
                stamp,
                timeout_ms,
                rejects_sent: RejectCounts::new(),
                rejects_received: RejectCounts::new(),
                seeds: Atomic::new(0),
                max_conns: tun.max_conns as usize,
                geo,
                hook: Atomic::new(0),
                hook_left: Atomic::new(0),
                connected <- new_condvar!("fastreg::Iface::connected"),
                spare <- new_mutex!(KVec::new(), "fastreg::Iface::spare"),
                corrupt_next: Atomic::new(0),
                served_get <- new_mutex!(None, "fastreg::Iface::served_get"),
                st <- new_mutex!(IfaceState {
                    listener: None,
                    conns: KVec::new(),
                    closed: false,
                    connecting: KVec::new(),
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
        self.connected.notify_all();
        // The listener first: no new connection while the others go.
        drop(listener);
        for c in conns.into_iter() {
            c.teardown_soon("interface removed");
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
            // Room first: a connection leaves the list only to be torn down. Without
            // memory, the next round reaps it.
            if dead.reserve(st.conns.len(), GFP_KERNEL).is_err() {
                return;
            }
            let mut i = 0;
            while i < st.conns.len() {
                let closed = matches!(st.conns[i].state(), State::Closing | State::Closed);
                if closed {
                    if let Ok(c) = st.conns.remove(i) {
                        // Within the capacity reserved above.
                        let _ = dead.push(c, GFP_NOWAIT);
                    }
                } else {
                    i += 1;
                }
            }
            dead
        };
        for c in dead.into_iter() {
            c.teardown_soon("closed");
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
        self.reap();
        // One connect attempt per peer at a time: threads asking for the same peer share
        // its outcome, while attempts to other peers go on (a dead peer delays no other).
        {
            let mut st = self.st.lock();
            while st.connecting.contains(&peer) && !st.closed {
                if self.connected.wait_interruptible(&mut st) {
                    return Err(ERESTARTSYS);
                }
            }
            if let Some(c) = Self::established_in(&st, peer)? {
                return Ok(c);
            }
            if let Some(f) = st.failed.iter().find(|f| f.peer == peer) {
                let wait = Delta::from_millis(conn_state::backoff_ms(f.n - 1).into());
                if f.at.elapsed() < wait {
                    return Err(f.err);
                }
            }
            st.connecting.push(peer, GFP_KERNEL)?;
        }
        let r = self.connect_new(peer);
        let mut st = self.st.lock();
        st.connecting.retain(|p| *p != peer);
        self.connected.notify_all();
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
            {
                // Checked in the same lock section as the push: a connection never lands
                // in the list of an interface that has shut down.
                let mut st = self.st.lock();
                if st.closed {
                    return Err(ENODEV);
                }
                st.conns.push(conn.clone(), GFP_KERNEL)?;
            }
            let r = conn.start_active();
            let outcome = match r {
                Ok(()) => conn.wait_connected(),
                Err(e) => Err(e),
            };
            if outcome.is_ok() {
                return Ok(conn);
            }
            let retry = conn.st.lock().retry.take();
            if self.forget(&conn) {
                conn.teardown_soon("connect failed");
            }
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
        Self::established_in(&self.st.lock(), peer)
    }

    /// [`Iface::established`] with the interface's state locked.
    fn established_in(st: &IfaceState, peer: SockAddr) -> Result<Option<Arc<Conn>>> {
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

    /// Connections of the interface that it accepted (and has not reaped yet).
    fn accepted(&self, st: &IfaceState) -> usize {
        st.conns.iter().filter(|c| !c.active).count()
    }

    /// Whether the interface was shut down.
    pub(crate) fn is_closed(&self) -> bool {
        self.st.lock().closed
    }

    /// Its device's resources.
    pub(crate) fn res(&self) -> &Arc<DevRes> {
        &self.res
    }

    /// Takes `conn` out of the list; returns whether it was there. Whoever takes a
    /// connection out tears it down (a shutdown may have taken it first).
    fn forget(&self, conn: &Arc<Conn>) -> bool {
        let mut st = self.st.lock();
        let before = st.conns.len();
        st.conns.retain(|c| !Arc::ptr_eq(c, conn));
        st.conns.len() != before
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
        if self.forget(&c) {
            c.teardown_soon("closed by request");
        }
        Ok(())
    }

    /// Writes the interface and its connections, for debugfs.
    pub(crate) fn write(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let st = self.st.lock();
        write!(
            f,
            "iface {} {} queue_depth={} max_payload={} max_regs={} mr_pages={} stamp={:#x} \
             rejects_sent=",
            self.res.name(),
            self.addr,
            self.tun.queue_depth,
            self.tun.max_payload,
            self.tun.max_regs,
            self.geo.max_pages(),
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
                    tx_all: KVec::new(),
                    rx: KVec::new(),
                    owed: KVec::new(),
                    next_cookie: 1,
                    last_tx: Instant::now(),
                    last_rx: Instant::now(),
                    mangle: None,
                    xfers: KVec::new(),
                    room_q: KVec::new(),
                    room_next: 0,
                    sinks: KVec::new(),
                    unkey: KVec::new(),
                    tagged: KVec::new(),
                    stats: Stats::default(),
                    same_pool: false,
                    in_connect: false,
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

    /// Most work requests one transfer's chain takes on a connection of `max_payload` and
    /// `max_regs` on `res`: this side's MRs, and RDMA work requests up to the pieces between
    /// them and the peer's registrations, however many of those it needs (up to the
    /// negotiated `max_regs`; see [`crate::budget`]).
    fn chain_wrs(res: &DevRes, max_payload: u32, max_regs: u16) -> u32 {
        let local = res.geo.max_mrs_for(max_payload.into());
        crate::budget::per_transfer_with(local, max_regs.into()).total()
    }

    /// Queue sizes for `qd` transfers of up to `max_payload` bytes in up to `max_regs`
    /// registrations: the send queue holds `qd` transfers' chains and the reserved
    /// messages ([`crate::budget::sq_depth`]).
    fn caps(res: &DevRes, qd: u16, max_payload: u32, max_regs: u16) -> QpCaps {
        let slots = u32::from(qd) + EXTRA;
        let chain = Self::chain_wrs(res, max_payload, max_regs);
        QpCaps {
            send_wr: crate::budget::sq_depth(qd.into(), chain).unwrap_or(u32::MAX),
            recv_wr: slots + 1,
            send_sge: 1,
            recv_sge: 1,
        }
    }

    /// Allocates message slots and buffers for queue depth `qd`, and posts the receives.
    /// Everything the completion path may keep per transfer is reserved here.
    fn setup(self: &Arc<Self>, st: &mut ConnState, ep: &Endpoint<Ctx>, qd: u16) -> Result {
        let slots = (u32::from(qd) + EXTRA) as usize;
        let pd = &self.iface.res.pd;
        let mut tx = KVec::with_capacity(slots, GFP_KERNEL)?;
        let mut tx_all = KVec::with_capacity(slots, GFP_KERNEL)?;
        let mut rx = KVec::with_capacity(slots, GFP_KERNEL)?;
        for _ in 0..slots {
            let slot = Completion::new(TxSlot {
                conn: self.clone(),
                buf: MsgBuf::new(pd, wire::MAX_MSG as usize)?,
            })?;
            tx_all.push(slot.clone(), GFP_KERNEL)?;
            tx.push((slot, SendChain::with_capacity(1, 1)?), GFP_KERNEL)?;
            rx.push(
                Completion::new(RxSlot {
                    conn: self.clone(),
                    buf: MsgBuf::new(pd, wire::MAX_MSG as usize)?,
                })?,
                GFP_KERNEL,
            )?;
        }
        st.owed.reserve(slots, GFP_KERNEL)?;
        st.sinks.reserve(slots, GFP_KERNEL)?;
        st.unkey.reserve(slots, GFP_KERNEL)?;
        st.tagged.reserve(slots, GFP_KERNEL)?;
        // The slots refer to the connection: teardown breaks the cycle, and finds them here
        // whatever happens next.
        st.tx_free = tx;
        st.tx_all = tx_all;
        st.rx = rx;
        for r in st.rx.iter() {
            ep.post_recv(&r.value().buf, r)?;
        }
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
            // An established connection is disconnected here, so that everything posted
            // flushes and the peer hears of it at once; the owner drains and frees later,
            // outside handlers. Before that there is nothing to break, and on iWARP
            // `rdma_disconnect` would wait for the connect or accept still in progress,
            // whose end runs the CM handler, which needs this lock: a flush completion
            // that failed a connecting connection deadlocked siw that way. Its teardown
            // disconnects, with no lock held.
            if st.state == State::Established {
                if let Some(ep) = &st.ep {
                    ep.disconnect();
                }
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
    ///
    /// A flush while an active connection is still connecting is the CM's doing (siw
    /// moves the QP to the error state on a reject before it reports the reject): the CM
    /// event that follows decides, so that a reject with lower limits is retried, and
    /// [`Conn::wait_connected`] bounds the wait.
    fn wr_failed(&self, st: &mut ConnState, wc: &Wc<'_>, reason: &'static str) {
        if matches!(st.state, State::Closing | State::Closed) {
            return;
        }
        if wc.flushed() && self.active && st.state == State::Connecting {
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

    /// [`Conn::teardown`], now; or on the module's workqueue while its connect request is
    /// out ([`ConnState::in_connect`]; on siw for minutes), so that the caller is not held.
    /// The device's removal waits for it (`DevRes::wait_background`).
    fn teardown_soon(self: Arc<Self>, reason: &'static str) {
        // Closed in the same lock section as the check: once closing, no connect starts.
        let pending = {
            let mut st = self.st.lock();
            self.on(&mut st, Event::Close, reason);
            st.in_connect
        };
        let conn = self.clone();
        if pending && self.iface.res.spawn(move || conn.teardown(reason)) {
            pr_info!(
                "{} {} {}: the device is still connecting: torn down in the background\n",
                self.iface.addr,
                self.dir(),
                self.peer
            );
            return;
        }
        self.teardown(reason);
    }

    /// Sends the connect request (see the [`CmEvent::RouteResolved`] handler), on the
    /// module's workqueue, unless a teardown came first.
    fn connect_work(self: Arc<Self>, ep: Arc<Endpoint<Ctx>>, private: [u8; wire::CONN_LEN]) {
        let go = self.st.lock().state == State::Connecting;
        let iwarp = Self::is_iwarp(&ep);
        let r = if go {
            // SAFETY: Not in the id's handler (on the module's workqueue), and nothing
            // disconnects or closes the endpoint meanwhile: `in_connect` is set, and only
            // an established connection is disconnected outside teardown (`Conn::on`),
            // while teardown waits for `in_connect` to clear.
            unsafe {
                ep.connect_unlocked(&ConnParam {
                    private: &private,
                    rd_atomic: 16,
                })
            }
        } else {
            Ok(())
        };
        // Before `in_connect` clears: the teardown that waits for it destroys the endpoint,
        // and must hold its last reference.
        drop(ep);
        let mut st = self.st.lock();
        // On iWARP a request that went out is over with its answer (an established,
        // rejected or failed event), which may have come already.
        if !(go && r.is_ok() && iwarp) {
            st.in_connect = false;
        }
        if let Err(e) = r {
            st.connect_err = Some(e.to_errno());
            self.on(&mut st, Event::Error, "connect failed");
        }
    }

    /// Whether `ep` is on an iWARP device.
    fn is_iwarp(ep: &Endpoint<Ctx>) -> bool {
        ep.device().is_some_and(|d| d.is_iwarp())
    }

    /// Waits, with the lock released meanwhile, until `in_connect` clears:
    /// `rdma_disconnect` must not run beside `rdma_connect` (on iWARP, rdma_cm frees the
    /// `iw_cm_id` of a failed connect without a lock that `rdma_disconnect` takes), and on
    /// iWARP both it and `rdma_destroy_id` would wait for the answer uninterruptibly.
    fn out_of_connect<'a>(
        &'a self,
        mut st: MutexGuard<'a, ConnState>,
    ) -> MutexGuard<'a, ConnState> {
        let start = Instant::<Monotonic>::now();
        while st.in_connect {
            // Bounded: a device that never answers is left to iwcm's own wait (after TCP's
            // SYN timeout, about 127 s, siw has given up on any connect it started).
            if start.elapsed() >= Delta::from_secs(OUT_OF_CONNECT_SECS) {
                pr_warn!(
                    "{} {} {}: no answer to the connect after {} s: tearing down anyway\n",
                    self.iface.addr,
                    self.dir(),
                    self.peer,
                    OUT_OF_CONNECT_SECS
                );
                break;
            }
            drop(st);
            // Short sleeps rather than a condition variable: uninterruptible, so that no
            // signal cuts the wait short, without looking like a hung task.
            kernel::time::delay::fsleep(Delta::from_millis(20));
            st = self.st.lock();
        }
        st
    }

    /// Disconnects, drains, and frees the endpoint and the buffers. Process context only.
    fn teardown(&self, reason: &'static str) {
        let ep = {
            let mut st = self.st.lock();
            self.on(&mut st, Event::Close, reason);
            let mut st = self.out_of_connect(st);
            st.ep.take()
        };
        // Every posted work request completes (flushed) before `close` returns, unless the
        // device lost its completion; those are taken back once the QP is gone.
        let gone = ep.and_then(|ep| {
            ep.close();
            Endpoint::destroy(ep)
        });
        let mut st = self.st.lock();
        if let Some(gone) = gone {
            self.reclaim_lost(&st, &gone);
        }
        Self::drop_slots(&mut st);
        st.owed.clear();
        // Everything in flight has completed or flushed: MRs whose keys may still be valid
        // are destroyed, never reused; transfers waiting on the peer fail.
        let res = self.iface.res.clone();
        let unkeyed = core::mem::take(&mut st.unkey);
        for s in st.sinks.drain_all() {
            for r in s.regs {
                res.pool.destroy(r.into_handle());
            }
        }
        for (s, _) in unkeyed {
            for r in s.regs {
                res.pool.destroy(r.into_handle());
            }
        }
        let tagged = core::mem::take(&mut st.tagged);
        for t in tagged {
            let inv = match t.what {
                Finishing::ServedGet(_, inv) | Finishing::ServedPut(_, inv, _) => inv,
                Finishing::Mine(cookie, inv) => {
                    // A chain whose completion never came: its transfer's MRs are
                    // destroyed, and it is told so.
                    if let Some(x) = st.xfers.iter_mut().find(|x| x.cookie == cookie) {
                        x.step = Step::ChainDone(false);
                    }
                    inv
                }
            };
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

    /// Drops the message slots: they refer to the connection, which breaks the cycle.
    fn drop_slots(st: &mut ConnState) {
        st.tx_free.clear();
        st.tx_all.clear();
        st.rx.clear();
    }

    /// Takes back the slots whose completion the device lost (see
    /// [`Completion::reclaim_lost`]), now that the endpoint is destroyed (`gone`).
    fn reclaim_lost(&self, st: &ConnState, gone: &verbs::QpGone) {
        let mut lost = 0u32;
        for s in st.tx_all.iter() {
            // SAFETY: A connection's send slots are posted only on its endpoint, the one
            // `gone` proves destroyed (teardown took it from `st.ep`, the only place).
            lost += u32::from(unsafe { Completion::reclaim_lost(s, gone) });
        }
        for s in st.rx.iter() {
            // SAFETY: As above, for its receive slots.
            lost += u32::from(unsafe { Completion::reclaim_lost(s, gone) });
        }
        if lost > 0 {
            pr_warn!(
                "{} {} {}: the device lost {} completion(s) after the drain: taken back\n",
                self.iface.addr,
                self.dir(),
                self.peer,
                lost
            );
        }
    }

    fn limits(&self, st: &ConnState) -> Option<Limits> {
        let p = st.params?;
        Some(Limits {
            max_msg: p.max_msg,
            max_payload: p.max_payload,
            max_regs: p.max_regs,
            max_credits: credits::limit(p.queue_depth),
            checksum: false,
            local_stamp: self.iface.stamp,
            peer_stamp: st.peer_stamp,
        })
    }

    /// Sends a message; `noop` may take the last credit. `EAGAIN` when no credit or slot.
    fn send_locked(&self, st: &mut ConnState, body: Body<'_>, noop: bool) -> Result {
        let kind = if noop { Post::Noop } else { Post::Msg };
        self.post_locked(st, kind, |_| Ok(None), |_| body, None)
            .map(|_| ())
    }

    /// Posts one chain: the work requests `pre` appends (REG_MR, RDMA, LOCAL_INV), then
    /// (unless `kind` is [`Post::Local`]) the message `body` makes (from the registrations
    /// `pre` may return), sent with invalidation of `invalidate` at the peer if given.
    /// Returns the send slot, whose completion is the chain's. On failure nothing was
    /// posted. Messages are encoded within the negotiated `max_msg`.
    fn post_locked<'a>(
        &self,
        st: &mut ConnState,
        kind: Post,
        pre: impl FnOnce(&mut SendChain) -> Result<Option<Regs>>,
        body: impl FnOnce(Option<&Regs>) -> Body<'a>,
        invalidate: Option<u32>,
    ) -> Result<Arc<Completion<TxSlot>>> {
        if st.state != State::Established
            && !(st.state == State::PassiveWait && st.params.is_some())
        {
            return Err(not_connected());
        }
        let need = match kind {
            Post::Msg => 2,
            Post::Noop => 1,
            Post::Local => 0,
        };
        if st.credits < need {
            return Err(EAGAIN);
        }
        // Dropped before the lock is released, so never the last reference (teardown takes
        // the connection's under the lock).
        let ep = st.ep.clone().ok_or_else(not_connected)?;
        let (slot, mut chain) = st.tx_free.pop().ok_or(EAGAIN)?;
        let local = kind == Post::Local;
        let returned = if local { 0 } else { st.outstanding.min(255) };
        chain.clear();
        let buf = &slot.value().buf;
        let max_msg = st.params.map_or(wire::MIN_MSG, |p| p.max_msg) as usize;
        let mangle = if local { None } else { st.mangle.take() };
        let built = pre(&mut chain).and_then(|regs| {
            if local {
                return Ok(());
            }
            let msg = Msg {
                credits: returned as u8,
                src_stamp: self.iface.stamp,
                dst_stamp: st.peer_stamp,
                body: body(regs.as_ref()),
            };
            let n = buf
                .with(|b| {
                    let end = max_msg.min(b.len());
                    let b = &mut b[..end];
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
            Ok(()) if local => Ok(slot),
            Ok(()) => {
                st.credits -= 1;
                st.outstanding -= returned;
                st.stats.tx += 1;
                st.last_tx = Instant::now();
                if kind == Post::Noop {
                    st.stats.noops_tx += 1;
                }
                Ok(slot)
            }
            Err((e, chain)) => {
                match chain {
                    Some(mut chain) => {
                        chain.clear();
                        st.tx_free.push((slot, chain), GFP_NOWAIT)?;
                    }
                    // The device took part of the chain: the state of its MRs is unknown
                    // until the QP is drained.
                    None => {
                        self.on(st, Event::Error, "the device took part of a chain");
                    }
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
        // Sinks whose data is in go first: their keys must die before anything else.
        while let Some((sink, _)) = st.unkey.first() {
            if !self.local_room(st, sink.regs.len()) {
                break;
            }
            let Ok((sink, inv)) = st.unkey.remove(0) else {
                break;
            };
            if let Err(why) = self.unkey(st, sink, inv) {
                self.violation(st, why);
                return;
            }
        }
        while st.unkey.is_empty()
            && !st.owed.is_empty()
            && st.credits >= 2
            && !st.tx_free.is_empty()
            && self.sq_room(st)
        {
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
        if credits::noop_now(
            p.queue_depth,
            st.credits,
            st.outstanding,
            !st.owed.is_empty(),
        ) {
            let _ = self.send_locked(st, Body::Noop, true);
        }
    }

    /// Handles a received message of `len` bytes in `slot` (`inv`: the rkey the peer
    /// invalidated with it), and reposts the buffer.
    fn receive(self: &Arc<Self>, slot: &Arc<Completion<RxSlot>>, len: u32, inv: Option<u32>) {
        let mut st = self.st.lock();
        // A connection going down acts on nothing more (its transfers were failed).
        if matches!(st.state, State::Closing | State::Closed) {
            return;
        }
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
                    Body::PutResult { cookie, status } => {
                        Todo::Verdict(cookie, wire::remote_error(status))
                    }
                    Body::PutAck {
                        cookie,
                        sink_cookie,
                        regs,
                    } => Todo::PutAck(cookie, sink_cookie, regs),
                    Body::PutNak { cookie, status } => {
                        Todo::Failed(cookie, wire::remote_error(status))
                    }
                    Body::Done {
                        get: false,
                        cookie,
                        status,
                    } => Todo::PutDone(cookie, status),
                    Body::Done {
                        get: true,
                        cookie,
                        status,
                    } => Todo::GetDone(cookie, wire::remote_error(status)),
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
        let max = limits.max_credits;
        if st.credits > max {
            pr_err!(
                "{} {}: peer returned too many credits\n",
                self.iface.addr,
                self.peer
            );
            self.on(&mut st, Event::Error, "too many credits");
            return;
        }
        // Only a DONE may invalidate remotely, and only when that was negotiated.
        if inv.is_some() {
            if !matches!(todo, Todo::PutDone(..) | Todo::GetDone(..)) {
                return self.violation(
                    &mut st,
                    "remote invalidation with a message other than DONE",
                );
            }
            if !Self::remote_inv(&st) {
                return self.violation(&mut st, "bogus remote invalidation: not negotiated");
            }
        }
        let r: core::result::Result<(), &'static str> = match todo {
            Todo::Nothing => Ok(()),
            Todo::Pong(cookie) => self.peer_request(&mut st, Owed::Pong(cookie)),
            Todo::PongSeen(cookie) => Self::step(&mut st, cookie, Kind::Ping, Step::Done(None)),
            Todo::Serve(o) => self.peer_request(&mut st, o),
            Todo::Verdict(cookie, status) => st
                .xfers
                .iter_mut()
                .find(|x| {
                    x.cookie == cookie
                        && x.kind == Kind::Put
                        && x.verdict.is_none()
                        && x.sent.is_some()
                })
                .map(|x| {
                    x.verdict = Some(status);
                    x.moved = true;
                })
                .ok_or("PUT_RESULT for an unknown transfer"),
            Todo::PutAck(cookie, sink_cookie, regs) => {
                // The sink's registrations must cover exactly what the PUT asked for,
                // each one its own, or the source would write short or twice.
                let size = st.xfers.iter().find(|x| x.cookie == cookie).map(|x| x.size);
                match size {
                    Some(size) if wire::regs_cover(&regs, size) => {
                        Self::step(&mut st, cookie, Kind::Put, Step::Acked(sink_cookie)).map(|()| {
                            if let Some(x) = st.xfers.iter_mut().find(|x| x.cookie == cookie) {
                                x.regs = regs;
                            }
                        })
                    }
                    Some(_) => Err("PUT_ACK registrations do not cover the PUT exactly"),
                    None => Err("PUT_ACK for an unknown transfer"),
                }
            }
            Todo::Failed(cookie, status) => {
                Self::step(&mut st, cookie, Kind::Put, Step::Failed(status))
            }
            Todo::GetDone(cookie, 0) => {
                let expected = st
                    .xfers
                    .iter()
                    .find(|x| x.cookie == cookie)
                    .map(|x| x.inv_rkey);
                match expected {
                    Some(want) if inv.is_some() && inv != want => {
                        Err("bogus remote invalidation: not the transfer's rkey")
                    }
                    _ => Self::step(&mut st, cookie, Kind::Get, Step::Done(inv)),
                }
            }
            Todo::GetDone(cookie, status) if inv.is_none() => {
                Self::step(&mut st, cookie, Kind::Get, Step::Failed(status))
            }
            Todo::GetDone(..) => Err("bogus remote invalidation: a failed GET"),
            Todo::PutDone(sink_cookie, status) => self.sink_done(&mut st, sink_cookie, status, inv),
        };
        if let Err(why) = r {
            pr_err!(
                "{} {} {}: bad {:?}\n",
                self.iface.addr,
                self.dir(),
                self.peer,
                kind
            );
            return self.violation(&mut st, why);
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

    /// Moves the transfer `cookie` this side started to `step`; a cookie it does not know,
    /// or one whose request is not waiting for the peer, is a protocol violation.
    fn step(
        st: &mut ConnState,
        cookie: u64,
        kind: Kind,
        step: Step,
    ) -> core::result::Result<(), &'static str> {
        let x = st
            .xfers
            .iter_mut()
            .find(|x| x.cookie == cookie && x.sent.is_some())
            .ok_or("answer for an unknown transfer")?;
        if x.kind != kind {
            return Err("answer of another kind of transfer");
        }
        if !matches!(x.step, Step::Waiting) {
            return Err("second answer for a transfer");
        }
        x.step = step;
        x.moved = true;
        Ok(())
    }

    /// The peer broke the protocol: logs why and fails the connection (only this one).
    fn violation(&self, st: &mut ConnState, why: &'static str) {
        pr_err!(
            "{} {} {}: protocol violation: {}\n",
            self.iface.addr,
            self.dir(),
            self.peer,
            why
        );
        self.on(st, Event::Error, why);
    }

    /// A request of the peer (ping, PUT, GET) to answer. The peer has at most
    /// `queue_depth` transfers in flight, so the requests not yet answered and the PUTs
    /// registered for it stay within that: a peer that exceeds it is closed.
    fn peer_request(&self, st: &mut ConnState, o: Owed) -> core::result::Result<(), &'static str> {
        let depth = st.params.map_or(0, |p| usize::from(p.queue_depth));
        if st.owed.len() + st.sinks.len() >= depth {
            return Err("more transfers in flight than the queue depth");
        }
        if let Owed::Get { size, regs, .. } = &o {
            if !wire::regs_cover(regs, *size) {
                return Err("GET_REQ registrations advertise an rkey twice");
            }
        }
        // Within the room reserved at setup: no allocation here.
        st.owed.push(o, GFP_NOWAIT).map_err(|_| "out of memory")
    }

    /// Posts the LOCAL_INVs of `regs` but the one whose rkey the peer invalidated (`inv`),
    /// in a chain of their own (no message, so no credit); the MRs go to `pending`. On
    /// failure nothing was posted.
    fn post_invalidate(
        &self,
        st: &mut ConnState,
        res: &DevRes,
        regs: &mut KVec<FrMr<Registered>>,
        inv: Option<u32>,
        pending: &mut KVec<FrMr<Invalidating>>,
    ) -> Result<Arc<Completion<TxSlot>>> {
        self.post_locked(
            st,
            Post::Local,
            |chain| {
                region::invalidate(res, regs, inv, chain, pending)?;
                Ok(None)
            },
            |_| Body::Noop,
            None,
        )
    }

    /// Whether a chain of `n` local work requests (no message) can be posted now.
    fn local_room(&self, st: &ConnState, n: usize) -> bool {
        let n = u32::try_from(n).unwrap_or(u32::MAX);
        !st.tx_free.is_empty() && st.ep.as_ref().is_some_and(|ep| ep.sq_room() >= n)
    }

    fn remote_inv(st: &ConnState) -> bool {
        st.params
            .map(|p| p.features & wire::FEATURE_REMOTE_INV != 0)
            .unwrap_or(false)
    }

    /// The sink of a PUT: registers a buffer and answers PUT_ACK with its registrations
    /// (the REG_MRs go first in the same chain). Without MRs or memory it answers PUT_NAK
    /// (`-EAGAIN`: busy, the source retries); a buffer this device would split into more
    /// registrations than negotiated is refused with `-EMSGSIZE`.
    fn serve_put(&self, st: &mut ConnState, cookie: u64, size: u64, how: SinkCheck) -> Result {
        let res = self.iface.res.clone();
        let sink_cookie = st.next_cookie;
        st.next_cookie += 1;
        let max_regs = st.params.map_or(0, |p| u32::from(p.max_regs));
        let short = self.iface.hook(Misbehave::Short);
        let mut regs = KVec::new();
        let access = Access::REMOTE_WRITE.with(Access::LOCAL_WRITE);
        let r = st.sinks.reserve(1, GFP_NOWAIT).map_err(Error::from);
        let r = r
            // A sink's buffer is cut as the interface says (`mr_pages`).
            .and_then(|()| self.iface.serving_region(size as usize, self.iface.geo))
            .and_then(|region| {
                if region.nmrs() > max_regs {
                    pr_err!(
                        "{} <- {}: a PUT of {} bytes needs {} registrations here, more than \
                     max_regs={}\n",
                        self.iface.addr,
                        self.peer,
                        size,
                        region.nmrs(),
                        max_regs
                    );
                    return Err(EMSGSIZE);
                }
                self.post_locked(
                    st,
                    Post::Msg,
                    |chain| {
                        region.register(&res, access, chain, &mut regs, None)?;
                        let mut adv = region::advertise(&regs)?;
                        if short {
                            adv.shorten();
                        }
                        Ok(Some(adv))
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
                let sink = Sink {
                    since: Instant::now(),
                    sink_cookie,
                    how,
                    region,
                    regs,
                };
                // Within the capacity reserved above.
                let _ = st.sinks.push(sink, GFP_NOWAIT);
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

    /// The source of a GET: writes a buffer (holding the pattern of `seed`, or zeros with
    /// check none: a served buffer never carries bytes of an earlier transfer) into the
    /// requester's registrations, invalidates its own, and answers GET_DONE with the remote
    /// invalidation of the requester's first registration.
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
        let mut remote_inv = Self::remote_inv(st).then(|| regs.as_slice()[0].rkey);
        if regs.as_slice().len() > 1 && self.iface.hook(Misbehave::BogusInv) {
            remote_inv = regs.as_slice().last().map(|r| r.rkey);
        }
        if self.iface.hook(Misbehave::RecordGet) {
            *self.iface.served_get.lock() = Some(*regs);
        }
        let geo = self.iface.res.geo;
        let r = self
            .iface
            .serving_region(size as usize, geo)
            .and_then(|region| {
                region::fill(&region, seed, check)?;
                self.iface.corrupt_hook(&region)?;
                self.post_locked(
                    st,
                    Post::Msg,
                    |chain| {
                        let (remote, none) = (regs.as_slice(), KVec::new());
                        region::source_chain(
                            &res, &region, remote, none, chain, &mut local, &mut inv,
                        )?;
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
                if self.iface.hook(Misbehave::DupDone) {
                    let done = Body::Done {
                        get: true,
                        cookie,
                        status: 0,
                    };
                    let _ = self.send_locked(st, done, false);
                }
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

    /// PUT_DONE at the sink: the source's data is in (or, with an error status, never
    /// will be). The remote invalidation, if any, must be of the first registration
    /// advertised; then the sink's keys are killed ([`Conn::unkey`]).
    fn sink_done(
        &self,
        st: &mut ConnState,
        sink_cookie: u64,
        status: i32,
        inv: Option<u32>,
    ) -> core::result::Result<(), &'static str> {
        let pos = st
            .sinks
            .iter()
            .position(|s| s.sink_cookie == sink_cookie)
            .ok_or("PUT_DONE for an unknown transfer")?;
        let first = st.sinks[pos].regs.first().map(|r| r.rkey());
        if inv.is_some() && inv != first {
            // The sink stays for teardown, which destroys its MRs once the QP is drained.
            return Err("bogus remote invalidation: not the transfer's rkey");
        }
        let sink = st
            .sinks
            .remove(pos)
            .map_err(|_| "PUT_DONE for an unknown transfer")?;
        let mut sink = sink;
        if status != 0 {
            pr_err!(
                "{} {}: the source failed a PUT: {}\n",
                self.iface.addr,
                self.peer,
                status
            );
            // Its data never fully arrived: nothing to check, no verdict owed (the source
            // has forgotten the transfer).
            sink.how.check = Check::None;
        }
        if inv.is_some() {
            st.stats.remote_inv += 1;
        }
        if !self.local_room(st, sink.regs.len()) {
            // A transient lack of a send slot or room: the next pump posts it.
            return st
                .unkey
                .push((sink, inv), GFP_NOWAIT)
                .map_err(|_| "out of memory");
        }
        self.unkey(st, sink, inv)
    }

    /// Kills the keys of a sink whose PUT_DONE arrived, then checks its data: the
    /// registration the peer invalidated is dead; the others get a LOCAL_INV in a chain of
    /// their own (no message, so no credit), and the data is checked when it completes.
    /// The caller made sure there is a send slot and room ([`Conn::local_room`]).
    fn unkey(
        &self,
        st: &mut ConnState,
        mut sink: Sink,
        inv: Option<u32>,
    ) -> core::result::Result<(), &'static str> {
        let res = self.iface.res.clone();
        let mut pending = KVec::new();
        let mut regs = core::mem::take(&mut sink.regs);
        if regs.len() == 1 && inv.is_some() {
            // The only registration was invalidated by the peer (checked by the caller).
            region::invalidate(&res, &mut regs, inv, &mut SendChain::empty(), &mut pending)
                .map_err(|_| "out of memory")?;
            let r = self.check_sink(st, &sink.region, sink.how);
            self.iface.recycle(sink.region);
            return r.map_err(|_| "out of memory");
        }
        st.tagged
            .reserve(1, GFP_NOWAIT)
            .map_err(|_| "out of memory")?;
        let r = self.post_invalidate(st, &res, &mut regs, inv, &mut pending);
        match r {
            Ok(slot) => {
                // Within the capacity reserved above.
                let _ = st.tagged.push(
                    Tagged {
                        slot,
                        what: Finishing::ServedPut(sink.region, pending, sink.how),
                    },
                    GFP_NOWAIT,
                );
                Ok(())
            }
            Err(_) => {
                // Nothing posted, but the keys may still be named by a chain in flight:
                // destroyed MRs die once the QP is drained, and the buffer stays with the
                // connection (teardown frees it after the drain).
                give_up(&res, &mut regs, &mut pending);
                let _ = st.sinks.push(sink, GFP_NOWAIT);
                Err("cannot invalidate a PUT's registrations")
            }
        }
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
        // New requests wait for a place and credits without a deadline of their own: the
        // first in line waits at most for the oldest transfer in flight, which the check
        // above bounds by the timeout. One that waited twice that means the peer keeps
        // its credits (or the send queue is stuck): the connection fails.
        let stuck = st.room_q.first().is_some_and(|(_, since)| {
            since.elapsed() > Delta::from_millis(2 * i64::from(timeout_ms))
        });
        if stuck {
            pr_err!(
                "{} {} {}: no room for a request in {} ms (credits {})\n",
                self.iface.addr,
                self.dir(),
                self.peer,
                2 * u64::from(timeout_ms),
                st.credits
            );
            self.on(&mut st, Event::Error, "no credits returned");
            return;
        }
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
    fn new_xfer(st: &mut ConnState, kind: Kind) -> Result<u64> {
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
                kind,
                waiter,
                moved: false,
                sent: None,
                step: Step::Waiting,
                verdict: None,
                regs: Regs::new(),
                size: 0,
                inv_rkey: None,
            },
            GFP_KERNEL,
        )?;
        Ok(cookie)
    }

    /// The request of transfer `cookie`, of `size` bytes, went out: its timeout starts, and
    /// it counts against the queue depth until it is forgotten.
    fn sent(st: &mut ConnState, cookie: u64, size: u64) {
        if let Some(x) = st.xfers.iter_mut().find(|x| x.cookie == cookie) {
            x.sent = Some(Instant::now());
            x.size = size;
        }
    }

    /// Stops tracking transfer `cookie`: its place in the queue depth is free.
    fn forget_xfer(&self, st: &mut ConnState, cookie: u64) {
        st.xfers.retain(|x| x.cookie != cookie);
        self.cv.notify_all();
    }

    /// Transfers of this side whose request went out and that are not finished.
    fn in_flight(st: &ConnState) -> usize {
        st.xfers.iter().filter(|x| x.sent.is_some()).count()
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
            .map(|p| Self::chain_wrs(&self.iface.res, p.max_payload, p.max_regs))
            .unwrap_or(1);
        st.ep.as_ref().is_some_and(|ep| ep.sq_room() >= need)
    }

    /// Whether what `room` describes can be posted now ([`Room`]).
    fn has_room(&self, st: &ConnState, room: Room) -> bool {
        let depth = st.params.map_or(0, |p| usize::from(p.queue_depth));
        let message = || {
            st.credits >= 2
                && !st.tx_free.is_empty()
                && st.owed.is_empty()
                && st.unkey.is_empty()
                && self.sq_room(st)
        };
        match room {
            Room::Request => {
                message()
                    && (Self::in_flight(st) < depth
                        || self.iface.armed(Misbehave::Flood) && self.iface.hook(Misbehave::Flood))
            }
            Room::Message => message(),
            Room::Local(n) => self.local_room(st, n),
        }
    }

    /// Waits until what `room` describes can be posted ([`Conn::has_room`]); new requests
    /// wait in arrival order, behind the transfers already in flight. There is no deadline:
    /// a transfer waits for credits as long as the connection is healthy (the periodic
    /// check fails a connection whose peer returns none within the timeout). Ends early
    /// when the connection fails or a signal arrives.
    fn wait_room(&self, st: &mut MutexGuard<'_, ConnState>, room: Room) -> Result {
        let new = room == Room::Request;
        let ticket = st.room_next;
        if new {
            st.room_next += 1;
            st.room_q.push((ticket, Instant::now()), GFP_KERNEL)?;
        }
        let r = loop {
            if st.state != State::Established {
                break Err(not_connected());
            }
            let turn = !new || st.room_q.first().is_some_and(|(t, _)| *t == ticket);
            if turn && self.has_room(st, room) {
                break Ok(());
            }
            if self.cv.wait_interruptible(st) {
                break Err(ERESTARTSYS);
            }
        };
        if new {
            st.room_q.retain(|(t, _)| *t != ticket);
            // The next in line may go now.
            self.cv.notify_all();
        }
        r
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
            let gave_up = if *left == 0 {
                pr_err!("{} -> {}: transfer timed out\n", self.iface.addr, self.peer);
                ETIMEDOUT
            } else if !wait::step(&waiter.cv, st, left) {
                ERESTARTSYS
            } else {
                continue;
            };
            // The peer still counts the transfer (its answer would come for a transfer
            // forgotten here, and its place would be taken twice): the connection goes.
            self.on(st, Event::Error, "a transfer gave up waiting for its peer");
            return Err(gave_up);
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
    /// own), then runs `steps` under the lock with a new transfer's cookie, its timeout
    /// and those MRs; forgets the transfer and gives back the MRs `steps` did not use.
    fn one_try<T>(
        &self,
        region: &Region,
        kind: Kind,
        ms: u32,
        steps: impl FnOnce(
            &mut MutexGuard<'_, ConnState>,
            &Arc<DevRes>,
            u64,
            u32,
            &mut KVec<FrMr<Free>>,
        ) -> Result<T>,
    ) -> Result<T> {
        let res = self.iface.res.clone();
        self.pool_can_serve(region)?;
        let mut free = region.take(&res, res.pool.reserve(), Some(ms))?;
        let mut st = self.st.lock();
        let r = Self::new_xfer(&mut st, kind).and_then(|cookie| {
            let r = steps(&mut st, &res, cookie, ms, &mut free);
            self.forget_xfer(&mut st, cookie);
            r
        });
        drop(st);
        for mr in free.drain_all() {
            res.pool.put_free(mr);
        }
        r
    }

    /// Refuses at once (`EMSGSIZE`, naming the limit) a transfer that can never complete
    /// because its peer is an interface on the same device, so both ends take MRs from one
    /// pool, and together they need more than `pool_max`.
    fn pool_can_serve(&self, region: &Region) -> Result {
        let same = self.st.lock().same_pool;
        if !same {
            return Ok(());
        }
        let res = &self.iface.res;
        let size: u64 = region.lens().iter().sum();
        let peer = res.geo.max_mrs_for(size);
        let need = region.nmrs().saturating_add(peer);
        let max = res.pool.max();
        if need > max {
            pr_err!(
                "{} -> {}: a transfer of {} bytes to this node needs {} MRs of {}'s pool at \
                 once ({} here, {} at the peer), more than pool_max={}\n",
                self.iface.addr,
                self.peer,
                size,
                need,
                res.name(),
                region.nmrs(),
                peer,
                max
            );
            return Err(EMSGSIZE);
        }
        Ok(())
    }

    /// One PUT try; returns the sink's registrations (for the stale rkey test).
    fn put_once(&self, region: &Region, seed: u32, check: Check, ms: u32) -> Result<Regs> {
        self.one_try(region, Kind::Put, ms, |st, res, cookie, ms, free| {
            self.put_steps(st, res, region, cookie, (seed, check), ms, free)
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
        ms: u32,
        free: &mut KVec<FrMr<Free>>,
    ) -> Result<Regs> {
        self.fits(st, region)?;
        self.wait_room(st, Room::Request)?;
        let size = region.lens().iter().sum();
        let req = Body::PutReq {
            cookie,
            size,
            seed,
            check,
        };
        self.send_locked(st, req, false)?;
        Self::sent(st, cookie, size);
        // The timeout runs from the request.
        let mut left = msecs_to_jiffies(ms);
        let sink_cookie =
            match self.wait_xfer(st, cookie, &mut left, |x| !matches!(x.step, Step::Waiting))? {
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
        // The sink's keys are live from here: every way out tells it, or fails the
        // connection.
        let sink_cookie = if self.iface.hook(Misbehave::UnknownDone) {
            sink_cookie ^ (1 << 62)
        } else {
            sink_cookie
        };
        let mut local = KVec::new();
        let mut inv = KVec::new();
        let remote_inv = Self::remote_inv(st).then(|| regs.as_slice()[0].rkey);
        let posted = st
            .tagged
            .reserve(1, GFP_KERNEL)
            .map_err(Error::from)
            .and_then(|()| self.wait_room(st, Room::Message))
            .and_then(|()| {
                // Taken only now: on the way out before this, they go back to the pool.
                let taken = core::mem::take(free);
                self.post_locked(
                    st,
                    Post::Msg,
                    |chain| {
                        let remote = regs.as_slice();
                        region::source_chain(
                            res, region, remote, taken, chain, &mut local, &mut inv,
                        )?;
                        Ok(None)
                    },
                    |_| Body::Done {
                        get: false,
                        cookie: sink_cookie,
                        status: 0,
                    },
                    remote_inv,
                )
            });
        match posted {
            // Within the capacity reserved above.
            Ok(slot) => {
                let _ = st.tagged.push(
                    Tagged {
                        slot,
                        what: Finishing::Mine(cookie, inv),
                    },
                    GFP_NOWAIT,
                );
            }
            Err(e) => {
                if st.state != State::Established {
                    // The device may have taken part of the chain: the buffer is its own
                    // until the QP is drained.
                    self.wait_drained(st, cookie);
                }
                give_up(res, &mut local, &mut inv);
                self.abort_put(st, sink_cookie, e);
                return Err(e);
            }
        }
        // The buffer is the device's until the chain completes, in time or flushed.
        if !self.settle_chain(st, cookie, &mut left) {
            return Err(EIO);
        }
        // With a check, the sink's verdict (it may arrive before the chain's completion).
        let (_, verdict) = self.wait_xfer(st, cookie, &mut left, |x| {
            check == Check::None || x.verdict.is_some()
        })?;
        match verdict {
            None | Some(0) => Ok(regs),
            Some(e) => Err(Error::from_errno(e)),
        }
    }

    /// A PUT failed after the sink registered its buffer: PUT_DONE with the error, so the
    /// sink kills its keys at once; if even that cannot go, the connection fails (the
    /// sink's teardown kills them).
    fn abort_put(&self, st: &mut ConnState, sink_cookie: u64, e: Error) {
        let done = Body::Done {
            get: false,
            cookie: sink_cookie,
            status: e.to_errno(),
        };
        if self.send_locked(st, done, false).is_err() {
            self.on(st, Event::Error, "cannot tell the sink that a PUT failed");
        }
    }

    /// Waits until the chain of transfer `cookie` (its data, or the LOCAL_INVs of its
    /// registrations) completes; returns whether it completed without error. When it has
    /// not within `left` (or a signal came), the connection is failed: the QP flushes the
    /// chain, whose MRs are then destroyed, never reused. Either way, when this returns no
    /// work request names the transfer's buffer or MRs any more.
    fn settle_chain(
        &self,
        st: &mut MutexGuard<'_, ConnState>,
        cookie: u64,
        left: &mut Jiffies,
    ) -> bool {
        let Some(waiter) = st
            .xfers
            .iter()
            .find(|x| x.cookie == cookie)
            .map(|x| x.waiter.clone())
        else {
            return false;
        };
        let done = |st: &ConnState| match st.xfers.iter().find(|x| x.cookie == cookie) {
            Some(x) => match x.step {
                Step::ChainDone(ok) => Some(ok),
                // Drained: nothing of the connection is posted any more.
                _ if st.state == State::Closed => Some(false),
                _ => None,
            },
            None => Some(false),
        };
        loop {
            if let Some(ok) = done(st) {
                return ok;
            }
            if *left == 0 || !wait::step(&waiter.cv, st, left) {
                break;
            }
        }
        self.on(
            st,
            Event::Error,
            "a transfer's chain did not complete in time",
        );
        loop {
            if let Some(ok) = done(st) {
                return ok;
            }
            // Not interruptible: the flush (or the teardown) always comes.
            waiter.cv.wait(st);
        }
    }

    /// Waits until the connection is drained (closed): after that no work request names
    /// anything of it.
    fn wait_drained(&self, st: &mut MutexGuard<'_, ConnState>, cookie: u64) {
        let waiter = st
            .xfers
            .iter()
            .find(|x| x.cookie == cookie)
            .map(|x| x.waiter.clone());
        while st.state != State::Closed {
            match &waiter {
                Some(w) => w.cv.wait(st),
                None => self.cv.wait(st),
            }
        }
    }

    /// Test hook (`fault` command). [`Fault::Mangle`] sends a GET whose request is
    /// corrupted that way: the peer must refuse it and close the connection, so the GET
    /// must fail. [`Fault::StaleRkey`] does a PUT and then RDMA-writes with the sink's old
    /// rkey; [`Fault::StaleGet`] RDMA-writes with the registrations of the last GET this
    /// interface served (recorded): the write must fail (the keys died with their
    /// transfers). `Ok` means the peer behaved.
    pub(crate) fn fault(&self, what: Fault, timeout_ms: u32) -> Result {
        if let Fault::Mangle(m) = what {
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
        let old = match what {
            Fault::StaleGet => (*self.iface.served_get.lock()).ok_or(ENOENT)?,
            _ => {
                let region = Region::new(&res, 0, 4096)?;
                let seed = self.iface.seed();
                region::write_pattern(&region, seed, Check::Full)?;
                self.put_once(&region, seed, Check::Full, timeout_ms)?
            }
        };
        let size = usize::try_from(old.bytes()).map_err(|_| EINVAL)?;
        let region = Region::new(&res, 0, size)?;
        let mut left = msecs_to_jiffies(timeout_ms);
        let mut st = self.st.lock();
        let cookie = Self::new_xfer(&mut st, Kind::Put)?;
        let r = self.stale_write(&mut st, &res, &region, &old, cookie, &mut left);
        self.forget_xfer(&mut st, cookie);
        drop(st);
        let rkey = old.as_slice().first().map_or(0, |r| r.rkey);
        match r? {
            // The chain failed: the peer's answer to the WRITE was an access error (RoCE
            // acknowledges every RDMA WRITE).
            false => {}
            // On iWARP an RDMA WRITE completes once the transport has it; a peer that
            // refuses the key terminates the connection. A round trip after it tells.
            true if self.ping_once(timeout_ms).is_err() => {}
            true => {
                pr_err!(
                    "{} -> {}: an RDMA WRITE with a dead rkey {:#x} succeeded\n",
                    self.iface.addr,
                    self.peer,
                    rkey
                );
                return Err(EIO);
            }
        }
        pr_info!(
            "{} -> {}: the sink's old rkey {:#x} was refused\n",
            self.iface.addr,
            self.peer,
            rkey
        );
        Ok(())
    }

    /// The write of [`Conn::fault`] with the sink's old registrations `old`: whether its
    /// chain completed without error.
    fn stale_write(
        &self,
        st: &mut MutexGuard<'_, ConnState>,
        res: &Arc<DevRes>,
        region: &Region,
        old: &Regs,
        cookie: u64,
        left: &mut Jiffies,
    ) -> Result<bool> {
        self.wait_room(st, Room::Message)?;
        st.tagged.reserve(1, GFP_KERNEL)?;
        let mut local = KVec::new();
        let mut inv = KVec::new();
        let r = self.post_locked(
            st,
            Post::Noop,
            |chain| {
                let (remote, none) = (old.as_slice(), KVec::new());
                region::source_chain(res, region, remote, none, chain, &mut local, &mut inv)?;
                Ok(None)
            },
            |_| Body::Noop,
            None,
        );
        let slot = match r {
            Ok(slot) => slot,
            Err(e) => {
                give_up(res, &mut local, &mut inv);
                return Err(e);
            }
        };
        // Within the capacity reserved above.
        let _ = st.tagged.push(
            Tagged {
                slot,
                what: Finishing::Mine(cookie, inv),
            },
            GFP_NOWAIT,
        );
        Ok(self.settle_chain(st, cookie, left))
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
    /// data is corrupt. The local registrations are dead before this returns, whatever it
    /// returns. Retried while the peer is busy.
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
        self.one_try(region, Kind::Get, ms, |st, res, cookie, ms, free| {
            let mut local = KVec::new();
            let r = self.get_steps(st, res, region, cookie, (seed, check), ms, &mut local, free);
            let inv = r.as_ref().ok().copied().flatten();
            // Whatever happened, the registrations die before the transfer is reported,
            // with a time of their own (the transfer's may be spent).
            let k = self.kill_mine(st, res, cookie, &mut local, inv, ms);
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
        ms: u32,
        local: &mut KVec<FrMr<Registered>>,
        free: &mut KVec<FrMr<Free>>,
    ) -> Result<Option<u32>> {
        self.fits(st, region)?;
        self.wait_room(st, Room::Request)?;
        let size = region.lens().iter().sum();
        let access = Access::REMOTE_WRITE.with(Access::LOCAL_WRITE);
        let taken = core::mem::take(free);
        let posted = self.post_locked(
            st,
            Post::Msg,
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
        );
        if let Err(e) = posted {
            // Never posted: destroying them kills the keys now; unless the device took part
            // of the chain (the connection failed): then only once the QP is drained.
            if st.state != State::Established {
                self.wait_drained(st, cookie);
            }
            give_up(res, local, &mut KVec::new());
            return Err(e);
        }
        let first = local.first().map(|r| r.rkey());
        if let Some(x) = st.xfers.iter_mut().find(|x| x.cookie == cookie) {
            x.inv_rkey = first;
        }
        Self::sent(st, cookie, size);
        let mut left = msecs_to_jiffies(ms);
        match self.wait_xfer(st, cookie, &mut left, |x| !matches!(x.step, Step::Waiting))? {
            (Step::Done(inv), _) => Ok(inv),
            (Step::Failed(e), _) => Err(Error::from_errno(e)),
            _ => Err(EINVAL),
        }
    }

    /// Kills the registrations of a transfer this side started (the one the peer
    /// invalidated is already dead): LOCAL_INVs, waited for up to `ms`. When that cannot
    /// be confirmed in time, the connection is failed and this returns only once the QP
    /// is drained and the MRs destroyed (as xprtrdma's `frwr_unmap_sync`): the caller gets
    /// its buffer back only when every key on it is dead. Answers from the peer no longer
    /// move the transfer (a second DONE closes the connection).
    fn kill_mine(
        &self,
        st: &mut MutexGuard<'_, ConnState>,
        res: &Arc<DevRes>,
        cookie: u64,
        local: &mut KVec<FrMr<Registered>>,
        inv: Option<u32>,
        ms: u32,
    ) -> Result {
        if local.is_empty() {
            return Ok(());
        }
        if inv.is_some() {
            st.stats.remote_inv += 1;
        }
        if let Some(x) = st.xfers.iter_mut().find(|x| x.cookie == cookie) {
            x.step = Step::Invalidating;
        }
        if local.len() == 1 && inv.is_some_and(|rkey| rkey == local[0].rkey()) {
            let mut none = KVec::new();
            return region::invalidate(res, local, inv, &mut SendChain::empty(), &mut none);
        }
        let mut pending = KVec::new();
        let posted = st
            .tagged
            .reserve(1, GFP_KERNEL)
            .map_err(Error::from)
            .and_then(|()| self.wait_room(st, Room::Local(local.len())))
            .and_then(|()| self.post_invalidate(st, res, local, inv, &mut pending));
        match posted {
            Ok(slot) => {
                // Within the capacity reserved above.
                let _ = st.tagged.push(
                    Tagged {
                        slot,
                        what: Finishing::Mine(cookie, pending),
                    },
                    GFP_NOWAIT,
                );
                let mut left = msecs_to_jiffies(ms);
                if self.settle_chain(st, cookie, &mut left) {
                    Ok(())
                } else {
                    Err(EIO)
                }
            }
            Err(e) => {
                // Not posted, but the request's chain may still name the MRs: their keys
                // die with the QP. Fail the connection, wait for the drain, destroy them.
                self.on(
                    st,
                    Event::Error,
                    "cannot invalidate a transfer's registrations",
                );
                self.wait_drained(st, cookie);
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
        let mut st = self.st.lock();
        let cookie = Self::new_xfer(&mut st, Kind::Ping)?;
        let r = self.wait_room(&mut st, Room::Request).and_then(|()| {
            let ping = Body::Immediate {
                cookie,
                payload: b"ping",
            };
            self.send_locked(&mut st, ping, false)?;
            Self::sent(&mut st, cookie, 0);
            let mut left = msecs_to_jiffies(timeout_ms);
            match self.wait_xfer(&mut st, cookie, &mut left, |x| {
                !matches!(x.step, Step::Waiting)
            })? {
                (Step::Done(_), _) => Ok(()),
                (Step::Failed(e), _) => Err(Error::from_errno(e)),
                _ => Err(EINVAL),
            }
        });
        self.forget_xfer(&mut st, cookie);
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
            // A flushed chain may be what a transfer waits for.
            conn.wake(&mut st);
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
                // Under the connection's lock, so teardown either came first (then the
                // state says so and nothing is set up) or finds everything set up here.
                // The handler only borrows its endpoint: the connection owns it.
                if conn_state::next(st.state, Event::RouteResolved).1 != Action::Connect {
                    return;
                }
                st.state = State::Connecting;
                let asked = st.asked;
                let res = &conn.iface.res;
                let caps = Conn::caps(res, asked.queue_depth, asked.max_payload, asked.max_regs);
                let r = ep
                    .create_qp(&res.pd, caps)
                    .and_then(|()| conn.setup(&mut st, &ep, asked.queue_depth));
                if r.is_err() {
                    conn.on(&mut st, Event::Error, "connect failed");
                    return;
                }
                // Without the lock, and off this handler: siw connects its TCP socket in
                // rdma_connect, blocking, for about two minutes when the SYN goes
                // unanswered. Under the lock that held the caller's bounded wait and every
                // reader of the connection; in this handler it holds rdma_cm's ordered
                // workqueue, and with it every other connection's setup on the node. So it
                // runs on the module's workqueue ([`Conn::connect_work`]); teardown waits
                // for `in_connect` to clear.
                // Counted until it is done: the device's removal waits for it, so
                // rdma_cm's own removal never finds this id's handler lock held.
                let private = asked.encode();
                let (c, e): (_, Arc<Endpoint<Ctx>>) = (conn.clone(), ep.into());
                if conn.iface.res.spawn(move || c.connect_work(e, private)) {
                    st.in_connect = true;
                } else {
                    // No workqueue (the module is going) or no memory.
                    conn.on(&mut st, Event::Error, "connect failed");
                }
            }
            CmEvent::Established(private) => {
                // The connect request is answered (see `ConnState::in_connect`).
                st.in_connect = false;
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
                    st.credits = credits::limit(granted.queue_depth);
                    st.same_pool = conn.iface.res.has_stamp(granted.stamp);
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
                    "{} {} {}: connected: queue_depth={} max_payload={} max_regs={} sq_depth={} \
                     page_size={} peer_page_size={}\n",
                    conn.iface.addr,
                    conn.dir(),
                    conn.peer,
                    st.params.map(|p| p.queue_depth).unwrap_or(0),
                    st.params.map(|p| p.max_payload).unwrap_or(0),
                    st.params.map(|p| p.max_regs).unwrap_or(0),
                    ep.caps().map(|c| c.send_wr).unwrap_or(0),
                    PAGE_SIZE,
                    st.params.map(|p| p.page_size).unwrap_or(0)
                );
                conn.pump(&mut st);
            }
            CmEvent::Rejected(status, private) => {
                // The connect request is answered (see `ConnState::in_connect`).
                st.in_connect = false;
                match ConnParams::decode(private) {
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
                }
            }
            CmEvent::Failed(event, status) => {
                // The connect request is answered (see `ConnState::in_connect`).
                st.in_connect = false;
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
        // What the connection shows as the peer's page size: the requester's, not ours.
        let peer_page_size = asked.map(|a| a.page_size).unwrap_or(0);
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
                let conn = Conn::new(iface.clone(), peer, false, peer_iface, granted)?;
                {
                    let mut st = conn.st.lock();
                    st.params = Some(ConnParams {
                        page_size: peer_page_size,
                        ..granted
                    });
                    st.peer_stamp = granted.dst_stamp;
                    st.credits = credits::limit(granted.queue_depth);
                    st.same_pool = iface.res.has_stamp(granted.stamp);
                    conn.on(&mut st, Event::Accepted, "");
                }
                // The interface's lock is held from the check that it is open until the
                // connection is in its list: a shutdown either comes first (and the request
                // is refused) or finds the connection and tears it down.
                let mut ist = iface.st.lock();
                if ist.closed {
                    return Err(ENODEV);
                }
                let accepted = iface.accepted(&ist);
                if accepted >= iface.max_conns {
                    drop(ist);
                    iface.rejects_sent.count(Reason::NoResources);
                    pr_err!(
                        "{} <- {}: rejecting: {} connections accepted, the limit (max_conns)\n",
                        iface.addr,
                        peer,
                        accepted
                    );
                    let _ = req.reject(&me.params(0, Reason::NoResources as u8).encode());
                    return Err(EBUSY);
                }
                // The push below must not fail once the id is accepted: returning an error
                // then would make rdma_cm destroy an id the endpoint owns.
                ist.conns.reserve(1, GFP_KERNEL)?;
                let private = granted.encode();
                let setup_conn = conn.clone();
                let qd = granted.queue_depth;
                let accepted = req.accept(
                    Ctx::Conn(conn.clone()),
                    &iface.res.pd,
                    Conn::caps(&iface.res, qd, granted.max_payload, granted.max_regs),
                    &ConnParam {
                        private: &private,
                        rd_atomic: 16,
                    },
                    // The endpoint is the connection's before rdma_accept: a message may
                    // arrive as soon as it is sent, and its buffer must be reposted.
                    move |ep| {
                        let mut st = setup_conn.st.lock();
                        st.ep = Some(ep.clone());
                        setup_conn.setup(&mut st, ep, qd)
                    },
                );
                match accepted {
                    Ok(ep) => {
                        // The connection holds the endpoint; a reference kept here would
                        // make a teardown meanwhile drop the last one in this handler.
                        drop(ep);
                        // Within the capacity reserved above.
                        let _ = ist.conns.push(conn.clone(), GFP_NOWAIT);
                        drop(ist);
                        iface.close_stale(&conn, granted.dst_stamp);
                        Ok(())
                    }
                    Err(e) => {
                        drop(ist);
                        // The slots refer to the connection: break the cycle. The endpoint
                        // goes with the handler's error (rdma_cm destroys the id).
                        let mut st = conn.st.lock();
                        Conn::drop_slots(&mut st);
                        let ep = st.ep.take();
                        drop(st);
                        drop(ep);
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
