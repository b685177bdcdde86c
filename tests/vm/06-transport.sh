#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# Interfaces and connections between two rxe devices on a veth pair: negotiation down to
# the smaller side's values, IMMEDIATE round trips under credit flow control, clear errors
# for unreachable peers and missing listeners, link down and back up, teardown.
# On soft RoCE and soft iWARP, both in make test.
#@ vm
#@ vm --rdma siw
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/veth.sh"
# fd 3: the suite's own output, for figures from inside a check.
exec 3>&1

CTL=$DBG/ctl

negotiated_minimum() {
	local a b
	a=$(conn_line $VETH_ADDR0 "->" $VETH_ADDR1)
	b=$(conn_line $VETH_ADDR1 "<-" $VETH_ADDR0)
	echo "$a" | grep -q 'state=established queue_depth=4 max_payload=1048576 max_regs=8 ' &&
		echo "$b" | grep -q 'state=established queue_depth=4 max_payload=1048576 max_regs=8 ' &&
		echo "$a" | grep -q 'attempts=[2-4] ' || { cat "$CONNS"; return 1; }
}

rejects_counted() {
	grep -q "^iface $RXE_DEV1 $VETH_ADDR1:.* rejects_sent=.*queue_depth:1" "$CONNS" &&
		grep -q "^iface $RXE_DEV0 $VETH_ADDR0:.* rejects_received=.*queue_depth:1" "$CONNS" ||
		{ cat "$CONNS"; return 1; }
}

credits_balanced() {
	local a
	a=$(conn_line $VETH_ADDR0 "->" $VETH_ADDR1)
	local tx rx credits
	tx=$(echo "$a" | sed -n 's/.* tx=\([0-9]*\).*/\1/p')
	rx=$(echo "$a" | sed -n 's/.* rx=\([0-9]*\).*/\1/p')
	credits=$(echo "$a" | sed -n 's/.* credits=\([0-9]*\).*/\1/p')
	[ "$tx" -ge 220 ] && [ "$rx" -ge 220 ] && [ "$credits" -ge 1 ] && [ "$credits" -le 6 ] ||
		{ echo "$a"; return 1; }
}

# lst_ping FROM PEER: three selftest round trips, all good.
lst_ping() {
	echo "ping from=$1 peers=$2 count=3" >"$DBG/lst" && grep -q "^test=ping .* ops=3 .*errors=0 " "$DBG/lst" ||
		{ echo "ping $1 -> $2:"; cat "$DBG/lst"; return 1; }
}

# conn_with FROM PEER: the connection lines of the interface at FROM with PEER, made by
# either side.
conn_with() {
	conn_line "$1" "->" "$2"
	conn_line "$1" "<-" "$2"
}

# one_conn: A and B each list exactly one connection with the other. A connection that
# lost a race closes and is reaped within the tick (1 s): up to 10 s are given.
one_conn() {
	local i
	for i in $(seq 40); do
		[ "$(pair_conns $VETH_ADDR0 $VETH_ADDR1)" = 1 ] && [ "$(pair_conns $VETH_ADDR1 $VETH_ADDR0)" = 1 ] &&
			return 0
		sleep 0.25
	done
	cat "$CONNS"
	return 1
}

