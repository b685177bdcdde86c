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
    sync::Arc,
    workqueue::{
        HasDelayedWork,
        Queue,
        Work,
        WorkItem, //
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

/// Cancels the delayed work `ID` of `this`, waiting for it if it runs; a pending item's
/// reference to `this` is given back.
///
/// Safe because the bounds carry what it needs: the work item's pointer type is `Arc<T>`,
/// so a pending item can only have been queued with an `Arc<T>` of `this` (the work is a
/// field of `this`; `Pin<KBox<T>>` and `ARef<T>` queue only items whose pointer type they
/// are), and `HasDelayedWork` says the work is the `work` of a `delayed_work`.
pub(crate) fn cancel_delayed_sync<T, const ID: u64>(this: &T)
where
    T: HasDelayedWork<T, ID> + WorkItem<ID, Pointer = Arc<T>>,
{
    let me = core::ptr::from_ref(this).cast_mut();
    // SAFETY: `me` points at a valid `T` for the borrow of `this`.
    let work = unsafe { T::raw_get_work(me) };
    // SAFETY: `work` points at the initialised `Work` field of `this`.
    let work = unsafe { Work::raw_get(work) };
    // SAFETY: By `HasDelayedWork`, `work` is the `work` field of a `delayed_work`, alive
    // and initialised for the borrow of `this`.
    let raw = unsafe { kernel::container_of!(work, bindings::delayed_work, work) };
    // SAFETY: `raw` is an initialised delayed work, alive for the borrow of `this`.
    let pending = unsafe { bindings::cancel_delayed_work_sync(raw) };
    if pending {
        // SAFETY: A pending item holds one reference to `this`, taken with `Arc::into_raw`
        // on an `Arc<T>` of it (the only pointer type its work item has, see above); it
        // was cancelled before `run` could give it back, so it is given back here, once.
        drop(unsafe { Arc::from_raw(me.cast_const()) });
    }
}
