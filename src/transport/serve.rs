// SPDX-License-Identifier: GPL-2.0

//! Serving a peer's PUT or GET: registering the sink or source, the RDMA, invalidation.

use super::*;

/// What the first request owed to the peer that needs it has ready, made with the
/// connection's lock released ([`Conn::prepare_serving`]): allocating, mapping and filling
/// a buffer, allocating MRs and a console's answer (which takes the console's locks) are
/// never done under that lock, which the completion handlers take; only the registration
/// and the post are.
pub(super) struct Prepared {
    /// The request it is for: its kind, cookie and size.
    what: Needs,
    cookie: u64,
    size: u64,
    /// What is ready, or why nothing is (the answer's status).
    got: Result<Ready>,
}

/// The kinds of requests answered with something [`Prepared`].
#[derive(Clone, Copy, PartialEq, Eq)]
enum Needs {
    Put,
    Get,
    Control,
}

/// What a [`Prepared`] holds.
pub(super) enum Ready {
    /// A PUT's sink or a GET's source, with its free MRs and room for their lists.
    Buffer(Buffer),
    /// A console's answer.
    Reply(crate::selftest::control::Payload),
}

/// A served transfer's buffer, and room for its MRs and the lists they go to (a PUT's
/// registrations and their invalidation; a GET's source registrations and theirs):
/// allocated with no lock held.
pub(super) struct Buffer {
    region: Region,
    mrs: KVec<FrMr<Free>>,
    regs: KVec<FrMr<Registered>>,
    inv: KVec<FrMr<Invalidating>>,
}

/// What [`Conn::post_served`] made: the answer's slot, the buffer and its charge, or the
/// error to answer with; and the lists the MRs went to.
struct Served {
    r: Result<(Arc<Completion<TxSlot>>, Region, Charge)>,
    regs: KVec<FrMr<Registered>>,
    inv: KVec<FrMr<Invalidating>>,
}

impl Prepared {
    /// Whether it was made for `o`.
    pub(super) fn is_for(&self, o: &Owed) -> bool {
        o.needs() == Some((self.what, self.cookie, self.size))
    }

    /// Gives what it holds back: the MRs to the pool, the buffer to the interface's spares.
    pub(super) fn give_back(self, iface: &Iface) {
        if let Ok(Ready::Buffer(b)) = self.got {
            Conn::put_back(&iface.res, b.mrs);
            iface.recycle(b.region);
        }
    }
}

impl Owed {
    /// What answering it takes ready ([`Prepared`]), and its cookie and size.
    fn needs(&self) -> Option<(Needs, u64, u64)> {
        match self {
            Owed::Put { cookie, size, .. } => Some((Needs::Put, *cookie, *size)),
            Owed::Get { cookie, size, .. } => Some((Needs::Get, *cookie, *size)),
            Owed::Control(cookie, _) => Some((Needs::Control, *cookie, 0)),
            _ => None,
        }
    }

    /// Whether answering it takes something [`Prepared`].
    pub(super) fn needs_prepared(&self) -> bool {
        self.needs().is_some()
    }
}

impl Conn {
    /// Takes the free MRs of a transfer this side serves in `region` into `out` (whose
    /// room was made when it was prepared), leaving the node's own transfers their reserve
    /// (`share::serve_reserve`); `EAGAIN` (busy) when there are none free now. Taken as the
    /// answer is posted, under the connection's lock: nothing is allocated, and no MR
    /// waits in a prepared buffer for credits.
    fn take_serving(res: &DevRes, region: &Region, out: &mut KVec<FrMr<Free>>) -> Result {
        let reserve = crate::rules::share::serve_reserve(res.pool.max(), region.nmrs());
        res.pool.take_now(region.nmrs(), reserve, out)
    }

    /// Gives free MRs that were not used back to the pool.
    pub(super) fn put_back(res: &DevRes, mrs: KVec<FrMr<Free>>) {
        for mr in mrs {
            res.pool.put_free(mr);
        }
    }

    /// Makes ready what the first request owed that needs it takes ([`Prepared`]), unless
    /// something is already: on the connection's work item, with the connection's lock
    /// released while it allocates, maps, fills, grows the pool or asks the console. A
    /// PUT's sink is cut as the interface says (`mr_pages`), within the negotiated
    /// `max_regs`; a GET's source holds the pattern of its seed (or zeros with check none:
    /// a served buffer never carries bytes of an earlier transfer).
    pub(super) fn prepare_serving(&self) {
        let mut req = crate::selftest::control::Payload::new();
        let (what, cookie, size, seed, check, max_regs) = {
            let st = self.st.lock();
            if st.state != State::Established || st.prepared.is_some() {
                return;
            }
            let max_regs = st.params.map_or(0, |p| u32::from(p.max_regs));
            let Some(o) = st.owed.iter().find(|o| o.needs_prepared()) else {
                return;
            };
            let (seed, check) = match o {
                Owed::Get { seed, check, .. } => (*seed, *check),
                Owed::Control(_, p) => {
                    req = *p;
                    (0, Check::None)
                }
                _ => (0, Check::None),
            };
            let Some((what, cookie, size)) = o.needs() else {
                return;
            };
            (what, cookie, size, seed, check, max_regs)
        };
        let got = match what {
            Needs::Control => self.control_reply(&req).map(Ready::Reply).ok_or(EINVAL),
            Needs::Put | Needs::Get => self
                .buffer_ready(what == Needs::Get, size, seed, check, max_regs)
                .map(Ready::Buffer),
        };
        let prepared = Prepared {
            what,
            cookie,
            size,
            got,
        };
        let mut st = self.st.lock();
        let wanted = st.state == State::Established
            && st.prepared.is_none()
            && st
                .owed
                .iter()
                .find(|o| o.needs_prepared())
                .is_some_and(|o| prepared.is_for(o));
        if wanted {
            st.prepared = Some(prepared);
            return;
        }
        drop(st);
        prepared.give_back(&self.iface);
    }

