// SPDX-License-Identifier: GPL-2.0

//! Interfaces: an RDMA device and a local address fastreg listens on; connecting to peers.

use super::*;

impl Iface {
    /// Counts a connection request from `peer` this side rejects for `why`, and traces it.
    pub(super) fn reject_sent(&self, peer: &SockAddr, why: Reason) {
        self.rejects_sent.count(why);
        verbs::trace::conn_reject(
            verbs::trace::ip(&self.addr),
            verbs::trace::ip(peer),
            true,
            why as u8,
            why.name(),
        );
    }

    /// A buffer of `size` bytes (at offset 0) to serve a transfer with, registered in
    /// pieces of `geo`: an idle one of that size and cut, else a new one.
    pub(super) fn serving_region(&self, size: usize, geo: Geometry) -> Result<Region> {
        let mut spare = self.spare.lock();
        let fits = |r: &Region| r.buffer().len() == size && r.pages() == geo.max_pages();
        if let Some(i) = spare.iter().rposition(fits) {
            if let Ok(r) = spare.remove(i) {
                return Ok(r);
            }
        }
        drop(spare);
        Region::new(&self.res.pd, geo, 0, size)
    }

    /// Keeps a served transfer's buffer for the next one of its size; the oldest go when
    /// more than [`SPARE_REGIONS`] or [`SPARE_BYTES`] are kept. Called from a send
    /// completion's handler: allocates nothing (the list has room for [`SPARE_REGIONS`]
    /// since the interface's creation), and frees what goes with the lock dropped.
    pub(super) fn recycle(&self, region: Region) {
        let len = region.buffer().len();
        if len > SPARE_BYTES {
            return;
        }
        loop {
            let mut spare = self.spare.lock();
            let bytes: usize = spare.iter().map(|r| r.buffer().len()).sum();
            if spare.len() < SPARE_REGIONS && bytes + len <= SPARE_BYTES {
                // Within the capacity reserved: no allocation.
                let _ = spare.push(region, GFP_NOWAIT);
                return;
            }
            let old = spare.remove(0);
            drop(spare);
            // Unmapped and freed here, without the lock.
            drop(old);
        }
    }

    /// Creates an interface on `res` at `addr` and starts listening.
    pub(crate) fn new(
        res: Arc<DevRes>,
        addr: SockAddr,
        tun: Tunables,
        timeout_ms: u32,
        control: Arc<dyn Control>,
    ) -> Result<Arc<Self>> {
        let stamp = res.new_stamp();
        let geo = match tun.mr_pages {
            0 => res.geo,
            n => res.geo.at_most(n),
        };
        let spare = KVec::with_capacity(SPARE_REGIONS, GFP_KERNEL)?;
        let msgs = res.msgs.of(wire::msg_size(tun.max_inline) as usize)?;
        let iface = Arc::pin_init(
            pin_init!(Self {
                res,
                addr,
                tun,
                stamp,
                timeout_ms,
                rejects_sent: RejectCounts::new(),
                rejects_received: RejectCounts::new(),
                seeds: Atomic::new(0),
                max_conns: tun.max_conns as usize,
                geo,
                msgs,
                configured: Atomic::new(false),
                connected <- new_condvar!("fastreg::Iface::connected"),
                spare <- new_mutex!(spare, "fastreg::Iface::spare"),
                hooks <- Hooks::new(),
                closed_by <- new_bh_spinlock!(Tally::new(), "fastreg::Iface::closed_by"),
                shares <- new_mutex!(KVec::new(), "fastreg::Iface::shares"),
                over_share: Atomic::new(0),
                control,
                moved: Moved::new(),
                st <- new_mutex!(IfaceState {
                    listener: None,
                    conns: KVec::new(),
                    closed: false,
                    dials: KVec::new(),
                    pending: KVec::new(),
                    accepting: 0,
                }, "fastreg::Iface::st"),
                accept_over <- new_condvar!("fastreg::Iface::accept_over"),
                born: Instant::now(),
                dialer <- new_mutex!((), "fastreg::Iface::dialer"),
                dial_work <- kernel::new_work!("fastreg::Iface::dial_work"),
                dial_later <- kernel::new_delayed_work!("fastreg::Iface::dial_later"),
            }),
            GFP_KERNEL,
        )?;
        let listener = Endpoint::new(Ctx::Listener(iface.clone()))?;
        let bound = listener.listen(addr, 64).and_then(|()| {
            let on_dev = listener.device().map(|d| iface.res.is(d)).unwrap_or(false);
            if on_dev {
                Ok(())
            } else {
                pr_err!("{}: address is not on device {}\n", addr, iface.res.name());
                Err(EINVAL)
            }
        });
        if let Err(e) = bound {
            // The listener refers to the interface: break the cycle before dropping it.
            drop(listener);
            return Err(e);
        }
        iface.st.lock().listener = Some(listener);
        pr_info!(
            "{}: interface {} up: queue_depth={} max_payload={} max_regs={}\n",
            iface.res.name(),
            addr,
            tun.queue_depth,
            tun.max_payload,
            tun.max_regs
        );
        Ok(iface)
    }

