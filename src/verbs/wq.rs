// SPDX-License-Identifier: GPL-2.0

//! The module's own workqueue: work that may sleep for a whole transfer (the in-kernel
//! API's operations and their callbacks) runs there, never on a system workqueue, so
//! unloading can wait for all of it: dropping the queue drains and destroys it.

use core::ptr::NonNull;

use kernel::{
    bindings,
    prelude::*,
    sync::atomic::{
        Atomic,
        Relaxed, //
    },
    workqueue::{
        DelayedWork,
        Queue, //
    },
};

use super::ib;

/// The queue of the loaded module, while a [`Workqueue`] owns it (null otherwise).
static MODULE_WQ: Atomic<usize> = Atomic::new(0);

/// An unbound workqueue owned by the module.
///
/// # Invariants
///
/// `wq` was returned by `alloc_workqueue` and is destroyed only in `drop`.
pub(crate) struct Workqueue {
    wq: NonNull<bindings::workqueue_struct>,
}

// SAFETY: A workqueue may be used and destroyed from any thread.
unsafe impl Send for Workqueue {}
// SAFETY: Queueing work is thread-safe.
unsafe impl Sync for Workqueue {}

impl Workqueue {
    /// Allocates the module's workqueue; [`queue`] returns it until this is dropped.
    pub(crate) fn new() -> Result<Self> {
        // SAFETY: The name is a NUL-terminated string with 'static lifetime.
        let wq = unsafe { ib::fastreg_alloc_wq(c"fastreg".as_char_ptr()) };
        let wq = NonNull::new(wq.cast::<bindings::workqueue_struct>()).ok_or(ENOMEM)?;
        MODULE_WQ.store(wq.as_ptr() as usize, Relaxed);
        // INVARIANT: just allocated.
        Ok(Self { wq })
    }
}

impl Drop for Workqueue {
    fn drop(&mut self) {
        MODULE_WQ.store(0, Relaxed);
        // SAFETY: Allocated by `new` (type invariant) and destroyed once, here. It waits
        // for every work item queued, including those queued by work on it meanwhile.
        unsafe { bindings::destroy_workqueue(self.wq.as_ptr()) };
    }
}

/// The module's workqueue, while the module is loaded (`None` while it unloads).
pub(crate) fn queue() -> Option<&'static Queue> {
    let p = MODULE_WQ.load(Relaxed) as *mut bindings::workqueue_struct;
    if p.is_null() {
        return None;
    }
    // SAFETY: A non-null pointer is the live queue of a `Workqueue`, which the module
    // struct owns and drops only after everything that queues work on it (the debugfs
    // files, the devices) is gone; work queued by its own items is drained in its drop.
    Some(unsafe { Queue::from_raw(p) })
}

/// Cancels the delayed work `dwork` of `this`, waiting for it if it runs; a pending item's
/// reference to `this` is given back.
///
/// # Safety
///
/// `dwork` is a field of `this`, and it is only ever queued by `enqueue_delayed` with an
/// `Arc<T>` of `this` (its work item's pointer type is `Arc<T>`).
pub(crate) unsafe fn cancel_delayed_sync<T, const ID: u64>(this: &T, dwork: &DelayedWork<T, ID>) {
    // CAST: `DelayedWork` is `repr(transparent)` over `Opaque<delayed_work>`.
    let raw = core::ptr::from_ref(dwork)
        .cast_mut()
        .cast::<bindings::delayed_work>();
    // SAFETY: `raw` is an initialised delayed work, alive for the borrow of `this`.
    let pending = unsafe { bindings::cancel_delayed_work_sync(raw) };
    if pending {
        // SAFETY: By the function's requirements, a pending item holds one reference to
        // `this`, taken by `enqueue_delayed` with `Arc::into_raw` on an `Arc<T>` of it; it
        // was cancelled before `run` could give it back, so it is given back here.
        drop(unsafe { kernel::sync::Arc::from_raw(core::ptr::from_ref(this)) });
    }
}
