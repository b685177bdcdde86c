// SPDX-License-Identifier: GPL-2.0

//! A connection's periodic checks, run by the tick: transfers and sinks past their
//! timeout, records that waited too long for MRs or room, keepalives and silent peers.

use super::*;

impl Conn {
    /// Periodic checks: fails the connection when a transfer waits on the peer (or for its
    /// keys to die) longer than its timeout, or the first queued one waited for room twice
    /// that; fails a transfer that waited for MRs longer than its timeout; sends a NOOP
    /// after `keepalive` idle seconds (0: never), which also finds out that a silent peer
    /// is gone (the send fails).
    pub(super) fn tick(self: &Arc<Self>, keepalive: u32, timeout_ms: u32) {
        self.tick_locked(keepalive, timeout_ms);
        // What the tick's drive left for the work item (MRs to allocate, a request to
        // serve), or a kick its handler missed.
        if core::mem::take(&mut self.st.lock().work_wanted) {
            self.kick(None);
        }
        self.deliver();
    }

    fn tick_locked(self: &Arc<Self>, keepalive: u32, timeout_ms: u32) {
        let mut st = self.st.lock();
        // A connection still in passive wait (accepted, no RTU yet) already serves the
        // requests that came first: its sinks are timed like the rest (they hold MRs and
        // buffers), and nothing else of it is.
        let waiting = st.state == State::PassiveWait;
        if st.state != State::Established && !waiting {
            return;
        }
        let over = |t: Option<Instant<Monotonic>>, ms: u32| {
            t.is_some_and(|t| t.elapsed() > Delta::from_millis(ms.into()))
        };
        // A transfer whose peer (or whose LOCAL_INVs) did not answer in time: the peer
        // still counts it, so the connection fails (`XEvent::Timeout`'s answer in every
        // such state), the transfer ends when the QP is drained and reports the timeout.
        let mut late = false;
        for x in st.xfers.iter_mut() {
            if (x.t.awaits_peer() || x.t.keys() == Keys::Dying) && over(x.sent, x.timeout_ms) {
                // The connection fails just below, with its own reason.
                let _ = x.t.on(XEvent::Timeout);
                late = true;
            }
        }
        let late_sink = st.sinks.iter().any(|s| over(Some(s.since), timeout_ms));
        if late {
            pr_limited!(
                pr_err,
                "{} {} {}: transfer timed out\n",
                self.iface.addr,
                self.dir(),
                self.peer
            );
            self.on(&mut st, Event::Error, "transfer timed out");
            return;
        }
        if late_sink {
            pr_limited!(
                pr_err,
                "{} {} {}: a PUT's sink waited too long for its data\n",
                self.iface.addr,
                self.dir(),
                self.peer
            );
            self.on(&mut st, Event::Error, "transfer timed out");
            return;
        }
        if waiting {
            return;
        }
        // Records waiting for MRs give up after their timeout.
        for i in 0..st.xfers.len() {
            let x = &st.xfers[i];
            if x.t.state() == xfer_state::State::Queued
                && x.waits_mrs
                && over(Some(x.start), x.timeout_ms)
            {
                self.iface.res.pool.timed_out();
                self.apply(&mut st, i, XEvent::Timeout);
            }
        }
        // New requests wait for a place and credits without a deadline of their own: the
        // first in line waits at most for the oldest transfer in flight, which the check
        // above bounds by the timeout. One that waited twice that means the peer keeps
        // its credits (or the send queue is stuck): the connection fails.
        let stuck = st
            .xfers
            .iter()
            .any(|x| over(x.room_since, 2 * x.timeout_ms.max(timeout_ms)));
        if stuck {
            pr_limited!(
                pr_err,
                "{} {} {}: no room for a request in {} ms (credits {}{})\n",
                self.iface.addr,
                self.dir(),
                self.peer,
                2 * u64::from(timeout_ms),
                st.credits,
                if st.held {
                    ", nothing heard from the connecting side"
                } else {
                    ""
                }
            );
            self.on(&mut st, Event::Error, "no credits returned");
            return;
        }
        self.drive(&mut st, Runs::Worker);
        self.open_iwarp(&mut st);
        if keepalive == 0 {
            return;
        }
        // A live peer sends at least a keepalive every `keepalive` seconds.
        let silent = Delta::from_millis(i64::from(timeout_ms).max(3000 * i64::from(keepalive)));
        if st.last_rx.elapsed() > silent {
            pr_limited!(
                conn,
                pr_err,
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
}
