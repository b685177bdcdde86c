/* SPDX-License-Identifier: GPL-2.0 */
/*
 * fastreg's tracepoints: the "fastreg" trace system (Documentation/trace.rst).
 *
 * Defined once, in src/verbs/trace.c (CREATE_TRACE_POINTS, and CREATE_RUST_TRACE_POINTS
 * for the rust_do_trace_*() functions that src/verbs/trace.rs calls after testing the
 * tracepoint's static key, as the kernel crate's declare_trace! does). Strings come from
 * Rust with their length (__string_len): they need no NUL. Addresses are IPv4, most
 * significant byte first in a u32.
 */
#undef TRACE_SYSTEM
#define TRACE_SYSTEM fastreg

#if !defined(_FASTREG_TRACE_H) || defined(TRACE_HEADER_MULTI_READ)
#define _FASTREG_TRACE_H

#include <linux/tracepoint.h>
#include <linux/unaligned.h>

/* A connection's state changed; `reason` says why one ends ("" otherwise). */
TRACE_EVENT(fastreg_conn_state,
	TP_PROTO(u32 laddr, u32 raddr, u16 rport, bool active, u32 qp_num,
		 const char *from, u32 from_len, const char *to, u32 to_len,
		 const char *reason, u32 reason_len),
	TP_ARGS(laddr, raddr, rport, active, qp_num, from, from_len, to, to_len, reason,
		reason_len),
	TP_STRUCT__entry(
		__array(u8, laddr, 4)
		__array(u8, raddr, 4)
		__field(u16, rport)
		__field(bool, active)
		__field(u32, qp_num)
		__string_len(from, from, from_len)
		__string_len(to, to, to_len)
		__string_len(reason, reason, reason_len)
	),
	TP_fast_assign(
		put_unaligned_be32(laddr, __entry->laddr);
		put_unaligned_be32(raddr, __entry->raddr);
		__entry->rport = rport;
		__entry->active = active;
		__entry->qp_num = qp_num;
		__assign_str(from);
		__assign_str(to);
		__assign_str(reason);
	),
	TP_printk("%pI4 %s %pI4:%u qp=%u %s -> %s reason=%s",
		  __entry->laddr, __entry->active ? "->" : "<-",
		  __entry->raddr, __entry->rport, __entry->qp_num,
		  __get_str(from), __get_str(to), __get_str(reason))
);

/* A connection request rejected: by this side (`sent`) or by the peer. */
TRACE_EVENT(fastreg_conn_reject,
	TP_PROTO(u32 laddr, u32 raddr, bool sent, u8 reason, const char *why, u32 why_len),
	TP_ARGS(laddr, raddr, sent, reason, why, why_len),
	TP_STRUCT__entry(
		__array(u8, laddr, 4)
		__array(u8, raddr, 4)
		__field(bool, sent)
		__field(u8, reason)
		__string_len(why, why, why_len)
	),
	TP_fast_assign(
		put_unaligned_be32(laddr, __entry->laddr);
		put_unaligned_be32(raddr, __entry->raddr);
		__entry->sent = sent;
		__entry->reason = reason;
		__assign_str(why);
	),
	TP_printk("%pI4 %s %pI4 reason=%u (%s)",
		  __entry->laddr, __entry->sent ? "rejected" : "rejected by",
		  __entry->raddr, __entry->reason, __get_str(why))
);

DECLARE_EVENT_CLASS(fastreg_xfer_class,
	TP_PROTO(u32 raddr, u32 qp_num, u64 cookie, const char *kind, u32 kind_len, u64 bytes,
		 u32 regs, int status, u64 usecs),
	TP_ARGS(raddr, qp_num, cookie, kind, kind_len, bytes, regs, status, usecs),
	TP_STRUCT__entry(
		__array(u8, raddr, 4)
		__field(u32, qp_num)
		__field(u64, cookie)
		__string_len(kind, kind, kind_len)
		__field(u64, bytes)
		__field(u32, regs)
		__field(int, status)
		__field(u64, usecs)
	),
	TP_fast_assign(
		put_unaligned_be32(raddr, __entry->raddr);
		__entry->qp_num = qp_num;
		__entry->cookie = cookie;
		__assign_str(kind);
		__entry->bytes = bytes;
		__entry->regs = regs;
		__entry->status = status;
		__entry->usecs = usecs;
	),
	TP_printk("peer=%pI4 qp=%u cookie=%llu kind=%s bytes=%llu regs=%u status=%d usecs=%llu",
		  __entry->raddr, __entry->qp_num, __entry->cookie, __get_str(kind),
		  __entry->bytes, __entry->regs, __entry->status, __entry->usecs)
);