    /// A buffer of `size` bytes to serve a PUT (`get` false) or GET with, and its MRs.
    fn buffer_ready(
        &self,
        get: bool,
        size: u64,
        seed: u32,
        check: Check,
        max_regs: u32,
    ) -> Result<Buffer> {
        let geo = if get {
            self.iface.res.geo
        } else {
            self.iface.geo
        };
        let region = self.iface.serving_region(size as usize, geo)?;
        let ready = if !get && region.nmrs() > max_regs {
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
            Err(EMSGSIZE)
        } else if get {
            region::fill(&region, seed, check).and_then(|()| self.iface.corrupt_hook(&region))
        } else {
            Ok(())
        };
        let n = region.nmrs();
        // The MRs it will take, allocated now if the pool must grow for them (taken only
        // when the answer goes: a failure here shows there as busy).
        let _ = self.iface.res.pool.grow(n);
        let n = n as usize;
        let lists = ready.and_then(|()| {
            Ok((
                KVec::with_capacity(n, GFP_KERNEL)?,
                KVec::with_capacity(n, GFP_KERNEL)?,
                KVec::with_capacity(n, GFP_KERNEL)?,
            ))
        });
        match lists {
            Ok((mrs, regs, inv)) => Ok(Buffer {
                region,
                mrs,
                regs,
                inv,
            }),
            Err(e) => {
                self.iface.recycle(region);
                Err(e)
            }
        }
    }

    /// What was [`Prepared`] for `o`, about to be answered; `EAGAIN` (busy) if nothing
    /// was.
    fn prepared_for(st: &mut ConnState, o: &Owed) -> Result<Ready> {
        match st.prepared.take() {
            Some(p) if p.is_for(o) => p.got,
            Some(p) => {
                // Not reached: `pump` answers only what was prepared.
                st.prepared = Some(p);
                Err(EAGAIN)
            }
            None => Err(EAGAIN),
        }
    }

    /// The buffer and MRs [`Prepared`] for `o`, a PUT or GET.
    fn buffer_for(st: &mut ConnState, o: &Owed) -> Result<Buffer> {
        match Self::prepared_for(st, o)? {
            Ready::Buffer(b) => Ok(b),
            Ready::Reply(_) => Err(EINVAL),
        }
    }

    /// The console's answer [`Prepared`] for `o`, a console's request (`None`: it gave
    /// none).
    pub(super) fn reply_for(
        st: &mut ConnState,
        o: &Owed,
    ) -> Option<crate::selftest::control::Payload> {
        match Self::prepared_for(st, o) {
            Ok(Ready::Reply(p)) => Some(p),
            _ => None,
        }
    }

    /// Answers the first request owed if what it takes is [`Prepared`] and it can go now
    /// (credits, a send slot, room; no sink's keys still to kill): a PUT's sink, a GET's
    /// source, a console's answer. On the connection's work item, the only place that
    /// serves ([`Conn::pump`] stops at such a request). Returns whether it answered.
    pub(super) fn serve_prepared(&self, st: &mut ConnState) -> bool {
        let ready = st.unkey.is_empty()
            && st.credits >= 2
            && !st.tx_free.is_empty()
            && self.sq_room(st)
            && st
                .owed
                .first()
                .is_some_and(|o| st.prepared.as_ref().is_some_and(|p| p.is_for(o)));
        if !ready {
            return false;
        }
        let Ok(o) = st.owed.remove(0) else {
            return false;
        };
        let r = match o {
            Owed::Put {
                cookie,
                seed,
                check,
                ..
            } => self.serve_put(
                st,
                &o,
                SinkCheck {
                    cookie,
                    seed,
                    check,
                },
            ),
            Owed::Get { .. } => self.serve_get(st, &o),
            Owed::Control(cookie, _) => {
                let Some(p) = Self::reply_for(st, &o) else {
                    self.violation(st, "control request not answered");
                    return false;
                };
                self.send_locked(
                    st,
                    Body::Control {
                        reply: true,
                        cookie,
                        payload: p.as_slice(),
                    },
                    false,
                )
            }
            _ => Err(EINVAL),
        };
        if let Err(e) = r {
            self.cannot_answer(st, e);
            return false;
        }
        true
    }

