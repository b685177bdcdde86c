// SPDX-License-Identifier: GPL-2.0

//! Transfers this side starts: records advanced by events, never by a sleeping thread.
//!
//! [`Conn::submit`] queues a record ([`Xfer`]); [`Conn::drive`] starts queued records in
//! order as room, credits and MRs allow and posts the next chain of those in flight; the
//! receive and send completion handlers, the tick and the teardown feed each record the
//! events of [`crate::rules::xfer_state`] and do what it answers. A finished record is reported
//! by [`Conn::deliver`], with no lock held, from whichever context finished it (a
//! completion handler, the tick, the teardown, or the connection's own work item when
//! nothing else runs: MRs came back, a busy peer's pause is over, a submission failed at
//! once).

use super::*;

/// An operation on a peer. Small (it is passed by value down the submission path, whose
/// stack the completion path shares): a console's request is shared, not carried.
#[derive(Clone, Debug)]
pub(crate) enum Request {
    /// An IMMEDIATE round trip.
    Ping,
    /// Moves the region to the peer, filled with the pattern of `seed`; the peer checks it.
    Put {
        /// Seed of the data pattern.
        seed: u32,
        /// What the peer checks.
        check: Check,
    },
    /// Fills the region from the peer with the pattern of `seed`, checked here.
    Get {
        /// Seed of the data pattern.
        seed: u32,
        /// What is checked.
        check: Check,
    },
    /// A console's request (`crate::selftest::control`), answered in [`Outcome::reply`].
    Control(Arc<crate::selftest::control::Payload>),
}

/// The outcome of an operation, given to its client.
pub(crate) struct Outcome {
    /// The region the operation was submitted with.
    pub(crate) region: Option<Region>,
    /// `Ok`, or why it failed: `EBADMSG` when the data was checked and differs,
    /// `ETIMEDOUT`, `ECONNABORTED` when the connection failed under it, `EMSGSIZE` beyond
    /// the negotiated limits, or the connection's error.
    pub(crate) result: Result,
    /// Microseconds from the submission to the end.
    pub(crate) usecs: u64,
    /// A console's request: the node's answer, when it came.
    pub(crate) reply: Option<KBox<crate::selftest::control::Payload>>,
}

/// Who is told of the outcome of the transfers it submits.
pub(crate) trait Client: Send + Sync {
    /// Called exactly once per transfer submitted, with the `token` it was submitted with,
    /// when every key of the transfer is dead: in process context with no fastreg lock
    /// held, from a completion handler, the periodic work or a teardown, so it must not
    /// sleep for long. `me` is the client the transfer was submitted with (to submit again
    /// without allocating).
    fn done(&self, me: &Arc<dyn Client>, token: usize, o: Outcome);
}

/// What starting a queued record came to.
enum Start {
    /// Its request is out (or it failed and is finished).
    Went,
    /// It waits for room, MRs or a busy peer's pause: the records after it wait too, so
    /// that they start in the order they were submitted (a record the peer refused as busy
    /// keeps its turn: letting those behind it go first had the slowest of 2048 transfers
    /// on a pool of 4 MRs wait 3 times the average).
    Wait,
}

