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

/// An IPv4 address, dotted, in log lines and files.
#[derive(Clone, Copy)]
pub(crate) struct Ip(pub(crate) [u8; 4]);

impl core::fmt::Display for Ip {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let [a, b, c, d] = self.0;
        write!(f, "{a}.{b}.{c}.{d}")
    }
}

impl kernel::fmt::Display for Ip {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        core::fmt::Display::fmt(self, f)
    }
}

/// Logs with the kernel's `$level` macro (`pr_info`, `pr_err`, ...) under a rate limit of
/// this call site's own ([`crate::rules::ratelimit`]: ten lines per five seconds), as
/// `printk_ratelimited` does: for every line that someone else (a peer, a forger on a
/// peer's address, a console) can make this node log. The first line let through after
/// some were held back is preceded by their count. `pr_limited!(conn, pr_info, ...)`: the
/// lines of a connection's life, with a larger burst (`ratelimit::CONN_BURST`).
macro_rules! pr_limited {
    (conn, $level:ident, $($arg:tt)*) => {{
        static LIMIT: $crate::rules::ratelimit::RateLimit =
            $crate::rules::ratelimit::RateLimit::with_burst($crate::rules::ratelimit::CONN_BURST);
        $crate::verbs::limited!(@with LIMIT, $level, $($arg)*)
    }};
    ($level:ident, $($arg:tt)*) => {
        $crate::verbs::limited!($level, $($arg)*)
    };
}
pub(crate) use pr_limited;
