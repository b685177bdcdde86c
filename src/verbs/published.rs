// SPDX-License-Identifier: GPL-2.0

//! One value published for callbacks that are given no context of their own.
//!
//! `kernel::configfs` (7.2) hands a subsystem's root group callbacks the data of a child
//! group instead of the subsystem's (`get_group_data` takes a root group for a child: its
//! `cg_subsys` is not null, configfs sets it to the subsystem itself), so the root's data
//! reads as garbage (a `Subsystem` whose data is read crashes, see
//! `Documentation/configfs.rst`). fastreg's root directory therefore carries no data and
//! finds what it acts on here: published once by the module's initializer, taken back
//! when the guard is dropped, in the manner of binder's global context list
//! (`kernel::sync::global_lock!`).

use core::any::Any;

use kernel::{
    prelude::*,
    sync::{
        atomic::{
            Acquire,
            Atomic,
            Relaxed,
            Release, //
        },
        Arc, //
    },
};

/// What is published: any value, shared.
pub(crate) type Value = Arc<dyn Any + Send + Sync>;

kernel::sync::global_lock! {
    // SAFETY: `init` is called by `Published::new` only, at most once (`STARTED`), and nothing
    // locks it before it is initialized (`INITED`, set after `init` returns).
    unsafe(uninit) static PUBLISHED: Mutex<Option<Value>> = None;
}

/// Set by the first `publish`: no other may initialize the lock.
static STARTED: Atomic<bool> = Atomic::new(false);
/// Set once the lock is initialized: only then is it used.
static INITED: Atomic<bool> = Atomic::new(false);

/// The published value; taking it back when dropped.
pub(crate) struct Published(());

impl Published {
    /// Publishes `value` until the returned guard is dropped. Once per module load:
    /// `EBUSY` after the first.
    pub(crate) fn new(value: Value) -> Result<Self> {
        if STARTED.xchg(true, Relaxed) {
            return Err(EBUSY);
        }
        // SAFETY: The first call (`STARTED` was clear), so `init` runs once, and before any
        // `lock`: `get` and this guard lock only after `INITED` is set, below.
        unsafe { PUBLISHED.init() };
        INITED.store(true, Release);
        *PUBLISHED.lock() = Some(value);
        Ok(Self(()))
    }

    /// The published value, if one is (none before `new` or after its guard is dropped).
    pub(crate) fn get() -> Option<Value> {
        if !INITED.load(Acquire) {
            return None;
        }
        PUBLISHED.lock().clone()
    }
}

impl Drop for Published {
    fn drop(&mut self) {
        let gone = PUBLISHED.lock().take();
        drop(gone);
    }
}
