// SPDX-License-Identifier: GPL-2.0

//! After a transfer is served: a PUT's sink whose data is in has its keys killed, then its
//! data checked on the connection's work item and the verdict owed to the source; the
//! buffers served go back to the interface's spares.

use super::*;

impl Conn {
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
        // Room reserved when the sink was served: no allocation here.
        let mut pending = core::mem::take(&mut sink.pending);
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

    /// Gives a served transfer's buffer back to the interface's spares, on the
    /// connection's work item ([`Conn::recycle_owed`]).
    pub(super) fn recycle_later(st: &mut ConnState, region: Region) {
        // Within the room reserved at setup (see `ConnState::recycle`); else it is freed
        // here rather than lost.
        if let Err(PushError(region)) = st.recycle.push_within_capacity(region) {
            drop(region);
        }
        st.work_wanted = true;
    }

    /// Gives the buffers [`Conn::recycle_later`] kept to the interface's spares, with the
    /// connection's lock released. On the connection's work item.
    pub(super) fn recycle_owed(&self) {
        loop {
            let Some(region) = self.st.lock().recycle.pop() else {
                return;
            };
            self.iface.recycle(region);
        }
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
            // Within the room reserved at setup (a check counts against the requests owed,
            // see `Conn::owed_room`).
            if how.check != Check::None
                && st
                    .owed
                    .push(Owed::Result(how.cookie, status), GFP_NOWAIT)
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
