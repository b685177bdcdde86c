#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# Failures injected below fastreg with the kernel's own fault-injection machinery, under
# load: fail_function on every C helper through which fastreg calls a verb that can fail
# (src/verbs/helpers.c, ALLOW_ERROR_INJECTION), failslab limited to fastreg's code by its
# stack filter, and fastreg's fault attribute fastreg_fail_wr, which makes the completion
# of a posted chain (REG_MR, LOCAL_INV, other sends, receives) an error.
#
# For each injection point: while it fires, brw write and read (64 KiB and 1 KiB: registered
# and inline, concurrency 16, check=full) on the node's interface connected to itself; the
# fault must have fired, no transfer may carry bad data (corrupt 0: a transfer is good or it
# failed), the kernel log names the failure, MRs in an unknown state are destroyed, never
# reused; when it stops, traffic recovers without reloading (a clean run both ways). At the
# end: nothing left after rmmod (rdma resources; kmemleak on the sanitizer kernel), no
# kernel report.
#@ vm --timeout 2400
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/lst.sh"

DEV=$FASTREG_DEV
FS=/sys/kernel/debug/failslab
FW=/sys/kernel/debug/fastreg_fail_wr
# fail_function points: helper, the value it returns when failed (NULL type: 0), and what
# the kernel must say (a regex after "fastreg: "): the verb that failed, named by fastreg
# where it called it, so that no other line (a connection's life) can stand for it. A
# receive buffer that cannot be reposted is a credit the peer never gets back: the
# connection fails at once, naming it (it stalled until "no credits returned" before).
FUNCS=(
	"fastreg_ib_alloc_mr -12 [a-z_0-9]+: ib_alloc_mr failed"
	"fastreg_ib_map_mr_sg -22 ib_map_mr_sg of [0-9]+ entries \\([0-9]+ bytes\\) failed \\(-22\\)"
	"fastreg_ib_post_send -12 ib_post_send failed \\(-12\\) without naming where it stopped"
	"fastreg_post_refused -12 ib_post_send refused a chain of [0-9]+ work requests whole \\(-12\\)"
	"fastreg_ib_post_recv -12 cannot repost a receive buffer"
	"fastreg_ib_dma_map_sg 0 [a-z_0-9]+: ib_dma_map_sg of [0-9]+ entries"
)
# Points on the connection's setup: the connection is closed first, so that the load
# makes a new one.
CONN_FUNCS=(
	"fastreg_ib_alloc_cq -12 [a-z_0-9]+: ib_alloc_cq of [0-9]+ entries failed"
	"fastreg_rdma_create_qp -12 [a-z_0-9]+: rdma_create_qp of [0-9]+ send and [0-9]+ receive work requests failed"
	"fastreg_rdma_connect -12 rdma_connect failed"
	"fastreg_rdma_accept -12 rdma_accept failed"
)
# fastreg_fail_wr kinds: name and mask.
WRS=("reg 1" "local_inv 2" "send 4" "recv 8")

pool_field() {
	sed -n "s/^$DEV:.* $1=\([0-9]*\).*/\1/p" "$DBG/pools"
}

# load_runs: brw write and read, registered (64 KiB) and inline (1 KiB), 16 in flight,
# check=full, a second each, while a fault is on, straight through the lst file (the
# CLI's start costs seconds under emulation, more on the sanitizer kernel). Their figures
# and status ("ops errors corrupt status") go to /tmp/fault-runs; a run that could not
# start ("- - - status": no connection to run on) too.
load_runs() {
	local op size r rc
	: >/tmp/fault-runs
	for op in write read; do
		for size in 65536 1024; do
			r=$(lst_direct brw "$op" size=$size check=full concurrency=16 seconds=1)
			rc=$?
			echo "${r:-- - -} $rc" >>/tmp/fault-runs
		done
	done
}

# sum FIELD: FIELD (ops, errors or corrupt) summed over the load runs.
sum() {
	awk -v f="$1" '{ n += (f == "ops" ? $1 : f == "errors" ? $2 : $3) } END { print n + 0 }' /tmp/fault-runs
}

# recovered: with no fault on, the connection comes back and 16 transfers of each size
# each way are all good.
recovered() {
	wait_for ctl ping "$FASTREG_ADDR" "$FASTREG_ADDR" 1 >/dev/null || return 1
	local op size got
	for op in write read; do
		for size in 65536 1024; do
			got=$(lst_direct brw "$op" size=$size check=full concurrency=16 count=16) &&
				[ "$got" = "16 0 0" ] || { echo "brw $op $size after the fault: ops errors corrupt $got"; return 1; }
		done
	done
}

