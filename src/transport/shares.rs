// SPDX-License-Identifier: GPL-2.0

//! Every peer's share of an interface (`crate::rules::share`): the peers it knows, the ticket of
//! each connection a peer opened, the charge of each transfer served for it.

use super::*;
use crate::rules::share::{
    self,
    Limits,
    Usage, //
};

/// A peer and what it holds: `(ip, (conns, mrs, bytes))`.
pub(crate) type PeerHeld = ([u8; 4], (u32, u32, u64));

/// What one peer (a remote address) holds on an interface.
pub(crate) struct PeerShare {
    ip: [u8; 4],
    usage: Usage,
}

/// A connection the peer opened, counted in its share until the connection goes.
pub(super) struct ConnTicket(Arc<PeerShare>);

impl Drop for ConnTicket {
    fn drop(&mut self) {
        self.0.usage.disconnect();
    }
}

/// The MRs and bytes of a transfer served for a peer, counted in its share until its keys
/// are dead and its buffer is back (dropped with the served transfer's region and MRs).
pub(super) struct Charge {
    share: Arc<PeerShare>,
    mrs: u32,
    bytes: u64,
}

impl Drop for Charge {
    fn drop(&mut self) {
        self.share.usage.release(self.mrs, self.bytes);
    }
}

impl Iface {
    /// A peer's share on this interface.
    pub(super) fn share_limits(&self) -> Limits {
        share::limits(
            self.res.pool.max(),
            self.tun.max_conns,
            u32::from(self.tun.queue_depth),
            self.tun.max_payload,
            u32::from(self.tun.max_regs),
        )
    }

    /// The share of peer `ip`, made on first use; entries of peers that hold nothing go
    /// when a new one comes.
    pub(super) fn share_of(&self, ip: [u8; 4]) -> Result<Arc<PeerShare>> {
        let mut shares = self.shares.lock();
        if let Some(s) = shares.iter().find(|s| s.ip == ip) {
            return Ok(s.clone());
        }
        shares.retain(|s| !s.usage.idle());
        let s = Arc::new(
            PeerShare {
                ip,
                usage: Usage::new(),
            },
            GFP_KERNEL,
        )?;
        shares.push(s.clone(), GFP_KERNEL)?;
        Ok(s)
    }

    /// A connection that peer `ip` opens: within its share, or refused (`EBUSY`, counted
    /// and logged, rate-limited).
    pub(super) fn admit_conn(&self, ip: [u8; 4]) -> Result<ConnTicket> {
        let s = self.share_of(ip)?;
        let lim = self.share_limits();
        match s.usage.connect(&lim) {
            Ok(()) => Ok(ConnTicket(s)),
            Err(over) => Err(self.over_share(&s, over, &lim)),
        }
    }

    /// Charges `share` with a served transfer of `mrs` MRs and `bytes` bytes, or says it is
    /// past its share (`EAGAIN`: the peer's side waits and retries).
    pub(super) fn charge(&self, share: &Arc<PeerShare>, mrs: u32, bytes: u64) -> Result<Charge> {
        let lim = self.share_limits();
        match share.usage.charge(&lim, mrs, bytes) {
            Ok(()) => Ok(Charge {
                share: share.clone(),
                mrs,
                bytes,
            }),
            Err(over) => Err(self.over_share(share, over, &lim)),
        }
    }

    fn over_share(&self, s: &PeerShare, over: share::Over, lim: &Limits) -> Error {
        self.over_share.fetch_add(1, Relaxed);
        let (conns, mrs, bytes) = s.usage.held();
        pr_limited!(
            pr_warn,
            "{}: peer {} is at its share of {} (holds {} connections, {} MRs, {} bytes; \
             share {}, {}, {}): its request waits or is refused\n",
            self.addr,
            Ip(s.ip),
            over.name(),
            conns,
            mrs,
            bytes,
            lim.conns,
            lim.mrs,
            lim.bytes
        );
        match over {
            share::Over::Conns => EBUSY,
            _ => EAGAIN,
        }
    }

    /// What each peer that holds anything holds: `(ip, (conns, mrs, bytes))`.
    pub(super) fn shares_held(&self) -> Result<KVec<PeerHeld>> {
        let shares = self.shares.lock();
        let mut v = KVec::with_capacity(shares.len(), GFP_KERNEL)?;
        for s in shares.iter().filter(|s| !s.usage.idle()) {
            v.push((s.ip, s.usage.held()), GFP_KERNEL)?;
        }
        Ok(v)
    }

    /// Requests refused as past a peer's share.
    pub(crate) fn over_share_count(&self) -> u64 {
        self.over_share.load(Relaxed)
    }
}

impl Conn {
    /// Charges the peer of this connection with a served transfer of `region`.
    pub(super) fn charge_served(&self, region: &Region) -> Result<Charge> {
        self.iface
            .charge(&self.share, region.nmrs(), region.buffer().len() as u64)
    }
}
