// SPDX-License-Identifier: GPL-2.0

//! Selftest statistics: counts, errors by kind, and a latency histogram cheap enough to
//! keep per worker and merge (log-linear buckets: every power of two split in 8, so a
//! percentile is known to within 12.5%).
//!
//! Pure logic: no `kernel::`, compiled by the host tests too.

use core::fmt;

/// The pause, in milliseconds, before a run restarts its slots whose transfer failed,
/// after `fruitless` rounds of restarts in a row that brought no good transfer: 10 ms,
/// doubling, at most 1 s. A peer or device that is gone (removed under a run) is then
/// asked about once a second until the run ends, not a hundred times.
pub(crate) fn restart_pause_ms(fruitless: u32) -> u32 {
    10u32.saturating_mul(1u32 << fruitless.min(7)).min(1000)
}

/// Why a transfer failed, as counted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ErrKind {
    /// The transfer or the connection timed out (`ETIMEDOUT`).
    Timeout,
    /// No connection could be made or it broke (refused, unreachable, reset, aborted,
    /// not connected).
    Connection,
    /// The peer refused the transfer (too big, no memory).
    Refused,
    /// Anything else.
    Other,
}

/// Number of [`ErrKind`]s.
pub(crate) const ERR_KINDS: usize = 4;

impl ErrKind {
    /// Every kind, in counting order.
    pub(crate) const ALL: [ErrKind; ERR_KINDS] = [
        ErrKind::Timeout,
        ErrKind::Connection,
        ErrKind::Refused,
        ErrKind::Other,
    ];

    /// The kind of a (negative or positive) Linux errno.
    pub(crate) fn of_errno(e: i32) -> ErrKind {
        match e.unsigned_abs() {
            110 => ErrKind::Timeout,
            // ECONNREFUSED, EHOSTUNREACH, ENETUNREACH, ECONNRESET, ECONNABORTED, ENOTCONN,
            // ENODEV, EADDRNOTAVAIL
            111 | 113 | 101 | 104 | 103 | 107 | 19 | 99 => ErrKind::Connection,
            // EMSGSIZE, ENOMEM, EINVAL
            90 | 12 | 22 => ErrKind::Refused,
            _ => ErrKind::Other,
        }
    }

    /// Its name in results.
    pub(crate) fn name(self) -> &'static str {
        match self {
            ErrKind::Timeout => "timeout",
            ErrKind::Connection => "connection",
            ErrKind::Refused => "refused",
            ErrKind::Other => "other",
        }
    }
}

const LINEAR: usize = 16;
const SUB: usize = 8;
const BUCKETS: usize = LINEAR + (64 - 4) * SUB;

/// The bucket of `v`.
fn bucket(v: u64) -> usize {
    if v < LINEAR as u64 {
        return v as usize;
    }
    let e = 63 - v.leading_zeros() as usize; // >= 4
    let sub = ((v >> (e - 3)) & 7) as usize;
    LINEAR + (e - 4) * SUB + sub
}

/// The largest value of bucket `b`.
fn bucket_max(b: usize) -> u64 {
    if b < LINEAR {
        return b as u64;
    }
    let e = (b - LINEAR) / SUB + 4;
    let sub = ((b - LINEAR) % SUB) as u64;
    let lo = (1u64 << e) | (sub << (e - 3));
    lo + ((1u64 << (e - 3)) - 1)
}

/// Counts of one test, one peer, or one worker.
#[derive(Clone)]
pub(crate) struct Stats {
    /// Transfers (or round trips) completed with good data.
    pub(crate) ops: u64,
    /// Bytes they moved.
    pub(crate) bytes: u64,
    /// Transfers that failed, by [`ErrKind`].
    pub(crate) errors: [u64; ERR_KINDS],
    /// Transfers that completed with data that differ from the pattern.
    pub(crate) corrupt: u64,
    lat_min: u64,
    lat_max: u64,
    lat_sum: u64,
    hist: [u32; BUCKETS],
}

impl Default for Stats {
    fn default() -> Self {
        Self::new()
    }
}

