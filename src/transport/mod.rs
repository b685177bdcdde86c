// SPDX-License-Identifier: GPL-2.0

//! Interfaces and connections: negotiation, messages and credits.
//!
//! An [`Iface`] is an RDMA device and a local IPv4 address (and port) that fastreg listens
//! on, with its own tunables. A [`Conn`] is a connection between two interfaces (of this
//! node or another): its state follows [`crate::rules::conn_state`], its parameters are negotiated
//! with [`crate::rules::negotiate`] through rdma_cm private data, and its messages are
//! [`crate::rules::wire`] messages over SEND/RECV, under credit flow control.
//!
//! Credits: each side posts `queue_depth + 2` receive buffers. A message costs the sender a
//! credit; the receiver reposts the buffer and returns the credit in the header of its next
//! message, or in a NOOP when `queue_depth / 2` credits are owed and nothing else goes out.
//! Ordinary messages never take the last credit, which is kept for a NOOP, so both sides can
//! always return credits to each other.
//!
//! Work that must not run in a completion or rdma_cm handler (draining a QP, destroying an
//! endpoint, starting a new connection) is done by the interface's dial work ([`dial`]) or
//! its teardown; handlers only record what happened and wake it. Transfers never wait in a
//! thread: they are records advanced by the handlers ([`xfer`]).
//!
//! This file holds the objects and their invariants, and [`state`] a connection's state
//! under its lock; their behaviour is split by concern:
//! [`iface`] (interfaces, connecting to a peer), [`lifecycle`] (a connection's setup and
//! failure), [`teardown`] (its teardown), [`cm_handler`] (rdma_cm events), [`send`] and
//! [`recv`] (messages, credits, completions), [`xfer`] (transfer records advanced by
//! events, room), [`report`] (finished transfers reported), [`tick`] (the periodic checks),
//! [`work`] (a connection's work item), [`call`] (the synchronous API), [`dial`]
//! (connecting to peers), [`pending`] (transfers waiting for their peer's connection),
//! [`put`] and [`get`] (the steps of the transfers this side starts), [`serve`] (the
//! transfers it serves for a peer), [`served`] (what follows: a sink's keys killed, its
//! data checked, buffers recycled),
//! [`inline`] (small transfers carried in the messages, both sides),
//! [`hooks`] (test hooks: in the test build only, `hooks_off.rs` in a production one),
//! [`control`] (consoles' requests, the data moved), `fuzzing` (the fuzzing peer, test build
//! only), [`show`] (debugfs output) and [`ifaces`] (the node's interfaces).

// The synchronous calls (a submission and a wait): the debugfs `ctl` commands' and the
// test hooks', in the test build only.
#[cfg(fastreg_test)]
mod call;
mod cm_handler;
mod control;
mod dial;
#[cfg(fastreg_test)]
mod fuzzing;
mod get;
#[cfg(fastreg_test)]
mod hooks;
#[cfg(not(fastreg_test))]
#[path = "hooks_off.rs"]
mod hooks;
mod iface;
mod ifaces;
mod inline;
mod lifecycle;
mod pending;
mod put;
mod records;
mod recv;
mod report;
mod send;
mod serve;
mod served;
mod shares;
mod show;
mod state;
mod teardown;
mod tick;
mod work;
mod xfer;

pub(crate) use control::{
    Control,
    Moved, //
};
use hooks::Hooks;
pub(crate) use ifaces::{
    Ifaces,
    NetTick, //
};
use records::Records;
use shares::{
    Charge,
    ConnTicket,
    PeerShare, //
};
pub(crate) use show::{
    ConnSnap,
    IfaceSnap, //
};
pub(crate) use state::Stats;
use state::{
    ConnGuard,
    ConnState,
    Owed,
    Slots, //
};
pub(crate) use xfer::{
    Client,
    Outcome,
    Request, //
};