    /// The address.
    pub(crate) fn addr(&self) -> SockAddr {
        self.addr
    }

    /// Marks it as made through configfs (before it is listed): only its directory removes
    /// it, not the debugfs commands (`iface del`, or `iface add` retuning it).
    pub(crate) fn configured(&self) {
        self.configured.store(true, Relaxed);
    }

    /// Its incarnation: with its address, what names it among the node's interfaces.
    pub(crate) fn stamp(&self) -> u64 {
        self.stamp
    }

    /// A new seed for a transfer's pattern.
    pub(crate) fn seed(&self) -> u32 {
        let n = self.seeds.fetch_add(1, Relaxed);
        (self.stamp as u32) ^ n.wrapping_mul(0x9e37_79b9)
    }

    /// A connection of this interface went down for `reason` (the first one given).
    pub(super) fn count_closed(&self, reason: &'static str) {
        self.closed_by.lock().count(reason);
    }

    /// What this interface offers in negotiation.
    pub(super) fn local(&self) -> negotiate::Local {
        negotiate::Local {
            queue_depth: self.tun.queue_depth,
            max_regs: self.tun.max_regs,
            max_payload: self.tun.max_payload,
            max_msg: wire::msg_size(self.tun.max_inline),
            // Within what those messages leave (the tunable's range keeps it so), and never
            // beyond the largest transfer.
            max_inline: u16::try_from(self.tun.max_inline.min(self.tun.max_payload)).unwrap_or(0),
            page_size: PAGE_SIZE as u32,
            features: wire::FEATURE_REMOTE_INV,
            stamp: self.stamp,
            port: self.addr.port,
        }
    }

    /// Closes every connection and the listener; the interface is unusable afterwards.
    pub(crate) fn shutdown(&self) {
        let (listener, pending) = {
            let mut st = self.st.lock();
            st.closed = true;
            st.dials.clear();
            (st.listener.take(), core::mem::take(&mut st.pending))
        };
        self.stop_dials(pending);
        // The listener first: no new connection while the others go.
        drop(listener);
        // Requests accepted before `closed` was set put their connections in the list.
        let conns = {
            let mut st = self.st.lock();
            while st.accepting > 0 {
                self.accept_over.wait(&mut st);
            }
            core::mem::take(&mut st.conns)
        };
        for c in conns.into_iter() {
            c.teardown_soon("interface removed");
        }
        // Their DMA mappings must not outlive the interface's use of the device.
        let spare = core::mem::take(&mut *self.spare.lock());
        drop(spare);
        pr_info!("{}: interface {} down\n", self.res.name(), self.addr);
    }

    /// Drops connections that are closed (their teardown happens here, in process context).
    pub(crate) fn reap(&self) {
        let dead: KVec<Arc<Conn>> = {
            let mut st = self.st.lock();
            let mut dead = KVec::new();
            // Room first: a connection leaves the list only to be torn down. Without
            // memory, the next round reaps it.
            if dead.reserve(st.conns.len(), GFP_KERNEL).is_err() {
                return;
            }
            let mut i = 0;
            while i < st.conns.len() {
                let closed = matches!(st.conns[i].state(), State::Closing | State::Closed);
                if closed {
                    if let Ok(c) = st.conns.remove(i) {
                        // Within the capacity reserved above.
                        let _ = dead.push(c, GFP_NOWAIT);
                    }
                } else {
                    i += 1;
                }
            }
            dead
        };
        for c in dead.into_iter() {
            c.teardown_soon("closed");
        }
    }

