// SPDX-License-Identifier: GPL-2.0

//! GET and ping: the peer's data read into this side's sink; round trips.

use super::*;

impl Conn {
    /// GET: moves `len(region)` bytes from the peer into `region`. Unless `check` is none
    /// the peer writes the pattern of `seed` and it is checked here: `EBADMSG` means the
    /// data is corrupt. The local registrations are dead before this returns, whatever it
    /// returns. Retried while the peer is busy. Within the connection's inline size, the
    /// data comes back in the answer ([`inline`]).
    pub(crate) fn get_region(
        &self,
        region: &Region,
        seed: u32,
        check: Check,
        timeout_ms: u32,
    ) -> Result {
        if self.goes_inline(region) {
            self.retry_busy(timeout_ms, |ms| self.get_inline(region, seed, check, ms))?;
        } else {
            self.retry_busy(timeout_ms, |ms| self.get_once(region, seed, check, ms))?;
        }
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
    pub(super) fn get_once(&self, region: &Region, seed: u32, check: Check, ms: u32) -> Result {
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
        match self.wait_answer(st, cookie, ms)? {
            Step::Done(inv) => Ok(inv),
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
            match self.wait_answer(&mut st, cookie, timeout_ms)? {
                Step::Done(_) => Ok(()),
                _ => Err(EINVAL),
            }
        });
        self.forget_xfer(&mut st, cookie);
        drop(st);
        r?;
        Ok(start.elapsed().as_micros_ceil() as u64)
    }
}
