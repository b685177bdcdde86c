// SPDX-License-Identifier: GPL-2.0

//! A count of things under way whose end can be waited for: the waiter sleeps until the
//! last one ends (`wait_var_event_timeout` / `wake_up_var`), with no polling.

use kernel::{
    sync::atomic::{
        Acquire,
        Atomic,
        Relaxed,
        Release, //
    },
    time::{
        msecs_to_jiffies,
        Msecs, //
    },
};

use super::ib;

/// A count that wakes its waiters when it drops to zero.
///
/// # Invariants
///
/// Every decrement that reaches zero wakes the waiters of `n`'s address.
pub(crate) struct WaitCount {
    n: Atomic<u32>,
}

impl WaitCount {
    /// Zero.
    pub(crate) const fn new() -> Self {
        Self { n: Atomic::new(0) }
    }

    /// The count now.
    pub(crate) fn get(&self) -> u32 {
        self.n.load(Acquire)
    }

    /// One more under way.
    pub(crate) fn inc(&self) {
        self.n.fetch_add(1, Relaxed);
    }

    /// One fewer under way; the last one wakes the waiters.
    pub(crate) fn dec(&self) {
        if self.n.fetch_sub(1, Release) == 1 {
            // SAFETY: `n` is a valid `u32` (`Atomic<u32>` has its layout) for the call;
            // `wake_up_var` only uses the address as a key.
            unsafe { ib::fastreg_wake_zero(self.n.as_ptr()) };
        }
    }

    /// Waits uninterruptibly, up to `ms` milliseconds, until the count is zero. Returns
    /// whether it is. Process context.
    pub(crate) fn wait_zero(&self, ms: Msecs) -> bool {
        // SAFETY: `n` is a valid `u32` for the call, which only reads it and sleeps on a
        // wait queue keyed by its address (woken by `dec`, type invariant).
        unsafe { ib::fastreg_wait_zero_timeout(self.n.as_ptr(), msecs_to_jiffies(ms)) };
        self.get() == 0
    }
}
