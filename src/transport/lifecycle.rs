// SPDX-License-Identifier: GPL-2.0

//! A connection's life: setting up its QP and buffers, connecting, failing (its teardown
//! is [`teardown`]'s).

use super::*;

impl Conn {
    pub(super) fn new(
        iface: Arc<Iface>,
        peer: SockAddr,
        active: bool,
        peer_iface: Option<SockAddr>,
        asked: ConnParams,
        ticket: Option<ConnTicket>,
    ) -> Result<Arc<Self>> {
        let share = iface.share_of(peer.ip)?;
        Arc::pin_init(
            pin_init!(Self {
                iface,
                peer,
                active,
                peer_iface,
                st <- new_bh_spinlock!(ConnState {
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
                    mem: 0,
                    tx_free: KVec::new(),
                    tx_all: KVec::new(),
                    rx: KVec::new(),
                    owed: KVec::new(),
                    next_cookie: 1,
                    last_tx: Instant::now(),
                    last_rx: Instant::now(),
                    #[cfg(fastreg_test)]
                    mangle: None,
                    xfers: Records::new(),
                    finished: Records::new(),
                    spare: KVec::new(),
                    #[cfg(fastreg_test)]
                    probe: None,
                    in_line: false,
                    sinks: KVec::new(),
                    unkey: KVec::new(),
                    checks: KVec::new(),
                    recycle: KVec::new(),
                    prepared: None,
                    work_wanted: false,
                    tagged: KVec::new(),
                    early: KVec::new(),
                    draining: false,
                    stats: Stats::default(),
                    same_pool: false,
                    in_connect: false,
                    after_connect: None,
                    held: false,
                    disconnect_owed: false,
                    disconnecting: false,
                    setting_up: false,
                }, "fastreg::Conn::st"),
                cv <- new_condvar!("fastreg::Conn::cv"),
                work <- kernel::new_work!("fastreg::Conn::work"),
                later <- kernel::new_delayed_work!("fastreg::Conn::later"),
                share,
                _ticket: ticket,
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
    /// negotiated `max_regs`; see [`crate::rules::budget`]).
    pub(super) fn chain_wrs(res: &DevRes, max_payload: u32, max_regs: u16) -> u32 {
        let local = res.geo.max_mrs_for(max_payload.into());
        crate::rules::budget::per_transfer_with(local, max_regs.into()).total()
    }

    /// Queue sizes for `qd` transfers of up to `max_payload` bytes in up to `max_regs`
    /// registrations: the send queue holds `qd` transfers' chains and the reserved
    /// messages ([`crate::rules::budget::sq_depth`]).
    pub(super) fn caps(res: &DevRes, qd: u16, max_payload: u32, max_regs: u16) -> QpCaps {
        let slots = u32::from(qd) + EXTRA;
        let chain = Self::chain_wrs(res, max_payload, max_regs);
        QpCaps {
            send_wr: crate::rules::budget::sq_depth(qd.into(), chain).unwrap_or(u32::MAX),
            recv_wr: slots + 1,
            send_sge: 1,
            recv_sge: 1,
        }
    }

    /// Allocates message slots and buffers for queue depth `qd` and the parameters asked,
    /// and the room the completion path may need per transfer: everything a connection
    /// keeps is reserved here, with no lock held ([`Conn::install`] moves it in).
    pub(super) fn slots(self: &Arc<Self>, asked: &ConnParams, qd: u16) -> Result<Slots> {
        let slots = (u32::from(qd) + EXTRA) as usize;
        let pd = &self.iface.res.pd;
        // Every slot's chain has room for the largest transfer's work requests: a handler
        // that builds one (a PUT's RDMA WRITEs and LOCAL_INVs once its sink answered)
        // allocates nothing.
        let wrs = Self::chain_wrs(&self.iface.res, asked.max_payload, asked.max_regs) as usize;
        let mut tx = KVec::with_capacity(slots, GFP_KERNEL)?;
        let mut tx_all = KVec::with_capacity(slots, GFP_KERNEL)?;
        let mut rx = KVec::with_capacity(slots, GFP_KERNEL)?;
        for _ in 0..slots {
            let slot = Completion::new(TxSlot {
                conn: self.clone(),
                buf: MsgBuf::new(pd, &self.iface.msgs, asked.max_msg as usize)?,
            })?;
            tx_all.push(slot.clone(), GFP_KERNEL)?;
            tx.push((slot, SendChain::with_capacity(wrs, wrs)?), GFP_KERNEL)?;
            rx.push(
                Completion::new(RxSlot {
                    conn: self.clone(),
                    buf: MsgBuf::new(pd, &self.iface.msgs, asked.max_msg as usize)?,
                })?,
                GFP_KERNEL,
            )?;
        }
        Ok(Slots {
            tx,
            tx_all,
            rx,
            owed: KVec::with_capacity(slots, GFP_KERNEL)?,
            sinks: KVec::with_capacity(slots, GFP_KERNEL)?,
            unkey: KVec::with_capacity(slots, GFP_KERNEL)?,
            // A sink's check is queued once its keys are dead, and the next sink is served
            // only after the queued checks (by the same work item): twice the depth is room.
            checks: KVec::with_capacity(2 * slots, GFP_KERNEL)?,
            recycle: KVec::with_capacity(2 * slots, GFP_KERNEL)?,
            tagged: KVec::with_capacity(slots, GFP_KERNEL)?,
            early: KVec::with_capacity(slots, GFP_KERNEL)?,
        })
    }

    /// Moves the slots and room of [`Conn::slots`] into the connection and posts the
    /// receives. Under the connection's lock: allocates nothing. On failure the slots
    /// stay with the connection, for its teardown.
    pub(super) fn install(&self, st: &mut ConnState, ep: &Endpoint<Ctx>, s: Slots) -> Result {
        st.mem = s.footprint();
        // The slots refer to the connection: teardown breaks the cycle, and finds them here
        // whatever happens next.
        st.tx_free = s.tx;
        st.tx_all = s.tx_all;
        st.rx = s.rx;
        // Empty until the connection is set up: nothing is lost.
        st.owed = s.owed;
        st.sinks = s.sinks;
        st.unkey = s.unkey;
        st.checks = s.checks;
        st.recycle = s.recycle;
        st.tagged = s.tagged;
        st.early = s.early;
        st.held = !self.active && Self::is_iwarp(ep);
        for r in st.rx.iter() {
            ep.post_recv(&r.value().buf, r)?;
        }
        Ok(())
    }

    /// Starts an active connection.
    pub(super) fn start_active(self: &Arc<Self>) -> Result {
        let ep = Endpoint::new(Ctx::Conn(self.clone()))?;
        let mut st = self.st.lock();
        if self.on(&mut st, Event::Connect, "") != Action::ResolveAddr {
            // Closed before it started (by its interface's shutdown, a close, a stale
            // incarnation): the endpoint, which refers to the connection, goes now, not
            // into a connection nobody will tear down.
            drop(st);
            drop(ep);
            return Err(ENODEV);
        }
        st.ep = Some(ep.clone());
        drop(st);
        // From a privileged port, so the peer can tell this kernel from a user process on
        // the same address (`require_privileged_port`).
        if let Err(e) = ep.bind_privileged(self.iface.addr) {
            pr_limited!(
                pr_err,
                "{} -> {}: no free privileged source port ({:?})\n",
                self.iface.addr,
                self.peer,
                e
            );
            return Err(e);
        }
        ep.resolve_addr(self.peer, RESOLVE_MS)?;
        Ok(())
    }

    /// Applies `event`; records `reason` when it ends the connection. Returns the action.
    pub(super) fn on(&self, st: &mut ConnState, event: Event, reason: &'static str) -> Action {
        let (s, a) = conn_state::next(st.state, event);
        if matches!(a, Action::Teardown | Action::TeardownAndRetry) {
            if st.reason.is_none() {
                st.reason = Some(reason);
                self.iface.count_closed(reason);
            }
            if st.state == State::Established {
                pr_limited!(
                    conn,
                    pr_info,
                    "{} {} {}: closing: {}\n",
                    self.iface.addr,
                    self.dir(),
                    self.peer,
                    reason
                );
            }
            // An established connection refuses posts now and is disconnected by the
            // interface's dial work (kicked below), so that everything posted flushes and
            // the peer hears of it without waiting for the teardown; `rdma_disconnect` may
            // sleep (a mutex on IB, a wait on iWARP), so never here, under this lock, maybe
            // in a handler. Before that there is nothing to break, and on iWARP
            // `rdma_disconnect` would wait for the connect or accept still in progress,
            // whose end runs the CM handler, which needs this lock. The teardown
            // disconnects, with no lock held.
            if st.state == State::Established {
                if let Some(ep) = &st.ep {
                    ep.refuse_posts();
                    st.disconnect_owed = true;
                }
            }
        }
        let moved = st.state != s;
        if moved {
            verbs::trace::conn_state(
                verbs::trace::ip(&self.iface.addr),
                verbs::trace::ip(&self.peer),
                self.peer.port,
                self.active,
                st.qp_num(),
                st.state.name(),
                s.name(),
                st.reason.unwrap_or(""),
            );
        }
        st.state = s;
        if moved && matches!(s, State::Established | State::Closing | State::Closed) {
            // Whoever waits for a connection to the peer hears of it ([`super::dial`]).
            self.iface.kick_dials(None);
        }
        if matches!(s, State::Closing | State::Closed) {
            // Every transfer hears of it; they end when the QP is drained, or now when
            // nothing of theirs is posted (reported by [`Conn::deliver`]).
            self.xfers_down(st);
        }
        self.cv.notify_all();
        a
    }

    /// `->` for a connection this side opened, `<-` for one it accepted (for logs).
    pub(super) fn dir(&self) -> &'static str {
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
    /// the dial's round timeout ([`crate::rules::dial_state::ROUND_MS`]) bounds the wait.
    pub(super) fn wr_failed(&self, st: &mut ConnState, wc: &Wc<'_>, reason: &'static str) {
        if matches!(st.state, State::Closing | State::Closed) {
            return;
        }
        // An injected flush (`fastreg_fail_wr`) has no CM event behind it.
        if wc.flushed() && !wc.injected() && self.active && st.state == State::Connecting {
            return;
        }
        pr_limited!(
            conn,
            pr_err,
            "{} {}: {}: {}{}\n",
            self.iface.addr,
            self.peer,
            reason,
            wc.status_msg().to_str().unwrap_or("?"),
            if wc.injected() { " (injected)" } else { "" }
        );
        self.on(st, Event::Error, reason);
    }

    /// Fails the connection with `reason`.
    pub(super) fn fail(&self, reason: &'static str) {
        let mut st = self.st.lock();
        self.on(&mut st, Event::Error, reason);
    }

    /// Sends the connect request (see the [`CmEvent::RouteResolved`] handler), on the
    /// module's workqueue, unless a teardown came first.
    pub(super) fn connect_work(
        self: Arc<Self>,
        ep: Arc<Endpoint<Ctx>>,
        private: [u8; wire::CONN_LEN],
    ) {
        let go = self.st.lock().state == State::Connecting;
        let iwarp = Self::is_iwarp(&ep);
        let r = if go {
            // On the module's workqueue, not in the id's handler.
            ep.connect(&ConnParam {
                private: &private,
                rd_atomic: 16,
            })
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
            self.connect_answered(&mut st);
        }
        if let Err(e) = r {
            st.connect_err = Some(e.to_errno());
            self.on(&mut st, Event::Error, "connect failed");
        }
    }

    /// On iWARP, the connecting side sends first (see `ConnState::held`): once its
    /// connection is established, a NOOP unless something went already. Called when it is
    /// established and by the tick, which retries a NOOP that found no room.
    pub(super) fn open_iwarp(&self, st: &mut ConnState) {
        if !self.active || st.stats.tx != 0 {
            return;
        }
        // Dropped before the lock is released: never the last reference.
        let Some(ep) = st.ep.clone() else { return };
        if !Self::is_iwarp(&ep) {
            return;
        }
        match self.send_locked(st, Body::Noop, true) {
            // No credit or send slot (not on a connection that has sent nothing): the
            // tick tries again.
            Err(e) if e == EAGAIN => {}
            // The peer would wait for a first message that never comes.
            Err(_) => {
                self.on(st, Event::Error, "cannot open the connection");
            }
            Ok(()) => {}
        }
    }

    /// Whether `ep` is on an iWARP device.
    fn is_iwarp(ep: &Endpoint<Ctx>) -> bool {
        ep.device().is_some_and(|d| d.is_iwarp())
    }
}
