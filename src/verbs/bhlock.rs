// SPDX-License-Identifier: GPL-2.0

//! Spinlocks that keep softirqs off while held (`spin_lock_bh`), for data that completion
//! handlers also touch: fastreg's CQs are polled in softirq (`IB_POLL_SOFTIRQ`), and a lock
//! a softirq handler takes must never be held with softirqs on in process context on the
//! same CPU (the handler would spin on it for ever). The kernel crate's `SpinLock` takes
//! `spin_lock` only; this is the same lock with the `_bh` calls.
//!
//! Nothing under these locks may sleep; `CondVar` waits release them (and turn softirqs
//! back on) while asleep.

use kernel::{
    bindings,
    sync::lock::{
        Backend,
        Guard,
        Lock, //
    },
};

use super::ib;

/// A spinlock taken with softirqs off ([`BhSpinLockBackend`]).
pub(crate) type BhSpinLock<T> = Lock<T, BhSpinLockBackend>;

/// A held [`BhSpinLock`].
pub(crate) type BhSpinLockGuard<'a, T> = Guard<'a, T, BhSpinLockBackend>;

/// `spin_lock_bh` / `spin_unlock_bh` on a `spinlock_t`.
pub(crate) struct BhSpinLockBackend;

/// A [`BhSpinLock`] initialiser, named for lockdep, with a lock class of its own per call
/// site (as `new_spinlock!`).
macro_rules! new_bh_spinlock {
    ($inner:expr, $name:literal $(,)?) => {
        kernel::sync::lock::Lock::<_, $crate::verbs::BhSpinLockBackend>::new(
            $inner,
            kernel::c_str!($name),
            kernel::static_lock_class!(),
        )
    };
}
pub(crate) use new_bh_spinlock;

// SAFETY: `spin_lock_bh` and `spin_unlock_bh` on a `spinlock_t` initialised by
// `__spin_lock_init` give mutual exclusion, as `SpinLockBackend`'s calls do: the guard state
// is unit and the lock is released by the owner only; `relock` is `lock` (the default).
unsafe impl Backend for BhSpinLockBackend {
    type State = bindings::spinlock_t;
    type GuardState = ();

    unsafe fn init(
        ptr: *mut Self::State,
        name: *const kernel::ffi::c_char,
        key: *mut bindings::lock_class_key,
    ) {
        // SAFETY: The caller passes a pointer valid for writes, and a name and key valid for
        // reads for ever (the trait's requirements).
        unsafe { bindings::__spin_lock_init(ptr, name, key) }
    }

    unsafe fn lock(ptr: *mut Self::State) -> Self::GuardState {
        // SAFETY: The caller passes an initialised lock (the trait's requirements).
        unsafe { ib::fastreg_spin_lock_bh(ptr) }
    }

    unsafe fn try_lock(ptr: *mut Self::State) -> Option<Self::GuardState> {
        // SAFETY: As in `lock`.
        (unsafe { ib::fastreg_spin_trylock_bh(ptr) } != 0).then_some(())
    }

    unsafe fn unlock(ptr: *mut Self::State, _guard_state: &Self::GuardState) {
        // SAFETY: The caller owns the lock (the trait's requirements), taken by `lock` or
        // `try_lock`.
        unsafe { ib::fastreg_spin_unlock_bh(ptr) }
    }

    unsafe fn assert_is_held(ptr: *mut Self::State) {
        // SAFETY: The caller passes an initialised lock.
        unsafe { bindings::spin_assert_is_held(ptr) }
    }
}
