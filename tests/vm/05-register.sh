#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# Registration exercised for real, through the transport: the node's interface connected to
# its own address (rxe loops back), driven by scripts/fastreg-lst. Every offset x length
# written and read back with every byte checked and the fewest registrations, counted by
# the pool; the pool's counters; the pool under pressure (growth, its cap, a transfer it can
# never serve, idle MRs released); the device removed during transfers; a clean unload.
# Both ends of every transfer take their MRs from the one pool of $FASTREG_DEV.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/lst.sh"

DEV=$FASTREG_DEV
PAGE=$(getconf PAGESIZE)

# pool_field NAME: a counter of the device's pool.
pool_field() {
	sed -n "s/^$DEV:.* $1=\([0-9]*\).*/\1/p" "$DBG/pools"
}

# invalidations: local and remote invalidations of the device's pool, summed.
invalidations() {
	echo $(($(pool_field local_invalidations) + $(pool_field remote_invalidations)))
}

# mrs BYTES MR_PAGES: the fewest MRs of MR_PAGES pages that map the pages BYTES bytes
# starting at a page boundary touch.
mrs() {
	local pages=$((($1 + PAGE - 1) / PAGE))
	echo $(((pages + $2 - 1) / $2))
}

# transfer_mrs OFFSET LENGTH MR_PAGES: the registrations of one registered transfer. The
# client's buffer starts OFFSET bytes into its first page (src/selftest/lst.rs); the server's buffer
# starts at a page boundary (serving_region in src/transport/iface.rs). For a write (PUT)
# the client registers its source and the server its sink (put.rs, serve.rs); for a read
# (GET) the client registers its sink and the server its source (get.rs, serve.rs): the
# same count both ways.
transfer_mrs() {
	echo $(($(mrs $(($1 % PAGE + $2)) "$3") + $(mrs "$2" "$3")))
}

# pool_idle_all: every MR of the pool is back (the served side returns its MRs when its
# last chain completes, which may be just after the client saw the end).
pool_idle_all() {
	[ "$(pool_field live)" = "$(pool_field free)" ] || { cat "$DBG/pools"; return 1; }
}

offsets=(0 1 8 4095 4096 4097)
# max_payload=2M: 1048577 fits, and 2 MiB at an unaligned offset needs 2 MRs of 512 pages.
max=$((2 << 20))
lengths=(1 4095 4096 4097 65536 1048575 1048576 1048577 $max)
OFFS=$(IFS=,; echo "${offsets[*]}")
LENS=$(IFS=,; echo "${lengths[*]}")

