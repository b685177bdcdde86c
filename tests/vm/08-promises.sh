#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# fastreg's promises on the paths that are not the happy one: every queue depth carries any
# concurrency (1 and 254..256, where the credit limit once overflowed); a transfer that can
# never complete fails at once, naming the limit; a GET that times out gives its buffer back
# only with its key dead; a hostile peer (short advertisement, DONE for an unknown transfer,
# DONE twice) costs only its own connection, closed naming the reason; interfaces removed
# while peers connect, writers killed mid-run, and rmmod or `rdma link delete` with
# transfers in flight return within seconds and leave nothing behind.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/veth.sh"
. "$(dirname "$0")/lst.sh"

A=$VETH_ADDR0
B=$VETH_ADDR1

pair() {
	ctl iface add $RXE_DEV0 $A "$@" && ctl iface add $RXE_DEV1 $B "$@"
}

# within SECS CMD...: CMD (a command or a function) succeeds and returns within SECS
# seconds; it is killed after three times that.
within() {
	local secs=$1 start rc pid dog
	shift
	start=$(date +%s)
	"$@" &
	pid=$!
	# Its output to /dev/null: the sleep outlives a quick CMD, and would hold the output
	# of the `check` around this open (each such point took 90 s).
	(sleep $((secs * 3)) && kill -9 $pid 2>/dev/null) >/dev/null 2>&1 &
	dog=$!
	wait $pid
	rc=$?
	kill $dog 2>/dev/null
	local took=$(($(date +%s) - start))
	[ $rc -eq 0 ] && [ $took -le "$secs" ] || { echo "exit $rc after $took s (limit $secs s)"; return 1; }
}

# negotiated QD: the connection A -> B and its accepted side run at queue depth QD.
negotiated() {
	grep -q "conn -> $B:[0-9]* state=established queue_depth=$1 " "$DBG/conns" &&
		grep -q "conn <- $A:[0-9]* state=established queue_depth=$1 " "$DBG/conns" ||
		{ cat "$DBG/conns"; return 1; }
}

# served_from PEER: the transfers served for PEER, summed over the connections with it (one
# connection serves both directions, whichever side made it).
served_from() {
	local n=0 line s
	while read -r line; do
		case "$line" in
		"conn <- $1:"* | "conn -> $1:"*)
			s=${line##* served=}
			n=$((n + ${s%% *})) ;;
		esac
	done <"$DBG/conns"
	echo $n
}

# both_served N: each side of the pair has served at least N transfers to the other.
both_served() {
	local a b
	a=$(served_from $A) b=$(served_from $B)
	[ "$a" -ge "$1" ] && [ "$b" -ge "$1" ] || { echo "served: $a from $A, $b from $B"; return 1; }
}

clean_unload() {
	unload && no_fastreg_resources
}

