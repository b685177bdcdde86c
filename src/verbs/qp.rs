// SPDX-License-Identifier: GPL-2.0

//! The send side of a queue pair: admission of work request chains, so the send queue can
//! never overflow, and the completion target of work requests that only report failures.

use kernel::{
    new_condvar,
    prelude::*,
    sync::{
        atomic::{
            Atomic,
            Relaxed, //
        },
        CondVar,
    },
    time::{
        msecs_to_jiffies,
        Msecs, //
    },
    types::Opaque, //
};

use super::{
    new_bh_spinlock,
    BhSpinLock, //
};

use super::ib;
use crate::rules::budget::{
    Refused,
    SqBudget, //
};

/// Work requests posted on every send queue of the module.
static POSTED_WRS: Atomic<u64> = Atomic::new(0);

/// Work requests posted on every send queue of the module since it was loaded.
pub(crate) fn posted_wrs() -> u64 {
    POSTED_WRS.load(Relaxed)
}

struct SqState {
    budget: SqBudget,
    closed: bool,
    failures: u64,
    posted_wrs: u64,
    /// Receives posted and not completed yet.
    recvs: u32,
}

/// Send-queue accounting of one QP, shared with its completion callbacks through the QP's
/// `qp_context`.
///
/// # Invariants
///
/// `err_cqe.done` is `Self::err_done`; `err_cqe` is the first field, so a pointer to it is a
/// pointer to the `SendQueue`.
#[pin_data]
#[repr(C)]
pub(crate) struct SendQueue {
    err_cqe: Opaque<ib::ib_cqe>,
    #[pin]
    state: BhSpinLock<SqState>,
    #[pin]
    room: CondVar,
}

/// Why a chain was not posted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PostError {
    /// The connection is closed or failed.
    Closed,
    /// No room in the send queue within the wait allowed.
    Timeout,
    /// The chain is larger than the whole send queue.
    TooLarge,
    /// Interrupted by a signal while waiting for room.
    Interrupted,
    /// The device refused the work requests.
    Device(i32),
}

impl PostError {
    /// The errno for callers that report one.
    pub(crate) fn to_error(self) -> Error {
        match self {
            PostError::Closed => Error::from_errno(-(kernel::bindings::ENOTCONN as i32)),
            PostError::Timeout => ETIMEDOUT,
            PostError::TooLarge => EMSGSIZE,
            PostError::Interrupted => ERESTARTSYS,
            PostError::Device(e) => Error::from_errno(e),
        }
    }
}

impl SendQueue {
    /// Accounting for a send queue of `depth` work requests.
    pub(crate) fn new(depth: u32) -> impl PinInit<Self> {
        // INVARIANT: `done` is set here and never changed.
        pin_init!(Self {
            err_cqe: Opaque::new(ib::ib_cqe {
                done: Some(Self::err_done),
            }),
            state <- new_bh_spinlock!(SqState {
                budget: SqBudget::new(depth),
                closed: false,
                failures: 0,
                posted_wrs: 0,
                recvs: 0,
            }, "fastreg::SendQueue::state"),
            room <- new_condvar!("fastreg::SendQueue::room"),
        })
    }

    /// Starts over with a send queue of `depth` work requests (when its QP is created).
    pub(super) fn reset(&self, depth: u32) {
        self.state.lock().budget = SqBudget::new(depth);
    }

    /// The `ib_cqe` for work requests whose success is not reported.
    pub(super) fn err_cqe(&self) -> *mut ib::ib_cqe {
        self.err_cqe.get()
    }

    /// Takes room for `n` work requests, waiting up to `wait_ms` for completions to free it.
    pub(super) fn admit(&self, n: u32, wait_ms: Msecs) -> Result<(), PostError> {
        let mut st = self.state.lock();
        let mut left = msecs_to_jiffies(wait_ms);
        loop {
            if st.closed {
                return Err(PostError::Closed);
            }
            match st.budget.admit(n) {
                Ok(()) => {
                    st.posted_wrs += u64::from(n);
                    POSTED_WRS.fetch_add(u64::from(n), Relaxed);
                    return Ok(());
                }
                Err(Refused::TooLarge) => return Err(PostError::TooLarge),
                Err(Refused::Busy) if left == 0 => return Err(PostError::Timeout),
                Err(Refused::Busy) => {}
            }
            if !crate::wait::step(&self.room, &mut st, &mut left) {
                return Err(PostError::Interrupted);
            }
        }
    }