impl Stats {
    /// Nothing counted.
    pub(crate) const fn new() -> Self {
        Self {
            ops: 0,
            bytes: 0,
            errors: [0; ERR_KINDS],
            corrupt: 0,
            lat_min: u64::MAX,
            lat_max: 0,
            lat_sum: 0,
            hist: [0; BUCKETS],
        }
    }

    /// A good transfer of `bytes` that took `us` microseconds.
    pub(crate) fn ok(&mut self, bytes: u64, us: u64) {
        self.ops += 1;
        self.bytes += bytes;
        self.lat_min = self.lat_min.min(us);
        self.lat_max = self.lat_max.max(us);
        self.lat_sum += us;
        let b = bucket(us);
        self.hist[b] = self.hist[b].saturating_add(1);
    }

    /// A failed transfer.
    pub(crate) fn error(&mut self, kind: ErrKind) {
        self.errors[kind as usize] += 1;
    }

    /// Adds `o`'s counts.
    pub(crate) fn merge(&mut self, o: &Stats) {
        self.ops += o.ops;
        self.bytes += o.bytes;
        for (a, b) in self.errors.iter_mut().zip(o.errors.iter()) {
            *a += b;
        }
        self.corrupt += o.corrupt;
        self.lat_min = self.lat_min.min(o.lat_min);
        self.lat_max = self.lat_max.max(o.lat_max);
        self.lat_sum += o.lat_sum;
        for (a, b) in self.hist.iter_mut().zip(o.hist.iter()) {
            *a = a.saturating_add(*b);
        }
    }

    /// All errors.
    pub(crate) fn errors_total(&self) -> u64 {
        self.errors.iter().sum()
    }

    /// Latency (min, avg, max) in microseconds; zeros when nothing completed.
    pub(crate) fn latency(&self) -> (u64, u64, u64) {
        match self.lat_sum.checked_div(self.ops) {
            None => (0, 0, 0),
            Some(avg) => (self.lat_min, avg, self.lat_max),
        }
    }

    /// The `pct`th percentile latency (within 12.5% above), at most the maximum.
    pub(crate) fn percentile(&self, pct: u64) -> u64 {
        let n: u64 = self.hist.iter().map(|&c| u64::from(c)).sum();
        if n == 0 {
            return 0;
        }
        let want = (n * pct).div_ceil(100).max(1);
        let mut seen = 0u64;
        for (b, &c) in self.hist.iter().enumerate() {
            seen += u64::from(c);
            if seen >= want {
                return bucket_max(b).min(self.lat_max);
            }
        }
        self.lat_max
    }

    /// Writes `key=value` fields: counts, and rates over `usecs` microseconds. Rates are
    /// fixed-point with two decimals.
    pub(crate) fn write(&self, f: &mut impl fmt::Write, usecs: u64) -> fmt::Result {
        let (min, avg, max) = self.latency();
        // Hundredths (no 128-bit division in the kernel: KiB first, products saturate).
        let per_s_100 = |n: u64| {
            n.saturating_mul(100_000_000)
                .checked_div(usecs)
                .unwrap_or(0)
        };
        let mib_100 = per_s_100(self.bytes >> 10) >> 10;
        let ops_100 = per_s_100(self.ops);
        write!(
            f,
            "ops={} bytes={} errors={} corrupt={} usecs={} seconds={}.{:06} \
             mib_per_s={}.{:02} ops_per_s={}.{:02} \
             lat_min_us={} lat_avg_us={} lat_p99_us={} lat_max_us={}",
            self.ops,
            self.bytes,
            self.errors_total(),
            self.corrupt,
            usecs,
            usecs / 1_000_000,
            usecs % 1_000_000,
            mib_100 / 100,
            mib_100 % 100,
            ops_100 / 100,
            ops_100 % 100,
            min,
            avg,
            self.percentile(99),
            max
        )?;
        for k in ErrKind::ALL {
            write!(f, " err_{}={}", k.name(), self.errors[k as usize])?;
        }
        Ok(())
    }
}