use kernel::{
    alloc::kvec::PushError,
    new_condvar, new_mutex,
    page::PAGE_SIZE,
    prelude::*,
    sync::{
        atomic::{
            Atomic,
            Relaxed, //
        },
        Arc, ArcBorrow, CondVar, Mutex,
    },
    time::{
        msecs_to_jiffies,
        Delta,
        Instant,
        Monotonic, //
    },
    workqueue::{
        DelayedWork,
        Work, //
    },
};

#[cfg(fastreg_test)]
use crate::wait;
use crate::{
    device::DevRes,
    reg::region::{
        self,
        Region, //
    },
    rules::{
        command::IfaceTunables,
        conn_state::{
            self,
            Action,
            Event,
            State, //
        },
        credits,
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
        tally::Tally,
        wire::{
            self,
            Body,
            Check,
            ConnParams,
            Limits,
            Msg,
            Regs, //
        },
        xfer_state::{
            self,
            Action as XAction,
            Event as XEvent,
            Keys,
            Kind,
            Track, //
        },
    },
    show::{
        pr_limited,
        Ip,
        Show, //
    },
    verbs::{
        self,
        new_bh_spinlock,
        Access,
        BhSpinLock,
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
        Wc,
        PRIVILEGED_PORTS, //
    },
};

/// Receive buffers and message slots beyond the queue depth (for NOOPs and replies).
const EXTRA: u32 = credits::EXTRA;
/// How long a teardown waits for the device to answer a connect ([`Conn::teardown_soon`]).
const OUT_OF_CONNECT_SECS: i64 = 150;
/// rdma_cm resolution timeout.
const RESOLVE_MS: u16 = 2000;
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
    /// Most bytes of a transfer carried inline, in its messages (0: none); its messages
    /// are [`wire::msg_size`] of it.
    pub(crate) max_inline: u32,
    /// Connection requests from unprivileged source ports are refused
    /// ([`crate::rules::params::REQUIRE_PRIVILEGED_PORT`]).
    pub(crate) require_privileged_port: bool,
}

impl Tunables {
    /// Registrations per transfer message when not given.
    pub(crate) const DEFAULT_MAX_REGS: u16 = 16;

    /// The module parameters' values.
    pub(crate) fn defaults(p: &crate::rules::params::Params) -> Self {
        Self {
            queue_depth: p.queue_depth as u16,
            max_payload: p.max_payload,
            max_regs: Self::DEFAULT_MAX_REGS,
            port: p.port,
            max_conns: p.max_conns,
            mr_pages: 0,
            max_inline: p.max_inline,
            require_privileged_port: p.require_privileged_port,
        }
    }

    /// The module parameters' values, with those given for one interface (`iface add`,
    /// configfs) in their place.
    pub(crate) fn with(p: &crate::rules::params::Params, t: &IfaceTunables) -> Self {
        let d = Self::defaults(p);
        Self {
            queue_depth: t.queue_depth.unwrap_or(d.queue_depth),
            max_payload: t.max_payload.unwrap_or(d.max_payload),
            max_regs: t.max_regs.unwrap_or(d.max_regs),
            port: t.port.unwrap_or(d.port),
            mr_pages: t.mr_pages.unwrap_or(d.mr_pages),
            max_inline: t.max_inline.unwrap_or(d.max_inline),
            ..d
        }
    }
}

struct IfaceState {
    listener: Option<Arc<Endpoint<Ctx>>>,
    conns: KVec<Arc<Conn>>,
    closed: bool,
    /// Connecting to peers, one entry per peer ever dialled ([`dial`]).
    dials: KVec<dial::PeerDial>,
    /// Transfers waiting for their peer's connection.
    pending: KVec<pending::Pending>,
    /// Connection requests being accepted, with this lock released (counted against
    /// `max_conns`); a shutdown waits for them ([`Iface::accept_over`]).
    accepting: usize,
}

/// Reasons a reject can name (their numbers index [`RejectCounts`]).
pub(crate) const REASONS: usize = 11;

