// SPDX-License-Identifier: GPL-2.0
/*
 * fastreg's tracepoints, defined once (include/fastreg_trace.h), with the functions that
 * src/verbs/trace.rs calls once it has seen a tracepoint enabled (rust_do_trace_*()).
 */
#define CREATE_TRACE_POINTS
#define CREATE_RUST_TRACE_POINTS
#include "fastreg_trace.h"
