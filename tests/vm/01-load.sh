#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# Load with defaults, check what the module reports, unload, check nothing is left.
. "$(dirname "$0")/lib.sh"

defaults=(pool_size=32 pool_max=1024 pool_idle=60 queue_depth=8 max_payload=1048576 port=7471
	timeout=20 keepalive=10 max_conns=1024 max_inline=4096 require_privileged_port=1
	test_mem=1024 tests_mem=0)

params_documented() {
	local n
	n=$(modinfo -F parm "$KO" | grep -c -E '^(pool_size|pool_max|pool_idle|queue_depth|max_payload|port|timeout|keepalive|max_conns|max_inline|require_privileged_port|test_mem|tests_mem):.*\([0-9]+\.\.[0-9]+')
	[ "$n" -eq 13 ] || { modinfo -F parm "$KO"; return 1; }
}

owns_pd_on_rxe0() {
	rdma resource show pd | grep -F '[fastreg]' | grep -q 'dev rxe0'
}

back_to_before() {
	no_fastreg_resources && [ "$(resource_counts)" = "$before" ]
}

ktap_begin 11
before=$(resource_counts)
dmesg_mark
check "insmod with defaults" load
check "dmesg reports the effective parameters" dmesg_has "fastreg: loaded: ${defaults[*]}\$"
check "dmesg reports rxe0 with its FRWR limits" \
	dmesg_has 'fastreg: rxe0: added: fast_reg=yes max_fast_reg_page_list_len=512 max_qp_wr=[0-9]+ max_send_sge=[0-9]+ .*page_size_cap=0x[0-9a-f]+ sg_gaps=no .*pd_local_dma_lkey=0x[0-9a-f]+'
check "debugfs params lists every parameter with its default" \
	diff <(printf '%s\n' "${defaults[@]}") "$DBG/params"
check "debugfs devices lists rxe0" \
	grep -q '^rxe0: pd_local_dma_lkey=0x[0-9a-f]* fast_reg=yes max_fast_reg_page_list_len=512 ' "$DBG/devices"
check "fastreg owns a PD on rxe0" owns_pd_on_rxe0
check "modinfo documents every parameter with its range" params_documented
check "rmmod" unload
check "debugfs directory removed" test ! -e "$DBG"
check "no PD/CQ/QP/MR/cm_id left after rmmod" back_to_before
check "no kernel warnings" no_kernel_errors
ktap_end
