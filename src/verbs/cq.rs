// SPDX-License-Identifier: GPL-2.0

//! Completion queues (`ib_alloc_cq`), and how completions reach Rust handlers.
//!
//! Work requests carry an `ib_cqe` (`wr_cqe`); ib_core calls its `done` function for each
//! completion. A [`Completion<T>`] embeds that `ib_cqe` in front of a `T: Handler`: posting
//! hands a counted reference to the device, and `done` takes it back and calls
//! `T::done` with the work completion and what was posted. No cast is needed anywhere else.

use core::ptr::NonNull;

use kernel::{
    error::from_err_ptr,
    prelude::*,
    sync::Arc,
    types::Opaque, //
};

use super::{
    new_bh_spinlock,
    BhSpinLock, //
};

use super::{
    ib,
    Device,
    DeviceRef,
    SendChain,
    SendQueue, //
};

/// A completion queue polled in softirq (`IB_POLL_SOFTIRQ`): handlers must not sleep, and
/// the locks they take are [`super::BhSpinLock`]s (held with softirqs off elsewhere).
///
/// # Invariants
///
/// `ptr` is a CQ allocated by `ib_alloc_cq()` on `device`, freed in `Drop`; its
/// `cq_context` is the `SendQueue` given to `new`, which outlives it.
pub(crate) struct Cq {
    ptr: NonNull<ib::ib_cq>,
    _device: DeviceRef,
}

// SAFETY: A CQ may be used and freed from any thread.
unsafe impl Send for Cq {}
// SAFETY: Shared references only pass the pointer to ib_core, which serialises polling.
unsafe impl Sync for Cq {}

impl Cq {
    /// Allocates a CQ of `entries` entries on `device`, for the QP whose send queue is
    /// `sq`: its completions find `sq` through the CQ, not through their QP, which may be
    /// destroyed before a late completion is polled (see `Endpoint::wait_flushed`).
    ///
    /// # Safety
    ///
    /// `sq` outlives the CQ.
    pub(super) unsafe fn new(device: &Device, entries: u32, sq: &SendQueue) -> Result<Self> {
        // SAFETY: The device is valid; the context is only read by `done_callback`, while
        // the CQ lives (and `sq` with it).
        let ptr = from_err_ptr(unsafe {
            ib::fastreg_ib_alloc_cq(
                device.as_raw(),
                core::ptr::from_ref(sq).cast_mut().cast(),
                entries as i32,
            )
        })
        .inspect_err(|e| {
            limited!(
                pr_err,
                "{}: ib_alloc_cq of {} entries failed ({:?})\n",
                device.name(),
                entries,
                e
            )
        })?;
        // INVARIANT: Just allocated.
        Ok(Self {
            ptr: NonNull::new(ptr).ok_or(ENOMEM)?,
            _device: device.into(),
        })
    }

    /// The raw CQ pointer.
    pub(super) fn as_raw(&self) -> *mut ib::ib_cq {
        self.ptr.as_ptr()
    }
}

impl Drop for Cq {
    fn drop(&mut self) {
        // SAFETY: Valid by the type invariant. Its QP was destroyed first (the endpoint's
        // `QpParts` drop the CQs after its `Drop`); this cancels the polling work, and
        // completions still queued are discarded (their owners take them back, see
        // `Completion::reclaim_lost`).
        unsafe { ib::ib_free_cq(self.ptr.as_ptr()) };
    }
}

/// A work completion, as passed to a handler: the device's, with its status replaced by
/// an error when the `fastreg_fail_wr` fault attribute chose its chain.
pub(crate) struct Wc<'a>(&'a ib::ib_wc, u32);