# Two interfaces connecting to each other at once end with one connection, which serves
# both: the side with the larger address refuses the other's request as a race
# (negotiate::wins_race), the other gives up its own attempt for the peer's. A's ping
# through the ctl file and B's through the selftest file (each file runs one command at a
# time) start together; each round begins with no connection between the pair. Each
# direction had its own connection before, so every round would end with two. At least
# 10 rounds, and on until one raced (B's race count grew), at most 40: pings that never
# met would pass every round without showing the race is handled.
# race_count: B's refusals sent as races (its iface line's rejects_sent field only: the
# rejects_received after it may name races too).
race_count() {
	local n
	n=$(sed -n "s/^iface $RXE_DEV1 $VETH_ADDR1:.* rejects_sent=\([^ ]*\) .*/\1/p" "$CONNS" | tr , '\n' |
		sed -n 's/^race://p')
	echo "${n:-0}"
}
race_rounds() {
	local i k pa pb races base
	base=$(race_count)
	for i in $(seq 40); do
		ctl close $VETH_ADDR0 $VETH_ADDR1 >/dev/null 2>&1
		for k in $(seq 40); do
			[ "$(pair_conns $VETH_ADDR0 $VETH_ADDR1)$(pair_conns $VETH_ADDR1 $VETH_ADDR0)" = 00 ] && break
			sleep 0.25
		done
		[ "$k" -lt 40 ] || { echo "round $i: the pair's connection did not go"; cat "$CONNS"; return 1; }
		(echo "ping $VETH_ADDR0 $VETH_ADDR1 3" >"$CTL") &
		pa=$!
		(lst_ping $VETH_ADDR1 $VETH_ADDR0) &
		pb=$!
		wait $pa || { echo "round $i: A's ping failed: $(cat "$CTL")"; dmesg | tail -n 30; return 1; }
		wait $pb || { echo "round $i: B's ping failed"; dmesg | tail -n 30; return 1; }
		one_conn || { echo "round $i: not one connection"; return 1; }
		races=$(($(race_count) - base))
		[ "$i" -lt 10 ] || [ "$races" -eq 0 ] || break
	done
	echo "# rounds that raced (B refused A's request): $races of $i" >&3
	[ "$races" -gt 0 ] || { echo "no round raced: the race was never tried"; cat "$CONNS"; return 1; }
}

# On siw the pair's TCP runs over loopback, which here delivers in 10 ms slots (netem):
# whatever the accepting side sends right after its MPA reply arrives with it. The side
# that accepts a raced connection has a ping waiting, and MPA has the initiator send first:
# siw fails the connect of an initiator that finds data behind the reply (EPROTO, a
# connect error with status -22). Every round failed so before the accepting side waited
# for the connecting side's first message (ConnState::held); without the slots about one
# round in 60.
race_rounds_slotted() {
	local rc
	[ "$RDMA_KIND" = siw ] || { race_rounds; return; }
	tc qdisc add dev lo root netem slot 10ms 10ms || return 1
	race_rounds
	rc=$?
	tc qdisc del dev lo root || return 1
	return $rc
}

fails_within() {
	local secs=$1 start rc
	shift
	start=$(date +%s)
	echo "$*" >"$CTL"
	rc=$?
	[ $rc -ne 0 ] && [ $(($(date +%s) - start)) -le "$secs" ] ||
		{ echo "exit $rc after $(($(date +%s) - start)) s: $(cat "$CTL")"; return 1; }
}

# After a flap that killed connections, rxe's connection manager answers no more requests
# between the two devices: the DREQ sent on the down link put the device's GSI QP in error
# for good (tests/vm/11-rxe-flap.sh reproduces it with perftest alone; see
# Documentation/robustness.rst); recreating the rxe devices clears it.
link_down_fails() {
	ctl ping $VETH_ADDR0 $VETH_ADDR1 1 || return 1
	(sleep 1; ip link set veth_v1 down) &
	dmesg_mark
	if echo "ping $VETH_ADDR0 $VETH_ADDR1 100000" >"$CTL"; then
		echo "pings went on with the link down"
		return 1
	fi
	wait
	ip link set veth_v1 up
	veth_neigh || return 1
	# Whichever comes first names the reason: the send that fails after its retries, or the
	# ping that times out (which fails the connection: the peer still counts it).
	dmesg_has "$VETH_ADDR0:[0-9]+ (->|<-) $VETH_ADDR1:[0-9]+: closing: ((send|receive) failed|transfer timed out|a transfer gave up waiting for its peer)" ||
		{ cat "$CONNS"; return 1; }
}

