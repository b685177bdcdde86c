// SPDX-License-Identifier: GPL-2.0

//! A leaf helper for log lines: pure types shown by the kernel's formatting macros.

/// Shows a value of a pure type (one that implements `core::fmt::Display`) in the kernel's
/// formatting macros (`pr_info!` and friends), which take `kernel::fmt::Display`.
pub(crate) struct Show<T>(pub(crate) T);

impl<T: core::fmt::Display> kernel::fmt::Display for Show<T> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        core::fmt::Display::fmt(&self.0, f)
    }
}