    /// Posts the answer to a served PUT or GET with what was [`Prepared`] for `o`: within
    /// the peer's share, its MRs taken now, `build` appending the registrations (and the
    /// RDMA) to the chain, `body` the message. On failure nothing was posted and the buffer
    /// goes back to the spares; the lists its MRs went to are returned either way.
    // Not inlined: one frame for both kinds, beside the NAK's.
    #[inline(never)]
    fn post_served<'a>(
        &self,
        st: &mut ConnState,
        o: &Owed,
        build: impl FnOnce(
            &mut SendChain,
            &Region,
            KVec<FrMr<Free>>,
            &mut KVec<FrMr<Registered>>,
            &mut KVec<FrMr<Invalidating>>,
        ) -> Result<Option<Regs>>,
        body: impl FnOnce(Option<&Regs>) -> Body<'a>,
        invalidate: Option<u32>,
    ) -> Served {
        let res = self.iface.res.clone();
        let Buffer {
            region,
            mrs,
            mut regs,
            mut inv,
        } = match Self::buffer_for(st, o) {
            Ok(b) => b,
            Err(e) => {
                return Served {
                    r: Err(e),
                    regs: KVec::new(),
                    inv: KVec::new(),
                }
            }
        };
        let mut unused = Some(mrs);
        // Within the peer's share (else busy: the peer waits and retries).
        let posted = self.charge_served(&region).and_then(|charge| {
            self.post_locked(
                st,
                Post::Msg,
                |chain| {
                    let mut taken = unused.take().ok_or(EINVAL)?;
                    Self::take_serving(&res, &region, &mut taken)?;
                    build(chain, &region, taken, &mut regs, &mut inv)
                },
                body,
                invalidate,
            )
            .map(|slot| (slot, charge))
        });
        if let Some(mrs) = unused {
            Self::put_back(&res, mrs);
        }
        let r = match posted {
            Ok((slot, charge)) => Ok((slot, region, charge)),
            Err(e) => {
                Self::recycle_later(st, region);
                Err(e)
            }
        };
        Served { r, regs, inv }
    }

    /// The sink of a PUT: registers its [`Prepared`] buffer and answers PUT_ACK with its
    /// registrations (the REG_MRs go first in the same chain). Without MRs or memory it
    /// answers PUT_NAK (`-EAGAIN`: busy, the source retries); a buffer this device would
    /// split into more registrations than negotiated is refused with `-EMSGSIZE`.
    // Not inlined: its frame is on the stack only when a request is served.
    #[inline(never)]
    pub(super) fn serve_put(&self, st: &mut ConnState, o: &Owed, how: SinkCheck) -> Result {
        let Owed::Put { cookie, .. } = *o else {
            return Err(EINVAL);
        };
        let res = self.iface.res.clone();
        let sink_cookie = st.next_cookie;
        st.next_cookie += 1;
        let short = self.iface.advertise_short();
        let access = Access::REMOTE_WRITE.with(Access::LOCAL_WRITE);
        let served = match st.sinks.reserve(1, GFP_NOWAIT) {
            Ok(()) => self.post_served(
                st,
                o,
                |chain, region, taken, regs, _| {
                    region.register_taken(&res.pool, access, chain, regs, taken)?;
                    let mut adv = region::advertise(regs)?;
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
            ),
            Err(e) => Served {
                r: Err(e.into()),
                regs: KVec::new(),
                inv: KVec::new(),
            },
        };
        let Served { r, mut regs, inv } = served;
        match r {
            Ok((_, region, charge)) => {
                let sink = Sink {
                    since: Instant::now(),
                    sink_cookie,
                    how,
                    region,
                    regs,
                    pending: inv,
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

    /// The source of a GET: writes its [`Prepared`] buffer into the requester's
    /// registrations, invalidates its own, and answers GET_DONE with the remote
    /// invalidation of the requester's first registration.
    // Not inlined: its frame is on the stack only when a request is served.
    #[inline(never)]
    pub(super) fn serve_get(&self, st: &mut ConnState, o: &Owed) -> Result {
        let Owed::Get { cookie, regs, .. } = o else {
            return Err(EINVAL);
        };
        let cookie = *cookie;
        let res = self.iface.res.clone();
        let remote_inv = Self::remote_inv(st).then(|| regs.as_slice()[0].rkey);
        let remote_inv = self.iface.serving_get(regs, remote_inv);
        let Served {
            r,
            regs: mut local,
            mut inv,
        } = self.post_served(
            st,
            o,
            |chain, region, taken, local, inv| {
                let remote = regs.as_slice();
                region::source_chain(&res.pool, region, remote, taken, chain, local, inv)?;
                Ok(None)
            },
            |_| Body::Done {
                get: true,
                cookie,
                status: 0,
            },
            remote_inv,
        );
        match r {
            Ok((slot, region, charge)) => {
                self.dup_done(st, cookie);
                // Within the capacity reserved at setup.
                st.tagged.push(
                    Tagged {
                        slot,
                        what: Finishing::ServedGet(region, inv, charge),
                    },
                    GFP_NOWAIT,
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
}
