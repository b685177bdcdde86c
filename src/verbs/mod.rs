// SPDX-License-Identifier: GPL-2.0

//! The verbs layer: safe owners of ib_core objects.
//!
//! This directory is the only place in fastreg with raw `ib_*` / `rdma_*` calls and `unsafe`.
//! Every C object is wrapped once, by a type that owns it and frees it in `Drop`; callbacks
//! from ib_core reach the layers above through traits defined here (for example [`Client`]).
//! Nothing here knows about fastreg's protocol or pools.

/// Logs at `$level`, rate-limited per call site (10 lines per 5 s, then a count of those
/// held back): for what a peer, a fault or a busy device can make happen at the rate of
/// requests (a verb's failure, a QP's event). `limited!(@with LIMIT, ...)` uses the given
/// [`crate::rules::ratelimit::RateLimit`] instead; `crate::show::pr_limited!` is built on it.
macro_rules! limited {
    (@with $limit:ident, $level:ident, $($arg:tt)*) => {{
        if let Some(held) = $limit.check($crate::verbs::now_ms()) {
            if held > 0 {
                kernel::$level!("{} lines like the next held back (rate limit)\n", held);
            }
            kernel::$level!($($arg)*);
        }
    }};
    ($level:ident, $($arg:tt)*) => {{
        static LIMIT: $crate::rules::ratelimit::RateLimit = $crate::rules::ratelimit::RateLimit::new();
        $crate::verbs::limited!(@with LIMIT, $level, $($arg)*)
    }};
}
pub(crate) use limited;

mod bhlock;
mod buffer;
mod chardev;
mod client;
mod cm;
mod cq;
mod crypto;
mod device;
// The completion fault attribute: in the test build only (Kbuild's FASTREG_TEST=1).
#[cfg(fastreg_test)]
mod fault;
mod ib;
mod mr;
mod msgbuf;
mod msgcache;
mod pd;
mod published;
mod qp;
mod ticker;
pub(crate) mod trace;
mod waitcount;
mod wq;
mod wr;

pub(crate) use bhlock::{
    new_bh_spinlock,
    BhSpinLock,
    BhSpinLockBackend,
    BhSpinLockGuard, //
};
pub(crate) use buffer::{
    Buffer,
    DmaSgl, //
};
pub(crate) use chardev::{
    DevFile,
    MiscDev, //
};
pub(crate) use client::{
    Client,
    Registration, //
};
pub(crate) use cm::{
    event_name,
    is_connect_error,
    CmEvent,
    CmHandler,
    ConnParam,
    ConnRequest,
    Endpoint,
    QpCaps,
    QpGone,
    SockAddr,
    PRIVILEGED_PORTS, //
};
pub(crate) use cq::{
    Completion,
    Cq,
    Handler,
    Wc, //
};
pub(crate) use crypto::{
    hmac_sha256,
    random_bytes, //
};
pub(crate) use device::{
    Device,
    DeviceRef, //
};
#[cfg(fastreg_test)]
pub(crate) use fault::FailWr;
pub(crate) use mr::{
    Mr,
    SglSpan,
    Tally, //
};
pub(crate) use msgbuf::MsgBuf;
pub(crate) use msgcache::{
    arc_footprint,
    vec_footprint, //
    MsgCache,
    MsgCaches,
};
pub(crate) use pd::Pd;
pub(crate) use published::{
    Published,
    Value, //
};
pub(crate) use qp::{
    posted_wrs,
    PostError,
    SendQueue, //
};
pub(crate) use ticker::{
    Tick,
    Ticker, //
};
pub(crate) use waitcount::WaitCount;
pub(crate) use wq::{
    cancel_delayed_sync,
    module_wq,
    queue,
    Workqueue,
    Wq, //
};
pub(crate) use wr::{
    Access,
    FrMr,
    RdmaOp,
    SendChain, //
};

/// A random non-zero 64-bit number: the incarnation stamp of an interface.
pub(crate) fn incarnation() -> u64 {
    // SAFETY: `get_random_u64` has no preconditions.
    unsafe { kernel::bindings::get_random_u64() | 1 }
}

/// Milliseconds of the monotonic clock (`ktime_get`), for rate limits.
pub(crate) fn now_ms() -> u64 {
    // SAFETY: `ktime_get` has no preconditions; it may be called from any context but NMI.
    let ns = unsafe { kernel::bindings::ktime_get() };
    u64::try_from(ns).unwrap_or(0) / 1_000_000
}

/// The node's memory, in bytes (`si_meminfo`: total RAM).
pub(crate) fn total_ram() -> u64 {
    let mut si = kernel::bindings::sysinfo::default();
    // SAFETY: `si` is a valid, writable `struct sysinfo` for the duration of the call;
    // `si_meminfo` only fills it.
    unsafe { kernel::bindings::si_meminfo(&mut si) };
    (si.totalram as u64).saturating_mul(u64::from(si.mem_unit))
}

/// Low-level helpers exposed to in-module KUnit tests.
#[cfg(CONFIG_KUNIT = "y")]
pub(crate) fn inc_rkey(rkey: u32) -> u32 {
    // SAFETY: `fastreg_ib_inc_rkey` is a pure function of its argument.
    unsafe { ib::fastreg_ib_inc_rkey(rkey) }
}
