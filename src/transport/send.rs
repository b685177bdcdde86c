// SPDX-License-Identifier: GPL-2.0

//! Posting messages and chains under credits and the send-queue budget; send completions.

use super::*;

impl Conn {
    pub(super) fn limits(&self, st: &ConnState) -> Option<Limits> {
        let p = st.params?;
        Some(Limits {
            max_msg: p.max_msg,
            max_payload: p.max_payload,
            max_regs: p.max_regs,
            max_inline: p.max_inline.into(),
            max_credits: credits::limit(p.queue_depth),
            checksum: false,
            local_stamp: self.iface.stamp,
            peer_stamp: st.peer_stamp,
        })
    }

    /// Sends a message; `noop` may take the last credit. `EAGAIN` when no credit or slot.
    pub(super) fn send_locked(&self, st: &mut ConnState, body: Body<'_>, noop: bool) -> Result {
        let kind = if noop { Post::Noop } else { Post::Msg };
        self.post_locked(st, kind, |_| Ok(None), |_| body, None)
            .map(|_| ())
    }

    /// Posts one chain: the work requests `pre` appends (REG_MR, RDMA, LOCAL_INV), then
    /// (unless `kind` is [`Post::Local`]) the message `body` makes (from the registrations
    /// `pre` may return), sent with invalidation of `invalidate` at the peer if given.
    /// Returns the send slot, whose completion is the chain's. On failure nothing was
    /// posted. Messages are encoded within the negotiated `max_msg`.
    pub(super) fn post_locked<'a>(
        &self,
        st: &mut ConnState,
        kind: Post,
        pre: impl FnOnce(&mut SendChain) -> Result<Option<Regs>>,
        body: impl FnOnce(Option<&Regs>) -> Body<'a>,
        invalidate: Option<u32>,
    ) -> Result<Arc<Completion<TxSlot>>> {
        self.post_with(st, kind, pre, body, |_| Ok(()), invalidate)
    }

    /// Sends an inline message (`PUT_INLINE`, `GET_DATA`) whose data `fill` writes
    /// (given exactly the body's `len` bytes). `EAGAIN` when no credit or slot.
    pub(super) fn send_inline_locked(
        &self,
        st: &mut ConnState,
        body: Body<'_>,
        fill: impl FnOnce(&mut [u8]) -> Result,
    ) -> Result {
        self.post_with(st, Post::Msg, |_| Ok(None), |_| body, fill, None)
            .map(|_| ())
    }

    /// [`Conn::post_locked`], with `fill` writing the data of an inline message.
    fn post_with<'a>(
        &self,
        st: &mut ConnState,
        kind: Post,
        pre: impl FnOnce(&mut SendChain) -> Result<Option<Regs>>,
        body: impl FnOnce(Option<&Regs>) -> Body<'a>,
        fill: impl FnOnce(&mut [u8]) -> Result,
        invalidate: Option<u32>,
    ) -> Result<Arc<Completion<TxSlot>>> {
        if st.state != State::Established
            && !(st.state == State::PassiveWait && st.params.is_some())
        {
            return Err(not_connected());
        }
        if st.held && kind != Post::Local {
            return Err(EAGAIN);
        }
        let need = match kind {
            Post::Msg => 2,
            Post::Noop => 1,
            Post::Local => 0,
        };
        if st.credits < need {
            return Err(EAGAIN);
        }
        // Dropped before the lock is released, so never the last reference (teardown takes
        // the connection's under the lock).
        let ep = st.ep.clone().ok_or_else(not_connected)?;
        let (slot, mut chain) = st.tx_free.pop().ok_or(EAGAIN)?;
        let local = kind == Post::Local;
        let returned = if local { 0 } else { st.outstanding.min(255) };
        chain.clear();
        let buf = &slot.value().buf;
        let max_msg = st.params.map_or(wire::MIN_MSG, |p| p.max_msg) as usize;
        let mangle = Self::take_mangle(st, local);
        let built = pre(&mut chain).and_then(|regs| {
            if local {
                return Ok(());
            }
            let msg = Msg {
                credits: returned as u8,
                src_stamp: self.iface.stamp,
                dst_stamp: st.peer_stamp,
                body: body(regs.as_ref()),
            };
            let mut filled = Ok(());
            let n = buf
                .with(|b| {
                    let end = max_msg.min(b.len());
                    let b = &mut b[..end];
                    let n = wire::encode_with(&msg, b, false, |d| filled = fill(d))?;
                    Some(self.iface.sending(mangle, b, n))
                })
                .ok_or(EMSGSIZE)?;
            filled?;
            chain.send(buf, n as u32, invalidate)
        });
        if let Err(e) = built {
            chain.clear();
            st.tx_free.push((slot, chain), GFP_NOWAIT)?;
            return Err(e);
        }
        // Never wait for room here (the lock is held, completions need it): callers check
        // the room first ([`Conn::has_room`]) or retry from `pump`.
        match ep.post(chain, &slot, 0) {
            Ok(()) if local => Ok(slot),
            Ok(()) => {
                st.credits -= 1;
                st.outstanding -= returned;
                st.stats.tx += 1;
                st.last_tx = Instant::now();
                if kind == Post::Noop {
                    st.stats.noops_tx += 1;
                }
                Ok(slot)
            }
            Err((e, chain)) => {
                match chain {
                    Some(mut chain) => {
                        chain.clear();
                        st.tx_free.push((slot, chain), GFP_NOWAIT)?;
                    }
                    // The device took part of the chain: the state of its MRs is unknown
                    // until the QP is drained.
                    None => {
                        self.on(st, Event::Error, "the device took part of a chain");
                    }
                }
                match e {
                    verbs::PostError::Timeout => Err(EAGAIN),
                    e => Err(e.to_error()),
                }
            }
        }
    }

    /// Sends what is owed to the peer (answers, requests to serve) as credits and send
    /// slots allow, then a NOOP if credits are owed and nothing went.
    pub(super) fn pump(&self, st: &mut ConnState, runs: Runs) {
        // Sinks whose data is in go first: their keys must die before anything else.
        while let Some((sink, _)) = st.unkey.first() {
            if !self.local_room(st, sink.regs.len()) {
                break;
            }
            let Ok((sink, inv)) = st.unkey.remove(0) else {
                break;
            };
            if let Err(why) = self.unkey(st, sink, inv) {
                self.violation(st, why);
                return;
            }
        }
        while st.unkey.is_empty()
            && !st.owed.is_empty()
            && st.credits >= 2
            && !st.tx_free.is_empty()
            && self.sq_room(st)
        {
            // Serving allocates, maps and registers a buffer, and a console's request takes
            // the console's locks: the work item prepares them and answers them
            // ([`Conn::serve_prepared`]); what is owed after them waits, in order. A GET
            // answered inline is only a bounded copy, left to the work item by handlers.
            let later = |o: &Owed| o.needs_prepared() || (runs == Runs::Handler && o.serves());
            if st.owed.first().is_some_and(later) {
                st.work_wanted = true;
                break;
            }
            let Ok(o) = st.owed.remove(0) else { break };
            let r = match o {
                Owed::Pong(cookie) => self.send_locked(
                    st,
                    Body::Immediate {
                        cookie,
                        payload: b"pong",
                    },
                    false,
                ),
                Owed::Result(cookie, status) => {
                    self.send_locked(st, Body::PutResult { cookie, status }, false)
                }
                Owed::GetInline {
                    cookie,
                    size,
                    seed,
                    check,
                } => self.serve_get_inline(st, cookie, size, seed, check),
                // Not here (above).
                Owed::Put { .. } | Owed::Get { .. } | Owed::Control(..) => Err(EINVAL),
            };
            if let Err(e) = r {
                self.cannot_answer(st, e);
                return;
            }
        }
        let Some(p) = st.params else { return };
        if credits::noop_now(
            p.queue_depth,
            st.credits,
            st.outstanding,
            !st.owed.is_empty(),
        ) {
            let _ = self.send_locked(st, Body::Noop, true);
        }
    }

    /// An answer owed to the peer could not be posted (`e`): logged, and the connection
    /// fails (the peer would wait for it).
    pub(super) fn cannot_answer(&self, st: &mut ConnState, e: Error) {
        pr_err!(
            "{} {} {}: cannot answer: {:?}\n",
            self.iface.addr,
            self.dir(),
            self.peer,
            e
        );
        self.on(st, Event::Error, "cannot answer");
    }

    /// Posts the LOCAL_INVs of `regs` but the one whose rkey the peer invalidated (`inv`),
    /// in a chain of their own (no message, so no credit); the MRs go to `pending`. On
    /// failure nothing was posted.
    pub(super) fn post_invalidate(
        &self,
        st: &mut ConnState,
        res: &DevRes,
        regs: &mut KVec<FrMr<Registered>>,
        inv: Option<u32>,
        pending: &mut KVec<FrMr<Invalidating>>,
    ) -> Result<Arc<Completion<TxSlot>>> {
        self.post_locked(
            st,
            Post::Local,
            |chain| {
                region::invalidate(&res.pool, regs, inv, chain, pending)?;
                Ok(None)
            },
            |_| Body::Noop,
            None,
        )
    }

    /// Whether a chain of `n` local work requests (no message) can be posted now.
    pub(super) fn local_room(&self, st: &ConnState, n: usize) -> bool {
        let n = u32::try_from(n).unwrap_or(u32::MAX);
        !st.tx_free.is_empty() && st.ep.as_ref().is_some_and(|ep| ep.sq_room() >= n)
    }

    pub(super) fn remote_inv(st: &ConnState) -> bool {
        st.params
            .map(|p| p.features & wire::FEATURE_REMOTE_INV != 0)
            .unwrap_or(false)
    }

    /// A chain tagged with `slot` completed (`ok`) or failed.
    fn finish(&self, st: &mut ConnState, slot: &Arc<Completion<TxSlot>>, end: ChainEnd) {
        let ok = end == ChainEnd::Done;
        let Some(pos) = st.tagged.iter().position(|t| Arc::ptr_eq(&t.slot, slot)) else {
            return;
        };
        let Ok(t) = st.tagged.remove(pos) else { return };
        let res = self.iface.res.clone();
        let settle = |inv: KVec<FrMr<Invalidating>>| {
            for i in inv {
                if ok {
                    res.pool.put(i.invalidated());
                } else {
                    res.pool.destroy(i.into_handle());
                }
            }
        };
        match t.what {
            Finishing::ServedGet(region, inv, _charge) => {
                settle(inv);
                st.stats.served += u64::from(ok);
                if ok {
                    self.iface.count_moved(false, region.buffer().len() as u64);
                }
                Self::recycle_later(st, region);
            }
            Finishing::ServedPut(region, inv, how, _charge) => {
                settle(inv);
                if !ok {
                    Self::recycle_later(st, region);
                } else if self.check_later(st, region, how).is_err() {
                    self.on(st, Event::Error, "out of memory");
                }
            }
            Finishing::Mine(cookie, inv) => {
                settle(inv);
                if let Some(i) = Self::find(st, cookie) {
                    self.apply(st, i, XEvent::ChainDone(ok));
                }
            }
            #[cfg(fastreg_test)]
            Finishing::Probe(inv) => {
                settle(inv);
                st.probe = Some(end);
                self.cv.notify_all();
            }
        }
    }
}

impl Handler for TxSlot {
    fn done(this: Arc<Completion<Self>>, wc: &Wc<'_>, mut chain: SendChain) {
        chain.clear();
        let conn = this.value().conn.clone();
        let mut st = conn.st.lock();
        conn.finish(&mut st, &this, ChainEnd::of(wc));
        if !wc.ok() {
            conn.wr_failed(&mut st, wc, "send failed");
            drop(st);
            conn.handled();
            return;
        }
        // Room for every slot was reserved at setup.
        let _ = st.tx_free.push((this, chain), GFP_NOWAIT);
        conn.drive(&mut st, Runs::Handler);
        drop(st);
        conn.handled();
    }
}

impl Owed {
    /// Whether answering it is for the work item: serving a transfer (a buffer to
    /// allocate and fill) or a console's request.
    fn serves(&self) -> bool {
        matches!(
            self,
            Owed::Put { .. } | Owed::Get { .. } | Owed::GetInline { .. } | Owed::Control(..)
        )
    }
}
