#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# Registration exercised for real: the module connects to itself over rxe0, registers a
# source, a sink and a read-back buffer of every offset x length, RDMA WRITEs, RDMA READs
# back, invalidates, and compares every byte. Then the pool under pressure, the counters,
# bad commands, and a clean unload.
. "$(dirname "$0")/lib.sh"

LB=$DBG/loopback
PAGE=$(getconf PAGESIZE)

# loopback OFFSET LENGTH [COUNT [CONCURRENCY]]: runs a command, prints its result line.
loopback() {
	echo "$FASTREG_ADDR $*" >"$LB" || { echo "write failed: $(cat "$LB")"; dmesg | tail -n 5; return 1; }
	cat "$LB"
}

# pool_field NAME: a counter of rxe0's pool.
pool_field() {
	sed -n "s/^rxe0:.* $1=\([0-9]*\).*/\1/p" "$DBG/pools"
}

# expect_mrs OFFSET LENGTH: the command moves every byte and uses the fewest MRs.
expect_mrs() {
	local off=$1 len=$2 out mr_pages pages want got
	out=$(loopback "$off" "$len") || { echo "$out"; return 1; }
	mr_pages=$(pool_field mr_pages)
	pages=$(((off % PAGE + len + PAGE - 1) / PAGE))
	want=$(((pages + mr_pages - 1) / mr_pages))
	got=$(echo "$out" | sed -n 's/.*mrs_per_buffer=\([0-9]*\).*/\1/p')
	[ "$got" = "$want" ] || { echo "$out: expected $want MRs per buffer"; return 1; }
	echo "$out" | grep -q "^ok transfers=1 bytes=$len "
}

offsets=(0 1 8 4095 4096 4097)
# max_payload=2M: 1048577 fits, and 2 MiB at an unaligned offset needs 2 MRs of 512 pages.
max=$((2 << 20))
lengths=(1 4095 4096 4097 65536 1048575 1048576 1048577 $max)

