/* SPDX-License-Identifier: GPL-2.0 */
/*
 * C helpers for the fastreg verbs layer.
 *
 * Rust cannot call static inline functions or macros. Each helper here wraps exactly one
 * static inline verb or one macro that passes KBUILD_MODNAME, with the same arguments and
 * return value, and nothing else: all logic lives in Rust.
 */
#ifndef _FASTREG_HELPERS_H
#define _FASTREG_HELPERS_H

#include <linux/types.h>

struct ib_device;
struct ib_pd;

/* ib_alloc_pd() is a macro that passes KBUILD_MODNAME. */
struct ib_pd *fastreg_ib_alloc_pd(struct ib_device *device, unsigned int flags);
/* ib_dealloc_pd() is static inline. */
void fastreg_ib_dealloc_pd(struct ib_pd *pd);
/* ib_inc_rkey() is static inline. */
u32 fastreg_ib_inc_rkey(u32 rkey);
/* ib_device_try_get() is static inline. */
bool fastreg_ib_device_try_get(struct ib_device *device);

#endif /* _FASTREG_HELPERS_H */
