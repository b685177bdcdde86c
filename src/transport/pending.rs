// SPDX-License-Identifier: GPL-2.0

//! Transfers waiting for their peer's connection: a submission to a peer with none
//! established queues the transfer on the peer and wants it dialled ([`dial`]); when the
//! peer's run ends, its transfers are submitted on the connection or reported with the
//! error. Synchronous callers wait for the run instead ([`Iface::connect`], test build
//! only).

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
            reply: None,
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
                match conn.submit(
                    req.clone(),
                    region,
                    timeout_ms,
                    client.clone(),
                    token,
                    false,
                ) {
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
        {
            let mut st = self.st.lock();
            if st.closed {
                return Err(ENODEV);
            }
            // Room first: a transfer is queued only on a peer that is dialled.
            st.pending.reserve(1, GFP_KERNEL)?;
            self.dial_of(&mut st, peer)?.want = true;
            // Within the capacity reserved above.
            let _ = st.pending.push(p, GFP_NOWAIT);
        }
        self.kick_dials(None);
        Ok(())
    }

    /// Starts connecting to `peer` unless a connection is up, with the dial work item
    /// kicked. Answers at once: the `dial` control command, and [`Iface::connect`] before
    /// it waits.
    #[cfg(fastreg_test)]
    pub(crate) fn dial(self: &Arc<Self>, peer: SockAddr) -> Result<Dialled> {
        let runs = {
            let mut st = self.st.lock();
            if let Some(c) = Self::established_in(&st, peer)? {
                return Ok(Dialled::Up(c));
            }
            let d = self.dial_of(&mut st, peer)?;
            d.want = true;
            d.runs
        };
        self.kick_dials(None);
        Ok(Dialled::Started(runs))
    }

    /// The established connection to `peer`, connecting (and negotiating) if needed, for
    /// callers that may sleep (the control commands). Waits for the peer's run to end; a
    /// signal ends the wait.
    ///
    /// After a failed run, runs within the backoff ([`conn_state::backoff_ms`] of the
    /// consecutive failures) fail at once with the same error, so callers that retry in a
    /// loop do not hammer an unreachable peer.
    #[cfg(fastreg_test)]
    pub(crate) fn connect(self: &Arc<Self>, peer: SockAddr) -> Result<Arc<Conn>> {
        let runs = match self.dial(peer)? {
            Dialled::Up(c) => return Ok(c),
            Dialled::Started(runs) => runs,
        };
        let mut st = self.st.lock();
        loop {
            if let Some(c) = Self::established_in(&st, peer)? {
                return Ok(c);
            }
            match st.dials.iter().find(|d| d.peer == peer) {
                Some(d) if d.runs != runs => {
                    // Connected, and already down again: as refused.
                    d.last?;
                    return Err(refused());
                }
                Some(_) => {}
                None if st.closed => return Err(ENODEV),
                // Its run ended, and its connection too, and the dial was forgotten.
                None => return Err(refused()),
            }
            if self.connected.wait_interruptible(&mut st) {
                return Err(ERESTARTSYS);
            }
        }
    }

    /// A run to `peer` ended with `r`: the transfers waiting on the peer are submitted on
    /// the connection, or reported with the error. Only those that waited when it ended:
    /// a client that submits again from its callback is not looped on.
    pub(super) fn release(&self, peer: SockAddr, r: Result<Arc<Conn>>) {
        let n = self
            .st
            .lock()
            .pending
            .iter()
            .filter(|p| p.peer == peer)
            .count();
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
                p.req.clone(),
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

    /// At shutdown: every transfer waiting on a peer fails, synchronous callers are
    /// woken, and the dial work is not armed any more.
    pub(super) fn stop_dials(&self, pending: KVec<Pending>) {
        for p in pending {
            p.fail(ENODEV);
        }
        self.connected.notify_all();
        // A run in progress finishes first, and the next one sees the interface closed.
        drop(self.dialer.lock());
        verbs::cancel_delayed_sync::<_, 1>(self); // `dial_later`
    }
}

/// What [`Iface::dial`] found.
#[cfg(fastreg_test)]
pub(crate) enum Dialled {
    /// A connection is up.
    Up(Arc<Conn>),
    /// Connecting: the runs the peer's dial had made when it was asked for.
    Started(u64),
}
