// SPDX-License-Identifier: GPL-2.0

//! A periodic work item on the module's main workqueue, stopped synchronously.
//!
//! `kernel::workqueue` queues and runs work but cannot cancel it; a module must not go
//! while one of its work items may still run, so [`Ticker::stop`] cancels with
//! `cancel_delayed_work_sync()` and takes back the reference a pending item held.

use kernel::{
    bindings, impl_has_delayed_work, new_delayed_work,
    prelude::*,
    sync::{
        atomic::{
            Atomic,
            Relaxed, //
        },
        Arc,
    },
    time::{
        msecs_to_jiffies,
        Jiffies, //
    },
    workqueue::{
        DelayedWork,
        WorkItem, //
    },
};

/// What runs at every tick, in process context.
pub(crate) trait Tick: Send + Sync + 'static {
    /// One period has passed.
    fn tick(&self);
}

/// Calls `T::tick` every period until stopped.
///
/// # Invariants
///
/// While queued, the work item holds one reference of the `Arc` that holds `self`
/// (`enqueue_delayed` consumes it and `run` gives it back); once `stopped` is set and
/// `stop` has returned, it is neither queued nor running.
#[pin_data]
pub(crate) struct Ticker<T: Tick> {
    #[pin]
    work: DelayedWork<Ticker<T>>,
    stopped: Atomic<bool>,
    period: Jiffies,
    ctx: T,
}

impl_has_delayed_work! {
    impl{T: Tick} HasDelayedWork<Self> for Ticker<T> { self.work }
}

impl<T: Tick> WorkItem for Ticker<T> {
    type Pointer = Arc<Self>;

    fn run(this: Arc<Self>) {
        if this.stopped.load(Relaxed) {
            return;
        }
        this.ctx.tick();
        if !this.stopped.load(Relaxed) {
            let period = this.period;
            // Already queued cannot happen: only `run` and `start` queue it, once each.
            // Without the queue (the module goes) the ticking ends.
            if let Some(q) = super::module_wq() {
                let _ = q.enqueue_delayed(this, period);
            }
        }
    }
}

impl<T: Tick> Ticker<T> {
    /// Starts ticking every `period_ms` milliseconds.
    pub(crate) fn start(ctx: T, period_ms: u32) -> Result<Arc<Self>> {
        let period = msecs_to_jiffies(period_ms);
        let t = Arc::pin_init(
            pin_init!(Self {
                work <- new_delayed_work!("fastreg::Ticker::work"),
                stopped: Atomic::new(false),
                period,
                ctx,
            }),
            GFP_KERNEL,
        )?;
        let _ = super::module_wq()
            .ok_or(ENODEV)?
            .enqueue_delayed(t.clone(), period);
        Ok(t)
    }

    /// Stops ticking; when this returns no tick runs or will run.
    pub(crate) fn stop(&self) {
        self.stopped.store(true, Relaxed);
        // CAST: `DelayedWork` is `repr(transparent)` over `Opaque<delayed_work>`.
        let dwork = core::ptr::from_ref(&self.work)
            .cast_mut()
            .cast::<bindings::delayed_work>();
        // SAFETY: `dwork` is the initialised delayed work of this ticker, alive for `&self`.
        // This waits for a running `run` and cancels a pending one, even if it re-queues.
        let pending = unsafe { bindings::cancel_delayed_work_sync(dwork) };
        if pending {
            // SAFETY: A pending item holds one reference to this ticker, taken by
            // `enqueue_delayed` with `Arc::into_raw` on an `Arc` holding `self`; it was
            // cancelled before `run` could give it back, so it is given back here.
            drop(unsafe { Arc::from_raw(core::ptr::from_ref(self)) });
        }
    }
}
