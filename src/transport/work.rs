// SPDX-License-Identifier: GPL-2.0

//! A connection's work item, on fastreg's workqueue: what a handler must not do (serve a
//! request, check a PUT's data, grow the MR pool, report outcomes) runs there, queued now
//! or after a delay.

use super::*;

impl Conn {
    /// Runs the connection's work item soon (or after `delay` jiffies).
    pub(super) fn kick(self: &Arc<Self>, delay: Option<kernel::time::Jiffies>) {
        let Some(wq) = verbs::queue(verbs::Wq::Conn) else {
            return;
        };
        // Already queued: it will see what this wanted it to see.
        match delay {
            None => {
                let _ = wq.enqueue::<_, 0>(self.clone());
            }
            Some(d) => {
                let _ = wq.enqueue_delayed::<_, 1>(self.clone(), d);
            }
        }
    }
}

impl crate::reg::pool::Waiter for Conn {
    fn mrs_back(self: Arc<Self>) {
        self.kick(None);
    }
}

kernel::impl_has_work! {
    impl HasWork<Self, 0> for Conn { self.work }
}

kernel::impl_has_delayed_work! {
    impl HasDelayedWork<Self, 1> for Conn { self.later }
}

impl kernel::workqueue::WorkItem<0> for Conn {
    type Pointer = Arc<Conn>;

    fn run(this: Arc<Conn>) {
        this.drive_and_deliver();
    }
}

impl kernel::workqueue::WorkItem<1> for Conn {
    type Pointer = Arc<Conn>;

    /// The timer only queues the work item: everything runs there, one at a time, so a
    /// teardown run by it can cancel the timer synchronously.
    fn run(this: Arc<Conn>) {
        this.kick(None);
    }
}

/// Rounds of preparing and serving in one run of a connection's work item.
const PREPARE_ROUNDS: usize = 256;

impl Conn {
    /// The work items' job: moves what can move, reports what finished.
    fn drive_and_deliver(self: &Arc<Self>) {
        if self.owed_teardown() {
            return;
        }
        let mut early = false;
        let mut again = false;
        // Serving a request takes what was prepared for it, one at a time: the next one
        // owed is prepared and served in the same run, as long as each round makes
        // progress (bounded, so that one busy connection does not keep the worker).
        for _ in 0..PREPARE_ROUNDS {
            self.recycle_owed();
            self.run_checks();
            let grew = self.grow_pool();
            self.prepare_serving();
            let mut st = self.st.lock();
            st.work_wanted = false;
            let mut served = false;
            if st.state == State::Established {
                self.drive(&mut st, Runs::Worker);
                // What was prepared, then what is owed after it.
                served = self.serve_prepared(&mut st);
                if served {
                    self.pump(&mut st, Runs::Worker);
                }
            }
            early |= st.draining;
            // More to prepare (the next request owed, MRs to allocate).
            again = core::mem::take(&mut st.work_wanted);
            let progress = grew || served;
            drop(st);
            if !(again && progress) {
                break;
            }
        }
        if early {
            self.clone().receive_early();
        }
        // MRs that went (destroyed, or idle beyond `pool_size`) are deregistered here,
        // never in a handler; before the outcomes are reported, so that a client that sees
        // its transfer done sees the pool as the transfer left it.
        self.iface.res.pool.reap();
        self.deliver();
        if again || core::mem::take(&mut self.st.lock().work_wanted) {
            self.kick(None);
        }
    }
}
