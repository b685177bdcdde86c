// SPDX-License-Identifier: GPL-2.0

//! GET, the sink side this side starts: the peer's data RDMA-written into this side's
//! registrations; and pings (IMMEDIATE round trips).
//!
//! The request carries this side's registrations ([`Conn::send_get_req`]); the peer's
//! DONE says the data is in (and may invalidate one registration remotely). The others
//! are invalidated locally ([`Conn::post_unkey`]) before the GET is reported, whatever its
//! outcome: the caller gets its buffer back only when every key on it is dead.

use super::*;

impl Conn {
    /// Registers GET record `i`'s region with the MRs it took and sends the request with
    /// those registrations.
    pub(super) fn send_get_req(&self, st: &mut ConnState, i: usize) -> Result {
        let res = self.iface.res.clone();
        let access = Access::REMOTE_WRITE.with(Access::LOCAL_WRITE);
        let x = &mut st.xfers[i];
        let (cookie, size, seed, check) = (x.cookie, x.size, x.seed, x.check);
        let taken = core::mem::take(&mut x.free);
        let region = x.region.take();
        let mut local = core::mem::take(&mut x.local);
        let r = match &region {
            Some(rg) => self
                .post_locked(
                    st,
                    Post::Msg,
                    |chain| {
                        rg.register_taken(&res.pool, access, chain, &mut local, taken)?;
                        Ok(Some(region::advertise(&local)?))
                    },
                    |r| Body::GetReq {
                        cookie,
                        size,
                        seed,
                        check,
                        regs: r.copied().unwrap_or(Regs::new()),
                    },
                    None,
                )
                .map(|_| ()),
            None => Err(EINVAL),
        };
        let x = &mut st.xfers[i];
        x.region = region;
        x.inv_rkey = local.first().map(|r| r.rkey());
        x.local = local;
        r
    }

    /// The peer's DONE for GET record `cookie`, with the rkey it invalidated (`inv`).
    pub(super) fn get_done(
        &self,
        st: &mut ConnState,
        cookie: u64,
        status: i32,
        inv: Option<u32>,
    ) -> core::result::Result<(), &'static str> {
        let i = Self::find(st, cookie).ok_or("answer for an unknown transfer")?;
        if st.xfers[i].t.kind() != Kind::Get {
            return Err("answer of another kind of transfer");
        }
        if st.xfers[i].t.state() != xfer_state::State::Requested {
            return Err("second answer for a transfer");
        }
        if inv.is_some() && (status != 0 || inv != st.xfers[i].inv_rkey) {
            return Err("bogus remote invalidation: not the transfer's rkey");
        }
        if status != 0 {
            self.apply(st, i, XEvent::Refused(status));
            return Ok(());
        }
        let res = self.iface.res.clone();
        let x = &mut st.xfers[i];
        x.inv = inv;
        let inv_all = x.local.len() == 1 && inv.is_some_and(|k| x.local[0].rkey() == k);
        if inv_all {
            // The peer killed the only key: nothing to post.
            let mut none = KVec::new();
            if region::invalidate(
                &res.pool,
                &mut x.local,
                inv,
                &mut SendChain::empty(),
                &mut none,
            )
            .is_err()
            {
                return Err("remote invalidation of an unknown rkey");
            }
        }
        if inv.is_some() {
            st.stats.remote_inv += 1;
        }
        self.apply(st, i, XEvent::Answered { inv_all });
        Ok(())
    }

    /// Posts the LOCAL_INVs of GET record `i`'s registrations but the one the peer
    /// invalidated (the caller checked the room). If they cannot be posted the connection
    /// fails, and the keys die with the QP.
    pub(super) fn post_unkey(&self, st: &mut ConnState, i: usize) {
        let res = self.iface.res.clone();
        self.apply(st, i, XEvent::ChainPosted);
        let x = &mut st.xfers[i];
        let (cookie, inv) = (x.cookie, x.inv);
        let mut local = core::mem::take(&mut x.local);
        let mut pending = core::mem::take(&mut x.pending);
        match self.post_invalidate(st, &res, &mut local, inv, &mut pending) {
            Ok(slot) => {
                st.xfers[i].local = local;
                // Within the capacity reserved at submission.
                let _ = st.tagged.push(
                    Tagged {
                        slot,
                        what: Finishing::Mine(cookie, pending),
                    },
                    GFP_NOWAIT,
                );
            }
            Err(e) => {
                // Their state is unknown until the QP is drained: they stay with the
                // record, which ends then.
                st.xfers[i].local = local;
                st.xfers[i].pending = pending;
                if st.state == State::Established {
                    self.apply(st, i, XEvent::NotPosted(e.to_errno()));
                }
            }
        }
    }

    /// Sends the request of ping record `i`.
    pub(super) fn send_ping(&self, st: &mut ConnState, i: usize) -> Result {
        let x = &st.xfers[i];
        let cookie = x.cookie;
        // A copy: the record is borrowed from the state the send needs.
        match x.ctl.as_deref().copied() {
            Some(p) => {
                let req = Body::Control {
                    reply: false,
                    cookie,
                    payload: p.as_slice(),
                };
                self.send_locked(st, req, false)
            }
            None => {
                let ping = Body::Immediate {
                    cookie,
                    payload: b"ping",
                };
                self.send_locked(st, ping, false)
            }
        }
    }

    /// The pong of ping record `cookie`.
    pub(super) fn pong(
        &self,
        st: &mut ConnState,
        cookie: u64,
    ) -> core::result::Result<(), &'static str> {
        let i = Self::find(st, cookie).ok_or("answer for an unknown transfer")?;
        if st.xfers[i].t.kind() != Kind::Ping || st.xfers[i].ctl.is_some() {
            return Err("answer of another kind of transfer");
        }
        self.apply(st, i, XEvent::Answered { inv_all: false });
        Ok(())
    }
}
