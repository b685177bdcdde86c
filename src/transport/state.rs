// SPDX-License-Identifier: GPL-2.0

//! A connection's state: what its lock guards ([`ConnState`]), its counters, what is
//! allocated for it before it is set up ([`Slots`]), and the messages it owes the peer
//! ([`Owed`]).

use super::*;

/// A connection's counters.
#[derive(Clone, Copy, Default)]
pub(crate) struct Stats {
    pub(crate) tx: u64,
    pub(crate) rx: u64,
    pub(crate) noops_tx: u64,
    pub(crate) noops_rx: u64,
    /// Negotiation rounds it took (this side's connections).
    pub(crate) attempts: u32,
    /// Bulk transfers served as sink (PUT) or source (GET), and those found corrupt.
    pub(crate) served: u64,
    pub(crate) corrupt: u64,
    pub(crate) remote_inv: u64,
    /// Requests this side refused for want of MRs or memory (`-EAGAIN`).
    pub(crate) busy: u64,
    /// Requests this side retried after the peer was busy.
    pub(crate) retries: u64,
    /// Transfers carried inline, started or served.
    pub(crate) inline: u64,
}

/// A held connection lock.
pub(super) type ConnGuard<'a> = verbs::BhSpinLockGuard<'a, ConnState>;

pub(super) struct ConnState {
    pub(super) state: State,
    pub(super) ep: Option<Arc<Endpoint<Ctx>>>,
    pub(super) asked: ConnParams,
    pub(super) params: Option<ConnParams>,
    pub(super) peer_stamp: u64,
    pub(super) retry: Option<Retry>,
    pub(super) reason: Option<&'static str>,
    /// Why connecting failed, when rdma_cm said (a negative errno).
    pub(super) connect_err: Option<i32>,
    pub(super) credits: u32,
    pub(super) outstanding: u32,
    /// Bytes its slots took when installed ([`Slots::footprint`]), 0 before.
    pub(super) mem: usize,
    /// Idle send slots, each with its chain storage.
    pub(super) tx_free: KVec<(Arc<Completion<TxSlot>>, SendChain)>,
    /// Every send slot, idle or not (teardown takes back those whose completion the
    /// device lost).
    pub(super) tx_all: KVec<Arc<Completion<TxSlot>>>,
    pub(super) rx: KVec<Arc<Completion<RxSlot>>>,
    /// Messages owed to the peer (answers and requests to serve), sent in order as credits
    /// allow.
    pub(super) owed: KVec<Owed>,
    pub(super) next_cookie: u64,
    /// When this side last sent a message.
    pub(super) last_tx: Instant<Monotonic>,
    /// When this side last received one.
    pub(super) last_rx: Instant<Monotonic>,
    /// Test hook: corrupt the next message sent (see the `fault` command).
    #[cfg(fastreg_test)]
    pub(super) mangle: Option<wire::Mangle>,
    /// Transfers this side started and not finished, in submission order (the order in
    /// which they start).
    pub(super) xfers: Records<Xfer>,
    /// Transfers finished, their outcome to report once the lock is dropped
    /// ([`Conn::deliver`]).
    pub(super) finished: Records<Xfer>,
    /// The (empty) MR lists of reported records, for the next ones.
    #[allow(clippy::type_complexity)]
    pub(super) spare: KVec<(
        KVec<FrMr<Free>>,
        KVec<FrMr<Registered>>,
        KVec<FrMr<Invalidating>>,
    )>,
    /// Test hook: how the chain of `Conn::fault`'s stale write ended.
    #[cfg(fastreg_test)]
    pub(super) probe: Option<ChainEnd>,
    /// The connection may be in its device pool's line of those waiting for MRs.
    pub(super) in_line: bool,
    /// PUTs this side is the sink of, registered and waiting for PUT_DONE.
    pub(super) sinks: KVec<Sink>,
    /// PUTs whose PUT_DONE arrived, waiting for a send slot or room to post the LOCAL_INVs
    /// of their registrations (with the rkey the peer invalidated).
    pub(super) unkey: KVec<(Sink, Option<u32>)>,
    /// PUTs served whose keys are dead, their data to check on the connection's work item
    /// ([`Conn::run_checks`]), never in a completion handler.
    pub(super) checks: KVec<(Region, SinkCheck)>,
    /// The buffer and MRs made ready for the first PUT or GET owed ([`serve::Prepared`]).
    pub(super) prepared: Option<serve::Prepared>,
    /// Buffers of transfers served that are done with, for the interface's spares
    /// ([`Iface::recycle`], which may unmap and free), on the connection's work item.
    pub(super) recycle: KVec<Region>,
    /// A completion handler left work for the connection's work item (a request to serve,
    /// MRs to allocate): [`Conn::handled`] queues it once the handler is done.
    pub(super) work_wanted: bool,
    /// Chains in flight whose completion finishes a transfer step.
    pub(super) tagged: KVec<Tagged>,
    /// Messages received on a connection this side made before it heard that the
    /// connection is established (the peer may send as soon as it has accepted: one
    /// connection serves both directions), with their length and invalidated rkey: held
    /// in order, and handled once it has ([`Conn::receive_early`]). At most one per
    /// receive buffer (reserved at setup).
    pub(super) early: KVec<(Arc<Completion<RxSlot>>, u32, Option<u32>)>,
    /// Held messages are being handled: those that arrive meanwhile queue behind them.
    pub(super) draining: bool,
    pub(super) stats: Stats,
    /// The peer is an interface on the same device: both ends take MRs from one pool.
    pub(super) same_pool: bool,
    /// The connect request is being sent (`rdma_connect`, on the module's workqueue or in
    /// the CM handler, with this lock released), or on iWARP is out and unanswered. On
    /// siw the first is a blocking TCP connect, for about two minutes when the SYN goes
    /// unanswered; the second lasts until the peer answers the MPA request or siw gives
    /// up. Meanwhile iwcm holds `IWCM_F_CONNECT_WAIT`, and both `rdma_disconnect` and
    /// `rdma_destroy_id` wait for it, uninterruptibly: a teardown meanwhile is owed
    /// ([`ConnState::after_connect`]) until this clears ([`Conn::connect_answered`]).
    pub(super) in_connect: bool,
    /// A teardown asked while the connect request was out, with its reason and when it was
    /// asked: run by the connection's work item once the device answers, or after
    /// [`OUT_OF_CONNECT_SECS`] without an answer. The device's removal waits for it
    /// (`DevRes::hold`).
    pub(super) after_connect: Option<(&'static str, Instant<Monotonic>)>,
    /// On iWARP, this side accepted the connection and has received nothing yet: it posts
    /// no message and no RDMA operation until the connecting side's first message has
    /// arrived. MPA has the initiator send first (RFC 5044, 7.1.2: a responder receives and
    /// validates an FPDU before it sends any); siw fails the connect of an initiator that
    /// finds data behind the MPA reply (`EPROTO`, a connect error with `-EINVAL`). The
    /// connecting side opens with a NOOP ([`Conn::open_iwarp`]).
    pub(super) held: bool,
    /// The connection failed while established: its endpoint refuses posts, and the
    /// interface's dial work disconnects it ([`Conn::disconnect_owed`]), so that what is
    /// posted flushes and the peer hears of it, never in a handler or under this lock.
    pub(super) disconnect_owed: bool,
    /// That disconnect runs, with a reference to the endpoint and this lock released: a
    /// teardown waits for it to end before it takes the endpoint (whose last reference it
    /// must drop).
    pub(super) disconnecting: bool,
    /// The rdma_cm handler resolves the route, or creates the QP and the slots, with this
    /// lock released: a teardown waits for it to end.
    pub(super) setting_up: bool,
}

impl ConnState {
    /// The number of the connection's QP, for the tracepoints (0 before it has one).
    pub(super) fn qp_num(&self) -> u32 {
        self.ep.as_ref().map_or(0, |ep| ep.qp_num())
    }
}

/// What a connection keeps, allocated before it is set up ([`Conn::slots`]).
pub(super) struct Slots {
    pub(super) tx: KVec<(Arc<Completion<TxSlot>>, SendChain)>,
    pub(super) tx_all: KVec<Arc<Completion<TxSlot>>>,
    pub(super) rx: KVec<Arc<Completion<RxSlot>>>,
    pub(super) owed: KVec<Owed>,
    pub(super) sinks: KVec<Sink>,
    pub(super) unkey: KVec<(Sink, Option<u32>)>,
    pub(super) checks: KVec<(Region, SinkCheck)>,
    pub(super) recycle: KVec<Region>,
    pub(super) tagged: KVec<Tagged>,
    pub(super) early: KVec<(Arc<Completion<RxSlot>>, u32, Option<u32>)>,
}

impl Slots {
    /// Bytes they take: the message buffers, the chains' storage, the slots and the
    /// vectors' storage (what a connection allocates beyond its QP and CQs).
    pub(super) fn footprint(&self) -> usize {
        use verbs::{arc_footprint, vec_footprint as v};
        let tx: usize = self
            .tx
            .iter()
            .map(|(s, c)| {
                arc_footprint::<Completion<TxSlot>>() + s.value().buf.footprint() + c.footprint()
            })
            .sum();
        let rx: usize = self
            .rx
            .iter()
            .map(|r| arc_footprint::<Completion<RxSlot>>() + r.value().buf.footprint())
            .sum();
        tx + rx
            + v(&self.tx)
            + v(&self.tx_all)
            + v(&self.rx)
            + v(&self.owed)
            + v(&self.sinks)
            + v(&self.unkey)
            + v(&self.checks)
            + v(&self.recycle)
            + v(&self.tagged)
            + v(&self.early)
    }
}

/// Something owed to the peer, waiting for a credit and a send slot.
// A GET carries its registrations inline (544 bytes): the queue's room is reserved at
// setup, and boxing them would allocate per request in completion context.
#[allow(clippy::large_enum_variant)]
pub(super) enum Owed {
    /// The answer to a ping.
    Pong(u64),
    /// A console's request, answered by the interfaces' [`Control`] on the connection's
    /// work item (the console's locks are never taken in a completion handler).
    Control(u64, crate::selftest::control::Payload),
    /// The verdict on a PUT's data.
    Result(u64, i32),
    /// A PUT to serve as the sink.
    Put {
        cookie: u64,
        size: u64,
        seed: u32,
        check: Check,
    },
    /// A GET whose data goes back inline.
    GetInline {
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
