// SPDX-License-Identifier: GPL-2.0

//! Bounded waits on a condition variable, and turns: a value one caller uses at a time,
//! the others waiting interruptibly.

use kernel::{
    new_condvar, new_mutex,
    prelude::*,
    sync::{
        lock::{
            Backend,
            Guard, //
        },
        CondVar,
        CondVarTimeoutResult,
        Mutex,
        MutexGuard, //
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

/// A value one caller uses at a time, for as long as it likes; the others wait for their
/// turn interruptibly. A mutex would make them wait uninterruptibly for the whole use (a
/// console request's lasts up to minutes).
///
/// # Invariants
///
/// `value` is locked only by the holder of the turn (`busy` set by it), so taking its lock
/// never waits for long.
#[pin_data]
pub(crate) struct Turn<T> {
    #[pin]
    busy: Mutex<bool>,
    #[pin]
    freed: CondVar,
    #[pin]
    value: Mutex<T>,
}

impl<T> Turn<T> {
    /// A turn over `value`, free.
    pub(crate) fn new(value: T) -> impl PinInit<Self> {
        pin_init!(Self {
            busy <- new_mutex!(false, "fastreg::Turn::busy"),
            freed <- new_condvar!("fastreg::Turn::freed"),
            value <- new_mutex!(value, "fastreg::Turn::value"),
        })
    }

    /// Waits for the turn (`EINTR` if a signal comes first); the value is the caller's
    /// until the guard is dropped.
    pub(crate) fn take(&self) -> Result<TurnGuard<'_, T>> {
        let mut busy = self.busy.lock();
        while *busy {
            if self.freed.wait_interruptible(&mut busy) {
                return Err(EINTR);
            }
        }
        *busy = true;
        drop(busy);
        Ok(TurnGuard {
            turn: self,
            value: self.value.lock(),
        })
    }
}

/// The turn of a [`Turn`]'s value; the next caller's comes when it is dropped.
pub(crate) struct TurnGuard<'a, T> {
    turn: &'a Turn<T>,
    value: MutexGuard<'a, T>,
}

impl<T> core::ops::Deref for TurnGuard<'_, T> {
    type Target = T;

    fn deref(&self) -> &T {
        &self.value
    }
}

impl<T: Unpin> core::ops::DerefMut for TurnGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        &mut self.value
    }
}

impl<T> Drop for TurnGuard<'_, T> {
    fn drop(&mut self) {
        *self.turn.busy.lock() = false;
        self.turn.freed.notify_one();
    }
}
