// SPDX-License-Identifier: GPL-2.0

//! A connection's teardown: now, or once the device answers its connect request; the
//! disconnect a failure left owed; the endpoint drained and destroyed, and what the
//! connection held released.

use super::*;

impl Conn {
    /// [`Conn::teardown`], now; or, while its connect request is out
    /// ([`ConnState::in_connect`]; on siw for minutes), once the device answers it: the
    /// answer queues the connection's work item, which tears it down
    /// ([`Conn::owed_teardown`]). No thread waits meanwhile; the device's removal waits
    /// for it (`DevRes::hold`).
    pub(super) fn teardown_soon(self: Arc<Self>, reason: &'static str) {
        // Closed in the same lock section as the check: once closing, no connect starts.
        let owed = {
            let mut st = self.st.lock();
            self.on(&mut st, Event::Close, reason);
            if st.in_connect && st.after_connect.is_none() {
                st.after_connect = Some((reason, Instant::now()));
                self.iface.res.hold();
                pr_info!(
                    "{} {} {}: the device is still connecting: torn down when it answers\n",
                    self.iface.addr,
                    self.dir(),
                    self.peer
                );
                // The bound on the wait: a timer, not a thread.
                self.kick(Some(msecs_to_jiffies(OUT_OF_CONNECT_SECS as u32 * 1000)));
            }
            st.in_connect
        };
        if !owed {
            self.teardown(reason);
        }
    }

    /// The connect request is answered (or was never sent): a teardown owed meanwhile
    /// runs now, on the connection's work item (not in the caller, which may be the
    /// connection's CM handler).
    pub(super) fn connect_answered(self: &Arc<Self>, st: &mut ConnState) {
        st.in_connect = false;
        if st.after_connect.is_some() {
            self.kick(None);
        }
    }

    /// The connection's work item's first step: runs a teardown owed since the connect
    /// ([`Conn::teardown_soon`]) once the device answered, or once it has not answered
    /// for [`OUT_OF_CONNECT_SECS`] (a device that never answers is left to iwcm's own
    /// wait: after TCP's SYN timeout, about 127 s, siw has given up on any connect it
    /// started). Returns whether one is owed (then nothing else is to do).
    pub(super) fn owed_teardown(self: &Arc<Self>) -> bool {
        let reason = {
            let mut st = self.st.lock();
            let Some((reason, since)) = st.after_connect else {
                return false;
            };
            if st.in_connect {
                let limit = OUT_OF_CONNECT_SECS * 1000;
                let waited = since.elapsed().as_millis();
                if waited < limit {
                    // Early (a busy peer's retry was timed): the timer for the rest.
                    self.kick(Some(msecs_to_jiffies((limit - waited) as u32)));
                    return true;
                }
                pr_warn!(
                    "{} {} {}: no answer to the connect after {} s: tearing down anyway\n",
                    self.iface.addr,
                    self.dir(),
                    self.peer,
                    OUT_OF_CONNECT_SECS
                );
                st.in_connect = false;
            }
            st.after_connect = None;
            reason
        };
        self.teardown(reason);
        self.iface.res.release();
        true
    }

    /// Disconnects, drains, and frees the endpoint and the buffers. Process context only.
    pub(super) fn teardown(self: &Arc<Self>, reason: &'static str) {
        let ep = {
            let mut st = self.st.lock();
            self.on(&mut st, Event::Close, reason);
            // The endpoint's last reference is taken here: a disconnect that holds one
            // ends first ([`Conn::disconnect_owed`]); `close` below disconnects anyway.
            st.disconnect_owed = false;
            while st.disconnecting || st.setting_up {
                self.cv.wait(&mut st);
            }
            // Never beside a connect (see `ConnState::in_connect`): a teardown asked
            // meanwhile waits for its answer ([`Conn::teardown_soon`]).
            if st.in_connect {
                pr_warn!(
                    "{} {} {}: torn down while connecting\n",
                    self.iface.addr,
                    self.dir(),
                    self.peer
                );
            }
            st.ep.take()
        };
        // Every posted work request completes (flushed) before `close` returns, unless the
        // device lost its completion; those are taken back once the QP is gone.
        let gone = ep.and_then(|ep| {
            ep.close();
            Endpoint::destroy(ep)
        });
        if let Some(gone) = gone {
            self.reclaim_lost(&self.st.lock(), &gone);
        }
        // Nothing completes any more (the QP is drained and gone): what the connection
        // held goes now.
        self.release_held();
        let mut st = self.st.lock();
        let res = self.iface.res.clone();
        let tagged = core::mem::take(&mut st.tagged);
        for t in tagged {
            let inv = match t.what {
                Finishing::ServedGet(_, inv, _) | Finishing::ServedPut(_, inv, _, _) => inv,
                Finishing::Mine(cookie, inv) => {
                    // A chain whose completion never came: its transfer's MRs are
                    // destroyed, and it is told so.
                    if let Some(i) = Self::find(&st, cookie) {
                        self.apply(&mut st, i, XEvent::ChainDone(false));
                    }
                    inv
                }
                #[cfg(fastreg_test)]
                Finishing::Probe(inv) => {
                    st.probe = Some(ChainEnd::Failed);
                    inv
                }
            };
            for r in inv {
                res.pool.destroy(r.into_handle());
            }
        }
        // Every transfer ends: nothing names its buffer or keys any more.
        self.xfers_drained(&mut st);
        // `Action::Release`: what is left (the endpoint, the slots) is freed by the caller
        // once the lock is dropped.
        self.on(&mut st, Event::Drained, "");
        drop(st);
        self.deliver();
        // The MRs destroyed above, deregistered now that nothing names them.
        res.pool.reap();
        // A busy peer's retry may still be timed: nothing is left to retry.
        verbs::cancel_delayed_sync::<Conn, 1>(self); // `later`
    }