/* A transfer this side starts was accepted (status and usecs 0). */
DEFINE_EVENT(fastreg_xfer_class, fastreg_xfer_submit,
	TP_PROTO(u32 raddr, u32 qp_num, u64 cookie, const char *kind, u32 kind_len, u64 bytes,
		 u32 regs, int status, u64 usecs),
	TP_ARGS(raddr, qp_num, cookie, kind, kind_len, bytes, regs, status, usecs));

/* Its outcome, reported to its client: status 0 or a negative errno, and its latency. */
DEFINE_EVENT(fastreg_xfer_class, fastreg_xfer_done,
	TP_PROTO(u32 raddr, u32 qp_num, u64 cookie, const char *kind, u32 kind_len, u64 bytes,
		 u32 regs, int status, u64 usecs),
	TP_ARGS(raddr, qp_num, cookie, kind, kind_len, bytes, regs, status, usecs));

/* A REG_MR posted: the key the MR now carries, and what it maps. */
TRACE_EVENT(fastreg_reg_mr,
	TP_PROTO(u32 qp_num, u32 rkey, u64 iova, u64 length),
	TP_ARGS(qp_num, rkey, iova, length),
	TP_STRUCT__entry(
		__field(u32, qp_num)
		__field(u32, rkey)
		__field(u64, iova)
		__field(u64, length)
	),
	TP_fast_assign(
		__entry->qp_num = qp_num;
		__entry->rkey = rkey;
		__entry->iova = iova;
		__entry->length = length;
	),
	TP_printk("qp=%u rkey=0x%08x iova=0x%llx length=%llu", __entry->qp_num, __entry->rkey,
		  __entry->iova, __entry->length)
);

/* A LOCAL_INV posted. */
TRACE_EVENT(fastreg_local_inv,
	TP_PROTO(u32 qp_num, u32 rkey),
	TP_ARGS(qp_num, rkey),
	TP_STRUCT__entry(
		__field(u32, qp_num)
		__field(u32, rkey)
	),
	TP_fast_assign(
		__entry->qp_num = qp_num;
		__entry->rkey = rkey;
	),
	TP_printk("qp=%u rkey=0x%08x", __entry->qp_num, __entry->rkey)
);

/*
 * A remote invalidation: a SEND_WITH_INV posted that kills the peer's `rkey` (`sent`), or a
 * message received that killed one of this side's (IB_WC_WITH_INVALIDATE).
 */
TRACE_EVENT(fastreg_remote_inv,
	TP_PROTO(u32 qp_num, u32 rkey, bool sent),
	TP_ARGS(qp_num, rkey, sent),
	TP_STRUCT__entry(
		__field(u32, qp_num)
		__field(u32, rkey)
		__field(bool, sent)
	),
	TP_fast_assign(
		__entry->qp_num = qp_num;
		__entry->rkey = rkey;
		__entry->sent = sent;
	),
	TP_printk("qp=%u rkey=0x%08x %s", __entry->qp_num, __entry->rkey,
		  __entry->sent ? "sent" : "received")
);

/* A device's pool: grown, shrunk, or a taker waiting for MRs; `live` after it. */
TRACE_EVENT(fastreg_pool,
	TP_PROTO(const char *dev, u32 dev_len, const char *what, u32 what_len, u32 count,
		 u32 live),
	TP_ARGS(dev, dev_len, what, what_len, count, live),
	TP_STRUCT__entry(
		__string_len(dev, dev, dev_len)
		__string_len(what, what, what_len)
		__field(u32, count)
		__field(u32, live)
	),
	TP_fast_assign(
		__assign_str(dev);
		__assign_str(what);
		__entry->count = count;
		__entry->live = live;
	),
	TP_printk("%s %s count=%u live=%u", __get_str(dev), __get_str(what), __entry->count,
		  __entry->live)
);

/* A console's request answered by this node: its operation and the answer's status. */
TRACE_EVENT(fastreg_console,
	TP_PROTO(u32 from, const char *op, u32 op_len, int status),
	TP_ARGS(from, op, op_len, status),
	TP_STRUCT__entry(
		__array(u8, from, 4)
		__string_len(op, op, op_len)
		__field(int, status)
	),
	TP_fast_assign(
		put_unaligned_be32(from, __entry->from);
		__assign_str(op);
		__entry->status = status;
	),
	TP_printk("from=%pI4 op=%s status=%d", __entry->from, __get_str(op),
		  __entry->status)
);

#endif /* _FASTREG_TRACE_H */

/* Out of the module's tree: define_trace.h finds this file through -I include/. */
#undef TRACE_INCLUDE_PATH
#define TRACE_INCLUDE_PATH .
#undef TRACE_INCLUDE_FILE
#define TRACE_INCLUDE_FILE fastreg_trace
#include <trace/define_trace.h>
