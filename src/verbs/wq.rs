// SPDX-License-Identifier: GPL-2.0

//! The module's own workqueues, each named for what runs there, never a system workqueue,
//! so that unloading can wait for all of it (dropping a queue drains and destroys it) and
//! nothing of fastreg's holds a worker that other subsystems share (`ib_comp_wq`, the
//! system workqueues).

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

/// Connects and teardowns that may wait on the device at once: siw connects its TCP
/// socket in `rdma_connect`, blocking, for about two minutes when the SYN goes unanswered.
/// More attempts than this wait their turn in the queue rather than take a worker each.
const CONNECTS_AT_ONCE: i32 = 8;

/// The module's workqueues.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Wq {
    /// `fastreg`: the in-kernel API's operations and their callbacks, the console's
    /// runs, the periodic tick. Work that may sleep for a whole transfer.
    Main,
    /// `fastreg_conn`: each connection's work item: starting transfers, serving a peer's
    /// requests, filling and checking selftest data, reporting outcomes (everything a
    /// completion handler hands on). Unbound, so a long data check holds no CPU's worker.
    Conn,
    /// `fastreg_connect`: connection requests sent and teardowns that wait for the device
    /// to answer one, at most [`CONNECTS_AT_ONCE`] at a time.
    Connect,
}

impl Wq {
    const ALL: [Wq; 3] = [Wq::Main, Wq::Conn, Wq::Connect];

    fn name(self) -> &'static CStr {
        match self {
            Wq::Main => c"fastreg",
            Wq::Conn => c"fastreg_conn",
            Wq::Connect => c"fastreg_connect",
        }
    }

    fn max_active(self) -> i32 {
        match self {
            Wq::Connect => CONNECTS_AT_ONCE,
            _ => bindings::wq_consts_WQ_MAX_ACTIVE as i32,
        }
    }
}

/// The queue of each [`Wq`], while a [`Workqueue`] owns it (null otherwise).
static QUEUES: [Atomic<usize>; 3] = [const { Atomic::new(0) }; 3];

/// An unbound workqueue owned by the module.
///
/// # Invariants
///
/// `wq` was returned by `alloc_workqueue` and is destroyed only in `drop`; it is the queue
/// published for `which` while this lives.
pub(crate) struct Workqueue {
    wq: NonNull<bindings::workqueue_struct>,
    which: Wq,
}

// SAFETY: A workqueue may be used and destroyed from any thread.
unsafe impl Send for Workqueue {}
// SAFETY: Queueing work is thread-safe.
unsafe impl Sync for Workqueue {}

impl Workqueue {
    /// Allocates the workqueue `which`; [`queue`] returns it until this is dropped.
    pub(crate) fn new(which: Wq) -> Result<Self> {
        // SAFETY: The name is a NUL-terminated string with 'static lifetime.
        let wq = unsafe { ib::fastreg_alloc_wq(which.name().as_char_ptr(), 0, which.max_active()) };
        let wq = NonNull::new(wq.cast::<bindings::workqueue_struct>()).ok_or(ENOMEM)?;
        QUEUES[which as usize].store(wq.as_ptr() as usize, Relaxed);
        // INVARIANT: just allocated, and published for `which`.
        Ok(Self { wq, which })
    }

    /// The module's workqueues, in the order they are to be destroyed: a connection's work
    /// may queue connects and teardowns, and both may queue the API's callbacks.
    pub(crate) fn all() -> Result<KVec<Self>> {
        let mut v = KVec::with_capacity(Wq::ALL.len(), GFP_KERNEL)?;
        for which in [Wq::Conn, Wq::Connect, Wq::Main] {
            v.push(Self::new(which)?, GFP_KERNEL)?;
        }
        Ok(v)
    }
}

impl Drop for Workqueue {
    fn drop(&mut self) {
        QUEUES[self.which as usize].store(0, Relaxed);
        // SAFETY: Allocated by `new` (type invariant) and destroyed once, here. It waits
        // for every work item queued, including those queued by work on it meanwhile.
        unsafe { bindings::destroy_workqueue(self.wq.as_ptr()) };
    }
}

/// The workqueue `which`, while the module is loaded (`None` while it unloads).
pub(crate) fn queue(which: Wq) -> Option<&'static Queue> {
    let p = QUEUES[which as usize].load(Relaxed) as *mut bindings::workqueue_struct;
    if p.is_null() {
        return None;
    }
    // SAFETY: A non-null pointer is the live queue of a `Workqueue`, which the module
    // struct owns and drops only after everything that queues work on it (the debugfs
    // files, the devices) is gone; work queued by its own items is drained in its drop.
    Some(unsafe { Queue::from_raw(p) })
}

/// The module's main workqueue ([`Wq::Main`]).
pub(crate) fn module_wq() -> Option<&'static Queue> {
    queue(Wq::Main)
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
