// SPDX-License-Identifier: GPL-2.0

//! Connecting to peers: per-peer state ([`crate::rules::dial_state`]) advanced by events, not a
//! thread per attempt or per transfer.
//!
//! Transfers to a peer with no established connection wait on the peer (as o2iblnd's
//! `ibp_tx_queue`); synchronous callers wait for the peer's run to end. The interface's
//! dial work item ([`Iface::run_dials`]) advances every peer's run: it is kicked when a
//! transfer wants a peer, when a connection is established or goes down, by a pause's
//! timer and by the tick (a round's timeout). It starts rounds (new connections, which
//! rdma_cm advances in their handlers), observes their outcome, and releases whoever waits.
//! No interface-wide lock is held across an attempt or a pause: a dead or rejecting peer
//! delays no other.
//!
//! Two interfaces connecting to each other at once end with one connection: a request
//! from a peer this side is connecting to is refused with [`Reason::Race`] by the side
//! that wins [`negotiate::wins_race`]; the other accepts it, and its own rejected attempt
//! finds the peer's connection established ([`Iface::established`] counts connections in
//! both directions).

use super::*;
use crate::rules::dial_state::{
    self,
    Action as DAction,
    Dial,
    Down,
    Event as DEvent,
    Phase, //
};

/// Connecting to one peer.
pub(super) struct PeerDial {
    pub(super) peer: SockAddr,
    pub(super) d: Dial,
    /// What the next round asks for (lowered by rejects within a run).
    asked: ConnParams,
    /// The round's connection: this side's attempt, or one the peer is making to it.
    pub(super) conn: Option<Arc<Conn>>,
    /// Someone wants the peer and the dial work has not seen it yet.
    pub(super) want: bool,
    /// Runs ended, and how the last one did (for synchronous callers).
    pub(super) runs: u64,
    pub(super) last: Result,
    /// The incarnation of the peer's interface, as its listener said (in an accept or a
    /// reject of this side's request; 0: not heard yet). A connection the peer made to
    /// this side serves this side's transfers only if it claims that incarnation: the
    /// request's port and stamp are the requester's word, the listener's answer is not.
    pub(super) stamp: u64,
    /// The round could not start: the error, for the run to end with.
    start_err: Option<Error>,
}

/// The least [`Iface::max_dials`].
const MIN_DIALS: usize = 64;

/// What [`Iface::run_dials`] does once the interface's lock is dropped.
struct Todo {
    /// Rounds to start: the peer, the parameters, the round.
    starts: KVec<(SockAddr, ConnParams, u32)>,
    /// Runs that ended: whoever waits on the peer is released with the outcome.
    ends: KVec<(SockAddr, Result<Arc<Conn>>)>,
    /// Connections of rounds that ended, to tear down.
    drops: KVec<(Arc<Conn>, &'static str)>,
    /// Connections that failed and are owed a disconnect ([`Conn::disconnect_owed`]).
    disconnects: KVec<Arc<Conn>>,
    /// When to run again (milliseconds of [`Iface::now_ms`]).
    wake: Option<u64>,
}

impl Iface {
    /// Milliseconds since the interface was created (the dial state's clock).
    fn now_ms(&self) -> u64 {
        self.born.elapsed().as_millis().max(0) as u64
    }

    /// Runs the dial work soon (or after `delay`).
    pub(super) fn kick_dials(self: &Arc<Self>, delay: Option<kernel::time::Jiffies>) {
        let Some(wq) = verbs::queue(verbs::Wq::Conn) else {
            return;
        };
        // Already queued: it will see what this wanted it to see.
        match delay {
            None => {
                let _ = wq.enqueue::<_, 0>(self.clone());
            }
            Some(d) => {
                let _ = wq.enqueue_delayed::<_, 1>(self.clone(), d);
            }
        }
    }

    /// Most peers an interface dials at once (and remembers a failed run to): as many as
    /// the connections it accepts, at least [`MIN_DIALS`].
    fn max_dials(&self) -> usize {
        self.max_conns.max(MIN_DIALS)
    }

