// SPDX-License-Identifier: GPL-2.0

//! Transfer records of a connection, room to start one, waiting for its verdict, the tick.

use super::*;

impl Conn {
    /// Periodic checks: fails the connection when a transfer waits on the peer longer than
    /// `timeout_ms`, and sends a NOOP after `keepalive` idle seconds (0: never), which
    /// also finds out that a silent peer is gone (the send fails).
    pub(super) fn tick(&self, keepalive: u32, timeout_ms: u32) {
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
    pub(super) fn new_xfer(st: &mut ConnState, kind: Kind) -> Result<u64> {
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
                into: None,
            },
            GFP_KERNEL,
        )?;
        Ok(cookie)
    }

    /// The request of transfer `cookie`, of `size` bytes, went out: its timeout starts, and
    /// it counts against the queue depth until it is forgotten.
    pub(super) fn sent(st: &mut ConnState, cookie: u64, size: u64) {
        if let Some(x) = st.xfers.iter_mut().find(|x| x.cookie == cookie) {
            x.sent = Some(Instant::now());
            x.size = size;
        }
    }

    /// Stops tracking transfer `cookie`: its place in the queue depth is free.
    pub(super) fn forget_xfer(&self, st: &mut ConnState, cookie: u64) {
        st.xfers.retain(|x| x.cookie != cookie);
        self.cv.notify_all();
    }

    /// Transfers of this side whose request went out and that are not finished.
    fn in_flight(st: &ConnState) -> usize {
        st.xfers.iter().filter(|x| x.sent.is_some()).count()
    }

    /// Refuses a transfer of `region` that the connection's negotiated limits do not allow
    /// (`EMSGSIZE`), before the peer would have to.
    pub(super) fn fits(&self, st: &ConnState, region: &Region) -> Result {
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
    pub(super) fn sq_room(&self, st: &ConnState) -> bool {
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
    pub(super) fn wait_room(&self, st: &mut MutexGuard<'_, ConnState>, room: Room) -> Result {
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
    pub(super) fn wait_xfer(
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

    /// Waits up to `ms` for the peer's answer to transfer `cookie` (its step leaves
    /// `Waiting`); returns that step, or the error it failed with.
    pub(super) fn wait_answer(
        &self,
        st: &mut MutexGuard<'_, ConnState>,
        cookie: u64,
        ms: u32,
    ) -> Result<Step> {
        let mut left = msecs_to_jiffies(ms);
        match self.wait_xfer(st, cookie, &mut left, |x| !matches!(x.step, Step::Waiting))? {
            (Step::Failed(e), _) => Err(Error::from_errno(e)),
            (step, _) => Ok(step),
        }
    }

    /// Runs `once` (given the milliseconds left) until it succeeds, fails for a reason
    /// other than a busy peer (`EAGAIN`), or `timeout_ms` passed; pauses between tries.
    pub(super) fn retry_busy(
        &self,
        timeout_ms: u32,
        mut once: impl FnMut(u32) -> Result,
    ) -> Result {
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

    /// One try of a transfer of `region`: takes its MRs first, without the lock (serving
    /// never waits for MRs, so a transfer that holds the peer's MRs must not wait for its
    /// own), then runs `steps` under the lock with a new transfer's cookie, its timeout
    /// and those MRs; forgets the transfer and gives back the MRs `steps` did not use.
    pub(super) fn one_try<T>(
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
}