DEPTHS=(1 254 255 256)
ktap_begin $((1 + ${#DEPTHS[@]} * 10 + 7 + 17 + 4 + 9 + 6 + 8 + 10 + 1))

check "veth pair with two rxe devices" veth_up

# Any queue depth carries any concurrency: transfers wait for credits in order, and the
# peer never sees more transfers than the depth. At 254..256 the credit limit (depth + 2)
# once overflowed a byte and panicked the completion worker on the first message; at 1,
# transfers waiting for credits timed out.
for qd in "${DEPTHS[@]}"; do
	check "qd $qd: load" load queue_depth=$qd
	check "qd $qd: interfaces on the pair" pair queue_depth=$qd
	check "qd $qd: ping the node itself, 8 at a time" run_clean 50 ping --count 50 --concurrency 8
	check "qd $qd: brw write 100000 B at offset 7 to itself, check full, 16 at a time" \
		run_clean 64 brw write --size 100000 --offset 7 --check full --concurrency 16 --count 64
	check "qd $qd: brw read 4 KiB from itself, check full, 64 at a time" \
		run_clean 256 brw read --size 4096 --check full --concurrency 64 --count 256
	check "qd $qd: ping across the pair" run_clean 20 ping --from $A --peer $B --count 20 --concurrency 4
	check "qd $qd: brw write 64 KiB across, check full, 64 at a time" \
		run_clean 128 brw write --from $A --peer $B --size 64k --check full --concurrency 64 --count 128
	check "qd $qd: brw read 65537 B at offset 4095 across, check full, 64 at a time" \
		run_clean 128 brw read --from $A --peer $B --size 65537 --offset 4095 --check full --concurrency 64 --count 128
	check "qd $qd: both sides negotiated queue_depth=$qd" negotiated $qd
	check "qd $qd: rmmod, nothing left" clean_unload
done

# A pool of one MR can never serve a transfer to the node itself (its source and its sink
# take MRs from the same pool): it fails at once, naming the limit, instead of each
# transfer waiting out the timeout. Across two devices each side has its own pool.
# Registered transfers (max_inline=0): an inline one takes no MR at all.
check "pool_max=1: load" load pool_size=1 pool_max=1 max_inline=0
check "  a transfer to the node itself fails at once" \
	bash -c "! \"$LST\" --json brw write --size 4096 --count 32 --concurrency 4 >$OUT"
check "  all 32 refused within a few seconds (not 32 timeouts)" \
	expect "r['errors'] == 32 and r['ops'] == 0 and r['seconds'] < 5"
check "  the CLI shows the limit" expect "any('more than pool_max=1' in m for m in r['kernel_messages'])"
check "  interfaces on the pair" pair
check "  across two devices (a pool each) it works" \
	run_clean 16 brw write --from $A --peer $B --size 4096 --check full --concurrency 4 --count 16
check "  rmmod, nothing left" clean_unload

# A GET whose answer comes late (the peer's packets delayed past the timeout) gives its
# buffer back only once its key is dead: an RDMA WRITE to the rkey it advertised fails.
# A hostile peer is closed naming the reason, and nothing of it is left.
late() {
	tc qdisc add dev veth_v1 root netem delay 4000ms || return 1
	"$LST" --json brw read --from $A --peer $B --size 4096 --check full --count 1 >$OUT
	local rc=$?
	tc qdisc del dev veth_v1 root
	[ $rc -ne 0 ] && expect "r['errors'] == 1 and r['corrupt'] == 0"
}
# The same write refused by the device without naming where it stopped (fail_function on
# fastreg_ib_post_send, once: bad_wr unset), so the device may hold part of its chain, the
# REG_MR of the command's buffer included: the connection fails naming it, and the command
# gives its buffer back (returns) only once the QP is drained, so no connection of B's is
# left closing then (one is until the next tick's teardown, up to a second later).
stale_write_unposted() {
	local fn=fastreg_ib_post_send rc closing
	dmesg_mark
	ff_arm $fn -12 100 1 || return 1
	ctl fault $B $A stale_get >/dev/null 2>&1
	rc=$?
	closing=$(awk -v b="$B:" '/^iface / { mine = index($3, b) == 1 } mine && / state=closing /' "$DBG/conns")
	ff_disarm $fn 1 || return 1
	[ $rc -ne 0 ] || { echo "the write succeeded with its chain refused"; return 1; }
	[ -z "$closing" ] || { echo "the command returned before the drain: $closing"; return 1; }
	dmesg_has "$B:[0-9]+ (<-|->) $A:[0-9]+: closing: the device took part of a chain"
}
# violation HOW IFACE N REASON OP [OPTION...]: arms misbehaviour HOW on IFACE N times, runs
# brw OP from A to B (one transfer unless OPTIONs say otherwise), and checks that a side
# closed the connection for REASON and that no data was reported good that was not.
violation() {
	local how=$1 on=$2 n=$3 reason=$4 op=$5
	shift 5
	dmesg_mark
	ctl misbehave $on $how $n || return 1
	"$LST" --json brw $op --from $A --peer $B --check full --count 1 "$@" >$OUT
	ctl misbehave $on $how 0
	expect "r['corrupt'] == 0" && dmesg_has "protocol violation: ($reason)"
}
# Registered transfers (max_inline=0): the hooks misbehave in the messages and keys of
# registered transfers.
check "timeout=2: load" load timeout=2 max_payload=2097152 max_inline=0
check "  interfaces on the pair" pair
check "  B records the next GET it serves" ctl misbehave $B record_get 1
check "  a GET whose answer is 4 s late fails" late
sleep 6
check "  an RDMA WRITE to the late GET's rkey is refused: its key died with the error" \
	ctl fault $B $A stale_get
check "  the same write refused by the device midway: the buffer comes back after the drain" \
	stale_write_unposted
# The hostile peers below are closed at once whatever the timeout: a longer one, so that
# no point depends on the machine's speed (a 2 MiB checked GET under load once took longer
# than 2 s and timed out before its bogus invalidation was seen).
check "  rmmod, nothing left" clean_unload
check "timeout=30: load" load timeout=30 max_payload=2097152 max_inline=0
check "  interfaces on the pair" pair
check "  a source sending GET_DONE twice: the connection is closed" \
	violation dup_done $B 1 "second answer for a transfer|answer for an unknown transfer" read --size 4096
check "  a sink advertising one byte less: the source closes the connection" \
	violation short $B 1 "PUT_ACK registrations do not cover the PUT exactly" write --size 65536
check "  a source sending PUT_DONE for an unknown transfer: the sink closes it" \
	violation unknown_done $A 1 "PUT_DONE for an unknown transfer" write --size 65536
check "  a source invalidating another registration of a GET remotely: closed as bogus" \
	violation bogus_inv $B 1 "bogus remote invalidation: not the transfer's rkey" read --size 2M --offset 1
check "  a client starting more transfers than the queue depth: the server closes it" \
	violation flood $A 1000 "more transfers in flight than the queue depth" write --size 4096 --concurrency 32 --count 64
check "  traffic goes on, on new connections" \
	run_clean 16 brw write --from $A --peer $B --size 64k --check full --concurrency 4 --count 16
check "  no kernel errors" no_kernel_errors
check "  rmmod, nothing left" clean_unload

# An inline GET's answer that fails the credit check: the message is refused before its
# data is taken (the copy into the requester's buffer happens only once every check
# passed), the connection closes naming why, and the GET fails rather than succeed with
# data nobody checked.
bad_credits() {
	dmesg_mark
	ctl misbehave $B credits 1 || return 1
	"$LST" --json brw read --from $A --peer $B --size 1000 --check full --count 1 >$OUT
	ctl misbehave $B credits 0
	expect "r['ops'] == 0 and r['errors'] == 1 and r['corrupt'] == 0" &&
		dmesg_has "invalid message: more credits than the queue depth"
}
check "inline (max_inline=4096): load" load timeout=5
check "  interfaces on the pair" pair
check "  a source whose GET_DATA returns 255 credits: refused, closed, the GET fails" bad_credits
check "  rmmod, nothing left" clean_unload

# A sink that cuts its buffer into more registrations than the source's MRs (one page
# each, as a 4 KiB-page node against a 64 KiB-page one): the source's chain has one RDMA
# WRITE per piece, up to the negotiated max_regs, and the send queue is budgeted for that
# (it once counted only the source's own MRs, and such chains failed to post after the
# sink had registered). One the sink cannot carry within max_regs is refused at once.
sq_sized() {
	grep -q "conn -> $B:[0-9]* state=established .* max_regs=16 " "$DBG/conns" &&
		dmesg_has "$A:[0-9]+ -> $B:[0-9]+: connected: queue_depth=8 max_payload=1048576 max_regs=16 sq_depth=155" ||
		{ cat "$DBG/conns"; return 1; }
}
check "split sinks: load" load
check "  A, and B cutting its sinks into one-page registrations" \
	bash -c "echo 'iface add $RXE_DEV0 $A' >$DBG/ctl && echo 'iface add $RXE_DEV1 $B mr_pages=1' >$DBG/ctl"
check "  B shows mr_pages=1" grep -q "^iface $RXE_DEV1 $B:.* mr_pages=1 " "$DBG/conns"
dmesg_mark
check "  PUTs of 60 KiB at offset 4095 (1 source MR, 15 sink registrations), 64 in flight" \
	run_clean 128 brw write --from $A --peer $B --size 61440 --offset 4095 --check full --concurrency 64 --count 128
check "  the send queue is sized for 16 peer registrations a transfer" sq_sized
check "  a PUT needing 257 sink registrations is refused at once (EMSGSIZE)" \
	bash -c "! \"$LST\" --json brw write --from $A --peer $B --size 1M --count 1 >$OUT"
check "  naming the limit" expect "any('more than max_regs=16' in m for m in r['kernel_messages'])"
check "  GETs from the same sink, 64 in flight" \
	run_clean 64 brw read --from $A --peer $B --size 61440 --offset 1 --check full --concurrency 64 --count 64
check "  rmmod, nothing left" clean_unload

# An interface accepts at most max_conns connections: its own one to itself is the first,
# the next peer's is rejected, naming the reason.
check "max_conns=1: load" load max_conns=1
check "  interfaces on the pair" pair
check "  A connects to itself: accepted" run_clean 4 ping --from $A --peer $A --count 4
check "  B's connection to A is rejected (no_resources)" \
	bash -c "! \"$LST\" ping --from $B --peer $A --count 1 >/dev/null 2>&1"
check "  A counted the reject" grep -q "^iface $RXE_DEV0 $A:.* rejects_sent=.*no_resources:[0-9]" "$DBG/conns"
check "  rmmod, nothing left" clean_unload

# Teardown races: an interface removed and added again while a loop connects and pings
# through it, and selftest writers killed in the middle of their runs.
check "load" load timeout=5
check "  interfaces on the pair" pair
# The pinger records each ping's end and status, the flapper each step's status and its
# window: pings must have run against the flapping interface (ended inside the window),
# and some got through.
(
	end=$(($(date +%s) + 20))
	while [ "$(date +%s)" -lt $end ]; do
		timeout 60 "$LST" ping --from $A --peer $B --count 5 >/dev/null 2>&1
		echo "$(date +%s.%N) $?"
	done >/tmp/pings
) &
pinger=$!
(
	echo "start $(date +%s.%N)"
	for _ in $(seq 12); do
		echo "iface del $B" >"$DBG/ctl" 2>/dev/null
		echo "del $?"
		sleep 0.3
		echo "iface add $RXE_DEV1 $B" >"$DBG/ctl" 2>/dev/null
		echo "add $?"
		sleep 0.7
	done
	echo "end $(date +%s.%N)"
) >/tmp/flaps &
flapper=$!
# Each writer is killed once its run is seen registering (the CLI takes seconds to start
# under emulation: a kill after a fixed second once came before the command was written).
killed_mid_run() {
	local i base w
	for i in $(seq 6); do
		base=$(registrations $RXE_DEV0)
		"$LST" brw write --from $A --peer $A --size 256k --concurrency 16 --seconds 30 \
			>/dev/null 2>&1 &
		w=$!
		wait_for registered $((base + 16)) $RXE_DEV0 || { kill -9 $w; return 1; }
		kill -9 $w
		# Killed (137): the writer's run stopped after its transfers in flight.
		wait $w 2>/dev/null
		[ $? -eq 137 ] || { echo "writer $i was not killed mid-run"; return 1; }
	done
}
check "  six selftest writers killed in the middle of their runs" killed_mid_run
wait $pinger $flapper
# flapped_under_pings: B was removed and added 12 times, each accepted, and pings ran
# while it flapped (at least one ended inside its window), some of them good.
flapped_under_pings() {
	local steps inside good
	steps=$(grep -c '^\(del\|add\) 0$' /tmp/flaps)
	read -r inside good < <(awk -v s="$(sed -n 's/^start //p' /tmp/flaps)" -v e="$(sed -n 's/^end //p' /tmp/flaps)" \
		'{ if ($1 >= s && $1 <= e) n++; if ($2 == 0) g++ } END { print n + 0, g + 0 }' /tmp/pings)
	echo "flap steps accepted: $steps of 24; pings ended while B flapped: $inside; good pings: $good of $(wc -l </tmp/pings)"
	[ "$steps" -eq 24 ] && [ "$inside" -ge 1 ] && [ "$good" -ge 1 ] || { cat /tmp/flaps /tmp/pings; return 1; }
}
check "  B removed and added 12 times while pings ran through it, some good" flapped_under_pings
ctl iface add $RXE_DEV1 $B >/dev/null 2>&1
check "  after the races, traffic works" \
	run_clean 16 brw write --from $A --peer $B --size 64k --check full --concurrency 8 --count 16
check "  no kernel errors (hung task, lockdep, oops)" no_kernel_errors
check "  rmmod within 30 s" within 30 unload
check "  nothing left" no_fastreg_resources

# 64 transfers in flight each way, then B stops answering (every packet it sends is
# dropped, as from a node that hung), then A's device goes, then the module: both return
# without a loop of timed sleeps (traced with their stacks, as in 07) and leave nothing.
check "load" load
check "  interfaces on the pair" pair
"$LST" brw write --from $A --peer $B --size 256k --concurrency 64 --seconds 60 >/dev/null 2>&1 &
w1=$!
"$LST" brw read --from $B --peer $A --size 256k --concurrency 64 --seconds 60 >/dev/null 2>&1 &
w2=$!
check "  128 transfers under way (both sides serving)" \
	wait_for both_served 8
check "  B stops answering (netem: all its packets lost)" \
	tc qdisc replace dev veth_v1 root netem loss 100%
check "  kprobes on the kernel's timed sleeps" sleep_probes_on
check "  rdma link delete of A's device, its peer silent, 128 transfers in flight: within 30 s" \
	within 30 rdma link delete $RXE_DEV0
# The CLIs hold /dev/fastreg open, and with it the module (rmmod would be refused as in
# use, tests/vm/18-device.sh): killed, their files close and the test stops, its transfers
# still in flight to the silent peer.
check "  the CLIs killed (SIGKILL): their files closed" eval "kill -KILL $w1 $w2; wait $w1 $w2; true"
check "  rmmod returns within 30 s" within 30 unload
check "  no polling in a teardown, the device's removal or a drain" sleep_seen
sleep_probes_off
tc qdisc del dev veth_v1 root
check "  nothing left" no_fastreg_resources

check "no kernel errors" no_kernel_errors
ktap_end
