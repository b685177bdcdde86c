// SPDX-License-Identifier: GPL-2.0

//! Transfers to a peer with no established connection: they wait on the peer, not in a
//! thread (as o2iblnd's `ibp_tx_queue`). The first one starts the one connect attempt to
//! that peer, on the module's workqueue; when it ends, every transfer waiting on the peer
//! is submitted on the new connection, or reported with the error.

use super::*;

/// A transfer waiting for its peer's connection.
pub(super) struct Pending {
    peer: SockAddr,
    req: Request,
    region: Option<Region>,
    timeout_ms: u32,
    client: Arc<dyn Client>,
    token: usize,
    start: Instant<Monotonic>,
}

impl Pending {
    /// Reports the transfer with `e`.
    fn fail(self, e: Error) {
        let o = Outcome {
            region: self.region,
            result: Err(e),
            usecs: self.start.elapsed().as_micros_ceil() as u64,
        };
        self.client.done(&self.client, self.token, o);
    }
}

impl Iface {
    /// Submits `req` to `peer` (see [`crate::api::submit`]): on the established connection
    /// if there is one, otherwise queued on the peer until it is connected.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn submit(
        self: &Arc<Self>,
        peer: SockAddr,
        req: Request,
        region: Option<Region>,
        timeout_ms: u32,
        client: Arc<dyn Client>,
        token: usize,
    ) -> Result {
        let region = match self.established(peer)? {
            Some(conn) => {
                match conn.submit(req, region, timeout_ms, client.clone(), token, false) {
                    Ok(()) => return Ok(()),
                    // The connection failed meanwhile: connect again, below.
                    Err((_, region)) => region,
                }
            }
            None => region,
        };
        let p = Pending {
            peer,
            req,
            region,
            timeout_ms,
            client,
            token,
            start: Instant::now(),
        };
        let dial = {
            let mut st = self.st.lock();
            if st.closed {
                return Err(ENODEV);
            }
            st.pending.push(p, GFP_KERNEL)?;
            // The first transfer waiting on the peer starts the attempt.
            if st.dialing.contains(&peer) {
                false
            } else {
                st.dialing.push(peer, GFP_KERNEL).is_ok()
            }
        };
        if dial {
            let wq = verbs::module_wq().ok_or(ENODEV)?;
            let iface = self.clone();
            if let Err(e) = wq.try_spawn(GFP_KERNEL, move || iface.dial(peer)) {
                // Nothing will connect: whoever waits on the peer (this one included) is
                // told now.
                self.release(peer, Err(e.into()));
            }
        }
        Ok(())
    }

    /// Connects to `peer` (on the module's workqueue) and releases the transfers waiting
    /// on it.
    fn dial(self: Arc<Self>, peer: SockAddr) {
        let r = self.connect(peer);
        self.release(peer, r);
    }

    /// The connect attempt to `peer` ended with `r`: the transfers waiting on the peer are
    /// submitted on the connection, or reported with the error. Only those that waited
    /// when it ended: a client that submits again from its callback is not looped on.
    fn release(&self, peer: SockAddr, r: Result<Arc<Conn>>) {
        let n = {
            let mut st = self.st.lock();
            st.dialing.retain(|p| *p != peer);
            st.pending.iter().filter(|p| p.peer == peer).count()
        };
        for _ in 0..n {
            let mut p = {
                let mut st = self.st.lock();
                let Some(i) = st.pending.iter().position(|p| p.peer == peer) else {
                    break;
                };
                match st.pending.remove(i) {
                    Ok(p) => p,
                    Err(_) => break,
                }
            };
            let conn = match &r {
                Ok(c) => c,
                Err(e) => {
                    p.fail(*e);
                    continue;
                }
            };
            let submitted = conn.submit(
                p.req,
                p.region.take(),
                p.timeout_ms,
                p.client.clone(),
                p.token,
                false,
            );
            if let Err((e, region)) = submitted {
                p.region = region;
                p.fail(e);
            }
        }
    }
}