impl Conn {
    /// Queues `req` (with `region`, for `timeout_ms` in all); `client` is told of its
    /// outcome with `token`. `record` keeps a PUT's sink registrations (test hook). Fails
    /// (giving the region back) only when the connection is not established or no memory
    /// is left for the record.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn submit(
        self: &Arc<Self>,
        req: Request,
        region: Option<Region>,
        timeout_ms: u32,
        client: Arc<dyn Client>,
        token: usize,
        record: bool,
    ) -> core::result::Result<(), (Error, Option<Region>)> {
        let (seed, check) = match req {
            Request::Ping | Request::Control(_) => (0, Check::None),
            Request::Put { seed, check } | Request::Get { seed, check } => (seed, check),
        };
        let len = region.as_ref().map_or(0, |r| r.buffer().len());
        let nmrs = region.as_ref().map_or(0, |r| r.nmrs() as usize);
        if !matches!(req, Request::Ping | Request::Control(_)) && region.is_none() {
            return Err((EINVAL, region));
        }
        if let (Request::Put { .. }, Some(r)) = (&req, &region) {
            // Filled before the record exists: the buffer is the caller's until then.
            if let Err(e) = region::write_pattern(r, seed, check) {
                return Err((e, region));
            }
        }
        let ctl = match &req {
            Request::Control(p) => match KBox::new(**p, GFP_KERNEL) {
                Ok(b) => Some(b),
                Err(e) => return Err((e.into(), region)),
            },
            _ => None,
        };
        // The MR lists of a record reported before, when there is one (at steady state a
        // submission allocates nothing), with room for its MRs made with no lock held.
        let (mut free, mut local, mut pending) = self.st.lock().spare.pop().unwrap_or_default();
        let lists = free
            .reserve(nmrs, GFP_KERNEL)
            .and_then(|()| local.reserve(nmrs, GFP_KERNEL))
            .and_then(|()| pending.reserve(nmrs, GFP_KERNEL));
        if let Err(e) = lists {
            return Err((e.into(), region));
        }
        // Room for the record among those in flight, those finished and the chains that
        // finish them: the handlers that advance it allocate nothing.
        let mut st = match self.lock_with_room() {
            Ok(st) => st,
            Err(e) => return Err((e, region)),
        };
        if st.state != State::Established {
            return Err((not_connected(), region));
        }
        let inline = st
            .params
            .is_some_and(|p| len > 0 && len <= usize::from(p.max_inline));
        let kind = match (&req, inline) {
            (Request::Ping | Request::Control(_), _) => Kind::Ping,
            (Request::Put { .. }, true) => Kind::PutInline,
            (Request::Put { .. }, false) => Kind::Put,
            (Request::Get { .. }, true) => Kind::GetInline,
            (Request::Get { .. }, false) => Kind::Get,
        };
        let registered = matches!(kind, Kind::Put | Kind::Get);
        let size: u64 = match (&region, registered) {
            (Some(r), true) => r.lens().iter().sum(),
            _ => len as u64,
        };
        let cookie = st.next_cookie;
        st.next_cookie += 1;
        // Within the room made above.
        let pushed = st.xfers.push(
            Xfer {
                cookie,
                t: Track::new(kind, check != Check::None),
                seed,
                check,
                region,
                free,
                local,
                pending,
                start: Instant::now(),
                timeout_ms,
                sent: None,
                not_before: None,
                room_since: None,
                pause_us: 50,
                regs: Regs::new(),
                sink_cookie: 0,
                size,
                inv_rkey: None,
                inv: None,
                client,
                token,
                record,
                waits_mrs: false,
                grow: 0,
                grow_err: None,
                ctl,
            },
            GFP_NOWAIT,
        );
        if let Err((e, x)) = pushed {
            return Err((e, x.region));
        }
        verbs::trace::xfer_submit(&verbs::trace::XferEvent {
            raddr: verbs::trace::ip(&self.peer),
            qp_num: st.qp_num(),
            cookie,
            kind: kind.name(),
            bytes: size,
            regs: if registered { nmrs as u32 } else { 0 },
        });
        self.drive(&mut st, Runs::Worker);
        // MRs to allocate, a request to serve: the work item's.
        let finished = !st.finished.is_empty() || core::mem::take(&mut st.work_wanted);
        drop(st);
        // Not reported from here: the client may be submitting from its own callback.
        if finished {
            self.kick(None);
        }
        Ok(())
    }

    /// The connection's lock, with room for one more record in every list a record may be
    /// in (in flight, finished, the chains that finish it, the spare MR lists): the room
    /// is made with the lock released, and the lock taken again until it is there.
    // Not inlined: its frame is not on the stack of the drive that follows.
    #[inline(never)]
    fn lock_with_room(&self) -> Result<ConnGuard<'_>> {
        loop {
            let st = self.st.lock();
            let more = st.xfers.len() + 1;
            let all = more + st.finished.len();
            let xfers = st.xfers.short_of(1);
            let finished = st.finished.short_of(more);
            let tagged = st.tagged.len() + more;
            let tagged = (st.tagged.capacity() < tagged).then_some(tagged);
            let spare = st.spare.len() + all;
            let spare = (st.spare.capacity() < spare).then_some(spare);
            if xfers.is_none() && finished.is_none() && tagged.is_none() && spare.is_none() {
                return Ok(st);
            }
            drop(st);
            let mut xfers = xfers
                .map(|n| Records::with_room(n, GFP_KERNEL))
                .transpose()?;
            let mut finished = finished
                .map(|n| Records::with_room(n, GFP_KERNEL))
                .transpose()?;
            let mut tagged = tagged
                .map(|n| KVec::with_capacity(n, GFP_KERNEL))
                .transpose()?;
            let mut spare = spare
                .map(|n| KVec::with_capacity(n, GFP_KERNEL))
                .transpose()?;
            let mut st = self.st.lock();
            if let Some(x) = xfers.as_mut() {
                st.xfers.move_into(x);
            }
            if let Some(f) = finished.as_mut() {
                st.finished.move_into(f);
            }
            if let Some(t) = tagged.as_mut() {
                crate::room::swap_bigger(&mut st.tagged, t);
            }
            if let Some(s) = spare.as_mut() {
                crate::room::swap_bigger(&mut st.spare, s);
            }
            drop(st);
            // The old storage is freed here, with the lock released.
        }
    }

    /// Moves every record as far as it can go now: the next chain of those in flight,
    /// then the queued ones in order; then answers and credits ([`Conn::pump`]).
    pub(super) fn drive(self: &Arc<Self>, st: &mut ConnState, runs: Runs) {
        self.pump(st, runs);
        // Steps of transfers in flight first: they free what new ones wait for.
        for i in 0..st.xfers.len() {
            if st.state != State::Established {
                break;
            }
            match (st.xfers[i].t.state(), st.xfers[i].t.keys()) {
                (xfer_state::State::Acked, _) if self.has_room(st, Room::Message) => {
                    self.post_data(st, i)
                }
                (xfer_state::State::Unkeying, Keys::Live) => {
                    let n = st.xfers[i].local.len();
                    if self.has_room(st, Room::Local(n)) {
                        self.post_unkey(st, i)
                    }
                }
                _ => {}
            }
        }
        // Only the record that tries to take MRs below keeps its place in the pool's line.
        for x in st.xfers.iter_mut() {
            x.waits_mrs = false;
        }
        for i in 0..st.xfers.len() {
            if st.state != State::Established {
                break;
            }
            if st.xfers[i].t.state() != xfer_state::State::Queued {
                continue;
            }
            match self.start(st, i) {
                Start::Went => {}
                Start::Wait => break,
            }
        }
        self.pump(st, runs);
        self.reap(st);
    }

    /// Applies `ev` to record `i` and does what its state machine answers (but reporting:
    /// [`Conn::reap`] and [`Conn::deliver`] do that).
    pub(super) fn apply(&self, st: &mut ConnState, i: usize, ev: XEvent) {
        let Some(x) = st.xfers.get_mut(i) else { return };
        match x.t.on(ev) {
            XAction::None | XAction::PostData | XAction::PostInvalidate | XAction::Finish => {}
            XAction::AbortPut => {
                let (sink, e) = (x.sink_cookie, x.t.result().err().unwrap_or(0));
                self.abort_put(st, sink, Error::from_errno(e));
            }
            XAction::FailConn => {
                self.on(st, Event::Error, "a transfer gave up waiting for its peer");
            }
            XAction::Violation(why) => self.violation(st, why),
        }
    }

    /// The index of the record of `cookie`, if its request went out.
    pub(super) fn find(st: &ConnState, cookie: u64) -> Option<usize> {
        st.xfers
            .iter()
            .position(|x| x.cookie == cookie && x.t.in_flight())
    }

    /// The connection is going down: every record hears of it.
    pub(super) fn xfers_down(&self, st: &mut ConnState) {
        for i in 0..st.xfers.len() {
            let _ = st.xfers[i].t.on(XEvent::ConnFailed);
        }
    }

    /// The connection is drained: no work request names anything of it. Every record ends;
    /// the MRs whose state is unknown are destroyed, never reused.
    pub(super) fn xfers_drained(self: &Arc<Self>, st: &mut ConnState) {
        let res = self.iface.res.clone();
        for x in st.xfers.iter_mut() {
            let _ = x.t.on(XEvent::Drained);
            give_up(&res, &mut x.local, &mut x.pending);
        }
        self.reap(st);
    }

    /// Tries to start queued record `i`.
    fn start(self: &Arc<Self>, st: &mut ConnState, i: usize) -> Start {
        if let Some(t) = st.xfers[i].not_before {
            let left = t - Instant::<Monotonic>::now();
            if left > Delta::ZERO {
                // The work item may run a jiffy early: timed again for what is left.
                self.kick(Some(Self::jiffies_after(left)));
                return Start::Wait;
            }
            st.xfers[i].not_before = None;
        }
        if let Err(e) = self.fits(st, i) {
            self.apply(st, i, XEvent::NotPosted(e.to_errno()));
            return Start::Went;
        }
        if !self.has_room(st, Room::Request) {
            // Waiting for room, not for MRs: out of the pool's line (`reap`), so that
            // a peer that keeps its credits costs no other connection its MRs.
            let x = &mut st.xfers[i];
            x.waits_mrs = false;
            x.room_since.get_or_insert_with(Instant::now);
            return Start::Wait;
        }
        st.xfers[i].room_since = None;
        let kind = st.xfers[i].t.kind();
        if matches!(kind, Kind::Put | Kind::Get) {
            match self.take_mrs(st, i) {
                Ok(()) => {}
                Err(e) if e == EAGAIN || e == crate::reg::pool::GROW => return Start::Wait,
                Err(e) => {
                    self.apply(st, i, XEvent::NotPosted(e.to_errno()));
                    return Start::Went;
                }
            }
        }
        self.apply(st, i, XEvent::Posted);
        let r = match kind {
            Kind::Ping => self.send_ping(st, i),
            Kind::Put => self.send_put_req(st, i),
            Kind::Get => self.send_get_req(st, i),
            Kind::PutInline => self.send_put_inline(st, i),
            Kind::GetInline => self.send_get_inline(st, i),
        };
        match r {
            Ok(()) => {
                let x = &mut st.xfers[i];
                x.sent = Some(Instant::now());
                if !matches!(kind, Kind::Ping | Kind::Put | Kind::Get) {
                    st.stats.inline += 1;
                }
            }
            // The device may have taken part of the chain: the connection failed, and the
            // record ends when the QP is drained.
            Err(_) if st.state != State::Established => {}
            Err(e) => {
                let res = self.iface.res.clone();
                let x = &mut st.xfers[i];
                give_up(&res, &mut x.local, &mut x.pending);
                self.apply(st, i, XEvent::NotPosted(e.to_errno()));
            }
        }
        Start::Went
    }

    /// Takes the MRs record `i` needs, all at once, first come first served among the
    /// connections waiting for the pool (and leaving what serving needs); `EAGAIN` when it
    /// must wait: the pool kicks this connection when MRs come back.
    fn take_mrs(self: &Arc<Self>, st: &mut ConnState, i: usize) -> Result {
        let x = &mut st.xfers[i];
        if let Some(e) = x.grow_err.take() {
            return Err(e);
        }
        let Some(region) = x.region.as_ref() else {
            return Err(EINVAL);
        };
        let n = region.nmrs();
        if x.free.len() as u32 >= n {
            return Ok(());
        }
        if st.same_pool {
            self.pool_can_serve(region)?;
        }
        let res = &self.iface.res;
        let me: Arc<dyn crate::reg::pool::Waiter> = self.clone();
        // MRs are never allocated under this lock: the work item allocates them
        // ([`crate::reg::pool::GROW`], [`Conn::grow_pool`]) and this is tried again.
        let r = res
            .pool
            .try_get(n, res.pool.reserve(), &mut x.free, &me, false);
        if r.as_ref().is_err_and(|e| *e == crate::reg::pool::GROW) {
            x.grow = n;
            st.work_wanted = true;
        }
        x.waits_mrs = r.as_ref().is_err_and(|e| *e == EAGAIN);
        st.in_line |= st.xfers[i].waits_mrs;
        r
    }

    /// Allocates the MRs the first record that found too few needs, or room for it in the
    /// pool's line ([`Xfer::grow`]), with no lock held: on the connection's work item,
    /// before it drives the records. Returns whether it changed anything.
    pub(super) fn grow_pool(&self) -> bool {
        let (cookie, n) = {
            let st = self.st.lock();
            let x = st.xfers.iter().find(|x| x.grow > 0);
            match x {
                Some(x) if st.state == State::Established => (x.cookie, x.grow),
                _ => return false,
            }
        };
        let r = self.iface.res.pool.grow(n);
        // Room for its MRs too: a record whose MRs were registered and then refused (a
        // busy peer) has given its list's room away with them.
        let room = KVec::with_capacity(n as usize, GFP_KERNEL);
        let mut changed = r == Ok(true);
        let mut st = self.st.lock();
        let Some(x) = st.xfers.iter_mut().find(|x| x.cookie == cookie) else {
            return changed;
        };
        x.grow = 0;
        x.grow_err = r.err();
        match room {
            Ok(v) if x.free.is_empty() && x.free.capacity() < n as usize => {
                // Empty: nothing is lost (freed once the lock is dropped).
                let old = core::mem::replace(&mut x.free, v);
                drop(st);
                drop(old);
                changed = true;
            }
            Ok(_) => {}
            Err(e) => x.grow_err = Some(e.into()),
        }
        changed
    }

    /// Jiffies that surely cover `d` (a delayed work item runs up to a jiffy early).
    pub(super) fn jiffies_after(d: Delta) -> kernel::time::Jiffies {
        let ms = (d.as_micros_ceil().max(0) + 999) / 1000;
        msecs_to_jiffies(u32::try_from(ms).unwrap_or(u32::MAX)).saturating_add(1)
    }

    /// Transfers of this side whose request went out and that are not finished.
    fn in_flight(st: &ConnState) -> usize {
        st.xfers.iter().filter(|x| x.t.in_flight()).count()
    }

    /// Refuses record `i` when the connection's negotiated limits do not allow it
    /// (`EMSGSIZE`), before the peer would have to.
    fn fits(&self, st: &ConnState, i: usize) -> Result {
        let p = st.params.ok_or_else(not_connected)?;
        let Some(region) = st.xfers[i].region.as_ref() else {
            return Ok(());
        };
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
    pub(super) fn sq_room(&self, st: &ConnState) -> bool {
        let need = st
            .params
            .map(|p| Self::chain_wrs(&self.iface.res, p.max_payload, p.max_regs))
            .unwrap_or(1);
        st.ep.as_ref().is_some_and(|ep| ep.sq_room() >= need)
    }

    /// Whether what `room` describes can be posted now ([`Room`]).
    pub(super) fn has_room(&self, st: &ConnState, room: Room) -> bool {
        let depth = st.params.map_or(0, |p| usize::from(p.queue_depth));
        let message = || {
            !st.held
                && st.credits >= 2
                && !st.tx_free.is_empty()
                && st.owed.is_empty()
                && st.unkey.is_empty()
                && self.sq_room(st)
        };
        match room {
            Room::Request => message() && (Self::in_flight(st) < depth || self.flood()),
            Room::Message => message(),
            Room::Local(n) => self.local_room(st, n),
        }
    }

    /// Refuses at once (`EMSGSIZE`, naming the limit) a transfer that can never complete
    /// because its peer is an interface on the same device, so both ends take MRs from one
    /// pool, and together they need more than `pool_max`.
    fn pool_can_serve(&self, region: &Region) -> Result {
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
}
