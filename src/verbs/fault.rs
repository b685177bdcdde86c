// SPDX-License-Identifier: GPL-2.0

//! The `fastreg_fail_wr` fault attribute: work completions failed on purpose.
//!
//! `/sys/kernel/debug/fastreg_fail_wr/` has the kernel's fault-injection knobs
//! (`probability`, `interval`, `times`, `verbose`, ...; Documentation/fault-injection) and
//! `kinds`, a mask of which chains count: 1 a chain with a REG_MR, 2 one with a LOCAL_INV,
//! 4 any other send chain (messages, RDMA WRITEs), 8 a receive. A chain chosen when it is
//! posted is posted as usual, and its completion is reported to its handler as an error
//! (a flush for a receive) whatever the device says: the transport must then treat every
//! MR of the chain as in an unknown state and the connection as failed, as after a real
//! error. Only with `CONFIG_FAULT_INJECTION_DEBUG_FS` (the sanitizer kernel,
//! `scripts/kernel-debug.config`, and the test kernel have it).

use kernel::prelude::*;

use super::ib;

/// Which chains `kinds` selects.
pub(super) const REG: u32 = ib::FASTREG_FAIL_WR_REG;
pub(super) const LOCAL_INV: u32 = ib::FASTREG_FAIL_WR_LOCAL_INV;
pub(super) const SEND: u32 = ib::FASTREG_FAIL_WR_SEND;
pub(super) const RECV: u32 = ib::FASTREG_FAIL_WR_RECV;

/// The attribute's debugfs directory, removed when dropped. One per module.
pub(crate) struct FailWr(());

impl FailWr {
    /// Creates the directory; without it (no debugfs, or a name taken) nothing fails.
    pub(crate) fn new() -> Self {
        // SAFETY: Called once, at module load, before anything is posted.
        let ret = unsafe { ib::fastreg_fail_wr_init() };
        if ret != 0 {
            pr_warn!(
                "no /sys/kernel/debug/fastreg_fail_wr ({}): completion faults off\n",
                ret
            );
        }
        FailWr(())
    }
}

impl Drop for FailWr {
    fn drop(&mut self) {
        // SAFETY: The directory `new` made (if any) is removed once, at module unload.
        unsafe { ib::fastreg_fail_wr_exit() };
    }
}

/// Whether a chain holding `kinds` (of [`REG`], [`LOCAL_INV`], [`SEND`], [`RECV`]) is to
/// complete in error.
pub(super) fn should_fail(kinds: u32) -> bool {
    // SAFETY: Reads the attribute's state only; callable in any context.
    unsafe { ib::fastreg_should_fail_wr(kinds) }
}
