#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# Devices that come and go while the module is loaded: an rxe device created after the
# module is picked up, `rdma link delete` releases everything fastreg held on it.
. "$(dirname "$0")/lib.sh"

devices_empty() {
	[ ! -s "$DBG/devices" ] || { cat "$DBG/devices"; return 1; }
}

has_device() {
	grep -q "^$1: " "$DBG/devices" || { cat "$DBG/devices"; return 1; }
}

owns_pd_on() {
	rdma resource show pd | grep -F '[fastreg]' | grep -q "dev $1 " ||
		{ rdma resource show pd; return 1; }
}

ktap_begin 14
rdma link delete rxe0
check "insmod without any RDMA device" load
check "no device in use" devices_empty
check "no resources held" no_fastreg_resources

dmesg_mark
rdma link add rxe0 type rxe netdev "$FASTREG_NIC"
# Gated on what it waits for: the device's arrival logged, not a guessed second.
check "rxe0 added later is picked up" wait_for dmesg_has 'fastreg: rxe0: added: fast_reg=yes'
check "rxe0 listed in debugfs" has_device rxe0
check "PD allocated on rxe0" owns_pd_on rxe0

dmesg_mark
check "rdma link delete rxe0" rdma link delete rxe0
check "removal logged" dmesg_has 'fastreg: rxe0: removed'
check "rxe0 gone from debugfs" devices_empty
check "nothing held after device removal" no_fastreg_resources

# Re-add, then unload with the device present.
rdma link add rxe0 type rxe netdev "$FASTREG_NIC"
check "rxe0 re-added is picked up" wait_for has_device rxe0
check "rmmod with the device present" unload
check "nothing held after rmmod" no_fastreg_resources
check "no kernel warnings" no_kernel_errors
ktap_end
