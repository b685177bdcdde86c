// SPDX-License-Identifier: GPL-2.0

//! rdma_cm events of interfaces and connections, and connection requests.

use super::*;

impl CmHandler for Ctx {
    fn event(ep: ArcBorrow<'_, Endpoint<Self>>, ev: CmEvent<'_>) {
        let Ctx::Conn(conn) = ep.ctx() else { return };
        let mut st = conn.st.lock();
        match ev {
            // The state machine moves the connection and says what to do; the handler does
            // that and nothing else: an event the state does not expect (a late one, after
            // a teardown began) comes back as `Action::None`.
            CmEvent::AddrResolved => {
                if conn.on(&mut st, Event::AddrResolved, "") != Action::ResolveRoute {
                    return;
                }
                // `rdma_resolve_route` takes rdma_cm's mutexes: with the lock released
                // (`setting_up`: a teardown meanwhile waits for it).
                st.setting_up = true;
                drop(st);
                let r = ep.resolve_route(RESOLVE_MS);
                let mut st = conn.st.lock();
                st.setting_up = false;
                conn.cv.notify_all();
                if r.is_err() {
                    conn.on(&mut st, Event::Failed, "route resolution failed");
                }
            }
            CmEvent::RouteResolved => {
                // The QP and the slots are made with the lock released (`setting_up`): a
                // teardown meanwhile waits for them, then finds everything set up, or came
                // first (then the state says so and nothing is installed). The handler
                // only borrows its endpoint: the connection owns it.
                if conn.on(&mut st, Event::RouteResolved, "") != Action::Connect {
                    return;
                }
                let asked = st.asked;
                let was = st.state;
                st.setting_up = true;
                drop(st);
                let res = &conn.iface.res;
                let caps = Conn::caps(res, asked.queue_depth, asked.max_payload, asked.max_regs);
                let slots = ep
                    .create_qp(&res.pd, caps)
                    .and_then(|()| conn.slots(&asked, asked.queue_depth));
                st = conn.st.lock();
                st.setting_up = false;
                conn.cv.notify_all();
                if st.state != was {
                    // Torn down meanwhile: what was made goes with the lock released.
                    drop(st);
                    drop(slots);
                    return;
                }
                let r = slots.and_then(|s| conn.install(&mut st, &ep, s));
                if r.is_err() {
                    conn.on(&mut st, Event::Error, "connect failed");
                    return;
                }
                // Without the lock, and off this handler: siw connects its TCP socket in
                // rdma_connect, blocking, for about two minutes when the SYN goes
                // unanswered. Under the lock that held the caller's bounded wait and every
                // reader of the connection; in this handler it holds rdma_cm's ordered
                // workqueue, and with it every other connection's setup on the node. So it
                // runs on the module's workqueue ([`Conn::connect_work`]); teardown waits
                // for `in_connect` to clear.
                // Counted until it is done: the device's removal waits for it, so
                // rdma_cm's own removal never finds this id's handler lock held.
                // Spawned with the lock released (it allocates): `in_connect` is set first,
                // so a teardown meanwhile waits for the connect's answer.
                let private = conn.iface.outgoing(&asked);
                let (c, e): (_, Arc<Endpoint<Ctx>>) = (conn.clone(), ep.into());
                st.in_connect = true;
                drop(st);
                if !conn.iface.res.spawn(move || c.connect_work(e, private)) {
                    // No workqueue (the module is going) or no memory: no connect is out.
                    let mut st = conn.st.lock();
                    conn.connect_answered(&mut st);
                    conn.on(&mut st, Event::Error, "connect failed");
                }
            }
            CmEvent::Established(private) => {
                // The connect request is answered (see `ConnState::in_connect`).
                conn.connect_answered(&mut st);
                if conn.active {
                    let granted = match ConnParams::decode(private) {
                        Ok(g) if negotiate::check_accept(&st.asked, &g) => g,
                        _ => {
                            pr_err!(
                                "{} -> {}: the accept grants more than asked, or is malformed\n",
                                conn.iface.addr,
                                conn.peer
                            );
                            st.retry = Some(Retry::Fail);
                            conn.on(&mut st, Event::RejectedFinal, "bad accept");
                            return;
                        }
                    };
                    st.params = Some(granted);
                    st.peer_stamp = granted.stamp;
                    st.credits = credits::limit(granted.queue_depth);
                    st.same_pool = conn.iface.res.has_stamp(granted.stamp);
                }
                if conn.on(&mut st, Event::Established, "") != Action::Start {
                    // Torn down meanwhile (closed by its owner, or its connect timed out):
                    // nothing starts; the teardown disconnects.
                    return;
                }
                if !st.early.is_empty() {
                    // Messages came first: handled, in order with those after them, on
                    // the connection's work item.
                    st.draining = true;
                    conn.kick(None);
                }
                // On iWARP the connecting side's NOOP is its first send, posted before the
                // lock is dropped below (where a request woken by the establishment could
                // go first); if it cannot go, the connection failed, saying so.
                conn.open_iwarp(&mut st);
                if st.state != State::Established {
                    return;
                }
                if conn.active {
                    // Lock order: the interface's state before a connection's.
                    let stamp = st.peer_stamp;
                    drop(st);
                    conn.iface.close_stale(conn, stamp);
                    st = conn.st.lock();
                }
                pr_limited!(
                    conn,
                    pr_info,
                    "{} {} {}: connected: queue_depth={} max_payload={} max_regs={} sq_depth={} \
                     page_size={} peer_page_size={} max_inline={}\n",
                    conn.iface.addr,
                    conn.dir(),
                    conn.peer,
                    st.params.map(|p| p.queue_depth).unwrap_or(0),
                    st.params.map(|p| p.max_payload).unwrap_or(0),
                    st.params.map(|p| p.max_regs).unwrap_or(0),
                    ep.caps().map(|c| c.send_wr).unwrap_or(0),
                    PAGE_SIZE,
                    st.params.map(|p| p.page_size).unwrap_or(0),
                    st.params.map(|p| p.max_inline).unwrap_or(0)
                );
                conn.pump(&mut st, Runs::Handler);
            }
            CmEvent::Rejected(status, private) => {
                // The connect request is answered (see `ConnState::in_connect`).
                conn.connect_answered(&mut st);
                match ConnParams::decode(private) {
                    Ok(limits) => {
                        // The listener's word on its incarnation ([`super::dial`]).
                        st.peer_stamp = limits.stamp;
                        let why = Reason::from_u8(limits.reason);
                        if let Some(r) = why {
                            conn.iface.rejects_received.count(r);
                        }
                        verbs::trace::conn_reject(
                            verbs::trace::ip(&conn.iface.addr),
                            verbs::trace::ip(&conn.peer),
                            false,
                            limits.reason,
                            why.map_or("unknown", |r| r.name()),
                        );
                        pr_info!(
                        "{} -> {}: rejected ({}); peer limits: queue_depth={} max_payload={} max_regs={} max_msg={} max_inline={}\n",
                        conn.iface.addr,
                        conn.peer,
                        why.map(|r| r.name()).unwrap_or("unknown"),
                        limits.queue_depth,
                        limits.max_payload,
                        limits.max_regs,
                        limits.max_msg,
                        limits.max_inline
                    );
                        let retry = negotiate::on_reject(&st.asked, &limits);
                        st.retry = Some(retry);
                        let ev = if matches!(retry, Retry::Fail) {
                            Event::RejectedFinal
                        } else {
                            Event::RejectedRetry
                        };
                        conn.on(&mut st, ev, "rejected by the peer");
                    }
                    Err(_) => {
                        pr_err!(
                            "{} -> {}: rejected (status {}): no fastreg listener there?\n",
                            conn.iface.addr,
                            conn.peer,
                            status
                        );
                        st.retry = Some(Retry::Fail);
                        conn.on(&mut st, Event::RejectedFinal, "rejected");
                    }
                }
            }
            CmEvent::Failed(event, status) => {
                // The connect request is answered (see `ConnState::in_connect`).
                conn.connect_answered(&mut st);
                pr_err!(
                    "{} -> {}: {} (status {})\n",
                    conn.iface.addr,
                    conn.peer,
                    verbs::event_name(event).to_str().unwrap_or("?"),
                    status
                );
                // A connect error the network did not cause is retried (see
                // `negotiate::on_connect_error`); anything else ends the run.
                st.retry = Some(if verbs::is_connect_error(event) {
                    negotiate::on_connect_error(&st.asked, status)
                } else {
                    Retry::Fail
                });
                // rdma_cm's status is a negative errno for address and route errors.
                st.connect_err = Some(if (-4095..0).contains(&status) {
                    status
                } else {
                    -(kernel::bindings::EHOSTUNREACH as i32)
                });
                conn.on(&mut st, Event::Failed, "unreachable");
            }
            CmEvent::Disconnected => {
                conn.on(&mut st, Event::Disconnected, "disconnected by the peer");
            }
            CmEvent::DeviceRemoval => {
                conn.on(&mut st, Event::DeviceRemoval, "device removed");
            }
            CmEvent::Other => {}
        }
    }

