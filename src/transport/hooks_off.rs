// SPDX-License-Identifier: GPL-2.0

//! The test hooks of a production build: none. `hooks.rs` and `fuzzing.rs` (corrupting,
//! misbehaving, injected faults, the fuzzing peer) are compiled in by the test build only
//! (Kbuild's `FASTREG_TEST=1`); here the transport's hook points find the same calls, which
//! leave everything as it is and compile to nothing.

use super::*;

/// An interface's test-hook state: nothing.
pub(super) struct Hooks;

impl Hooks {
    /// Nothing to arm.
    pub(super) fn new() -> Self {
        Hooks
    }
}

impl Iface {
    /// Advertises what was asked.
    #[inline(always)]
    pub(super) fn advertise_short(&self) -> bool {
        false
    }

    /// Never corrupts.
    #[inline(always)]
    pub(super) fn corrupt_hook(&self, _region: &Region) -> Result {
        Ok(())
    }

    /// Never corrupts.
    #[inline(always)]
    pub(super) fn corrupt_hook_bytes(&self, _data: &mut [u8]) {}

    /// Never corrupts.
    #[inline(always)]
    pub(super) fn take_corrupt(&self, _len: usize) -> Option<usize> {
        None
    }

    /// The cookie a PUT's DONE names: its own.
    #[inline(always)]
    pub(super) fn done_cookie(&self, cookie: u64) -> u64 {
        cookie
    }

    /// The rkey a served GET invalidates remotely: the one chosen.
    #[inline(always)]
    pub(super) fn serving_get(&self, _regs: &Regs, remote_inv: Option<u32>) -> Option<u32> {
        remote_inv
    }

    /// Leaves the GET_DATA as it is.
    #[inline(always)]
    pub(super) fn mangle_get_data(&self, _st: &mut ConnState) {}

    /// Keeps nothing.
    #[inline(always)]
    pub(super) fn record_put(&self, _regs: Regs) {}

    /// A message about to be sent goes as it is: its length.
    #[inline(always)]
    pub(super) fn sending(&self, _mangle: Mangling, _buf: &mut [u8], n: usize) -> usize {
        n
    }

    /// Connection parameters about to be sent, encoded as they are.
    #[inline(always)]
    pub(super) fn outgoing(&self, p: &ConnParams) -> [u8; wire::CONN_LEN] {
        p.encode()
    }
}

/// No corruption is ever armed.
pub(super) struct Mangling;

impl Conn {
    /// Nothing to corrupt.
    #[inline(always)]
    pub(super) fn take_mangle(_st: &mut ConnState, _local: bool) -> Mangling {
        Mangling
    }

    /// Sends no second DONE.
    #[inline(always)]
    pub(super) fn dup_done(&self, _st: &mut ConnState, _cookie: u64) {}

    /// Never goes beyond the queue depth.
    #[inline(always)]
    pub(super) fn flood(&self) -> bool {
        false
    }
}
