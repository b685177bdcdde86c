// SPDX-License-Identifier: GPL-2.0

//! Receiving messages: classification, credits, dispatch; receive completions.

use super::*;
use crate::selftest::control::Payload;

impl Conn {
    /// Handles a received message of `len` bytes in `slot` (`inv`: the rkey the peer
    /// invalidated with it), and reposts the buffer.
    fn receive(
        self: &Arc<Self>,
        slot: &Arc<Completion<RxSlot>>,
        len: u32,
        inv: Option<u32>,
        runs: Runs,
    ) {
        let mut st = self.st.lock();
        // A connection going down acts on nothing more (its transfers were failed).
        if matches!(st.state, State::Closing | State::Closed) {
            return;
        }
        let Some(limits) = self.limits(&st) else {
            drop(st);
            return self.fail("message before the connection parameters");
        };
        // What to do, copied out while the buffer is borrowed.
        enum Todo {
            Nothing,
            Pong(u64),
            PongSeen(u64),
            /// A console's request, and the answer to one of this side's.
            Control(u64, Payload),
            ControlSeen(u64, Payload),
            Serve(Owed),
            PutAck(u64, u64, Regs),
            Verdict(u64, i32),
            Failed(u64, i32),
            PutDone(u64, i32),
            GetDone(u64, i32),
            /// An inline PUT served: its cookie, and where its data differs (checked in
            /// the receive buffer, which is reposted below).
            PutInline(u64, Option<usize>, u64),
            /// The answer to an inline GET: its cookie and the bytes of its data, copied
            /// out of the buffer only once the whole message passed every check.
            GetData(u64, u32),
            GetDataFailed(u64, i32),
        }
        let iface = &self.iface;
        let decoded = slot.value().buf.with(|b| {
            let b = &b[..(len as usize).min(b.len())];
            wire::decode(b, &limits).map(|m| {
                let todo = match m.body {
                    Body::Noop => Todo::Nothing,
                    Body::Immediate { cookie, payload } if payload == b"ping" => Todo::Pong(cookie),
                    Body::Immediate { cookie, payload } if payload == b"pong" => {
                        Todo::PongSeen(cookie)
                    }
                    Body::Immediate { .. } => Todo::Nothing,
                    // Within MAX_CONTROL (checked by the decoder) as the payload is.
                    Body::Control {
                        reply,
                        cookie,
                        payload,
                    } => {
                        let p = Payload::from_slice(payload).unwrap_or(Payload::new());
                        if reply {
                            Todo::ControlSeen(cookie, p)
                        } else {
                            Todo::Control(cookie, p)
                        }
                    }
                    Body::PutReq {
                        cookie,
                        size,
                        seed,
                        check,
                    } => Todo::Serve(Owed::Put {
                        cookie,
                        size,
                        seed,
                        check,
                    }),
                    Body::GetReq {
                        cookie,
                        size,
                        seed,
                        check,
                        regs,
                    } => Todo::Serve(Owed::Get {
                        cookie,
                        size,
                        seed,
                        check,
                        regs,
                    }),
                    Body::PutResult { cookie, status } => {
                        Todo::Verdict(cookie, wire::remote_error(status))
                    }
                    Body::PutAck {
                        cookie,
                        sink_cookie,
                        regs,
                    } => Todo::PutAck(cookie, sink_cookie, regs),
                    Body::PutNak { cookie, status } => {
                        Todo::Failed(cookie, wire::remote_error(status))
                    }
                    Body::Done {
                        get: false,
                        cookie,
                        status,
                    } => Todo::PutDone(cookie, status),
                    Body::Done {
                        get: true,
                        cookie,
                        status,
                    } => Todo::GetDone(cookie, wire::remote_error(status)),
                    // The data is checked (or copied) here, while the buffer is borrowed.
                    Body::PutInline {
                        cookie,
                        seed,
                        check,
                        ..
                    } => {
                        let data = wire::payload(b, &m);
                        let flip = iface.take_corrupt(data.len());
                        let found = region::verify_bytes(data, seed, check, flip);
                        Todo::PutInline(cookie, found, data.len() as u64)
                    }
                    Body::GetInline {
                        cookie,
                        size,
                        seed,
                        check,
                    } => Todo::Serve(Owed::GetInline {
                        cookie,
                        size,
                        seed,
                        check,
                    }),
                    Body::GetData {
                        cookie,
                        status: 0,
                        len,
                    } => Todo::GetData(cookie, len),
                    Body::GetData { cookie, status, .. } => {
                        Todo::GetDataFailed(cookie, wire::remote_error(status))
                    }
                };
                (m.credits, m.kind(), todo)
            })
        });
        let (credits, kind, todo) = match decoded {
            Ok(d) => d,
            Err(e) => {
                pr_limited!(
                    conn,
                    pr_err,
                    "{} {} {}: invalid message: {}\n",
                    self.iface.addr,
                    self.dir(),
                    self.peer,
                    Show(e)
                );
                self.on(&mut st, Event::Error, e.closing());
                return;
            }
        };
        st.stats.rx += 1;
        st.last_rx = Instant::now();
        // The connecting side spoke first: this side may send (see `ConnState::held`).
        st.held = false;
        if kind == wire::Type::Noop {
            st.stats.noops_rx += 1;
        }
        st.credits += u32::from(credits);
        let max = limits.max_credits;
        if st.credits > max {
            pr_limited!(
                conn,
                pr_err,
                "{} {}: peer returned too many credits\n",
                self.iface.addr,
                self.peer
            );
            self.on(&mut st, Event::Error, "too many credits");
            return;
        }
        // Only a DONE may invalidate remotely, and only when that was negotiated.
        if inv.is_some() {
            if !matches!(todo, Todo::PutDone(..) | Todo::GetDone(..)) {
                return self.violation(
                    &mut st,
                    "remote invalidation with a message other than DONE",
                );
            }
            if !Self::remote_inv(&st) {
                return self.violation(&mut st, "bogus remote invalidation: not negotiated");
            }
        }
        let r: core::result::Result<(), &'static str> = match todo {
            Todo::Nothing => Ok(()),
            Todo::Pong(cookie) => self.peer_request(&mut st, Owed::Pong(cookie)),
            Todo::PongSeen(cookie) => self.pong(&mut st, cookie),
            Todo::Control(cookie, p) => self.control_request(&mut st, cookie, p),
            Todo::ControlSeen(cookie, p) => self.control_answered(&mut st, cookie, &p),
            Todo::Serve(o) => self.peer_request(&mut st, o),
            Todo::Verdict(cookie, status) => self.put_verdict_in(&mut st, cookie, status),
            Todo::PutAck(cookie, sink_cookie, regs) => {
                self.put_acked(&mut st, cookie, sink_cookie, regs)
            }
            Todo::Failed(cookie, status) => match Self::find(&st, cookie) {
                Some(i) if st.xfers[i].t.kind() == Kind::Put => {
                    self.apply(&mut st, i, XEvent::Refused(status));
                    Ok(())
                }
                Some(_) => Err("answer of another kind of transfer"),
                None => Err("answer for an unknown transfer"),
            },
            Todo::GetDone(cookie, status) => self.get_done(&mut st, cookie, status, inv),
            Todo::PutDone(sink_cookie, status) => self.sink_done(&mut st, sink_cookie, status, inv),
            Todo::PutInline(cookie, mismatch, len) => {
                self.serve_put_inline(&mut st, cookie, mismatch, len)
            }
            Todo::GetData(cookie, n) => slot.value().buf.with(|b| {
                // Where the decoder found it: `n` bytes after the fixed body, within the
                // message (checked then); `get` keeps a short buffer from panicking.
                let at = wire::payload_at(wire::Type::GetData);
                let data = b.get(at..at + n as usize).unwrap_or(&[]);
                self.inline_data(&mut st, cookie, Ok(data))
            }),
            Todo::GetDataFailed(cookie, status) => self.inline_data(&mut st, cookie, Err(status)),
        };
        if let Err(why) = r {
            pr_limited!(
                conn,
                pr_err,
                "{} {} {}: bad {:?}\n",
                self.iface.addr,
                self.dir(),
                self.peer,
                kind
            );
            return self.violation(&mut st, why);
        }
        // Repost the buffer: one more credit owed to the peer. A buffer that cannot be
        // reposted is a credit the peer never gets back: the connection would stall
        // until "no credits returned", so it fails now. Unless the QP already left RTS
        // (`ENOTCONN`, siw): the connection is going down and its event names why.
        if let Some(ep) = st.ep.clone() {
            match ep.post_recv(&slot.value().buf, slot) {
                Ok(()) => st.outstanding += 1,
                Err(e) if e.to_errno() == -(kernel::bindings::ENOTCONN as i32) => {}
                Err(e) => {
                    pr_err!(
                        "{} {} {}: cannot repost a receive buffer ({:?})\n",
                        self.iface.addr,
                        self.dir(),
                        self.peer,
                        e
                    );
                    self.on(&mut st, Event::Error, "receive buffer not reposted");
                    return;
                }
            }
        }
        self.drive(&mut st, runs);
    }

    /// The peer broke the protocol: logs why and fails the connection (only this one).
    pub(super) fn violation(&self, st: &mut ConnState, why: &'static str) {
        pr_limited!(
            conn,
            pr_err,
            "{} {} {}: protocol violation: {}\n",
            self.iface.addr,
            self.dir(),
            self.peer,
            why
        );
        self.on(st, Event::Error, why);
    }

    /// Whether one more request of the peer fits within the queue depth it agreed to. A
    /// PUT whose data waits for its check is still in flight for the peer, which waits for
    /// the verdict.
    pub(super) fn owed_room(st: &ConnState) -> bool {
        let depth = st.params.map_or(0, |p| usize::from(p.queue_depth));
        let checking = st
            .checks
            .iter()
            .filter(|c| c.1.check != Check::None)
            .count();
        st.owed.len() + st.sinks.len() + checking < depth
    }

    /// A request of the peer (ping, PUT, GET) to answer. The peer has at most
    /// `queue_depth` transfers in flight, so the requests not yet answered and the PUTs
    /// registered for it stay within that: a peer that exceeds it is closed.
    pub(super) fn peer_request(
        &self,
        st: &mut ConnState,
        o: Owed,
    ) -> core::result::Result<(), &'static str> {
        if !Self::owed_room(st) {
            return Err("more transfers in flight than the queue depth");
        }
        if let Owed::Get { size, regs, .. } = &o {
            if !wire::regs_cover(regs, *size) {
                return Err("GET_REQ registrations advertise an rkey twice");
            }
        }
        // Within the room reserved at setup: no allocation here.
        st.owed.push(o, GFP_NOWAIT).map_err(|_| "out of memory")
    }
}