    /// The disconnect a failure left owed ([`ConnState::disconnect_owed`]), run by the
    /// interface's dial work, with no lock held across `rdma_disconnect`.
    pub(super) fn disconnect_owed(&self) {
        let ep = {
            let mut st = self.st.lock();
            if !core::mem::take(&mut st.disconnect_owed) {
                return;
            }
            let Some(ep) = st.ep.clone() else { return };
            st.disconnecting = true;
            ep
        };
        ep.disconnect();
        // Before `disconnecting` clears: the teardown must hold the last reference.
        drop(ep);
        self.st.lock().disconnecting = false;
        self.cv.notify_all();
    }

    /// A teardown's release of what the connection held, once its QP is drained and gone,
    /// dropped with the lock released (buffers of up to `max_payload` to unmap and free):
    /// the slots, what was owed, the checks (their keys are dead: freed unchecked, the
    /// peer is gone), the spares to give back, the sinks' MRs (destroyed: their keys may
    /// still be valid).
    // Not inlined: what it holds is not on the stack of the teardown's reports.
    #[inline(never)]
    fn release_held(&self) {
        let mut st = self.st.lock();
        let slots = Self::take_slots(&mut st);
        let owed = core::mem::take(&mut st.owed);
        let checks = core::mem::take(&mut st.checks);
        let recycle = core::mem::take(&mut st.recycle);
        let prepared = st.prepared.take();
        let sinks = core::mem::take(&mut st.sinks);
        let unkeyed = core::mem::take(&mut st.unkey);
        drop(st);
        drop((slots, owed, checks, recycle));
        if let Some(p) = prepared {
            p.give_back(&self.iface);
        }
        let pool = &self.iface.res.pool;
        for s in sinks {
            for r in s.regs {
                pool.destroy(r.into_handle());
            }
        }
        for (s, _) in unkeyed {
            for r in s.regs {
                pool.destroy(r.into_handle());
            }
        }
    }

    /// Takes the message slots out (to drop once the lock is released): they refer to the
    /// connection, which breaks the cycle.
    #[allow(clippy::type_complexity)]
    pub(super) fn take_slots(
        st: &mut ConnState,
    ) -> (
        KVec<(Arc<Completion<TxSlot>>, SendChain)>,
        KVec<Arc<Completion<TxSlot>>>,
        KVec<Arc<Completion<RxSlot>>>,
        KVec<(Arc<Completion<RxSlot>>, u32, Option<u32>)>,
    ) {
        // Its memory goes with the slots (a closed connection still listed shows none).
        st.mem = 0;
        (
            core::mem::take(&mut st.tx_free),
            core::mem::take(&mut st.tx_all),
            core::mem::take(&mut st.rx),
            core::mem::take(&mut st.early),
        )
    }

    /// Takes back the slots whose completion the device lost (see
    /// [`Completion::reclaim_lost`]), now that the endpoint is destroyed (`gone`).
    fn reclaim_lost(&self, st: &ConnState, gone: &verbs::QpGone) {
        let mut lost = 0u32;
        for s in st.tx_all.iter() {
            lost += u32::from(Completion::reclaim_lost(s, gone));
        }
        for s in st.rx.iter() {
            lost += u32::from(Completion::reclaim_lost(s, gone));
        }
        if lost > 0 {
            pr_warn!(
                "{} {} {}: the device lost {} completion(s) after the drain: taken back\n",
                self.iface.addr,
                self.dir(),
                self.peer,
                lost
            );
        }
    }
}
