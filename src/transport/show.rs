// SPDX-License-Identifier: GPL-2.0

//! Snapshots of interfaces and connections, for the debugfs files: copied under their
//! locks, formatted by the debugfs code above ([`crate::ctl::report`]) with no lock held.

use super::*;

/// What debugfs shows of a connection.
#[derive(Clone, Copy)]
pub(crate) struct ConnSnap {
    /// This side made it.
    pub(crate) active: bool,
    pub(crate) peer: SockAddr,
    pub(crate) state: State,
    /// The negotiated parameters (the peer's page size in `page_size`), once known.
    pub(crate) params: Option<ConnParams>,
    pub(crate) credits: u32,
    pub(crate) outstanding: u32,
    /// Bytes its message slots take (buffers, chains, slots).
    pub(crate) mem: usize,
    pub(crate) stats: Stats,
    /// Work requests posted on its QP.
    pub(crate) wrs: u64,
    pub(crate) peer_stamp: u64,
    pub(crate) reason: Option<&'static str>,
}

/// What debugfs shows of an interface.
pub(crate) struct IfaceSnap {
    pub(crate) res: Arc<DevRes>,
    pub(crate) addr: SockAddr,
    pub(crate) tun: Tunables,
    /// Pages per registration of the buffers it serves.
    pub(crate) mr_pages: u32,
    pub(crate) stamp: u64,
    /// Rejects by reason (index: the reason's number).
    pub(crate) rejects_sent: [u64; REASONS],
    pub(crate) rejects_received: [u64; REASONS],
    /// Its fuzzing run, if any (test hook).
    #[cfg(fastreg_test)]
    pub(crate) fuzz: Option<crate::rules::fuzz::Fuzzer>,
    /// Its connections that went down, by reason.
    pub(crate) closed_by: Tally,
    pub(crate) conns: KVec<ConnSnap>,
    /// A peer's share, the requests refused as past one, and what each peer holds
    /// (connections, MRs, bytes) that holds anything.
    pub(crate) share: crate::rules::share::Limits,
    pub(crate) over_share: u64,
    pub(crate) held: KVec<super::shares::PeerHeld>,
}

impl RejectCounts {
    fn snapshot(&self) -> [u64; REASONS] {
        core::array::from_fn(|i| self.0[i].load(Relaxed))
    }
}

impl Conn {
    /// A copy of what debugfs shows.
    pub(super) fn snapshot(&self) -> ConnSnap {
        let st = self.st.lock();
        ConnSnap {
            active: self.active,
            peer: self.peer,
            state: st.state,
            params: st.params,
            credits: st.credits,
            outstanding: st.outstanding,
            mem: st.mem,
            stats: st.stats,
            wrs: st.ep.as_ref().map(|e| e.posted_wrs()).unwrap_or(0),
            peer_stamp: st.peer_stamp,
            reason: st.reason,
        }
    }
}

impl Iface {
    /// A copy of what debugfs shows (under memory pressure, fewer connections).
    pub(super) fn snapshot(&self) -> Result<IfaceSnap> {
        let conns = super::ifaces::snapshot(&self.st.lock().conns);
        let mut snaps = KVec::with_capacity(conns.len(), GFP_KERNEL)?;
        for c in conns.iter() {
            snaps.push(c.snapshot(), GFP_KERNEL)?;
        }
        // A statement of its own: the spinlock's guard must not live on while the snapshot
        // below takes the shares' mutex.
        let closed_by = *self.closed_by.lock();
        Ok(IfaceSnap {
            #[cfg(fastreg_test)]
            fuzz: self.fuzz_snapshot(),
            closed_by,
            res: self.res.clone(),
            addr: self.addr,
            tun: self.tun,
            mr_pages: self.geo.max_pages(),
            stamp: self.stamp,
            rejects_sent: self.rejects_sent.snapshot(),
            rejects_received: self.rejects_received.snapshot(),
            conns: snaps,
            share: self.share_limits(),
            over_share: self.over_share_count(),
            held: self.shares_held()?,
        })
    }
}

impl Ifaces {
    /// A copy of every interface and its connections, for debugfs.
    pub(crate) fn snapshot(&self) -> Result<KVec<IfaceSnap>> {
        let ifaces = super::ifaces::snapshot(&self.list.lock());
        let mut v = KVec::with_capacity(ifaces.len(), GFP_KERNEL)?;
        for i in ifaces.iter() {
            v.push(i.snapshot()?, GFP_KERNEL)?;
        }
        Ok(v)
    }
}
