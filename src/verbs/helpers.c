// SPDX-License-Identifier: GPL-2.0
/*
 * Out-of-line wrappers of static inline verbs and KBUILD_MODNAME macros, for Rust.
 * See include/fastreg_helpers.h.
 */
#include <rdma/ib_verbs.h>

#include "fastreg_helpers.h"

struct ib_pd *fastreg_ib_alloc_pd(struct ib_device *device, unsigned int flags)
{
	return ib_alloc_pd(device, flags);
}

void fastreg_ib_dealloc_pd(struct ib_pd *pd)
{
	ib_dealloc_pd(pd);
}

u32 fastreg_ib_inc_rkey(u32 rkey)
{
	return ib_inc_rkey(rkey);
}

bool fastreg_ib_device_try_get(struct ib_device *device)
{
	return ib_device_try_get(device);
}
