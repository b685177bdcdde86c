// SPDX-License-Identifier: GPL-2.0

//! PUT, the source side: this side's data RDMA-written into the peer's sink.
//!
//! The request goes out ([`Conn::send_put_req`]); the sink answers with its registrations
//! (PUT_ACK), and the data chain is posted as soon as there is room ([`Conn::post_data`]):
//! this side's REG_MRs, the RDMA WRITEs into the sink's registrations, the LOCAL_INVs of
//! its own MRs and the DONE that tells the sink to kill its keys (with remote invalidation
//! when negotiated). With a check, the sink's verdict (PUT_RESULT) ends it.

use super::*;

impl Conn {
    /// Sends the request of PUT record `i`.
    pub(super) fn send_put_req(&self, st: &mut ConnState, i: usize) -> Result {
        let x = &st.xfers[i];
        let req = Body::PutReq {
            cookie: x.cookie,
            size: x.size,
            seed: x.seed,
            check: x.check,
        };
        self.send_locked(st, req, false)
    }

    /// PUT_ACK for record `cookie`: the sink's registrations must cover exactly what the
    /// PUT asked for, each one its own, or the source would write short or twice.
    pub(super) fn put_acked(
        &self,
        st: &mut ConnState,
        cookie: u64,
        sink_cookie: u64,
        regs: Regs,
    ) -> core::result::Result<(), &'static str> {
        let i = Self::find(st, cookie).ok_or("PUT_ACK for an unknown transfer")?;
        let x = &mut st.xfers[i];
        if x.t.kind() != Kind::Put {
            return Err("PUT_ACK for a transfer other than a PUT");
        }
        if x.t.state() != xfer_state::State::Requested {
            return Err("second answer for a transfer");
        }
        if !wire::regs_cover(&regs, x.size) {
            return Err("PUT_ACK registrations do not cover the PUT exactly");
        }
        x.regs = regs;
        x.sink_cookie = sink_cookie;
        self.apply(st, i, XEvent::Acked);
        Ok(())
    }

    /// Posts the data chain of acknowledged PUT record `i` (the caller checked the room).
    /// From here the sink's keys are told to die by the chain's DONE, by a DONE with the
    /// error if the chain cannot be posted, or by the connection failing.
    pub(super) fn post_data(&self, st: &mut ConnState, i: usize) {
        let res = self.iface.res.clone();
        let regs = st.xfers[i].regs;
        let cookie = st.xfers[i].cookie;
        let sink_cookie = self.iface.done_cookie(st.xfers[i].sink_cookie);
        let remote_inv = Self::remote_inv(st)
            .then(|| regs.as_slice().first().map(|r| r.rkey))
            .flatten();
        self.apply(st, i, XEvent::ChainPosted);
        let x = &mut st.xfers[i];
        let taken = core::mem::take(&mut x.free);
        let region = x.region.take();
        let mut local = core::mem::take(&mut x.local);
        let mut inv = core::mem::take(&mut x.pending);
        let posted = match &region {
            Some(r) => self.post_locked(
                st,
                Post::Msg,
                |chain| {
                    region::source_chain(
                        &res.pool,
                        r,
                        regs.as_slice(),
                        taken,
                        chain,
                        &mut local,
                        &mut inv,
                    )?;
                    Ok(None)
                },
                |_| Body::Done {
                    get: false,
                    cookie: sink_cookie,
                    status: 0,
                },
                remote_inv,
            ),
            None => Err(EINVAL),
        };
        st.xfers[i].region = region;
        match posted {
            Ok(slot) => {
                st.xfers[i].local = local;
                // Within the capacity reserved at submission.
                let _ = st.tagged.push(
                    Tagged {
                        slot,
                        what: Finishing::Mine(cookie, inv),
                    },
                    GFP_NOWAIT,
                );
            }
            // The device may have taken part of the chain: its MRs stay with the record
            // until the QP is drained (the connection failed).
            Err(_) if st.state != State::Established => {
                st.xfers[i].local = local;
                st.xfers[i].pending = inv;
            }
            Err(e) => {
                // Never posted: destroying them kills the keys now.
                give_up(&res, &mut local, &mut inv);
                st.xfers[i].sink_cookie = sink_cookie;
                self.apply(st, i, XEvent::NotPosted(e.to_errno()));
            }
        }
    }

    /// A PUT failed after the sink registered its buffer: PUT_DONE with the error, so the
    /// sink kills its keys at once; if even that cannot go, the connection fails (the
    /// sink's teardown kills them).
    pub(super) fn abort_put(&self, st: &mut ConnState, sink_cookie: u64, e: Error) {
        let done = Body::Done {
            get: false,
            cookie: sink_cookie,
            status: e.to_errno(),
        };
        if self.send_locked(st, done, false).is_err() {
            self.on(st, Event::Error, "cannot tell the sink that a PUT failed");
        }
    }

    /// PUT_RESULT for record `cookie`: the sink's verdict.
    pub(super) fn put_verdict_in(
        &self,
        st: &mut ConnState,
        cookie: u64,
        status: i32,
    ) -> core::result::Result<(), &'static str> {
        let i = Self::find(st, cookie).ok_or("PUT_RESULT for an unknown transfer")?;
        if !matches!(st.xfers[i].t.kind(), Kind::Put | Kind::PutInline) {
            return Err("PUT_RESULT for a transfer other than a PUT");
        }
        self.apply(st, i, XEvent::Verdict(status));
        Ok(())
    }
}
