// SPDX-License-Identifier: GPL-2.0

//! fastreg's tracepoints (the `fastreg` trace system, `include/fastreg_trace.h`), as safe
//! functions.
//!
//! The kernel crate's `declare_trace!` reaches tracepoints through `kernel::bindings`, which
//! a module out of the tree cannot add to; this does the same over fastreg's own bindings:
//! each function tests the tracepoint's static key
//! (`kernel::jump_label::static_branch_unlikely!`, a patched jump: the event's C function
//! is not called while the tracepoint is off) and only then calls the C function that fires it
//! (`rust_do_trace_*`, from `CREATE_RUST_TRACE_POINTS` in `trace.c`). Strings are passed
//! with their length, so any `&str` will do; addresses are IPv4, most significant byte
//! first.

use super::{
    ib,
    SockAddr, //
};

/// Whether the tracepoint `__tracepoint_fastreg_<name>` is on.
macro_rules! on {
    ($tp:ident) => {
        // SAFETY: `$tp` is a tracepoint defined by C (`trace.c`); querying its static key
        // is always allowed.
        unsafe {
            kernel::jump_label::static_branch_unlikely!(ib::$tp, kernel::bindings::tracepoint, key)
        }
    };
}

/// Most bytes of a string an event keeps: its length is packed in 16 bits
/// (`__string_len`), and fastreg's strings are names and reasons.
const MAX_STR: usize = 255;

/// A string's length as the events take it: at most [`MAX_STR`] bytes of it.
fn len(s: &str) -> u32 {
    s.len().min(MAX_STR) as u32
}

/// A connection's state changed (`reason`: why one ends, or "").
#[allow(clippy::too_many_arguments)]
pub(crate) fn conn_state(
    laddr: u32,
    raddr: u32,
    rport: u16,
    active: bool,
    qp_num: u32,
    from: &str,
    to: &str,
    reason: &str,
) {
    if on!(__tracepoint_fastreg_conn_state) {
        // SAFETY: The arguments are the header's `TP_PROTO`; every string is a pointer to
        // as many readable bytes as its length says, copied by the event before it returns.
        unsafe {
            ib::rust_do_trace_fastreg_conn_state(
                laddr,
                raddr,
                rport,
                active,
                qp_num,
                from.as_ptr().cast(),
                len(from),
                to.as_ptr().cast(),
                len(to),
                reason.as_ptr().cast(),
                len(reason),
            )
        };
    }
}

/// A connection request rejected by this side (`sent`) or by the peer.
pub(crate) fn conn_reject(laddr: u32, raddr: u32, sent: bool, reason: u8, why: &str) {
    if on!(__tracepoint_fastreg_conn_reject) {
        // SAFETY: As in `conn_state`.
        unsafe {
            ib::rust_do_trace_fastreg_conn_reject(
                laddr,
                raddr,
                sent,
                reason,
                why.as_ptr().cast(),
                len(why),
            )
        };
    }
}

/// A transfer as the transfer events show it.
pub(crate) struct XferEvent<'a> {
    /// The peer.
    pub(crate) raddr: u32,
    /// The connection's QP.
    pub(crate) qp_num: u32,
    /// What this side calls the transfer.
    pub(crate) cookie: u64,
    /// Its kind (`xfer_state::Kind::name`).
    pub(crate) kind: &'a str,
    /// Its bytes.
    pub(crate) bytes: u64,
    /// The registrations of its buffer (0 inline).
    pub(crate) regs: u32,
}

/// Fires `fastreg_xfer_submit` (`done` false) or `fastreg_xfer_done` for `x`.
fn fire_xfer(done: bool, x: &XferEvent<'_>, status: i32, usecs: u64) {
    let f = if done {
        ib::rust_do_trace_fastreg_xfer_done
    } else {
        ib::rust_do_trace_fastreg_xfer_submit
    };
    // SAFETY: `f` is one of the two functions of the header's `fastreg_xfer_class`, whose
    // arguments are these; `kind` is a pointer to as many readable bytes as its length
    // says, copied by the event before it returns.
    unsafe {
        f(
            x.raddr,
            x.qp_num,
            x.cookie,
            x.kind.as_ptr().cast(),
            len(x.kind),
            x.bytes,
            x.regs,
            status,
            usecs,
        )
    };
}

/// A transfer this side starts was accepted.
pub(crate) fn xfer_submit(x: &XferEvent<'_>) {
    if on!(__tracepoint_fastreg_xfer_submit) {
        fire_xfer(false, x, 0, 0);
    }
}

/// A transfer's outcome, reported to its client: 0 or a negative errno, and its latency.
pub(crate) fn xfer_done(x: &XferEvent<'_>, status: i32, usecs: u64) {
    if on!(__tracepoint_fastreg_xfer_done) {
        fire_xfer(true, x, status, usecs);
    }
}

/// Whether `reg_mr`, `local_inv` or `remote_inv` (sent) is on: a chain is walked for them
/// only then.
pub(crate) fn wrs_on() -> bool {
    on!(__tracepoint_fastreg_reg_mr)
        || on!(__tracepoint_fastreg_local_inv)
        || on!(__tracepoint_fastreg_remote_inv)
}

/// A REG_MR posted.
pub(crate) fn reg_mr(qp_num: u32, rkey: u32, iova: u64, length: u64) {
    if on!(__tracepoint_fastreg_reg_mr) {
        // SAFETY: The arguments are the header's `TP_PROTO`.
        unsafe { ib::rust_do_trace_fastreg_reg_mr(qp_num, rkey, iova, length) };
    }
}

/// A LOCAL_INV posted.
pub(crate) fn local_inv(qp_num: u32, rkey: u32) {
    if on!(__tracepoint_fastreg_local_inv) {
        // SAFETY: The arguments are the header's `TP_PROTO`.
        unsafe { ib::rust_do_trace_fastreg_local_inv(qp_num, rkey) };
    }
}

/// Whether `remote_inv` is on (for a caller that must lock to know what it shows).
pub(crate) fn remote_inv_on() -> bool {
    on!(__tracepoint_fastreg_remote_inv)
}

/// A remote invalidation sent (SEND_WITH_INV) or received (a key of this side's).
pub(crate) fn remote_inv(qp_num: u32, rkey: u32, sent: bool) {
    if on!(__tracepoint_fastreg_remote_inv) {
        // SAFETY: The arguments are the header's `TP_PROTO`.
        unsafe { ib::rust_do_trace_fastreg_remote_inv(qp_num, rkey, sent) };
    }
}

/// Whether `pool` is on (for a caller that must lock to know what it shows).
pub(crate) fn pool_on() -> bool {
    on!(__tracepoint_fastreg_pool)
}

/// A pool grown, shrunk, or waited for (`count` MRs), with its live MRs after it.
pub(crate) fn pool(dev: &str, what: &str, count: u32, live: u32) {
    if on!(__tracepoint_fastreg_pool) {
        // SAFETY: As in `conn_state`.
        unsafe {
            ib::rust_do_trace_fastreg_pool(
                dev.as_ptr().cast(),
                len(dev),
                what.as_ptr().cast(),
                len(what),
                count,
                live,
            )
        };
    }
}

/// A console's request answered by this node.
pub(crate) fn console(from: u32, op: &str, status: i32) {
    if on!(__tracepoint_fastreg_console) {
        // SAFETY: As in `conn_state`.
        unsafe { ib::rust_do_trace_fastreg_console(from, op.as_ptr().cast(), len(op), status) };
    }
}

/// An address as the events carry it.
pub(crate) fn ip(a: &SockAddr) -> u32 {
    u32::from_be_bytes(a.ip)
}