# verdict NAME REGEX: the load ran while the fault was on and the fault reached it (some
# transfers failed; for ib_alloc_mr, which may only delay them, the fault fired during the
# load: with_function checks it fired), no transfer was corrupt, every run that started reported its failures
# (a run with a failed transfer ended in error, and only such a run), and the kernel log
# names the failure (a line "fastreg: ...REGEX"). Keeps the figures and that line for the
# suite's diagnostics.
verdict() {
	local ops errs corrupt first silent
	ops=$(sum ops) errs=$(sum errors) corrupt=$(sum corrupt)
	first=$(dmesg_since_mark | grep -m1 -E "fastreg: .*$2" | sed 's/^\[[^]]*\] //')
	echo "$1 (from ${MARK_UPTIME}s): $ops transfers, $errs failed, $corrupt corrupt${first:+; first: $first}" >>/tmp/fault-figures.txt
	[ "$corrupt" = 0 ] || { echo "$corrupt corrupt transfers"; return 1; }
	[ $((ops + errs)) -gt 0 ] || { echo "no transfer ran while the fault was on"; cat /tmp/fault-runs; return 1; }
	# A failed ib_alloc_mr may fail no transfer: the pool then waits for an MR to come back.
	[ "$errs" -gt 0 ] || [ "$1" = fastreg_ib_alloc_mr ] ||
		{ echo "no transfer failed under the fault: the load never met it"; cat /tmp/fault-runs; return 1; }
	silent=$(awk '$1 != "-" && (($2 + $3 > 0) != ($4 != 0))' /tmp/fault-runs)
	[ -z "$silent" ] || { echo "runs whose status does not match their counts: $silent"; return 1; }
	[ -n "$first" ] || { echo "$errs transfers failed and the kernel did not name the failure ($2)"; dmesg_since_mark | tail -n 20; return 1; }
}

# with_function HELPER RETVAL CLOSE [REGEX]: fail_function on HELPER (20 % of calls, at
# most 40 times) during the load, then off; CLOSE=1 closes the connection first; the
# kernel's first line about it matches REGEX.
with_function() {
	local fn=$1 ret=$2 close=$3 times=40 say=${4:-}
	dmesg_mark
	[ "$close" = 0 ] || ctl close "$FASTREG_ADDR" "$FASTREG_ADDR" >/dev/null 2>&1
	local pct=20
	# A new connection: every setup fails until 3 have (the dial's next rounds).
	[ "$close" = 0 ] || { pct=100; times=3; }
	ff_arm "$fn" "$ret" $pct $times || return 1
	load_runs
	ff_disarm "$fn" "$times" || return 1
	# A chain refused whole was not posted at all: never taken as one the device took
	# part of (which would fail the connection with its MRs in an unknown state).
	if [ "$fn" = fastreg_post_refused ] &&
		dmesg_since_mark | grep -E "without naming where it stopped|accepted part of a chain|took part of a chain"; then
		echo "a chain refused whole was taken as partly posted"
		return 1
	fi
	verdict "$fn" "$say" && recovered
}

# with_wr NAME MASK: fastreg_fail_wr on the chains of MASK (10 %, at most 20), then off.
with_wr() {
	local name=$1 mask=$2 times=20 destroyed
	dmesg_mark
	destroyed=$(pool_field errors)
	echo "$mask" >"$FW/kinds"
	echo 10 >"$FW/probability"
	echo 1 >"$FW/interval"
	echo "$times" >"$FW/times"
	echo 0 >"$FW/verbose"
	load_runs
	echo 0 >"$FW/probability"
	fired "$FW/times" "$times" || return 1
	verdict "fail_wr $name" "failed: .*\(injected\)" || return 1
	# A chain that failed leaves its MRs in an unknown state: destroyed, not reused.
	case $name in
	reg | local_inv)
		[ "$(pool_field errors)" -gt "$destroyed" ] ||
			{ echo "no MR destroyed after a failed $name"; cat "$DBG/pools"; return 1; } ;;
	esac
	recovered
}

# quiet: the node's connection to itself closed and gone (no CM traffic in flight).
quiet() {
	ctl close "$FASTREG_ADDR" "$FASTREG_ADDR" >/dev/null 2>&1
	wait_for bash -c "! grep -q '^  conn ' $DBG/conns"
}