impl Conn {
    /// Handles the messages held while this side did not know the connection was
    /// established ([`ConnState::early`]), in the order they came, and those that arrive
    /// meanwhile. On the connection's work item, not in the rdma_cm handler.
    pub(super) fn receive_early(self: &Arc<Self>) {
        loop {
            let next = {
                let mut st = self.st.lock();
                if st.early.is_empty() {
                    st.draining = false;
                    return;
                }
                st.early.remove(0)
            };
            if let Ok((slot, len, inv)) = next {
                self.receive(&slot, len, inv, Runs::Worker);
            }
        }
    }
}

impl Handler for RxSlot {
    fn done(this: Arc<Completion<Self>>, wc: &Wc<'_>, _chain: SendChain) {
        let conn = this.value().conn.clone();
        if let Some(rkey) = wc.invalidated_rkey().filter(|_| wc.ok()) {
            if verbs::trace::remote_inv_on() {
                // The QP named by the connection's endpoint, never by the completion (whose
                // QP may be gone when a completion comes late).
                let qp = conn.st.lock().qp_num();
                verbs::trace::remote_inv(qp, rkey, false);
            }
        }
        if !wc.ok() {
            conn.wr_failed(&mut conn.st.lock(), wc, "receive failed");
            conn.handled();
            return;
        }
        {
            let mut st = conn.st.lock();
            if st.draining || (conn.active && st.state == State::Connecting) {
                // Within the room reserved at setup: one entry per receive buffer.
                let _ = st
                    .early
                    .push((this, wc.byte_len(), wc.invalidated_rkey()), GFP_NOWAIT);
                return;
            }
        }
        conn.receive(&this, wc.byte_len(), wc.invalidated_rkey(), Runs::Handler);
        conn.handled();
    }
}