impl Wc<'_> {
    /// Whether the work request succeeded.
    pub(crate) fn ok(&self) -> bool {
        self.1 == ib::ib_wc_status_IB_WC_SUCCESS
    }

    /// Whether the work request was flushed (its QP is in the error state).
    pub(crate) fn flushed(&self) -> bool {
        self.1 == ib::ib_wc_status_IB_WC_WR_FLUSH_ERR
    }

    /// Whether the peer refused the access (`IB_WC_REM_ACCESS_ERR`: a key it does not grant).
    pub(crate) fn remote_access_error(&self) -> bool {
        self.1 == ib::ib_wc_status_IB_WC_REM_ACCESS_ERR
    }

    /// Whether the error was injected (`fastreg_fail_wr`) rather than the device's.
    pub(crate) fn injected(&self) -> bool {
        self.1 != self.0.status
    }

    /// The status as text (`ib_wc_status_msg`).
    pub(crate) fn status_msg(&self) -> &'static CStr {
        // SAFETY: `ib_wc_status_msg` returns a static string for any value.
        unsafe { CStr::from_char_ptr(ib::ib_wc_status_msg(self.1)) }
    }

    /// Bytes received (receive completions).
    pub(crate) fn byte_len(&self) -> u32 {
        self.0.byte_len
    }

    /// The rkey the peer invalidated with this message (`IB_WC_WITH_INVALIDATE`), if any.
    pub(crate) fn invalidated_rkey(&self) -> Option<u32> {
        if self.0.wc_flags & ib::ib_wc_flags_IB_WC_WITH_INVALIDATE as i32 != 0 {
            // SAFETY: The union holds `invalidate_rkey` when the flag is set.
            Some(unsafe { *self.0.ex.invalidate_rkey.as_ref() })
        } else {
            None
        }
    }
}

/// What receives the completion of a chain of work requests.
pub(crate) trait Handler: Send + Sync + Sized + 'static {
    /// Called once per posted chain, in the CQ's poll context (softirq: it must not sleep),
    /// with the completion of its last work request (a failure of an earlier one shows as a
    /// failure, or a flush, here) and the chain itself, which no longer references anything
    /// once this is called.
    fn done(this: Arc<Completion<Self>>, wc: &Wc<'_>, chain: SendChain);
}

/// An `ib_cqe` bound to a handler.
///
/// # Invariants
///
/// `cqe.done` is `Self::done_callback`. Every `wr_cqe` that points at `cqe` was given one
/// reference of the `Arc` that holds `self` (`Arc::into_raw`), which `done_callback` takes
/// back; while a chain is posted, `posted` holds it with the serial number of the endpoint
/// it was posted on.
#[pin_data]
#[repr(C)]
pub(crate) struct Completion<T: Handler> {
    cqe: Opaque<ib::ib_cqe>,
    #[pin]
    posted: BhSpinLock<Option<(SendChain, u64)>>,
    value: T,
}

// SAFETY: `cqe` is only read by ib_core; `posted` is locked; `T` is `Send + Sync`.
unsafe impl<T: Handler> Send for Completion<T> {}
// SAFETY: As above.
unsafe impl<T: Handler> Sync for Completion<T> {}

impl<T: Handler> Completion<T> {
    /// Allocates a completion target for `value`.
    pub(crate) fn new(value: T) -> Result<Arc<Self>> {
        // INVARIANT: `done` is set here and never changed.
        Arc::pin_init(
            pin_init!(Self {
                cqe: Opaque::new(ib::ib_cqe {
                    done: Some(Self::done_callback),
                }),
                posted <- new_bh_spinlock!(None, "fastreg::Completion::posted"),
                value,
            }),
            GFP_KERNEL,
        )
    }

    /// The handler.
    pub(crate) fn value(&self) -> &T {
        &self.value
    }

    /// The `ib_cqe` to put in work requests.
    pub(super) fn cqe_ptr(&self) -> *mut ib::ib_cqe {
        self.cqe.get()
    }

