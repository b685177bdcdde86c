/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Input of the module's own bindgen run (see Kbuild). Only RDMA items and the helpers are
 * generated from it; everything else comes from kernel::bindings.
 */
#include <rdma/ib_verbs.h>
#include <rdma/ib_cm.h>
#include <rdma/rdma_cm.h>
#include "fastreg_helpers.h"
#include "fastreg_trace.h"