# with_pd: the device removed, then added while fastreg_ib_alloc_pd fails: fastreg says so
# and leaves the device alone; removed and added again with no fault, it is used again.
# The device is removed only once fastreg's connection is gone: removing an rxe device
# while connection management datagrams are in flight made KASAN report a use-after-free
# in ib_core's MAD receive path (ib_mad_post_receive_mads from ib_mad_recv_done, on a QP1
# being destroyed: Documentation/robustness.rst, "Faults"), which is not fastreg's.
with_pd() {
	local fn=fastreg_ib_alloc_pd
	dmesg_mark
	quiet || return 1
	rdma link delete "$DEV" || return 1
	ff_arm $fn -12 100 1 || return 1
	rdma link add "$DEV" type "$FASTREG_RDMA" netdev "$FASTREG_NIC"
	ff_disarm $fn 1 || return 1
	dmesg_has "fastreg: $DEV: ib_alloc_pd failed" || return 1
	! grep -q "^$DEV:" "$DBG/devices" || { echo "$DEV used without a PD"; return 1; }
	echo "fastreg_ib_alloc_pd (from ${MARK_UPTIME}s): device not used; first: $(dmesg_since_mark | grep -m1 'fastreg: ' |
		sed 's/^\[[^]]*\] //')" >>/tmp/fault-figures.txt
	rdma link delete "$DEV" && rdma link add "$DEV" type "$FASTREG_RDMA" netdev "$FASTREG_NIC" || return 1
	wait_for grep -q "^$DEV:" "$DBG/devices" && recovered
}

# with_slab: failslab on allocations with fastreg's code on the stack (5 %, at most 50).
with_slab() {
	local start end times=50
	dmesg_mark
	# The module's text: the lowest and highest of its code symbols.
	read -r start end < <(awk '$4 == "[fastreg]" && ($2 == "t" || $2 == "T") { print $1 }' /proc/kallsyms |
		sort | sed -n '1p;$p' | paste -sd' ')
	[ -n "$start" ] && [ -n "$end" ] || { echo "no fastreg symbols in /proc/kallsyms"; return 1; }
	echo "0x$start" >"$FS/require-start"
	printf '%#x\n' $((0x$end + 4096)) >"$FS/require-end"
	# Not the device driver's own allocations under fastreg's calls: rxe's queues are
	# vmalloc'd, and a failed vmalloc is reported by the kernel with a call trace
	# (warn_alloc), as it should be; that is rxe's path, not fastreg's.
	local rstart rend
	read -r rstart rend < <(awk '$4 == "[rdma_rxe]" && ($2 == "t" || $2 == "T") { print $1 }' /proc/kallsyms |
		sort | sed -n '1p;$p' | paste -sd' ')
	if [ -n "$rstart" ] && [ -n "$rend" ]; then
		echo "0x$rstart" >"$FS/reject-start"
		printf '%#x\n' $((0x$rend + 4096)) >"$FS/reject-end"
	fi
	echo 32 >"$FS/stacktrace-depth"
	echo N >"$FS/ignore-gfp-wait"
	echo 5 >"$FS/probability"
	echo 1 >"$FS/interval"
	echo "$times" >"$FS/times"
	echo 0 >"$FS/verbose"
	load_runs
	echo 0 >"$FS/probability"
	fired "$FS/times" "$times" || return 1
	# Every allocation failslab fails is one of fastreg's: the line names the memory.
	verdict failslab "(Error\\(12\\)|ENOMEM|-12\\b|out of memory)" && recovered
}

npoints=$((${#FUNCS[@]} + ${#CONN_FUNCS[@]} + ${#WRS[@]} + 9))
ktap_begin "$npoints"
before=$(resource_counts)
# A small pool released soon after use: the load keeps growing it (ib_alloc_mr).
check "load pool_size=1 pool_idle=1 timeout=20" load pool_size=1 pool_idle=1 timeout=20
check "fault attribute /sys/kernel/debug/fastreg_fail_wr and fail_function present" \
	test -d "$FW" -a -d "$FF" -a -f "$FW/kinds"
check "a clean run before any fault" recovered
for f in "${FUNCS[@]}"; do
	set -f
	set -- $f
	set +f
	sleep 1.5 # the pool's idle MRs go, so the load allocates again
	check "fail_function $1 under load: transfers failed by it, named, none corrupt; recovers" \
		with_function "$1" "$2" 0 "${*:3}"
done
for f in "${CONN_FUNCS[@]}"; do
	set -f
	set -- $f
	set +f
	check "fail_function $1 on a new connection: transfers failed by it, named, none corrupt; recovers" \
		with_function "$1" "$2" 1 "${*:3}"
done
check "fail_function fastreg_ib_alloc_pd on a device added: not used, then used again" with_pd
for w in "${WRS[@]}"; do
	set -- $w
	check "fastreg_fail_wr $1 under load: no corrupt transfer, MRs destroyed, recovers" with_wr "$1" "$2"
done
if [ -f "$FS/require-start" ]; then
	check "failslab within fastreg under load: no corrupt transfer, recovers" with_slab
else
	ok "failslab within fastreg # SKIP no stack filter (CONFIG_FAULT_INJECTION_STACKTRACE_FILTER)"
fi
# The figures of every point (Documentation/robustness.rst, "Faults").
sed 's/^/# /' /tmp/fault-figures.txt 2>/dev/null
unload_checks "$before"
ktap_end