/// Rejects by reason (index: the reason's number).
struct RejectCounts([Atomic<u64>; REASONS]);

impl RejectCounts {
    const fn new() -> Self {
        Self([const { Atomic::new(0) }; REASONS])
    }

    fn count(&self, why: Reason) {
        if let Some(n) = self.0.get(why as usize) {
            n.fetch_add(1, Relaxed);
        }
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
    /// The cache of its connections' message buffers: objects of its own message size
    /// (`max_inline` and the header), whatever size a peer negotiates.
    msgs: Arc<verbs::MsgCache>,
    /// Made through configfs: its directory owns it, and the debugfs commands leave it be.
    configured: Atomic<bool>,
    /// Test hooks ([`hooks`]; nothing in a production build).
    #[pin]
    hooks: Hooks,
    /// Signalled when a peer's run of connect attempts ends ([`dial`]).
    #[pin]
    connected: CondVar,
    /// Buffers (allocated and DMA-mapped) of transfers served, kept for the next ones of
    /// the same size: serving allocates nothing at steady state.
    #[pin]
    spare: Mutex<KVec<Region>>,
    /// Its connections that went down, by the first reason given (a leaf lock).
    #[pin]
    closed_by: BhSpinLock<Tally>,
    /// The peers it knows and what each holds ([`shares`]; a leaf lock).
    #[pin]
    shares: Mutex<KVec<Arc<PeerShare>>>,
    /// Requests refused as past their peer's share.
    over_share: Atomic<u64>,
    /// Who answers consoles' requests ([`control`]).
    control: Arc<dyn Control>,
    /// The data it moved.
    moved: Moved,
    #[pin]
    st: Mutex<IfaceState>,
    /// When it was created (the clock of its dials).
    born: Instant<Monotonic>,
    /// Notified when a connection request's accept is over (`IfaceState::accepting`).
    #[pin]
    accept_over: CondVar,
    /// Held by the dial work while it runs ([`Iface::run_dials`]).
    #[pin]
    dialer: Mutex<()>,
    /// Runs the dial work, now or later.
    #[pin]
    dial_work: Work<Iface, 0>,
    #[pin]
    dial_later: DelayedWork<Iface, 1>,
}

/// The context of every endpoint of the transport.
pub(crate) enum Ctx {
    /// A listening endpoint of an interface.
    Listener(Arc<Iface>),
    /// The endpoint of a connection.
    Conn(Arc<Conn>),
}

/// Where a step runs. A completion handler runs in softirq (`IB_POLL_SOFTIRQ`): it only
/// classifies, advances records and posts what is prepared. Serving a peer's request (a buffer to allocate, map, register, fill),
/// checking a PUT's data, growing the MR pool and reporting outcomes are left to the
/// connection's work item, on fastreg's own workqueue; and of those, what is long or may
/// sleep (a buffer allocated, mapped or filled, MRs allocated or deregistered, a console's
/// locks) runs there with the connection's lock released, never under it.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Runs {
    /// A completion or rdma_cm handler.
    Handler,
    /// The connection's work item, a submission, the tick.
    Worker,
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

/// What a transfer needs before it posts ([`Conn::has_room`]).
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

/// A transfer this side started: a record advanced by events ([`crate::rules::xfer_state`]),
/// owned by its connection from submission until its outcome is reported.
struct Xfer {
    cookie: u64,
    t: Track,
    seed: u32,
    check: Check,
    /// The caller's buffer, given back with the outcome. While the transfer runs it is the
    /// device's (and the peer's, through this side's keys): it goes back only in
    /// [`State::Done`](crate::rules::xfer_state::State::Done), when no key of it is alive.
    region: Option<Region>,
    /// MRs taken for it and not registered yet.
    free: KVec<FrMr<Free>>,
    /// GET: this side's registrations, until their keys are dead.
    local: KVec<FrMr<Registered>>,
    /// MRs being invalidated by a chain being built, or by one whose state is unknown
    /// (destroyed when the connection is drained).
    pending: KVec<FrMr<Invalidating>>,
    /// When it was submitted, and how long it may take in all (retries included).
    start: Instant<Monotonic>,
    timeout_ms: u32,
    /// When its current request went out (the peer's deadline runs from there).
    sent: Option<Instant<Monotonic>>,
    /// A busy peer: tried again not before then, with a pause doubling up to 5 ms.
    not_before: Option<Instant<Monotonic>>,
    /// Since when it is the first in line and waits for room (a place, credits).
    room_since: Option<Instant<Monotonic>>,
    pause_us: i64,
    /// PUT: the sink's registrations and cookie.
    regs: Regs,
    sink_cookie: u64,
    /// Bytes of the transfer.
    size: u64,
    /// GET: the rkey the peer may invalidate remotely (the first one advertised), and the
    /// one it did.
    inv_rkey: Option<u32>,
    inv: Option<u32>,
    /// Whom to tell, and what it called the transfer.
    client: Arc<dyn Client>,
    token: usize,
    /// Test hook (`fault ... stale_rkey`): keep the sink's registrations when it is done.
    record: bool,
    /// Its last try to take MRs found none (it is in the pool's line).
    waits_mrs: bool,
    /// Its last try to take MRs found that the pool must allocate this many first
    /// ([`Conn::grow_pool`], on the work item); and that allocation's failure, if it
    /// failed (the transfer fails with it).
    grow: u32,
    grow_err: Option<Error>,
    /// A console's request (a round trip, [`Kind::Ping`]): the request, then the answer
    /// (boxed: records are moved on the completion path's stack).
    ctl: Option<KBox<crate::selftest::control::Payload>>,
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
    /// Room for its MRs while they are invalidated ([`Conn::unkey`]).
    pending: KVec<FrMr<Invalidating>>,
    /// Its charge in the peer's share, given back with its region and MRs.
    charge: Charge,
}

/// How a chain of work requests ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ChainEnd {
    /// Every work request succeeded.
    Done,
    /// The peer refused an access (remote access error: a key it does not grant).
    Refused,
    /// Any other failure: flushed (the QP went to error first), or the device's error.
    Failed,
}

