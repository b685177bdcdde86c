// SPDX-License-Identifier: GPL-2.0

//! Serving a peer's PUT or GET: registering the sink or source, the RDMA, invalidation.

use super::*;

impl Conn {
    /// The free MRs of a transfer this side serves in `region`, leaving the node's own
    /// transfers their reserve (`share::serve_reserve`); `EAGAIN` when there are none.
    fn take_serving(res: &DevRes, region: &Region) -> Result<KVec<FrMr<Free>>> {
        let reserve = crate::share::serve_reserve(res.pool.max(), region.nmrs());
        region.take(&res.pool, reserve, None)
    }

    /// The sink of a PUT: registers a buffer and answers PUT_ACK with its registrations
    /// (the REG_MRs go first in the same chain). Without MRs or memory it answers PUT_NAK
    /// (`-EAGAIN`: busy, the source retries); a buffer this device would split into more
    /// registrations than negotiated is refused with `-EMSGSIZE`.
    pub(super) fn serve_put(
        &self,
        st: &mut ConnState,
        cookie: u64,
        size: u64,
        how: SinkCheck,
    ) -> Result {
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
                    pr_limited!(
                        pr_err,
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
                // Within the peer's share (else busy: the peer waits and retries).
                let charge = match self.charge_served(&region) {
                    Ok(c) => c,
                    Err(e) => {
                        self.iface.recycle(region);
                        return Err(e);
                    }
                };
                self.post_locked(
                    st,
                    Post::Msg,
                    |chain| {
                        let taken = Self::take_serving(&res, &region)?;
                        region.register_taken(&res.pool, access, chain, &mut regs, taken)?;
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
                .map(|_| (region, charge))
            });
        match r {
            Ok((region, charge)) => {
                let sink = Sink {
                    since: Instant::now(),
                    sink_cookie,
                    how,
                    region,
                    regs,
                    charge,
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
    pub(super) fn serve_get(
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
        let remote_inv = self.iface.serving_get(regs, remote_inv);
        let geo = self.iface.res.geo;
        let r = self
            .iface
            .serving_region(size as usize, geo)
            .and_then(|region| {
                // Within the peer's share (else busy: the peer waits and retries).
                let charge = match self.charge_served(&region) {
                    Ok(c) => c,
                    Err(e) => {
                        self.iface.recycle(region);
                        return Err(e);
                    }
                };
                region::fill(&region, seed, check)?;
                self.iface.corrupt_hook(&region)?;
                self.post_locked(
                    st,
                    Post::Msg,
                    |chain| {
                        let taken = Self::take_serving(&res, &region)?;
                        region::source_chain(
                            &res.pool,
                            &region,
                            regs.as_slice(),
                            taken,
                            chain,
                            &mut local,
                            &mut inv,
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
                .map(|slot| (slot, region, charge))
            });
        match r {
            Ok((slot, region, charge)) => {
                self.dup_done(st, cookie);
                st.tagged.push(
                    Tagged {
                        slot,
                        what: Finishing::ServedGet(region, inv, charge),
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
    pub(super) fn sink_done(
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
            pr_limited!(
                pr_err,
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
    pub(super) fn unkey(
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
            region::invalidate(
                &res.pool,
                &mut regs,
                inv,
                &mut SendChain::empty(),
                &mut pending,
            )
            .map_err(|_| "out of memory")?;
            return self
                .check_later(st, sink.region, sink.how)
                .map_err(|_| "out of memory");
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
                        what: Finishing::ServedPut(sink.region, pending, sink.how, sink.charge),
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

    /// Queues the check of a PUT's data this side received (its registrations are dead)
    /// for the connection's work item ([`Conn::run_checks`]).
    pub(super) fn check_later(&self, st: &mut ConnState, region: Region, how: SinkCheck) -> Result {
        // Within the room reserved at setup (see `ConnState::checks`).
        st.checks.push((region, how), GFP_NOWAIT)?;
        st.work_wanted = true;
        Ok(())
    }

    /// Checks the data of the PUTs served whose keys are dead, one at a time with the
    /// connection's lock released, and owes each source the verdict if it asked for a
    /// check. On the connection's work item.
    // Its frame (a region, a verdict) is not on the stack of the deliveries that follow.
    #[inline(never)]
    pub(super) fn run_checks(self: &Arc<Self>) {
        loop {
            let (region, how) = {
                let mut st = self.st.lock();
                if st.checks.is_empty() || matches!(st.state, State::Closing | State::Closed) {
                    return;
                }
                match st.checks.remove(0) {
                    Ok(c) => c,
                    Err(_) => return,
                }
            };
            let verdict = self
                .iface
                .corrupt_hook(&region)
                .and_then(|()| region::verify(&region, how.seed, how.check));
            let len = region.buffer().len() as u64;
            self.iface.recycle(region);
            let mut st = self.st.lock();
            st.stats.served += 1;
            self.iface.count_moved(true, len);
            let status = match verdict {
                Ok(found) => self.put_verdict(&mut st, found),
                Err(e) => e.to_errno(),
            };
            if how.check != Check::None
                && st
                    .owed
                    .push(Owed::Result(how.cookie, status), GFP_KERNEL)
                    .is_err()
            {
                self.on(&mut st, Event::Error, "out of memory");
                return;
            }
        }
    }

    /// The verdict on a PUT's data, served here: 0, or `-EBADMSG` (counted and logged
    /// with the first byte `found` to differ).
    pub(super) fn put_verdict(&self, st: &mut ConnState, found: Option<usize>) -> i32 {
        let Some(off) = found else { return 0 };
        st.stats.corrupt += 1;
        pr_limited!(
            pr_err,
            "{} <- {}: PUT data differs from the pattern at byte {}\n",
            self.iface.addr,
            self.peer,
            off
        );
        -(kernel::bindings::EBADMSG as i32)
    }
}
