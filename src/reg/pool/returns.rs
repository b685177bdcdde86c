// SPDX-License-Identifier: GPL-2.0

//! MRs coming back to the pool or leaving it: taken back once their key is dead, given
//! back unused, destroyed after a failure, and deregistered in process context
//! ([`Pool::reap`]).

use super::*;

impl Pool {
    /// Takes back an MR whose key is dead.
    pub(crate) fn put(&self, mr: FrMr<Invalidated>) {
        let mut inner = self.inner.lock();
        inner.keep(mr.recycle(), Instant::now());
        self.shrink(&mut inner);
        let first = inner.line.first().cloned();
        drop(inner);
        if let Some(w) = first {
            w.mrs_back();
        }
    }

    /// Gives back a free MR that was not used (the transfer failed before mapping it).
    pub(crate) fn put_free(&self, mr: FrMr<Free>) {
        self.inner.lock().keep(mr, Instant::now());
        self.wake_line();
    }

    /// Destroys an MR whose state is unknown (a work request on it failed): it is never
    /// reused. Its handle goes to the dead list, dropped by [`Pool::reap`]; it is
    /// deregistered when that and the last work request chain naming it are gone.
    pub(crate) fn destroy(&self, mr: Mr) {
        self.inner.lock().bury(mr);
        inc(&self.counters.errors, 1);
    }

    /// Deregisters the MRs that went (destroyed, or idle beyond `pool_size`), one at a
    /// time with the lock released, then tells the first connection in line if any went.
    /// In process context, where sleeping is allowed: never from a completion handler.
    pub(crate) fn reap(&self) {
        let mut gone = 0;
        loop {
            let Some(mr) = self.inner.lock().dead.pop() else {
                break;
            };
            // Dropping the handle takes it off the live count (and deregisters the MR
            // unless a chain in flight still names it).
            drop(mr);
            gone += 1;
        }
        if gone > 0 {
            if trace::pool_on() {
                let live = self.inner.lock().live;
                self.trace("dereg", gone, live);
            }
            self.wake_line();
        }
    }
}
