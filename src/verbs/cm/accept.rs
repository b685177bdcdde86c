// SPDX-License-Identifier: GPL-2.0

//! The passive side of an endpoint: listening, and a connection request rejected or
//! accepted with a new endpoint.

use super::*;

impl<T: CmHandler> Endpoint<T> {
    /// Binds to `addr` and listens for connection requests.
    pub(crate) fn listen(&self, addr: SockAddr, backlog: i32) -> Result {
        let mut sa = addr.raw();
        // SAFETY: The id is valid; `sa` is a valid `sockaddr_in` for the call.
        to_result(unsafe { ib::rdma_bind_addr(self.id.as_ptr(), (&raw mut sa).cast()) })?;
        // SAFETY: The id is valid and bound.
        to_result(unsafe { ib::rdma_listen(self.id.as_ptr(), backlog) })
    }
}

impl<T: CmHandler> ConnRequest<'_, T> {
    /// The requester's address.
    pub(crate) fn peer(&self) -> Option<SockAddr> {
        // SAFETY: The id is valid during the handler; rdma_cm filled its route addresses.
        SockAddr::from_storage(unsafe { &(*self.id).route.addr.dst_addr })
    }

    /// The requester's private data.
    pub(crate) fn private(&self) -> &[u8] {
        self.private
    }

    /// Rejects with `private` data (for example the reason and local limits); the caller
    /// then returns an error from its handler, and rdma_cm destroys the new id.
    pub(crate) fn reject(self, private: &[u8]) -> Result {
        let len = u8::try_from(private.len()).map_err(|_| EMSGSIZE)?;
        // SAFETY: The id is the request's, valid during the handler; the data is valid for
        // the call.
        to_result(unsafe {
            ib::rdma_reject(
                self.id,
                private.as_ptr().cast(),
                len,
                ib::ib_cm_rej_reason_IB_CM_REJ_CONSUMER_DEFINED as u8,
            )
        })
    }

    /// Accepts: a new endpoint with context `ctx` and a QP of `caps` on `pd`; `setup` runs
    /// once the QP exists (to post receives), then the accept is sent with `param`. On
    /// error nothing is left and the request is refused.
    pub(crate) fn accept(
        self,
        ctx: T,
        pd: &Arc<Pd>,
        caps: QpCaps,
        param: &ConnParam<'_>,
        setup: impl FnOnce(&Arc<Endpoint<T>>) -> Result,
    ) -> Result<Arc<Endpoint<T>>> {
        let id = NonNull::new(self.id).ok_or(EINVAL)?;
        // INVARIANT: the new id's context is set to the new endpoint below, before any event
        // can reach it (events for it are serialised behind this handler). Until the accept
        // succeeds the endpoint does not own the id: on failure rdma_cm destroys it.
        let ep = Arc::pin_init(
            try_pin_init!(Endpoint {
                id,
                serial: SERIAL.fetch_add(1, Relaxed),
                owns_id: Atomic::new(false),
                drained: Atomic::new(false),
                qp: SetOnce::new(),
                sq <- SendQueue::new(0),
                orphans <- crate::verbs::new_bh_spinlock!(KVec::new(), "fastreg::Endpoint::orphans"),
                handler_task: Atomic::new(0),
                connecting <- kernel::new_mutex!(
                    Connecting::default(),
                    "fastreg::Endpoint::connecting"
                ),
                connect_over <- kernel::new_condvar!("fastreg::Endpoint::connect_over"),
                ctx,
            }),
            GFP_KERNEL,
        )?;
        // SAFETY: `id` is the new id of the request, owned by this handler invocation.
        unsafe {
            (*id.as_ptr()).context = core::ptr::from_ref::<Endpoint<T>>(&ep).cast_mut().cast()
        };
        ep.create_qp(pd, caps)?;
        setup(&ep)?;
        let mut p = raw_param(param)?;
        // SAFETY: The id is valid and its handler lock is held (we are in its handler).
        to_result(unsafe { ib::fastreg_rdma_accept(id.as_ptr(), &mut p) })
            .inspect_err(|e| limited!(pr_err, "rdma_accept failed ({:?})\n", e))?;
        ep.owns_id.store(true, Relaxed);
        Ok(ep)
    }
}
