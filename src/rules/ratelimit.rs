// SPDX-License-Identifier: GPL-2.0

//! Rate limits for log lines that someone else can trigger.
//!
//! A peer, a forger on a peer's address or a console can make a node log (a refused
//! request, a malformed message); each such line goes through a [`RateLimit`], as the
//! kernel's `printk_ratelimited` does: at most `burst` lines per `interval`, and the first
//! line let through after a held-back run says how many were held back. The state is three
//! atomics, so a line can be limited from any context, a completion handler included,
//! without a lock.
//!
//! Pure logic: no `kernel::`, compiled by the host tests too (`ratelimit_tests.rs`).

use core::sync::atomic::{
    AtomicU32,
    AtomicU64,
    Ordering::Relaxed, //
};

/// The kernel's defaults (`DEFAULT_RATELIMIT_INTERVAL`, `DEFAULT_RATELIMIT_BURST`): ten
/// lines per five seconds.
pub(crate) const INTERVAL_MS: u64 = 5000;
/// See [`INTERVAL_MS`].
pub(crate) const BURST: u32 = 10;
/// The burst of the lines of a connection's life (connected, closing, a protocol
/// violation): a node with many peers logs that many events in a window in normal use,
/// and a test reads them; still a bound on what a flood of connections can log.
pub(crate) const CONN_BURST: u32 = 100;

/// A log rate limit: at most `burst` lines ([`BURST`] by default) per [`INTERVAL_MS`].
///
/// # Invariants
///
/// `begin` is the start of the current window in milliseconds plus one (0: no window yet);
/// `printed` counts the lines let through in it (it may pass `burst` by the lines held
/// back), `missed` the lines held back since a line was last let through.
pub(crate) struct RateLimit {
    begin: AtomicU64,
    printed: AtomicU32,
    missed: AtomicU32,
    burst: u32,
}

impl Default for RateLimit {
    fn default() -> Self {
        Self::new()
    }
}

impl RateLimit {
    /// A limit of [`BURST`] lines per window, with no line logged yet.
    pub(crate) const fn new() -> Self {
        Self::with_burst(BURST)
    }

    /// A limit of `burst` lines per window, with no line logged yet.
    pub(crate) const fn with_burst(burst: u32) -> Self {
        Self {
            begin: AtomicU64::new(0),
            printed: AtomicU32::new(0),
            missed: AtomicU32::new(0),
            burst,
        }
    }

    /// Whether a line may be logged at `now_ms` (a monotonic clock): `Some(n)` lets it
    /// through, `n` being the lines held back before it (to be told with it); `None` holds
    /// it back (counted). Two callers at a window's edge may both start a window: a line
    /// or two more than the burst, never an unbounded number.
    pub(crate) fn check(&self, now_ms: u64) -> Option<u32> {
        let stamp = now_ms.saturating_add(1);
        let begin = self.begin.load(Relaxed);
        if begin == 0 || stamp.saturating_sub(begin) >= INTERVAL_MS {
            // A new window: the caller that moves `begin` resets the count.
            if self
                .begin
                .compare_exchange(begin, stamp, Relaxed, Relaxed)
                .is_ok()
            {
                self.printed.store(0, Relaxed);
            }
        }
        if self.printed.fetch_add(1, Relaxed) < self.burst {
            Some(self.missed.swap(0, Relaxed))
        } else {
            // Saturating: a count that wrapped would claim nothing was held back.
            let _ = self
                .missed
                .fetch_update(Relaxed, Relaxed, |m| m.checked_add(1));
            None
        }
    }

    /// Lines held back since a line was last let through (for the host tests).
    #[cfg(test)]
    pub(crate) fn missed(&self) -> u32 {
        self.missed.load(Relaxed)
    }
}