ktap_begin $((2 * ${#offsets[@]} * ${#lengths[@]} + 19))
before=$(resource_counts)
# max_inline=0: no transfer goes inline (an inline transfer registers nothing), so every
# transfer's registrations follow from the page math.
check "load max_payload=2M max_inline=0" load max_payload=$max max_inline=0
MR_PAGES=$(pool_field mr_pages)

# The matrix, both ways, one transfer per pair: a test point per pair (all bytes checked,
# no error), then one on the registrations of the whole run. Every MR maps at most
# mr_pages pages and a transfer's registrations cover its buffers, so no pair can use
# fewer than the page math gives: the run's total is the sum of those figures only if
# every pair used the fewest (a pair that used more, or a GET retried, registering again,
# fails it).
matrix_regs() {
	local dir=$1 reg0=$2 inv0=$3 want=0 off len reg inv
	for len in "${lengths[@]}"; do
		for off in "${offsets[@]}"; do
			want=$((want + $(transfer_mrs "$off" "$len" "$MR_PAGES")))
		done
	done
	reg=$(($(pool_field registrations) - reg0))
	inv=$(($(invalidations) - inv0))
	[ "$reg" = "$want" ] && [ "$inv" = "$want" ] ||
		{ echo "brw $dir: $reg registrations, $inv invalidations, expected $want (mr_pages=$MR_PAGES)"; cat "$DBG/pools"; return 1; }
}
for dir in write read; do
	reg0=$(pool_field registrations)
	inv0=$(invalidations)
	"$LST" --json brw $dir --size "$LENS" --offset "$OFFS" --check full --count 1 >"$OUT"
	matrix_points "brw $dir, every byte checked:" "$LENS" "$OFFS" 1
	check "brw $dir: every pair used the fewest MRs, each invalidated" matrix_regs $dir "$reg0" "$inv0"
done

# Counters: every MR registered was invalidated (locally or by the peer), none failed,
# all are back in the pool.
counters_balanced() {
	local reg
	reg=$(pool_field registrations)
	[ "$reg" -gt 0 ] && [ "$reg" = "$(invalidations)" ] && [ "$(pool_field errors)" = 0 ] ||
		{ cat "$DBG/pools"; return 1; }
}
check "pool counters: registrations = local + remote invalidations, no errors" counters_balanced
check "  all MRs free" wait_for pool_idle_all

# 10 writes of 200000 bytes at offset 100, 3 at a time: each registers one MR at the
# client (its source: 49 pages) and one at the server (its sink), invalidated locally by
# the client and remotely (SEND_WITH_INV) at the server.
counts_match() {
	local reg0 loc0 rem0 mr
	mr=$(transfer_mrs 100 200000 "$MR_PAGES")
	[ "$mr" = 2 ] || { echo "200000 bytes at offset 100: $mr MRs with mr_pages=$MR_PAGES, not 2"; return 1; }
	reg0=$(pool_field registrations)
	loc0=$(pool_field local_invalidations)
	rem0=$(pool_field remote_invalidations)
	run_clean 10 brw write --size 200000 --offset 100 --check full --count 10 --concurrency 3 || return 1
	[ "$(pool_field registrations)" = $((reg0 + 20)) ] &&
		[ "$(pool_field local_invalidations)" = $((loc0 + 10)) ] &&
		[ "$(pool_field remote_invalidations)" = $((rem0 + 10)) ] || { cat "$DBG/pools"; return 1; }
}
check "10 writes of 2 MRs add 20 registrations, 10 local and 10 remote invalidations" counts_match

check "a length above max_payload is refused" bash -c "! '$LST' --json brw write --size $((max + 1)) --count 1 >$OUT"
check "  as refused, not as a connection error" expect "r['errors_by_kind']['refused'] == 1 and r['errors'] == 1"
check "  the kernel says why" expect "any('exceeds the connection\\'s max_payload=$max' in m for m in r['kernel_messages'])"
check "rmmod" unload
check "no resources left" no_fastreg_resources

# A pool of one MR and many concurrent transfers: the pool grows on demand.
grow() {
	load pool_size=1 || return 1
	run_clean 64 brw write --size 64k --offset 1 --check full --count 64 --concurrency 16 &&
		[ "$(pool_field allocated)" -gt 1 ] || { cat "$DBG/pools"; unload; return 1; }
	unload
}
check "pool_size=1: 64 transfers 16 at a time complete, the pool grows" grow

# Growing, the pool adds a quarter of what it holds beyond the need (src/reg/pool.rs), so a
# load that ramps up reaches its working set in a few steps. One write of 2 x mr_pages
# pages at offset 1 (4 MiB on rxe) on a pool of 4: the client takes 3 MRs (2 x mr_pages
# + 1 pages) of the 4; the server's sink needs 2 (2 x mr_pages pages) and finds 1, so the
# pool allocates the missing 1 plus a quarter of 4: 6 MRs in all, where the need was 5.
grow_ahead() {
	local len=$((2 * MR_PAGES * PAGE))
	[ "$(transfer_mrs 1 $len "$MR_PAGES")" = 5 ] || { echo "not 3 + 2 MRs"; return 1; }
	load pool_size=4 max_payload=$len || return 1
	# The device's MRs map as many pages with this max_payload as with 2M.
	[ "$(pool_field mr_pages)" = "$MR_PAGES" ] || { cat "$DBG/pools"; unload; return 1; }
	run_clean 1 brw write --size $len --offset 1 --check full --count 1 &&
		[ "$(pool_field allocated)" = 6 ] && wait_for pool_idle_all && [ "$(pool_field live)" = 6 ] ||
		{ cat "$DBG/pools"; unload; return 1; }
	unload
}
check "growing, the pool allocates a quarter of its size beyond the need" grow_ahead

# A pool capped at 3, and transfers of 1 MR at each end: a client leaves half of pool_max
# (1 MR) to what the node serves, so at most two clients hold an MR at once and the
# servers take the rest. The pool grows to its cap and no further, the other transfers
# wait for MRs, and all complete.
capped() {
	load pool_size=1 pool_max=3 max_inline=0 || return 1
	run_clean 24 brw write --size 8k --check full --count 24 --concurrency 8 &&
		[ "$(pool_field allocated)" = 3 ] && [ "$(pool_field waits)" -gt 0 ] ||
		{ cat "$DBG/pools"; unload; return 1; }
	unload
}
check "pool_max=3: 24 transfers 8 at a time wait for MRs and complete, the pool grows to 3" capped

# A transfer to this node needs MRs at both ends from the one pool: 1 + 1 for 8 KiB, more
# than pool_max=1 can ever hold. It fails at once, naming the limit, instead of waiting
# for ever (src/transport/xfer.rs, pool_can_serve).
too_big() {
	load pool_size=1 pool_max=1 max_inline=0 || return 1
	dmesg_mark
	local rc=0
	no_hang 60 bash -c "! '$LST' --json brw write --size 8k --count 1 >$OUT" &&
		expect "r['errors'] == 1 and r['errors_by_kind']['refused'] == 1" &&
		dmesg_has "a transfer of 8192 bytes to this node needs 2 MRs of $DEV's pool at once \(1 here, 1 at the peer\), more than pool_max=1" || rc=1
	unload
	return $rc
}
check "a transfer needing more MRs than pool_max is refused, not hung" too_big

# Idle MRs beyond pool_size are released after pool_idle seconds, when the pool is next
# used: the next transfer's first take releases every idle MR but pool_size, then takes
# what that transfer needs (2).
shrink() {
	load pool_size=1 pool_idle=1 max_inline=0 || return 1
	local grown rel0
	run_clean 8 brw write --size 4k --count 8 --concurrency 4 && wait_for pool_idle_all ||
		{ unload; return 1; }
	grown=$(pool_field live)
	rel0=$(pool_field released)
	sleep 2
	run_clean 1 brw write --size 4k --count 1 || { unload; return 1; }
	[ "$grown" -gt 1 ] && [ $(($(pool_field released) - rel0)) -ge $((grown - 1)) ] &&
		[ "$(pool_field live)" -le 2 ] ||
		{ echo "grown=$grown released before=$rel0"; cat "$DBG/pools"; unload; return 1; }
	unload
}
check "MRs beyond pool_size idle for pool_idle are released" shrink

# Removing the device while transfers run: they stop, the removal completes, no oops.
# 500 writes of 1 MiB would take minutes under emulation: the removal must not wait for
# them, and the run must end without trying the rest (its interface is gone). The device
# goes once transfers are seen completing (16 registrations: at most 8 belong to the 4 in
# flight), not after a fixed time (the CLI alone takes seconds to start).
remove_during_transfers() {
	load || return 1
	dmesg_mark
	local base pid start took rc deadline
	base=$(pool_field registrations)
	"$LST" --json brw write --size 1M --offset 1 --count 500 --concurrency 4 >"$OUT" 2>&1 &
	pid=$!
	wait_for registered $((base + 16)) "$DEV" || { kill $pid; wait $pid; unload; return 1; }
	start=$SECONDS
	no_hang 60 rdma link delete "$DEV"
	rc=$?
	took=$((SECONDS - start))
	deadline=$((SECONDS + 60))
	while kill -0 $pid 2>/dev/null && [ $SECONDS -lt $deadline ]; do
		sleep 0.5
	done
	kill -0 $pid 2>/dev/null && { echo "fastreg-lst still running 60 s after the removal"; blocked_tasks; }
	wait $pid
	rdma link add "$DEV" type "$FASTREG_RDMA" netdev "$FASTREG_NIC"
	unload || return 1
	[ $rc = 0 ] && [ $took -lt 15 ] &&
		expect "r['ops'] > 0 and r['ops'] + r['errors'] < 500" &&
		dmesg_has "fastreg: $DEV: removed" ||
		{ echo "removal: exit $rc after $took s"; return 1; }
}
check "rdma link delete during transfers stops them within 15 s and completes" remove_during_transfers

check "rdma resource counts back to what they were before loading" bash -c "[ \"\$(. tests/vm/lib.sh; resource_counts)\" = '$before' ]"
check "no kernel warnings" no_kernel_errors
ktap_end