    fn connect_request(ep: ArcBorrow<'_, Endpoint<Self>>, req: ConnRequest<'_, Self>) -> Result {
        let Ctx::Listener(iface) = ep.ctx() else {
            return Err(EINVAL);
        };
        let me = iface.local();
        let from = req.peer();
        let peer = from.unwrap_or(SockAddr {
            ip: [0; 4],
            port: 0,
        });
        // Only a kernel (or a process with CAP_NET_BIND_SERVICE) binds a source port below
        // 1024: rdma_cm refuses it to anyone else, and on iWARP so does TCP. Checked before
        // anything of the request is read, so a forger on a peer's address is refused
        // without a word of its parameters acted upon (an incarnation it claims closes
        // nothing). The reject gives away no incarnation.
        if iface.tun.require_privileged_port && from.is_none_or(|a| a.port >= PRIVILEGED_PORTS) {
            iface.reject_sent(&peer, Reason::Unprivileged);
            pr_limited!(
                pr_warn,
                "{} <- {}: rejecting: source port {} is not privileged (require_privileged_port=1): not a peer's kernel\n",
                iface.addr,
                peer,
                peer.port
            );
            let limits = ConnParams {
                stamp: 0,
                ..me.params(0, Reason::Unprivileged as u8)
            };
            let _ = req.reject(&iface.outgoing(&limits));
            return Err(EACCES);
        }
        let asked = ConnParams::decode(req.private());
        let answer = match &asked {
            Ok(asked) => negotiate::answer(asked, &me),
            Err(_) => Answer::Reject(Reason::Malformed, me.params(0, Reason::Malformed as u8)),
        };
        // What the connection shows as the peer's page size: the requester's, not ours.
        let peer_page_size = asked.map(|a| a.page_size).unwrap_or(0);
        // The interface that connects: the request's source address and listening port.
        let peer_iface = asked.ok().filter(|a| a.port != 0).map(|a| SockAddr {
            ip: peer.ip,
            port: a.port,
        });
        match answer {
            Answer::Reject(why, limits) => {
                iface.reject_sent(&peer, why);
                pr_limited!(
                    pr_info,
                    "{} <- {}: rejecting: {}\n",
                    iface.addr,
                    peer,
                    why.name()
                );
                let _ = req.reject(&iface.outgoing(&limits));
                Err(EINVAL)
            }
            Answer::Accept(granted) => {
                // Within the peer's share of connections (all its addresses' connections).
                let ticket = match iface.admit_conn(peer.ip) {
                    Ok(t) => t,
                    Err(e) => {
                        iface.reject_sent(&peer, Reason::NoResources);
                        let limits = me.params(0, Reason::NoResources as u8);
                        let _ = req.reject(&iface.outgoing(&limits));
                        return Err(e);
                    }
                };
                let conn = Conn::new(
                    iface.clone(),
                    peer,
                    false,
                    peer_iface,
                    granted,
                    Some(ticket),
                )?;
                {
                    let mut st = conn.st.lock();
                    st.params = Some(ConnParams {
                        page_size: peer_page_size,
                        ..granted
                    });
                    st.peer_stamp = granted.dst_stamp;
                    st.credits = credits::limit(granted.queue_depth);
                    st.same_pool = iface.res.has_stamp(granted.stamp);
                    conn.on(&mut st, Event::Accepted, "");
                }
                // Counted in `accepting` from the check that the interface is open until the
                // connection is in its list, with the lock released meanwhile (creating the
                // QP and its buffers, and `rdma_accept`, go without it): a shutdown either
                // comes first (and the request is refused) or waits for the count and then
                // finds the connection and tears it down.
                let mut ist = iface.st.lock();
                if ist.closed {
                    return Err(ENODEV);
                }
                let race = |f: &SockAddr| iface.refuses_race(&ist, *f, granted.dst_stamp);
                if let Some(from) = peer_iface.filter(race) {
                    drop(ist);
                    // This side's own connection to that interface goes on (or is up), and
                    // serves both directions; the peer's attempt finds it established.
                    iface.reject_sent(&peer, Reason::Race);
                    pr_limited!(
                        pr_info,
                        "{} <- {}: rejecting: race (this side connects to {})\n",
                        iface.addr,
                        peer,
                        from
                    );
                    let _ = req.reject(&iface.outgoing(&me.params(0, Reason::Race as u8)));
                    return Err(EINVAL);
                }
                let accepted = iface.accepted(&ist) + ist.accepting;
                if accepted >= iface.max_conns {
                    drop(ist);
                    iface.reject_sent(&peer, Reason::NoResources);
                    pr_limited!(
                        pr_err,
                        "{} <- {}: rejecting: {} connections accepted, the limit (max_conns)\n",
                        iface.addr,
                        peer,
                        accepted
                    );
                    let _ = req.reject(&iface.outgoing(&me.params(0, Reason::NoResources as u8)));
                    return Err(EBUSY);
                }
                // The push below should not fail once the id is accepted: returning an
                // error then would make rdma_cm destroy an id the endpoint owns.
                let room = ist.accepting + 1;
                ist.conns.reserve(room, GFP_KERNEL)?;
                ist.accepting += 1;
                drop(ist);
                let private = iface.outgoing(&granted);
                let setup_conn = conn.clone();
                let qd = granted.queue_depth;
                let accepted = req.accept(
                    Ctx::Conn(conn.clone()),
                    &iface.res.pd,
                    Conn::caps(&iface.res, qd, granted.max_payload, granted.max_regs),
                    &ConnParam {
                        private: &private,
                        rd_atomic: 16,
                    },
                    // The endpoint is the connection's before rdma_accept: a message may
                    // arrive as soon as it is sent, and its buffer must be reposted.
                    move |ep| {
                        let asked = setup_conn.st.lock().asked;
                        let slots = setup_conn.slots(&asked, qd)?;
                        let mut st = setup_conn.st.lock();
                        st.ep = Some(ep.clone());
                        setup_conn.install(&mut st, ep, slots)
                    },
                );
                let mut ist = iface.st.lock();
                ist.accepting -= 1;
                let r = match accepted {
                    Ok(ep) => {
                        // The connection holds the endpoint; a reference kept here would
                        // make a teardown meanwhile drop the last one in this handler.
                        drop(ep);
                        // Within the capacity reserved above, unless connections this
                        // side opened took it meanwhile.
                        if ist.conns.push(conn.clone(), GFP_KERNEL).is_ok() {
                            drop(ist);
                            iface.close_stale(&conn, granted.dst_stamp);
                        } else {
                            drop(ist);
                            // Nobody would find it: torn down off this handler (which
                            // holds the new id's handler lock that its destruction takes).
                            let c = conn.clone();
                            if !iface.res.spawn(move || c.teardown("out of memory")) {
                                pr_err!(
                                    "{} <- {}: cannot list or tear down an accepted connection: leaking it\n",
                                    iface.addr,
                                    peer
                                );
                            }
                        }
                        Ok(())
                    }
                    Err(e) => {
                        drop(ist);
                        // The slots refer to the connection: break the cycle. The endpoint
                        // goes with the handler's error (rdma_cm destroys the id).
                        let mut st = conn.st.lock();
                        let slots = Conn::take_slots(&mut st);
                        let ep = st.ep.take();
                        drop(st);
                        drop(slots);
                        drop(ep);
                        Err(e)
                    }
                };
                iface.accept_over.notify_all();
                r
            }
        }
    }
}