    /// The dial of `peer`, created if needed; `EBUSY` past [`Iface::max_dials`].
    pub(super) fn dial_of<'a>(
        &self,
        st: &'a mut IfaceState,
        peer: SockAddr,
    ) -> Result<&'a mut PeerDial> {
        let i = match st.dials.iter().position(|d| d.peer == peer) {
            Some(i) => i,
            None if st.dials.len() >= self.max_dials() => {
                pr_limited!(
                    pr_err,
                    "{} -> {}: not dialed: {} peers are being dialed or failed lately, the \
                     limit (max_conns)\n",
                    self.addr,
                    peer,
                    st.dials.len()
                );
                return Err(EBUSY);
            }
            None => {
                let d = PeerDial {
                    peer,
                    d: Dial::new(),
                    asked: self.local().params(0, 0),
                    conn: None,
                    want: false,
                    runs: 0,
                    last: Ok(()),
                    stamp: 0,
                    start_err: None,
                };
                st.dials.push(d, GFP_KERNEL)?;
                st.dials.len() - 1
            }
        };
        Ok(&mut st.dials[i])
    }

    /// The dial work: advances every peer's run (see the file's documentation).
    pub(super) fn run_dials(self: &Arc<Self>) {
        // One run at a time (the work item and its delayed twin may run at once); it is
        // held across rounds being started, never across a round or a pause.
        let _one = self.dialer.lock();
        let mut todo = Todo {
            starts: KVec::new(),
            ends: KVec::new(),
            drops: KVec::new(),
            disconnects: KVec::new(),
            wake: None,
        };
        let closed = {
            let mut st = self.st.lock();
            if !st.closed {
                self.advance(&mut st, &mut todo);
                Self::owed_disconnects(&st, &mut todo.disconnects);
            }
            st.closed
        };
        for c in todo.disconnects.drain_all() {
            c.disconnect_owed();
        }
        if closed {
            // [`Iface::shutdown`] released everyone; nothing is armed any more.
            return;
        }
        for (peer, asked, round) in todo.starts.drain_all() {
            self.start_round(peer, asked, round);
        }
        if let Some(at) = todo.wake {
            // Under `dialer`: a shutdown that took it after this sees nothing armed.
            let ms = at.saturating_sub(self.now_ms());
            let ms = u32::try_from(ms).unwrap_or(u32::MAX).saturating_add(1);
            self.kick_dials(Some(msecs_to_jiffies(ms).saturating_add(1)));
        }
        drop(_one);
        // Clients are called, and teardowns done, with no fastreg lock held.
        for (c, why) in todo.drops.drain_all() {
            // In the background while the device still connects it (siw: minutes).
            c.teardown_soon(why);
        }
        let mut ended = false;
        for (peer, r) in todo.ends.drain_all() {
            self.release(peer, r);
            ended = true;
        }
        if ended {
            self.connected.notify_all();
        }
    }

    /// The connections owed a disconnect (without memory to list them, the teardown
    /// disconnects them).
    fn owed_disconnects(st: &IfaceState, out: &mut KVec<Arc<Conn>>) {
        for c in st.conns.iter() {
            let owed = c.st.lock().disconnect_owed;
            if owed && out.push(c.clone(), GFP_KERNEL).is_err() {
                return;
            }
        }
    }

    /// Applies to every dial what happened: wants, its round's connection's fate, time.
    fn advance(&self, st: &mut IfaceState, todo: &mut Todo) {
        let now = self.now_ms();
        for i in 0..st.dials.len() {
            let peer = st.dials[i].peer;
            let up = Self::established_in(st, peer).ok().flatten();
            let conns = &mut st.conns;
            let d = &mut st.dials[i];
            let mut events = [None; 3];
            if core::mem::take(&mut d.want) {
                if !d.d.busy() && up.is_some() {
                    // Connected meanwhile (by this side or the peer): nothing to run.
                    d.d = Dial::new();
                    Self::end(d, todo, up.clone().ok_or_else(not_connected));
                    continue;
                }
                events[0] = Some(DEvent::Want);
            }
            // The peer connected (by either side's connection), or the round's connection
            // went down.
            if let Some(c) = up.as_ref().filter(|c| c.active) {
                // This side's own connection: its listener's word.
                d.stamp = c.st.lock().peer_stamp;
            }
            events[1] = match (&up, &d.conn) {
                (Some(_), _) if d.d.busy() => Some(DEvent::Up),
                (_, None) if d.start_err.is_some() => {
                    let e = d.start_err.take().unwrap_or(ENOMEM);
                    Some(DEvent::Down(Down::Fail(-e.to_errno())))
                }
                (_, Some(c)) if matches!(c.state(), State::Closing | State::Closed) => {
                    let c = c.clone();
                    Some(DEvent::Down(self.down(&c, d)))
                }
                _ => None,
            };
            events[2] = Some(DEvent::Tick);
            for ev in events.into_iter().flatten() {
                if matches!(ev, DEvent::Down(_)) {
                    if let Some(c) = d.conn.take() {
                        Self::drop_round(conns, todo, c, "connect failed");
                    }
                }
                match d.d.on(ev, now) {
                    DAction::None => {}
                    DAction::Attempt { round } => {
                        d.start_err = None;
                        if round == 0 {
                            d.asked = self.local().params(0, 0);
                        }
                        // The peer is connecting to this side: this round waits for that
                        // connection rather than racing it.
                        d.conn = Self::passive_in(conns, peer, d.stamp);
                        if d.conn.is_none() {
                            // Without memory the round's timeout ends the run.
                            let _ = todo.starts.push((peer, d.asked, round), GFP_KERNEL);
                        }
                    }
                    DAction::Connected => {
                        d.conn = None;
                        Self::end(d, todo, up.clone().ok_or_else(not_connected));
                    }
                    DAction::Fail(e) => {
                        let e = Error::from_errno(-e);
                        // A want answered from the backoff is not a new failure to log.
                        if ev != DEvent::Want {
                            pr_err!("{} -> {}: connecting failed: {:?}\n", self.addr, peer, e);
                        }
                        Self::end(d, todo, Err(e));
                    }
                    DAction::GiveUp => {
                        if let Some(c) = d.conn.take() {
                            pr_err!(
                                "{} -> {}: connect timed out ({})\n",
                                self.addr,
                                peer,
                                c.state().name()
                            );
                            Self::drop_round(conns, todo, c, "connect timed out");
                        }
                        Self::end(d, todo, Err(ETIMEDOUT));
                    }
                    DAction::WakeAt(t) => {
                        todo.wake = Some(todo.wake.map_or(t, |w| w.min(t)));
                    }
                }
            }
        }
        // Dials that hold nothing (no run, no connection to the peer, a failure long past)
        // go: the list holds the peers being dialed or failed lately, no more.
        let conns = &st.conns;
        st.dials.retain(|d| {
            let known = conns
                .iter()
                .any(|c| c.peer == d.peer || c.peer_iface == Some(d.peer));
            known || d.want || d.conn.is_some() || !d.d.reapable(now)
        });
    }

    /// A round's connection `c` is over: out of the interface's list, to be torn down
    /// (unless [`Iface::reap`] took it first: whoever takes it out tears it down).
    fn drop_round(conns: &mut KVec<Arc<Conn>>, todo: &mut Todo, c: Arc<Conn>, why: &'static str) {
        if todo.drops.reserve(1, GFP_KERNEL).is_err() {
            // Without memory: failed, and left to [`Iface::reap`].
            c.fail(why);
            return;
        }
        if let Some(i) = conns.iter().position(|x| Arc::ptr_eq(x, &c)) {
            let _ = conns.remove(i);
            // Within the capacity reserved above.
            let _ = todo.drops.push((c, why), GFP_NOWAIT);
        }
    }

    /// How `c`, a round's connection, went down; `asked` takes what the next round asks.
    fn down(&self, c: &Conn, d: &mut PeerDial) -> Down {
        let mut cst = c.st.lock();
        let err = cst.connect_err.map(Error::from_errno).unwrap_or(refused());
        if !c.active {
            // The peer's connection to this side failed: this side tries itself.
            return Down::Again;
        }
        if cst.peer_stamp != 0 {
            // The listener answered (a reject carries its stamp).
            d.stamp = cst.peer_stamp;
        }
        let asked = &mut d.asked;
        match cst.retry.take() {
            Some(Retry::With(lower)) => {
                pr_info!(
                    "{} -> {}: retrying with queue_depth={} max_payload={} max_regs={} \
                     max_msg={} max_inline={}\n",
                    self.addr,
                    c.peer,
                    lower.queue_depth,
                    lower.max_payload,
                    lower.max_regs,
                    lower.max_msg,
                    lower.max_inline
                );
                *asked = lower;
                Down::Lower
            }
            Some(Retry::Again(p)) => {
                *asked = p;
                Down::Again
            }
            Some(Retry::Fail) | None => {
                pr_err!(
                    "{} -> {}: connection failed: {}\n",
                    self.addr,
                    c.peer,
                    cst.reason.unwrap_or("?")
                );
                Down::Fail(-err.to_errno())
            }
        }
    }

    /// A run of `d` ended with `r`.
    fn end(d: &mut PeerDial, todo: &mut Todo, r: Result<Arc<Conn>>) {
        d.runs = d.runs.wrapping_add(1);
        d.last = r.as_ref().map(|_| ()).map_err(|e| *e);
        if todo.ends.push((d.peer, r), GFP_KERNEL).is_err() {
            // Without memory the waiting transfers are released at the next run.
            d.want = true;
        }
    }

    /// A connection the peer `peer` (whose listener said it is incarnation `stamp`) is
    /// making to this side, not up yet.
    fn passive_in(conns: &[Arc<Conn>], peer: SockAddr, stamp: u64) -> Option<Arc<Conn>> {
        conns
            .iter()
            .find(|c| {
                !c.active && c.peer_iface == Some(peer) && {
                    let cst = c.st.lock();
                    cst.state == State::PassiveWait && stamp != 0 && cst.peer_stamp == stamp
                }
            })
            .cloned()
    }

    /// Starts round `round` to `peer`, asking `asked`: a new connection, which rdma_cm
    /// advances in its handlers; its end kicks the dial work.
    fn start_round(self: &Arc<Self>, peer: SockAddr, asked: ConnParams, round: u32) {
        let conn = match Conn::new(self.clone(), peer, true, Some(peer), asked, None) {
            Ok(c) => c,
            Err(e) => return self.start_failed(peer, e),
        };
        conn.st.lock().stats.attempts = round + 1;
        {
            // Checked in the same lock section as the push: a connection never lands in
            // the list of an interface that has shut down.
            let mut st = self.st.lock();
            // The round is still this one's to make: not ended, and not waiting for the
            // peer's connection instead.
            let Some(i) = st.dials.iter().position(|d| {
                d.peer == peer
                    && d.conn.is_none()
                    && matches!(d.d.phase, Phase::Trying { round: r, .. } if r == round)
            }) else {
                return;
            };
            if st.closed {
                return;
            }
            if let Err(e) = st.conns.push(conn.clone(), GFP_KERNEL) {
                drop(st);
                return self.start_failed(peer, e.into());
            }
            st.dials[i].conn = Some(conn.clone());
        }
        if let Err(e) = conn.start_active() {
            let mut st = conn.st.lock();
            st.connect_err = Some(e.to_errno());
            st.retry = Some(Retry::Fail);
            conn.on(&mut st, Event::Error, "connect failed");
        }
    }

    /// A round to `peer` could not start (no memory): its run ends with `e`.
    fn start_failed(self: &Arc<Self>, peer: SockAddr, e: Error) {
        pr_err!("{} -> {}: no connection: {:?}\n", self.addr, peer, e);
        if let Some(d) = self.st.lock().dials.iter_mut().find(|d| d.peer == peer) {
            d.start_err = Some(e);
        }
        self.kick_dials(None);
    }

    /// Whether a request from the interface `from` (incarnation `stamp`) is refused as the
    /// losing side of a race (see the file's documentation): this side has a round of its
    /// own under way to `from` and wins [`negotiate::wins_race`], or it already has a
    /// connection up to that incarnation of `from`, made by this side (the peer's request
    /// crossed it). An interface never races itself, and a peer that restarted (another
    /// stamp) is never refused: its old connections are stale.
    pub(super) fn refuses_race(&self, st: &IfaceState, from: SockAddr, stamp: u64) -> bool {
        if from == self.addr {
            return false;
        }
        let key = |a: SockAddr| (u32::from_be_bytes(a.ip), a.port);
        let racing = st.dials.iter().any(|d| {
            d.peer == from
                && matches!(d.d.phase, Phase::Trying { .. })
                && d.conn.as_ref().is_none_or(|c| c.active)
        });
        if racing && negotiate::wins_race(key(self.addr), key(from)) {
            return true;
        }
        st.conns.iter().any(|c| {
            c.active && c.peer_iface == Some(from) && {
                let mut cst = c.st.lock();
                let up = cst.state == State::Established && cst.peer_stamp == stamp;
                if up {
                    // Unless the request crossed it, the peer lost its end of this one
                    // without a word reaching this side: a NOOP now finds out (it fails
                    // with the transport's retries, and the next request is accepted),
                    // whether or not keepalives are on. Without a credit the peer is
                    // holding some, so it is alive.
                    let _ = c.send_locked(&mut cst, Body::Noop, true);
                }
                up
            }
        })
    }
}

kernel::impl_has_work! {
    impl HasWork<Self, 0> for Iface { self.dial_work }
}

kernel::impl_has_delayed_work! {
    impl HasDelayedWork<Self, 1> for Iface { self.dial_later }
}

impl kernel::workqueue::WorkItem<0> for Iface {
    type Pointer = Arc<Iface>;

    fn run(this: Arc<Iface>) {
        this.run_dials();
    }
}

impl kernel::workqueue::WorkItem<1> for Iface {
    type Pointer = Arc<Iface>;

    fn run(this: Arc<Iface>) {
        this.run_dials();
    }
}

/// Keeps the dial state's errno numbers honest against the kernel's.
const _: () = {
    assert!(dial_state::ECONNREFUSED == kernel::bindings::ECONNREFUSED as i32);
    assert!(dial_state::ETIMEDOUT == kernel::bindings::ETIMEDOUT as i32);
};