# The rxe devices recreated after the flap: fastreg picks them up (hotplug), opens their
# default interfaces again, and traffic resumes on a new connection.
recreate_and_resume() {
	rdma link delete $RXE_DEV0 && rdma link delete $RXE_DEV1 || return 1
	rdma link add $RXE_DEV0 type "$RDMA_KIND" netdev veth_v0 &&
		rdma link add $RXE_DEV1 type "$RDMA_KIND" netdev veth_v1 || return 1
	local i
	ctl iface add $RXE_DEV0 $VETH_ADDR0 queue_depth=16 max_payload=4M max_regs=16 || return 1
	for i in $(seq 20); do
		grep -q "^iface $RXE_DEV1 " "$CONNS" && grep -q "^iface $RXE_DEV0 " "$CONNS" && break
		sleep 0.5
	done
	ctl ping $VETH_ADDR0 $VETH_ADDR1 5 && ctl put $VETH_ADDR0 $VETH_ADDR1 1 1M 2 &&
		ctl get $VETH_ADDR0 $VETH_ADDR1 4095 1M 2
}

# With keepalive=1: idle connections exchange NOOPs; when the link goes down both sides find
# out (the keepalive fails) and the periodic work tears the connections down.
keepalive_noops() {
	ctl ping $VETH_ADDR0 $VETH_ADDR1 1 && wait_for noops_both_ways || { cat "$CONNS"; return 1; }
}
noops_both_ways() {
	conn_line $VETH_ADDR0 "->" $VETH_ADDR1 | grep -Eq ' noops_tx=[1-9][0-9]* noops_rx=[1-9]' &&
		conn_line $VETH_ADDR1 "<-" $VETH_ADDR0 | grep -Eq ' noops_tx=[1-9][0-9]* noops_rx=[1-9]'
}
dead_peers_reaped() {
	local i
	ctl iface add $RXE_DEV0 $VETH_ADDR0 queue_depth=16 max_payload=4M max_regs=16 || return 1
	for i in $(seq 20); do
		grep -q 'established=0 closing=0 closed=0' "$CONNS" && return 0
		sleep 1
	done
	cat "$CONNS"
	return 1
}

# A peer that restarts: interface A goes without a word reaching B (both directions
# blackholed by netem, which leaves the links up), and comes back with a new incarnation.
# When it connects, B closes what it had with the old A at once, instead of leaving
# transfers to time out on it; B's next ping gets a new connection. (One connection serves
# both directions: B's ping went over the one A made.)
peer_restart_replaces() {
	ctl ping $VETH_ADDR0 $VETH_ADDR1 2 && ctl ping $VETH_ADDR1 $VETH_ADDR0 2 || return 1
	local old rc i
	old=$(sed -n "s/^iface $RXE_DEV0 $VETH_ADDR0:[0-9]* .* stamp=\(0x[0-9a-f]*\) .*/\1/p" "$CONNS")
	[ -n "$old" ] || { cat "$CONNS"; return 1; }
	tc qdisc add dev veth_v0 root netem loss 100% && tc qdisc add dev veth_v1 root netem loss 100% ||
		return 1
	ctl iface del $VETH_ADDR0
	rc=$?
	tc qdisc del dev veth_v0 root && tc qdisc del dev veth_v1 root && [ $rc = 0 ] || return 1
	conn_with $VETH_ADDR1 $VETH_ADDR0 | grep -q "state=established .* peer_stamp=$old " || {
		echo "B does not hold a connection to the old A"
		cat "$CONNS"
		return 1
	}
	dmesg_mark
	ctl iface add $RXE_DEV0 $VETH_ADDR0 queue_depth=16 max_payload=4M max_regs=16 &&
		ctl ping $VETH_ADDR0 $VETH_ADDR1 2 || return 1
	dmesg_has "$VETH_ADDR1:[0-9]+ (<-|->) $VETH_ADDR0:[0-9]+: peer $VETH_ADDR0:7471 restarted \(incarnation 0x[0-9a-f]+, was $old\)" &&
		dmesg_has "$VETH_ADDR1:[0-9]+ (<-|->) $VETH_ADDR0:[0-9]+: closing: stale incarnation: the peer restarted" ||
		return 1
	# Within the timeout (5 s): the stale connection would make this time out.
	ctl ping $VETH_ADDR1 $VETH_ADDR0 2 || return 1
	for i in $(seq 10); do
		grep -q "peer_stamp=$old " "$CONNS" || return 0
		sleep 0.5
	done
	echo "connections to the old A remain"
	cat "$CONNS"
	return 1
}

# bulk OP OFFSET LENGTH: one checked transfer A -> B (put) or B -> A into A (get).
bulk() {
	ctl "$1" $VETH_ADDR0 $VETH_ADDR1 "$2" "$3"
}

