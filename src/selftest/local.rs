// SPDX-License-Identifier: GPL-2.0

//! The node's own selftest, as the control device runs it (`crate::ctl::device`): one at a
//! time, started by one request and then waited for, polled or stopped by others.
//!
//! A start sets the run up ([`lst::start`]) and hands the waiting to a work item on the
//! module's workqueue, which restarts the slots whose transfer failed and, when every slot
//! has ended, keeps the report for the next reader. A test belongs to the open file that
//! started it: when that file is closed (its process exits, killed or not), the test stops,
//! so no test outlives whoever asked for it by more than its last transfers.

use kernel::{
    new_condvar, new_mutex,
    prelude::*,
    sync::{
        Arc,
        CondVar,
        Mutex, //
    },
};

use crate::{
    rules::{
        command::Lst,
        ctldev::TestState, //
    },
    selftest::lst::{
        self,
        Report,
        Run, //
    },
    show::pr_limited,
    transport::Ifaces,
    verbs,
};

/// Where the test stands.
struct St {
    /// The running test, and the open file that started it (its number).
    run: Option<(Arc<Run>, u64)>,
    /// How the last test ended: its report, or why it could not run.
    last: Option<Result<KBox<Report>, Error>>,
}

/// The node's own test.
#[pin_data]
pub(crate) struct Local {
    #[pin]
    st: Mutex<St>,
    /// Notified when a test ends.
    #[pin]
    cv: CondVar,
}

impl Local {
    /// No test yet.
    pub(crate) fn new() -> impl PinInit<Self> {
        pin_init!(Self {
            st <- new_mutex!(
                St { run: None, last: None },
                "fastreg::selftest::Local"
            ),
            cv <- new_condvar!("fastreg::selftest::Local::cv"),
        })
    }

    /// Where the test stands.
    pub(crate) fn state(&self) -> TestState {
        let st = self.st.lock();
        Self::state_of(&st)
    }

    fn state_of(st: &St) -> TestState {
        match (&st.run, &st.last) {
            (Some(_), _) => TestState::Running,
            (None, Some(_)) => TestState::Over,
            (None, None) => TestState::Idle,
        }
    }

    /// Starts test `t` from one of `ifaces`, for the open file `owner`: `EBUSY` while
    /// another runs, the run's own errors when it cannot start (`ENOENT` no interface,
    /// `ENOMEM` its buffers pass the node's budget).
    pub(crate) fn start(
        self: &Arc<Self>,
        ifaces: &Ifaces,
        t: &Lst,
        timeout_ms: u32,
        owner: u64,
    ) -> Result {
        let mut st = self.st.lock();
        if st.run.is_some() {
            return Err(EBUSY);
        }
        let iface = lst::local_iface(ifaces, t)?;
        let run = lst::start(iface, t.peers(), t, timeout_ms)?;
        let me = self.clone();
        let waiter = run.clone();
        let spawned = verbs::module_wq().ok_or(ENODEV).and_then(|q| {
            q.try_spawn(GFP_KERNEL, move || me.finish(waiter))
                .map_err(|_| ENOMEM)
        });
        if let Err(e) = spawned {
            // Nobody to wait for it: it stops, and ends here.
            drop(st);
            run.stop();
            let _ = run.wait();
            return Err(e);
        }
        st.run = Some((run, owner));
        Ok(())
    }

    /// The work item of the running test: waits until it is over, keeps its report, and
    /// wakes whoever waits. It is always the running one's: a test starts only when none
    /// runs, and none runs again until this ends it (its start holds the lock until the
    /// test is recorded as running, so this cannot end it before).
    fn finish(&self, run: Arc<Run>) {
        let r = run.wait();
        let mut st = self.st.lock();
        st.run = None;
        st.last = Some(r);
        self.cv.notify_all();
    }

    /// Waits until the running test is over (`ENOENT` when none ever ran); `EINTR` if a
    /// signal comes first (the test goes on).
    pub(crate) fn wait(&self) -> Result {
        let mut st = self.st.lock();
        if st.run.is_none() && st.last.is_none() {
            return Err(ENOENT);
        }
        while st.run.is_some() {
            if self.cv.wait_interruptible(&mut st) {
                return Err(EINTR);
            }
        }
        Ok(())
    }

    /// Stops the running test (its transfers end after the current one); whether one ran.
    pub(crate) fn stop(&self) -> bool {
        let run = self.st.lock().run.as_ref().map(|(r, _)| r.clone());
        run.map(|r| r.stop()).is_some()
    }

    /// Stops the running test if the open file `owner` started it (that file is closed).
    pub(crate) fn stop_owned(&self, owner: u64) {
        let run = match &self.st.lock().run {
            Some((r, o)) if *o == owner => Some(r.clone()),
            _ => None,
        };
        if let Some(r) = run {
            pr_limited!(
                pr_info,
                "lst: the file that started the test is closed: the test stops\n"
            );
            r.stop();
        }
    }

    /// The running test's counts so far (one `running ...` line), or the last test's
    /// report; `ENOENT` when there is neither, the last test's error when it could not run.
    pub(crate) fn write_state(&self, f: &mut impl core::fmt::Write) -> Result<TestState> {
        let st = self.st.lock();
        if let Some((run, _)) = &st.run {
            let p = run.progress();
            writeln!(
                f,
                "running ops={} bytes={} errors={} corrupt={} usecs={} first_error={}",
                p.ops,
                p.bytes,
                p.errors.iter().sum::<u64>(),
                p.corrupt,
                p.usecs,
                p.first_error
            )
            .map_err(|_| ENOMEM)?;
            return Ok(TestState::Running);
        }
        Self::write_last(&st, f)?;
        Ok(TestState::Over)
    }

    /// The last test's report (a running one does not replace it until it is over).
    pub(crate) fn write_result(&self, f: &mut impl core::fmt::Write) -> Result<TestState> {
        let st = self.st.lock();
        Self::write_last(&st, f)?;
        Ok(Self::state_of(&st))
    }

    /// How the last test ended: `Ok` if every transfer was clean, `EIO` if one failed or
    /// was corrupt, its own error if it could not run, `ENOENT` if none ran.
    #[cfg(fastreg_test)]
    pub(crate) fn last_status(&self) -> Result {
        match &self.st.lock().last {
            Some(Ok(rep)) if rep.clean() => Ok(()),
            Some(Ok(_)) => Err(EIO),
            Some(Err(e)) => Err(*e),
            None => Err(ENOENT),
        }
    }

    fn write_last(st: &St, f: &mut impl core::fmt::Write) -> Result {
        match &st.last {
            Some(Ok(rep)) => rep.write(f).map_err(|_| ENOMEM),
            Some(Err(e)) => Err(*e),
            None => Err(ENOENT),
        }
    }
}
