// SPDX-License-Identifier: GPL-2.0

//! Reporting the transfers this side started: finished records leave the list of those in
//! flight (a busy peer's start again after a pause), and each outcome goes to its client
//! with no lock held, a GET's data checked first.

use super::*;

impl Conn {
    /// Moves the finished records to the list of those to report; a busy peer's are
    /// started again (after a pause, within their timeout). The MRs a record took and did
    /// not use go back to the pool.
    pub(super) fn reap(self: &Arc<Self>, st: &mut ConnState) {
        let res = self.iface.res.clone();
        let mut i = 0;
        while i < st.xfers.len() {
            let x = &mut st.xfers[i];
            if x.t.state() != xfer_state::State::Done {
                i += 1;
                continue;
            }
            let busy = x.t.result() == Err(EAGAIN.to_errno());
            let spent = x.start.elapsed().as_millis();
            let up = st.state == State::Established;
            if busy && up && spent < i64::from(x.timeout_ms) && x.t.retry() {
                st.stats.retries += 1;
                x.sent = None;
                x.regs = Regs::new();
                x.inv = None;
                x.inv_rkey = None;
                let pause = Delta::from_micros(x.pause_us);
                x.not_before = Some(Instant::now() + pause);
                x.pause_us = (x.pause_us * 2).min(5000);
                self.kick(Some(Self::jiffies_after(pause)));
                i += 1;
                continue;
            }
            for mr in x.free.drain_all() {
                res.pool.put_free(mr);
            }
            if let Some(x) = st.xfers.remove(i) {
                // Within the capacity reserved at submission.
                let _ = st.finished.push(x, GFP_NOWAIT);
            }
        }
        if st.in_line && !st.xfers.iter().any(|x| x.waits_mrs) {
            st.in_line = false;
            let me: Arc<dyn crate::reg::pool::Waiter> = self.clone();
            res.pool.leave(&me);
        }
        self.cv.notify_all();
    }

    /// Reports the finished records, one at a time, with no lock held: a GET's data is
    /// checked first. A client's `done` is called from this small frame, not from the one
    /// that held the record ([`Conn::next_outcome`]): it often submits the next transfer,
    /// whose path to the post is deep, on the stack of a completion.
    pub(crate) fn deliver(self: &Arc<Self>) {
        self.reap(&mut self.st.lock());
        while let Some((client, token, o)) = self.next_outcome() {
            client.done(&client, token, o);
        }
    }

    /// The end of a completion handler: what it left (a request to serve, data to check,
    /// MRs to allocate, outcomes to report) goes to the connection's work item.
    pub(super) fn handled(self: &Arc<Self>) {
        let wanted = {
            let mut st = self.st.lock();
            self.reap(&mut st);
            core::mem::take(&mut st.work_wanted) || !st.finished.is_empty()
        };
        if wanted {
            self.kick(None);
        }
    }

    /// The next finished record's outcome, with its client and token; `None` when none is
    /// left.
    #[inline(never)]
    fn next_outcome(&self) -> Option<(Arc<dyn Client>, usize, Outcome)> {
        loop {
            let (x, qp_num) = {
                let mut st = self.st.lock();
                let qp_num = st.qp_num();
                let mut x = st.finished.remove(0)?;
                // Its lists (empty: their MRs went back or died) serve the next record.
                if x.free.is_empty() && x.local.is_empty() && x.pending.is_empty() {
                    let lists = (
                        core::mem::take(&mut x.free),
                        core::mem::take(&mut x.local),
                        core::mem::take(&mut x.pending),
                    );
                    // Within the capacity reserved at submission.
                    let _ = st.spare.push(lists, GFP_NOWAIT);
                }
                (x, qp_num)
            };
            if let Some(out) = self.outcome(x, qp_num) {
                return Some(out);
            }
        }
    }

    /// A finished record's outcome for its client (`None` when it was reported already);
    /// `qp_num` names its connection's QP in the tracepoint.
    fn outcome(&self, mut x: Xfer, qp_num: u32) -> Option<(Arc<dyn Client>, usize, Outcome)> {
        let r = x.t.fire()?;
        let mut result = r.map_err(Error::from_errno);
        if x.record {
            self.iface.record_put(x.regs);
        }
        if result.is_ok() && matches!(x.t.kind(), Kind::Get | Kind::GetInline) {
            if let Some(region) = x.region.as_ref() {
                result = self.check_get(region, x.seed, x.check);
            }
        }
        if result.is_ok() {
            match x.t.kind() {
                Kind::Put | Kind::PutInline => self.iface.count_moved(false, x.size),
                Kind::Get | Kind::GetInline => self.iface.count_moved(true, x.size),
                Kind::Ping => {}
            }
        }
        let usecs = x.start.elapsed().as_micros_ceil() as u64;
        let kind = x.t.kind();
        let registered = matches!(kind, Kind::Put | Kind::Get);
        verbs::trace::xfer_done(
            &verbs::trace::XferEvent {
                raddr: verbs::trace::ip(&self.peer),
                qp_num,
                cookie: x.cookie,
                kind: kind.name(),
                bytes: x.size,
                regs: match x.region.as_ref() {
                    Some(r) if registered => r.nmrs(),
                    _ => 0,
                },
            },
            result.err().map_or(0, |e| e.to_errno()),
            usecs,
        );
        let o = Outcome {
            region: x.region.take(),
            result,
            usecs,
            reply: x.ctl.take().filter(|_| result.is_ok()),
        };
        Some((x.client.clone(), x.token, o))
    }

    /// A GET's data against the pattern of `seed`: `EBADMSG` when it differs.
    fn check_get(&self, region: &Region, seed: u32, check: Check) -> Result {
        if let Some(off) = region::verify(region, seed, check)? {
            pr_limited!(
                pr_err,
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
}