    /// The established connection between this interface and the interface `peer`, if
    /// any: one this side made, else one the peer made (one connection serves both
    /// directions) that claims the incarnation the peer's listener told this side of
    /// ([`dial::PeerDial::stamp`]): a request's port and stamp are only the requester's
    /// word. What proves a request came from the peer's kernel is its privileged source
    /// port (`require_privileged_port`, checked in `connect_request`); with that check off,
    /// a process on the peer's address that learned the stamp could pass for it here.
    pub(crate) fn established(&self, peer: SockAddr) -> Result<Option<Arc<Conn>>> {
        Self::established_in(&self.st.lock(), peer)
    }

    /// [`Iface::established`] with the interface's state locked.
    pub(super) fn established_in(st: &IfaceState, peer: SockAddr) -> Result<Option<Arc<Conn>>> {
        if st.closed {
            return Err(ENODEV);
        }
        let stamp = st
            .dials
            .iter()
            .find(|d| d.peer == peer)
            .map_or(0, |d| d.stamp);
        Ok(Self::to_peer(&st.conns, peer, |c| {
            let cst = c.st.lock();
            cst.state == State::Established && (c.active || (stamp != 0 && cst.peer_stamp == stamp))
        }))
    }

    /// The connection with `peer` for which `ok` holds: one this side made first, else
    /// one the peer made.
    fn to_peer(
        conns: &[Arc<Conn>],
        peer: SockAddr,
        ok: impl Fn(&Conn) -> bool,
    ) -> Option<Arc<Conn>> {
        let with = |c: &&Arc<Conn>| c.peer_iface == Some(peer) && ok(c);
        conns
            .iter()
            .filter(|c| c.active)
            .find(with)
            .or_else(|| conns.iter().find(with))
            .cloned()
    }

    /// `conn` has just learned that its peer interface is incarnation `stamp`: fails the
    /// other connections to or from that interface that know it by another incarnation.
    /// The peer restarted; they will never hear from it again, and transfers on them
    /// would only time out. Their teardown happens in [`Iface::reap`].
    pub(super) fn close_stale(&self, conn: &Arc<Conn>, stamp: u64) {
        let Some(peer) = conn.peer_iface else {
            return;
        };
        let stale: KVec<(Arc<Conn>, u64)> = {
            let st = self.st.lock();
            let mut v = KVec::new();
            for c in st.conns.iter() {
                if Arc::ptr_eq(c, conn) || c.peer_iface != Some(peer) {
                    continue;
                }
                let known = c.st.lock().peer_stamp;
                if negotiate::stale(known, stamp) {
                    // Under memory pressure the keepalive finds the others.
                    let _ = v.push((c.clone(), known), GFP_KERNEL);
                }
            }
            v
        };
        for (c, known) in stale.iter() {
            pr_limited!(
                conn,
                pr_info,
                "{} {} {}: peer {} restarted (incarnation {:#x}, was {:#x})\n",
                self.addr,
                c.dir(),
                c.peer,
                peer,
                stamp,
                known
            );
            c.fail("stale incarnation: the peer restarted");
        }
    }

    /// Connections of the interface that it accepted (and has not reaped yet).
    pub(super) fn accepted(&self, st: &IfaceState) -> usize {
        st.conns.iter().filter(|c| !c.active).count()
    }

    /// Whether the interface was shut down.
    pub(crate) fn is_closed(&self) -> bool {
        self.st.lock().closed
    }

    /// Its device's resources.
    pub(crate) fn res(&self) -> &Arc<DevRes> {
        &self.res
    }

    /// Takes `conn` out of the list; returns whether it was there. Whoever takes a
    /// connection out tears it down (a shutdown may have taken it first).
    #[cfg(fastreg_test)]
    fn forget(&self, conn: &Arc<Conn>) -> bool {
        let mut st = self.st.lock();
        let before = st.conns.len();
        st.conns.retain(|c| !Arc::ptr_eq(c, conn));
        st.conns.len() != before
    }

    /// The connection with `peer` (see [`Iface::established`]), in any state.
    #[cfg(fastreg_test)]
    pub(crate) fn find(&self, peer: SockAddr) -> Option<Arc<Conn>> {
        Self::to_peer(&self.st.lock().conns, peer, |_| true)
    }

    /// Closes the connection to `peer`, if any.
    #[cfg(fastreg_test)]
    pub(crate) fn close(&self, peer: SockAddr) -> Result {
        let c = self.find(peer).ok_or(ENOENT)?;
        if self.forget(&c) {
            c.teardown_soon("closed by request");
        }
        Ok(())
    }
}
