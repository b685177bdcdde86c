// SPDX-License-Identifier: GPL-2.0

//! Posting on an endpoint's QP: send chains and receives, admitted by the send queue, and
//! the chains the device took only part of, kept until the QP is drained.

use super::*;

impl<T: CmHandler> Endpoint<T> {
    /// Work requests posted on the send queue since the QP was created.
    pub(crate) fn posted_wrs(&self) -> u64 {
        self.sq.posted()
    }

    /// Room in the send queue for work requests now.
    pub(crate) fn sq_room(&self) -> u32 {
        self.sq.room()
    }

    /// Posts `chain`; `done` receives its completion, with the chain, once.
    ///
    /// Waits up to `wait_ms` for room in the send queue. On failure the chain is
    /// handed back (except when the device took part of it: then it is kept until the QP
    /// is drained, and the connection fails).
    // The chain is handed back by value on failure so its storage is reused: no allocation.
    #[expect(clippy::result_large_err)]
    pub(crate) fn post<H: Handler>(
        &self,
        mut chain: SendChain,
        done: &Arc<Completion<H>>,
        wait_ms: Msecs,
    ) -> Result<(), (PostError, Option<SendChain>)> {
        let parts = match self.qp.as_ref() {
            Some(p) => p,
            None => return Err((PostError::Closed, Some(chain))),
        };
        let n = chain.len() as u32;
        if n == 0 {
            return Err((PostError::Device(EINVAL.to_errno()), Some(chain)));
        }
        if let Err(e) = self.sq.admit(n, wait_ms) {
            return Err((e, Some(chain)));
        }
        chain.draw_fault();
        chain.trace(self.qp_num());
        let first = chain.link(done.cqe_ptr(), self.sq.err_cqe(), parts.signal_writes);
        let cqe = match Completion::arm(done, chain, self.serial) {
            Ok(cqe) => cqe,
            Err(chain) => {
                self.sq.refused(n);
                return Err((PostError::Device(EBUSY.to_errno()), Some(chain)));
            }
        };
        let mut bad: *const ib::ib_send_wr = core::ptr::null();
        // SAFETY: The QP is valid while `self` lives; the chain's work requests were just
        // linked and live in the armed chain until its completion.
        let ret = unsafe { ib::fastreg_ib_post_send(parts.qp.as_ptr(), first, &mut bad) };
        if ret == 0 {
            return Ok(());
        }
        // SAFETY: `cqe` came from `arm` above and its work request was not posted (the
        // signalled one is last, and posting stops at the first failure).
        let chain = unsafe { Completion::<H>::disarm(cqe) };
        if bad.cast_mut() == first {
            limited!(
                pr_err,
                "ib_post_send refused a chain of {} work requests whole ({}): nothing posted\n",
                n,
                ret
            );
            self.sq.refused(n);
            Err((PostError::Device(ret), Some(chain)))
        } else {
            // Part of the chain may be on the send queue: keep it until the QP is drained.
            if bad.is_null() {
                // Out of the verbs' contract, but what `fail_function` does (the helper is
                // not run at all): assumed partly posted, which is always safe.
                pr_err!(
                    "ib_post_send failed ({}) without naming where it stopped; failing the \
                     connection\n",
                    ret
                );
            } else {
                pr_err!(
                    "ib_post_send accepted part of a chain ({}); failing the connection\n",
                    ret
                );
            }
            // No completion comes for the part posted (its signaled last request was
            // not): its room is not waited for after the drain. Closed first, so that no
            // waiter for room gets in between.
            self.sq.close();
            self.sq.release(n);
            self.orphan(chain);
            Err((PostError::Device(ret), None))
        }
    }

    /// Refuses further posts (a failed connection, until it is disconnected); never sleeps.
    pub(crate) fn refuse_posts(&self) {
        self.sq.close();
    }

    /// Posts a receive of up to `buf.len()` bytes into `buf`; `done` receives its
    /// completion once.
    pub(crate) fn post_recv<H: Handler>(
        &self,
        buf: &Arc<MsgBuf>,
        done: &Arc<Completion<H>>,
    ) -> Result {
        let parts = self.qp.as_ref().ok_or(EINVAL)?;
        let mut chain = SendChain::empty();
        chain.hold_recv(buf);
        chain.draw_fault();
        let mut sge = buf.sge(buf.len() as u32);
        let cqe = Completion::arm(done, chain, self.serial).map_err(|_| EBUSY)?;
        let mut wr = ib::ib_recv_wr {
            sg_list: &mut sge,
            num_sge: 1,
            ..Default::default()
        };
        // SAFETY: The union member for kernel ULPs is `wr_cqe`.
        unsafe { *wr.__bindgen_anon_1.wr_cqe.as_mut() = cqe };
        let mut bad: *const ib::ib_recv_wr = core::ptr::null();
        // Counted before the post: its completion may run before this returns.
        self.sq.recv_posted();
        // SAFETY: The QP is valid; the work request and its entry are valid for the call
        // (providers copy them); `buf` is held by the armed completion until it completes.
        let ret = unsafe { ib::fastreg_ib_post_recv(parts.qp.as_ptr(), &wr, &mut bad) };
        if ret != 0 {
            self.sq.recv_done();
            // SAFETY: `cqe` came from `arm` and was not posted.
            drop(unsafe { Completion::<H>::disarm(cqe) });
            return Err(Error::from_errno(ret));
        }
        Ok(())
    }

    fn orphan(&self, chain: SendChain) {
        // The work requests were posted: the MRs they name must outlive them, so the chain
        // is kept until the drain. Without memory to keep it, its references are leaked
        // rather than risk a use after free (the MRs then stay allocated). Called with the
        // connection's lock held: no sleeping allocation.
        if let Err(e) = self.orphans.lock().push(chain, GFP_ATOMIC) {
            pr_err!(
                "cannot keep a partly posted chain ({:?}): leaking its MRs\n",
                e
            );
        }
    }
}