impl ChainEnd {
    /// The end a send completion tells.
    fn of(wc: &crate::verbs::Wc<'_>) -> Self {
        if wc.ok() {
            ChainEnd::Done
        } else if wc.remote_access_error() {
            ChainEnd::Refused
        } else {
            ChainEnd::Failed
        }
    }
}

/// What completes with a chain.
enum Finishing {
    /// The source side of a GET this side serves: its MRs are invalidated.
    ServedGet(Region, KVec<FrMr<Invalidating>>, Charge),
    /// The sink side of a PUT: the LOCAL_INVs of its other MRs; then the data is checked.
    ServedPut(Region, KVec<FrMr<Invalidating>>, SinkCheck, Charge),
    /// A chain of a transfer this side started (its MRs, invalidated in the chain).
    Mine(u64, KVec<FrMr<Invalidating>>),
    /// Test hook: the chain of `Conn::fault`'s stale write.
    #[cfg(fastreg_test)]
    Probe(KVec<FrMr<Invalidating>>),
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
    /// Its state. A spinlock: the completion handlers take it, and nothing under it sleeps
    /// or allocates beyond what was reserved (what would is done with it released, on the
    /// connection's work item: [`Runs`]).
    #[pin]
    st: BhSpinLock<ConnState>,
    #[pin]
    cv: CondVar,
    /// Runs [`Conn::kick`]'s work: starting transfers when MRs come back or a busy
    /// peer's pause is over, reporting those finished where nothing else would.
    #[pin]
    work: Work<Conn, 0>,
    #[pin]
    later: DelayedWork<Conn, 1>,
    /// Its peer's share on the interface: what this side serves for it is charged there.
    share: Arc<PeerShare>,
    /// Its count in that share, when the peer opened it.
    _ticket: Option<ConnTicket>,
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