ktap_begin $((${#offsets[@]} * ${#lengths[@]} + 16))
before=$(resource_counts)
load max_payload=$max || { not_ok "insmod max_payload=$max"; ktap_end; }
for off in "${offsets[@]}"; do
	for len in "${lengths[@]}"; do
		check "offset $off length $len: write, read back, every byte checked" expect_mrs "$off" "$len"
	done
done

# Counters: every MR registered was invalidated, none failed, all are back in the pool.
counters_balanced() {
	local reg inv live free
	reg=$(pool_field registrations) inv=$(pool_field local_invalidations)
	live=$(pool_field live) free=$(pool_field free)
	[ "$reg" -gt 0 ] && [ "$reg" = "$inv" ] && [ "$live" = "$free" ] &&
		[ "$(pool_field errors)" = 0 ] || { cat "$DBG/pools"; return 1; }
}
check "pool counters: registrations = invalidations, no errors, all MRs free" counters_balanced

counts_match() {
	local reg0 out
	reg0=$(pool_field registrations)
	out=$(loopback 100 200000 10 3) || { echo "$out"; return 1; }
	# 10 transfers x 3 buffers x 1 MR.
	[ "$(pool_field registrations)" = $((reg0 + 30)) ] &&
		[ "$(pool_field local_invalidations)" = $((reg0 + 30)) ] || { cat "$DBG/pools"; return 1; }
}
check "10 transfers of 3 MRs add 30 registrations and 30 invalidations" counts_match
check "length above max_payload refused" bash -c "! echo '$FASTREG_ADDR 0 $((max + 1))' >$LB"
check "malformed command refused" bash -c "! echo '$FASTREG_ADDR x 1' >$LB"
check "address that is not local refused" bash -c "! echo '10.0.2.99 0 4096' >$LB"
check "refusals explained in dmesg" dmesg_has 'loopback: (bad offset|length [0-9]+ exceeds max_payload|.* is not)'
check "rmmod" unload
check "no resources left" no_fastreg_resources

# A pool of one MR and many concurrent transfers: the pool grows on demand.
grow() {
	load pool_size=1 || return 1
	local out
	out=$(loopback 1 65536 64 16) || { echo "$out"; unload; return 1; }
	echo "$out" | grep -q '^ok transfers=64 ' && [ "$(pool_field allocated)" -gt 1 ] ||
		{ cat "$DBG/pools"; unload; return 1; }
	unload
}
check "pool_size=1: 64 transfers 16 at a time complete, the pool grows" grow

# Growing, the pool adds a quarter of what it has beyond the need, so a load that ramps up
# reaches its working set in a few steps: with 4 MRs of 512 pages, a 4 MiB loopback (three
# buffers of two MRs each) needs 6, and the pool allocates 2 + 1.
grow_ahead() {
	load pool_size=4 max_payload=4194304 || return 1
	local out
	out=$(loopback 0 4194304) || { echo "$out"; unload; return 1; }
	echo "$out" | grep -q '^ok transfers=1 ' && [ "$(pool_field allocated)" = 7 ] &&
		[ "$(pool_field live)" = 7 ] && [ "$(pool_field free)" = 7 ] ||
		{ echo "$out"; cat "$DBG/pools"; unload; return 1; }
	unload
}
check "growing, the pool allocates a quarter of its size beyond the need" grow_ahead

# A pool capped at one transfer's worth: transfers wait for MRs and all complete.
capped() {
	load pool_size=1 pool_max=3 || return 1
	local out
	out=$(loopback 0 8192 24 8) || { echo "$out"; unload; return 1; }
	echo "$out" | grep -q '^ok transfers=24 ' && [ "$(pool_field allocated)" = 3 ] &&
		[ "$(pool_field waits)" -gt 0 ] || { cat "$DBG/pools"; unload; return 1; }
	unload
}
check "pool_max=3: 24 transfers 8 at a time wait for MRs and complete" capped

# A transfer that needs more MRs than the pool may ever hold fails cleanly.
too_big() {
	load pool_size=1 pool_max=2 || return 1
	dmesg_mark
	if echo "$FASTREG_ADDR 0 4096" >"$LB"; then
		unload
		return 1
	fi
	dmesg_has 'needs 3 MRs, more than pool_max=2'
	local rc=$?
	unload
	return $rc
}
check "a transfer needing more MRs than pool_max is refused, not hung" too_big

# Idle MRs beyond pool_size are released after pool_idle seconds.
shrink() {
	load pool_size=1 pool_idle=1 || return 1
	loopback 0 4096 4 4 >/dev/null || { unload; return 1; }
	local grown
	grown=$(pool_field live)
	sleep 2
	# The pool releases idle MRs when it is next used.
	loopback 0 4096 >/dev/null || { unload; return 1; }
	[ "$grown" -gt 3 ] && [ "$(pool_field released)" -gt 0 ] && [ "$(pool_field live)" -lt "$grown" ] ||
		{ echo "grown=$grown"; cat "$DBG/pools"; unload; return 1; }
	unload
}
check "MRs beyond pool_size idle for pool_idle are released" shrink

# Removing the device while transfers run: they stop, the removal completes, no oops.
remove_during_transfers() {
	load || return 1
	dmesg_mark
	(echo "$FASTREG_ADDR 1 1M 500 4" >"$LB") &
	local bg=$! start end rc
	sleep 2
	start=$(date +%s)
	rdma link delete rxe0 || return 1
	end=$(date +%s)
	wait $bg
	rc=$?
	rdma link add rxe0 type rxe netdev "$FASTREG_NIC"
	unload || return 1
	# 500 MiB at ~10 MB/s would take a minute: the removal must not wait for that.
	[ $((end - start)) -lt 15 ] && [ $rc -ne 0 ] && dmesg_has 'rxe0 is being removed; stopping' ||
		{ echo "removal took $((end - start)) s, command exit $rc"; return 1; }
}
check "rdma link delete during transfers stops them and completes" remove_during_transfers

check "rdma resource counts back to what they were before loading" bash -c "[ \"\$(. tests/vm/lib.sh; resource_counts)\" = '$before' ]"
check "no kernel warnings" no_kernel_errors
ktap_end