bulk_counters() {
	local a b
	a=$(conn_with $VETH_ADDR0 $VETH_ADDR1)
	b=$(conn_with $VETH_ADDR1 $VETH_ADDR0)
	echo "$b" | grep -Eq ' served=[1-9][0-9]* corrupt=0 remote_inv=[1-9]' &&
		echo "$a" | grep -Eq ' corrupt=0 remote_inv=[1-9]' ||
		{ cat "$CONNS"; return 1; }
	# Every registration was invalidated, locally or by the peer; nothing failed.
	local p reg loc rem err
	for p in $RXE_DEV0 $RXE_DEV1; do
		read -r reg loc rem err < <(sed -n "s/^$p:.* registrations=\([0-9]*\) local_invalidations=\([0-9]*\) remote_invalidations=\([0-9]*\) errors=\([0-9]*\).*/\1 \2 \3 \4/p" "$DBG/pools")
		[ "$reg" -gt 0 ] && [ "$reg" = $((loc + rem)) ] && [ "$err" = 0 ] || { cat "$DBG/pools"; return 1; }
	done
}

# On iWARP the connecting side speaks first, with a NOOP once established (transport.rst,
# "Who speaks first"): the accepting side posts nothing until it heard from it. A NOOP
# that the device refuses (fail_function on fastreg_post_refused, -ENOMEM, once: the first
# send of A's new connection is refused whole, as a full send queue would) fails the
# connection, naming it, instead of leaving both sides waiting; with the fault gone the
# next connection opens.
open_noop_fails() {
	local fn=fastreg_post_refused
	ctl close $VETH_ADDR0 $VETH_ADDR1 >/dev/null 2>&1
	wait_for bash -c "! grep -q '^  conn ' $CONNS" || return 1
	dmesg_mark
	ff_arm $fn -12 100 1 || return 1
	ctl ping $VETH_ADDR0 $VETH_ADDR1 1 >/dev/null 2>&1
	ff_disarm $fn 1 || return 1
	dmesg_has "$VETH_ADDR0:7471 -> $VETH_ADDR1:7471: .*cannot open the connection" &&
		wait_for ctl ping $VETH_ADDR0 $VETH_ADDR1 1
}

sizes=(1 4095 4096 4097 65536 1048575 1048576)
offsets=(0 1 4095)

