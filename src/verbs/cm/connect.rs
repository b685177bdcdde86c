// SPDX-License-Identifier: GPL-2.0

//! The active side of an endpoint: a privileged source port bound, the address and the
//! route resolved, `rdma_connect` run outside the id's handler, and the disconnect.

use super::*;

impl<T: CmHandler> Endpoint<T> {
    /// Starts resolving `dst` from the address the id is bound to
    /// ([`Endpoint::bind_privileged`]); [`CmEvent::AddrResolved`] or [`CmEvent::Failed`]
    /// follows.
    pub(crate) fn resolve_addr(&self, dst: SockAddr, timeout_ms: u16) -> Result {
        let sa = dst.raw();
        // SAFETY: The id is valid; `sa` is a valid `sockaddr_in` for the call, and a null
        // source makes rdma_cm use the bound one.
        to_result(unsafe {
            ib::rdma_resolve_addr(
                self.id.as_ptr(),
                core::ptr::null_mut(),
                (&raw const sa).cast(),
                timeout_ms.into(),
            )
        })
    }

    /// Binds the id to `src`'s address on the highest free privileged port (1023 down to 1,
    /// skipping those in use, as o2iblnd's `kiblnd_resolve_addr` does), before
    /// [`Endpoint::resolve_addr`]: its requests then come from a port that
    /// only the kernel or a process with `CAP_NET_BIND_SERVICE` can bind (rdma_cm checks it
    /// in `cma_get_port`), which is what a peer requiring privileged ports checks. Returns
    /// the port; `EADDRINUSE` when every privileged port is taken on that address.
    pub(crate) fn bind_privileged(&self, src: SockAddr) -> Result<u16> {
        let in_use = |e: Error| {
            let n = e.to_errno();
            n == -(bindings::EADDRINUSE as i32) || n == -(bindings::EADDRNOTAVAIL as i32)
        };
        for port in (1..PRIVILEGED_PORTS).rev() {
            let mut sa = SockAddr { port, ..src }.raw();
            // SAFETY: The id is valid and not yet bound (a failed bind leaves it unbound);
            // `sa` is a valid `sockaddr_in` for the call.
            let r =
                to_result(unsafe { ib::rdma_bind_addr(self.id.as_ptr(), (&raw mut sa).cast()) });
            match r {
                Ok(()) => return Ok(port),
                Err(e) if in_use(e) => continue,
                Err(e) => return Err(e),
            }
        }
        Err(Error::from_errno(-(bindings::EADDRINUSE as i32)))
    }

    /// Starts resolving the route; [`CmEvent::RouteResolved`] or [`CmEvent::Failed`] follows.
    pub(crate) fn resolve_route(&self, timeout_ms: u16) -> Result {
        // SAFETY: The id is valid.
        to_result(unsafe { ib::rdma_resolve_route(self.id.as_ptr(), timeout_ms.into()) })
    }

    /// Connects from outside the id's handler (after [`CmEvent::RouteResolved`]):
    /// `rdma_connect` takes the handler's lock itself, so events for this id wait for it,
    /// and rdma_cm's workqueue, where handlers run, is not held while a device connects
    /// (siw's connect is a blocking TCP connect).
    ///
    /// Fails with `EDEADLK` from this id's handler, `EBUSY` while another connect runs,
    /// and `ENOTCONN` once the endpoint is closed. A [`Endpoint::disconnect`] meanwhile is
    /// done when `rdma_connect` returns, and [`Endpoint::close`] waits for it.
    pub(crate) fn connect(&self, param: &ConnParam<'_>) -> Result {
        if self.handler_task.load(Relaxed) == Task::current_raw() as usize {
            return Err(Error::from_errno(-(bindings::EDEADLK as i32)));
        }
        let mut p = raw_param(param)?;
        {
            let mut c = self.connecting.lock();
            if c.closed {
                return Err(Error::from_errno(-(bindings::ENOTCONN as i32)));
            }
            if c.running {
                return Err(EBUSY);
            }
            c.running = true;
        }
        // SAFETY: The id is valid (the endpoint is alive for `&self`); `p` with its private
        // data is valid for the call; not in this id's handler (checked above: its task is
        // recorded while it runs), and no disconnect or close runs meanwhile (`running`).
        let r = to_result(unsafe { ib::fastreg_rdma_connect(self.id.as_ptr(), &mut p) })
            .inspect_err(|e| limited!(pr_err, "rdma_connect failed ({:?})\n", e));
        let mut c = self.connecting.lock();
        c.running = false;
        if core::mem::take(&mut c.disconnect) {
            // SAFETY: The id is valid; disconnecting an unconnected id only returns an
            // error; no connect runs (`running` is clear, under the lock).
            unsafe { ib::rdma_disconnect(self.id.as_ptr()) };
        }
        drop(c);
        self.connect_over.notify_all();
        r
    }

    /// Disconnects: the QP moves to the error state and posted work requests flush.
    ///
    /// Process context. It may sleep: on iWARP, `iw_cm_disconnect` first waits for a
    /// connect or accept downcall in progress, which ends only after this id's handler
    /// has run for its answer. So before the connection is established, call it only
    /// with no lock held that the handler takes.
    pub(crate) fn disconnect(&self) {
        self.sq.close();
        let mut c = self.connecting.lock();
        if c.running {
            // Done by `connect` when it returns.
            c.disconnect = true;
            return;
        }
        // SAFETY: The id is valid; disconnecting twice only returns an error; no connect
        // runs (`running` is clear, and the lock keeps one from starting).
        unsafe { ib::rdma_disconnect(self.id.as_ptr()) };
    }
}