    /// Work requests posted on this queue.
    pub(super) fn posted(&self) -> u64 {
        self.state.lock().posted_wrs
    }

    /// Room for work requests now (0 once closed).
    pub(super) fn room(&self) -> u32 {
        let st = self.state.lock();
        if st.closed {
            return 0;
        }
        st.budget.capacity() - st.budget.used()
    }

    /// Gives back the room of `n` work requests that [`SendQueue::admit`] admitted but the
    /// device refused (none of them was posted): neither in flight nor counted as posted.
    pub(super) fn refused(&self, n: u32) {
        let mut st = self.state.lock();
        st.posted_wrs = st.posted_wrs.saturating_sub(u64::from(n));
        Self::give_back(&mut st, n);
        drop(st);
        POSTED_WRS.fetch_sub(u64::from(n), Relaxed);
        self.room.notify_all();
    }

    /// Gives back room for `n` work requests (completed, or not posted).
    pub(super) fn release(&self, n: u32) {
        Self::give_back(&mut self.state.lock(), n);
        self.room.notify_all();
    }

    /// The budget part of [`SendQueue::release`], within the caller's critical section.
    fn give_back(st: &mut SqState, n: u32) {
        if !st.budget.release(n) {
            pr_warn!(
                "send queue: released {} WRs with {} of {} in flight\n",
                n,
                st.budget.used(),
                st.budget.capacity()
            );
        }
    }

    /// A receive was posted on the QP.
    pub(super) fn recv_posted(&self) {
        self.state.lock().recvs += 1;
    }

    /// A receive completed (or flushed).
    pub(super) fn recv_done(&self) {
        let mut st = self.state.lock();
        st.recvs = st.recvs.saturating_sub(1);
        let last = st.recvs == 0;
        drop(st);
        if last {
            // [`SendQueue::wait_idle`] may wait for it.
            self.room.notify_all();
        }
    }

    /// Waits up to `ms` milliseconds, woken by completions, until no send work request
    /// or receive posted is still to complete; returns those that are: `(sends,
    /// receives)`. A signal ends the wait early.
    pub(super) fn wait_idle(&self, ms: Msecs) -> (u32, u32) {
        let mut st = self.state.lock();
        let mut left = msecs_to_jiffies(ms);
        while (st.budget.used() != 0 || st.recvs != 0) && left > 0 {
            if !crate::wait::step(&self.room, &mut st, &mut left) {
                break;
            }
        }
        (st.budget.used(), st.recvs)
    }

    /// Refuses further posts; returns whether it was open.
    pub(super) fn close(&self) -> bool {
        let was_open = !core::mem::replace(&mut self.state.lock().closed, true);
        self.room.notify_all();
        was_open
    }

    /// # Safety
    ///
    /// Called by ib_core with a completion whose `wr_cqe` is some `SendQueue::err_cqe`.
    unsafe extern "C" fn err_done(_cq: *mut ib::ib_cq, wc: *mut ib::ib_wc) {
        // SAFETY: ib_core passes a valid completion.
        let wc = unsafe { &*wc };
        // A signaled RDMA WRITE that succeeded (iWARP, see `SendChain::link`).
        if wc.status == ib::ib_wc_status_IB_WC_SUCCESS {
            return;
        }
        // SAFETY: `wr_cqe` is `err_cqe`, the first field of a live `SendQueue` (the queue
        // lives until its QP is drained and destroyed).
        let sq = unsafe { &*(*wc.__bindgen_anon_1.wr_cqe.as_ref()).cast::<SendQueue>() };
        let mut st = sq.state.lock();
        st.failures += 1;
        let first = st.failures == 1;
        drop(st);
        if first && wc.status != ib::ib_wc_status_IB_WC_WR_FLUSH_ERR {
            // SAFETY: `ib_wc_status_msg` returns a static string.
            let msg = unsafe { CStr::from_char_ptr(ib::ib_wc_status_msg(wc.status)) };
            pr_err!(
                "work request failed: {} (status {}, vendor error {:#x})\n",
                msg.to_str().unwrap_or("?"),
                wc.status,
                wc.vendor_err
            );
        }
    }
}
