// SPDX-License-Identifier: GPL-2.0

//! Bounded waits on a condition variable.

use kernel::{
    sync::{
        lock::{
            Backend,
            Guard, //
        },
        CondVar,
        CondVarTimeoutResult, //
    },
    time::Jiffies,
};

/// Waits once on `cv` for at most `*left` jiffies and takes the time spent off `*left`.
///
/// Returns `false` when a signal interrupted the wait (then `*left` is 0 too). Callers loop
/// until their condition holds or `*left` reaches 0.
pub(crate) fn step<T: ?Sized, B: Backend>(
    cv: &CondVar,
    guard: &mut Guard<'_, T, B>,
    left: &mut Jiffies,
) -> bool {
    match cv.wait_interruptible_timeout(guard, *left) {
        CondVarTimeoutResult::Timeout => {
            *left = 0;
            true
        }
        CondVarTimeoutResult::Woken { jiffies } => {
            *left = jiffies;
            true
        }
        CondVarTimeoutResult::Signal { .. } => {
            *left = 0;
            false
        }
    }
}