ktap_begin $((19 + 2 * ${#sizes[@]} * ${#offsets[@]} + 1 + 20))
check "two rxe devices on a veth pair" veth_up
check "insmod timeout=5" load timeout=5
default_ifaces() {
	grep -q "^iface $RXE_DEV0 $VETH_ADDR0:7471 queue_depth=8 max_payload=1048576 max_regs=16 " "$CONNS" &&
		grep -q "^iface $RXE_DEV1 $VETH_ADDR1:7471 queue_depth=8 " "$CONNS" || { cat "$CONNS"; return 1; }
}
check "a default interface on each device with an IPv4 address" default_ifaces
check "interface A retuned: queue_depth=16 max_payload=4M max_regs=16" \
	ctl iface add $RXE_DEV0 $VETH_ADDR0 queue_depth=16 max_payload=4M max_regs=16
check "interface B removed" ctl iface del $VETH_ADDR1
check "no listener at the peer: refused at once" fails_within 5 ping $VETH_ADDR0 $VETH_ADDR1 1
check "interface B: queue_depth=4 max_payload=1M max_regs=8" \
	ctl iface add $RXE_DEV1 $VETH_ADDR1 queue_depth=4 max_payload=1M max_regs=8
check "tunables shown per interface" bash -c "grep -q '^iface $RXE_DEV0 $VETH_ADDR0:7471 queue_depth=16 max_payload=4194304 max_regs=16 ' $CONNS && grep -q '^iface $RXE_DEV1 $VETH_ADDR1:7471 queue_depth=4 max_payload=1048576 max_regs=8 ' $CONNS"
check "ping A -> B" ctl ping $VETH_ADDR0 $VETH_ADDR1 20
check "the connection has the smaller side's values on both ends" negotiated_minimum
check "rejects counted by reason on both sides" rejects_counted
check "ping B -> A: on the same connection (one serves both directions)" ctl ping $VETH_ADDR1 $VETH_ADDR0 20
check "  one connection between A and B, on both sides" one_conn
check "200 more round trips at queue depth 4: credits flow back" ctl ping $VETH_ADDR0 $VETH_ADDR1 200
check "credits stay within the queue depth" credits_balanced
check "A and B connecting to each other at once (10 to 40 rounds, until one raced): both pings succeed, one connection" race_rounds_slotted
for len in "${sizes[@]}"; do
	for off in "${offsets[@]}"; do
		check "PUT $len bytes at offset $off, checked at the sink" bulk put "$off" "$len"
		check "GET $len bytes at offset $off, checked here" bulk get "$off" "$len"
	done
done
check "bulk: no corruption, sinks remotely invalidated, every registration dead" bulk_counters
check "unreachable peer: clear error within the timeout" fails_within 20 ping $VETH_ADDR0 10.1.0.99 1
# Test hooks: a corrupted request makes the peer close the connection with the reason;
# after a PUT, an RDMA WRITE with the sink's old rkey fails.
fault_refused() {
	dmesg_mark
	ctl fault $VETH_ADDR0 $VETH_ADDR1 "$1" && dmesg_has "$VETH_ADDR1:[0-9]+ (<-|->) $VETH_ADDR0:[0-9]+: invalid message: $2"
}
# The sink refuses the dead key: its QP raises an access error event (rxe and siw both,
# C9-222.1), which fastreg logs naming the sink's device; nothing else raises it. The
# writer sees it as it can: RoCE acknowledges an RDMA WRITE, so the write fails with a
# remote access error, unless the sink's disconnect (its QP went to the error state right
# after its NAK) reaches this side first and flushes it; on iWARP the write completes once
# TCP has it and the round trip after it fails.
stale_rkey_refused() {
	dmesg_mark
	ctl fault $VETH_ADDR0 $VETH_ADDR1 stale_rkey || return 1
	dmesg_has "$RXE_DEV1: QP 0x[0-9a-f]+: access error: a peer used a key this side does not grant" &&
		dmesg_has "the sink's old rkey 0x[0-9a-f]+ was refused \((remote access error|the peer ended the connection)\)|the write with the sink's old rkey 0x[0-9a-f]+ was flushed before the peer's answer"
}
check "corrupted header (magic): the peer closes the connection, naming the reason" fault_refused magic "bad magic"
check "oversized registration count: refused" fault_refused regs "size or registration count beyond"
check "wrong length: refused" fault_refused length "length field does not match"
check "after a PUT, an RDMA WRITE with the sink's old rkey fails (the key died)" stale_rkey_refused
check "traffic resumes on a new connection after the faults" bulk put 1 65536
if [ "$RDMA_KIND" = siw ]; then
	check "iWARP: an opening NOOP that cannot be posted fails the connection, naming it; the next opens" \
		open_noop_fails
else
	skip "iWARP: an opening NOOP that cannot be posted fails the connection, naming it; the next opens" \
		"InfiniBand and RoCE connections open with no NOOP"
fi
# siw's TCP between the two local addresses goes over loopback, not the veth (the test
# kernel has no policy routing to send it out), so netem and link flaps on the veth do not
# reach it: what needs them is skipped on siw.
ON_LOOPBACK="siw between two local addresses runs over loopback: the veth cannot cut it"
if [ "$RDMA_KIND" = siw ]; then
	skip "a restarted peer: its old connections are closed when it connects again" "$ON_LOOPBACK"
else
	check "a restarted peer: its old connections are closed when it connects again" peer_restart_replaces
fi

# The peer retuned smaller and larger in turn: each next connection is rejected (or
# accepted) and retried with the peer's limits, and pings on it succeed. On siw the
# reject's flush completion comes before the reject: a completion handler disconnecting
# under the connection's lock, while iw_cm waited for the reject's handler (which needs
# that lock), once deadlocked both; and a flush taken as the failure lost the retry.
# A retune closes B's connections, and A hears of it when B's disconnect arrives: a ping
# sent before that goes on the closing connection and fails (ECONNABORTED), as any transfer
# racing its peer's removal does. So each round waits until A has heard (one connection
# now serves both pings, and B's teardown of it alone no longer gives A that time).
a_heard() {
	local k
	for k in $(seq 40); do
		conn_with $VETH_ADDR0 $VETH_ADDR1 | grep -q "state=established" || return 0
		sleep 0.25
	done
	echo "A still has an established connection to the retuned B"
	cat "$CONNS"
	return 1
}
retune_rounds() {
	local i
	ctl iface add $RXE_DEV0 $VETH_ADDR0 queue_depth=16 max_payload=4M max_regs=16 || return 1
	for i in $(seq 20); do
		# Through the selftest (the module's workqueue), as fastreg-lst runs it, both ways.
		lst_ping $VETH_ADDR0 $VETH_ADDR1 && lst_ping $VETH_ADDR1 $VETH_ADDR0 || return 1
		if [ $((i % 2)) = 1 ]; then
			ctl iface add $RXE_DEV1 $VETH_ADDR1 queue_depth=4 max_payload=256k max_regs=8
		else
			ctl iface add $RXE_DEV1 $VETH_ADDR1 queue_depth=16 max_payload=4M max_regs=16
		fi || return 1
		a_heard || return 1
		lst_ping $VETH_ADDR0 $VETH_ADDR1 || { echo "round $i: after the retune"; dmesg | tail -n 40; return 1; }
	done
}
check "the peer retuned 20 times, smaller and larger in turn: every ping after succeeds" \
	no_hang 180 retune_rounds

# GETs and PUTs of 64 KiB to two peers at once (the other device and the node itself), 8
# at a time to each, every byte checked: none corrupt.
concurrent_bulk() {
	local op
	for op in read write; do
		echo "brw $op from=$VETH_ADDR0 peers=$VETH_ADDR1,$VETH_ADDR0 size=65536 check=full concurrency=8 count=400" \
			>"$DBG/lst"
		grep -q "^test=$op .* ops=400 .*errors=0 corrupt=0 " "$DBG/lst" ||
			{ echo "brw $op:"; cat "$DBG/lst"; return 1; }
	done
}
check "400 GETs and 400 PUTs of 64 KiB to two peers at once, 8 in flight to each: none corrupt" \
	no_hang 300 concurrent_bulk

# The same over a lossy link: netem drops 2% of the packets and delays them 1 ms on both
# ends of the pair and on lo (which carries the pair's traffic inside the namespace).
# siw retransmits TCP segments from the pages of the work request, and sends an unsignaled
# WRITE zero-copy: a source returned to its pool when the reply after it completes can be
# sent again with another transfer's data. fastreg before ccca2ba posted its WRITEs
# unsignaled: 63 of 200 GETs here were corrupt (the GETs 07 on siw once saw). Soft RoCE
# gives up on a packet lost on all of its 8 tries (retry_count 7 is the maximum), so there
# transfers may fail, with their connection; none may be corrupt, and none may go missing.
lossy_links() {
	local d
	for d in lo veth_v0 veth_v1; do
		tc qdisc "$1" dev $d root ${2:+netem $2} || return 1
	done
}
lossy_bulk() {
	local op line rc r=0
	modprobe sch_netem && lossy_links add "loss 2% delay 1ms" || { lossy_links del; return 1; }
	for op in read write; do
		(echo "brw $op from=$VETH_ADDR0 peers=$VETH_ADDR1,$VETH_ADDR0 size=65536 check=full concurrency=8 count=200" \
			>"$DBG/lst") 2>/dev/null
		rc=$?
		line=$(head -1 "$DBG/lst")
		echo "# $op over the lossy link (status $rc): $(grep -o 'ops=[0-9]* .*corrupt=[0-9]*' <<<"$line")" >&3
		if [ "$RDMA_KIND" = siw ]; then
			[ $rc -eq 0 ] && grep -q "^test=$op .* ops=200 .*errors=0 corrupt=0 " <<<"$line" || r=1
		else
			# This run's line (not the one before), none corrupt, none missing, most good
			# (a transfer fails only with its connection), and the run's status says
			# whether any failed.
			python3 - "$op" "$rc" "$line" <<-'PY' || r=1
				import re, sys
				op, rc, line = sys.argv[1], int(sys.argv[2]), sys.argv[3]
				v = dict(re.findall(r"(\w+)=(\S+)", line))
				ops, errs = int(v["ops"]), int(v["errors"])
				sys.exit(not (v["test"] == op and int(v["corrupt"]) == 0 and ops + errs == 200
				              and ops >= 100 and (rc == 0) == (errs == 0)))
			PY
		fi
	done
	lossy_links del || r=1
	return $r
}
check "the same, 200 of each, over links that drop 2% of the packets: none corrupt" \
	no_hang 300 lossy_bulk
check "  and on the mended links, 40 GETs to each peer without an error" \
	bash -c "echo 'brw read from=$VETH_ADDR0 peers=$VETH_ADDR1,$VETH_ADDR0 size=65536 check=full concurrency=4 count=80' >$DBG/lst && grep -q '^test=read .* ops=80 .*errors=0 corrupt=0 ' $DBG/lst || { cat $DBG/lst; false; }"

# rmmod while transfers run, three times: no oops, nothing left. On siw a chain posted
# on a QP whose TCP stream is closing can lose its completion (see Endpoint::wait_flushed):
# the module that then destroyed the CQs and forgot the chain left a PD and MRs behind
# after rmmod in 3 of 9 runs of this suite, `rdma resource show` faulted on their names
# (the check passed, the listing being empty), and deleting the device hung.
rmmod_during_traffic() {
	local round bg tries base
	for round in 1 2 3; do
		if ! loaded; then
			# As the first round finds them: both interfaces retuned larger.
			load timeout=5 && wait_for grep -q "^iface $RXE_DEV1 " "$CONNS" &&
				ctl iface add $RXE_DEV0 $VETH_ADDR0 queue_depth=16 max_payload=4M max_regs=16 &&
				ctl iface add $RXE_DEV1 $VETH_ADDR1 queue_depth=16 max_payload=4M max_regs=16 || return 1
		fi
		base=$(registrations $RXE_DEV0 $RXE_DEV1)
		(echo "put $VETH_ADDR0 $VETH_ADDR1 0 1M 100000" >"$CTL") 2>/dev/null &
		bg=$!
		# Unloaded under traffic: once registrations are under way, not after a guess.
		wait_for registered $((base + 8)) $RXE_DEV0 $RXE_DEV1 ||
			{ echo "round $round: no transfer under way"; return 1; }
		tries=0
		until rmmod fastreg 2>/dev/null; do
			tries=$((tries + 1))
			[ $tries -lt 50 ] || { echo "round $round: rmmod kept failing"; return 1; }
			sleep 0.2
		done
		wait $bg
		! loaded && no_fastreg_resources || { echo "round $round"; return 1; }
	done
}

check "rmmod during bulk transfers, three times: nothing left each time" rmmod_during_traffic
check "no oops or warning so far" no_kernel_errors
check "reload with timeout=5 keepalive=1: default interfaces again" bash -c "insmod $KO timeout=5 keepalive=1 && grep -q '^iface $RXE_DEV1 ' $CONNS"
check "idle connections exchange keepalive NOOPs" keepalive_noops
if [ "$RDMA_KIND" = siw ]; then
	skip "link down during pings: they fail and the connection closes with the reason" "$ON_LOOPBACK"
	skip "both sides' failed connections are torn down by the periodic work" "$ON_LOOPBACK"
else
	check "link down during pings: they fail and the connection closes with the reason" link_down_fails
	check "both sides' failed connections are torn down by the periodic work" dead_peers_reaped
fi
check "rxe devices recreated after the flap: interfaces back, ping, PUT and GET resume" \
	no_hang 120 recreate_and_resume
check "interfaces removed" bash -c "echo 'iface del $VETH_ADDR0' >$CTL && echo 'iface del $VETH_ADDR1' >$CTL && ! grep -q '^iface rxe_v' $CONNS"
check "rmmod" unload
check "nothing left at the end" no_fastreg_resources
check "no kernel warnings" no_kernel_errors
ktap_end