    /// Records `chain` as posted on the endpoint numbered `on` and returns the `wr_cqe` for
    /// its last work request, which carries one reference to `this`. Gives the chain back
    /// if one is already posted.
    // The chain is handed back by value when refused, so its storage is reused.
    #[expect(clippy::result_large_err)]
    pub(super) fn arm(
        this: &Arc<Self>,
        chain: SendChain,
        on: u64,
    ) -> Result<*mut ib::ib_cqe, SendChain> {
        let mut slot = this.posted.lock();
        if slot.is_some() {
            return Err(chain);
        }
        *slot = Some((chain, on));
        drop(slot);
        // The reference is taken back by `done_callback` (or `disarm`).
        let raw = Arc::into_raw(this.clone());
        // CAST: `cqe` is the first field of a `repr(C)` struct.
        Ok(raw.cast_mut().cast())
    }

    /// Takes back the reference and chain of `arm` when the post failed.
    ///
    /// # Safety
    ///
    /// `cqe` was returned by `arm` on this completion and was not posted.
    pub(super) unsafe fn disarm(cqe: *mut ib::ib_cqe) -> SendChain {
        // SAFETY: `arm` produced `cqe` with `Arc::into_raw`.
        let this = unsafe { Arc::from_raw(cqe.cast::<Self>()) };
        let chain = this.posted.lock().take();
        chain.map_or_else(SendChain::empty, |(c, _)| c)
    }

    /// Takes back the reference and chain of a work request whose completion never came,
    /// once its QP and CQs are destroyed (`gone`); returns whether one was outstanding. A
    /// completion posted on another endpoint is left alone (`false`).
    ///
    /// siw can lose the completion of a request posted before the drain (see
    /// `Endpoint::wait_flushed`): without this its chain, and the MRs and buffers the
    /// chain holds, would stay allocated for good, the PD with them.
    pub(crate) fn reclaim_lost(this: &Arc<Self>, gone: &super::QpGone) -> bool {
        let mut posted = this.posted.lock();
        match *posted {
            Some((_, on)) if on == gone.serial() => {}
            _ => return false,
        }
        let chain = posted.take();
        drop(posted);
        drop(chain);
        // SAFETY: `posted` was set, so `arm` gave a work request one reference made with
        // `Arc::into_raw`, and neither `done_callback` nor `disarm` took it back (each takes
        // `posted` with it). It was posted on the endpoint `gone` names (the serial
        // numbers are unique), whose QP and CQs are destroyed:
        // `ib_free_cq` cancelled the polling work, so no completion is running or will
        // run, and nothing arms this completion on them any more. It is taken back here,
        // once (`posted` is cleared with it).
        drop(unsafe { Arc::from_raw(Arc::as_ptr(this)) });
        true
    }

    /// # Safety
    ///
    /// Called by ib_core only, with a completion of a work request posted by
    /// `Endpoint::post` with the `ib_cqe` of a `Completion<T>`.
    unsafe extern "C" fn done_callback(cq: *mut ib::ib_cq, wc: *mut ib::ib_wc) {
        // SAFETY: ib_core passes a valid work completion for the duration of the call.
        let wc = unsafe { &*wc };
        // SAFETY: `wr_cqe` is a pointer `arm` made with `Arc::into_raw` (type invariant);
        // the reference it carries is taken back here, once per completion.
        let this = unsafe { Arc::from_raw((*wc.__bindgen_anon_1.wr_cqe.as_ref()).cast::<Self>()) };
        let chain = this.posted.lock().take();
        let chain = chain.map_or_else(SendChain::empty, |(c, _)| c);
        // SAFETY: Completions are posted on QPs whose CQs were made by `Cq::new`, with the
        // QP's `SendQueue` as context, which outlives them (its invariant); the CQ is valid
        // during its own callback.
        let sq = unsafe { &*(*cq).cq_context.cast::<SendQueue>() };
        if chain.is_recv() {
            sq.recv_done();
        } else {
            sq.release(chain.len() as u32);
        }
        // A fault injected into a chain that failed anyway leaves the device's error.
        let status = match chain.injected_status() {
            Some(s) if wc.status == ib::ib_wc_status_IB_WC_SUCCESS => s,
            _ => wc.status,
        };
        T::done(this, &Wc(wc, status), chain);
    }
}
