// SPDX-License-Identifier: GPL-2.0

//! PUT: this side's data written to the peer's sink.

use super::*;

impl Conn {
    /// PUT: moves `region` to the peer. Unless `check` is none the region is first filled
    /// with the pattern of `seed`, and the peer checks what arrived and reports:
    /// `EBADMSG` means the peer found the data corrupt. Retried while the peer is busy.
    /// Within the connection's inline size, the data goes in the request ([`inline`]).
    pub(crate) fn put_region(
        &self,
        region: &Region,
        seed: u32,
        check: Check,
        timeout_ms: u32,
    ) -> Result {
        region::write_pattern(region, seed, check)?;
        if self.goes_inline(region) {
            return self.retry_busy(timeout_ms, |ms| self.put_inline(region, seed, check, ms));
        }
        self.retry_busy(timeout_ms, |ms| {
            self.put_once(region, seed, check, ms).map(|_| ())
        })
    }

    /// One PUT try; returns the sink's registrations (for the stale rkey test).
    pub(super) fn put_once(
        &self,
        region: &Region,
        seed: u32,
        check: Check,
        ms: u32,
    ) -> Result<Regs> {
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
    pub(super) fn settle_chain(
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
    pub(super) fn wait_drained(&self, st: &mut MutexGuard<'_, ConnState>, cookie: u64) {
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
}
