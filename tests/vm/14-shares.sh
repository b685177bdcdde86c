#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# A fair share for every peer: a hostile peer (tests/peer/forge.c --puts, as root from
# privileged ports of a third address, 10.1.0.4, on B's side of the veth pair) opens as many
# connections to A as its share allows and on each asks for 8 PUTs of 1 MiB that it never
# completes, so that A holds a sink for each it acknowledges. A holds no more for it than
# its share (MRs and bytes, shown on A's iface line), answers its excess busy (PUT_NAK
# -EAGAIN) and logs it once (rate-limited), refuses its connection past the share (reason
# 9), while B's transfers to A and A's own to B are served. Once the peer goes, everything
# it held is back. Tests' buffers are bounded too (test_mem, tests_mem): a test past either
# is refused before it allocates anything.
#@ vm
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/veth.sh"
. "$(dirname "$0")/lst.sh"

A=$VETH_ADDR0 B=$VETH_ADDR1 P=10.1.0.4
FORGE=/tmp/forge
# A small pool and few connections: a peer's share is 4 connections (max_conns/4), 16 MRs
# (a quarter of the 48 the serving side may use, at least max_regs) and 32 MiB. A test may
# have 16 MiB of buffers, all the node's tests 12. A sink is held up to the timeout: 300 s,
# longer than the points below take on a slow machine while P holds its sinks.
PARAMS="timeout=300 pool_max=64 max_conns=16 test_mem=16 tests_mem=12"

build_forge() {
	modprobe rdma_ucm && gcc -O2 -Wall -o $FORGE "$FASTREG_TOP/tests/peer/forge.c" -lrdmacm -libverbs
}

# third_peer: P on B's side, routed to A's.
third_peer() {
	ip addr add $P/32 dev veth_v1 &&
		ip route replace $P/32 dev veth_v0 &&
		ip neigh replace $P lladdr "$(cat /sys/class/net/veth_v1/address)" dev veth_v0 nud permanent
}

# iface_field NAME: a field of A's iface line.
iface_field() {
	sed -n "s/^iface [^ ]* $A:7471 .* $1=\([^ ]*\).*/\1/p" "$CONNS"
}

# peer_line: what A lists P as holding ("conns=N mrs=N bytes=N"), or nothing.
peer_line() {
	awk -v a="$A:7471" -v p="$P" '$1 == "iface" { cur = $3 } cur == a && $1 == "peer" && $2 == p { print $3, $4, $5 }' "$CONNS"
}

# hold_sinks N: N forged connections from P, each asking 8 PUTs of 1 MiB and holding them
# until /tmp/forge.release exists (within the sink timeout), in the background; each one's
# lines in /tmp/puts.K.
hold_sinks() {
	local k
	rm -f /tmp/forge.release
	for k in $(seq "$1"); do
		$FORGE --src $P:$((1001 - k)) --dst $A:7471 --puts 8 --hold 600 \
			--release /tmp/forge.release >/tmp/puts.$k 2>&1 &
	done
}

# all_answered N: the N forgers each had their 8 PUTs answered.
all_answered() {
	local k
	for k in $(seq "$1"); do
		grep -q '^puts acks=' /tmp/puts.$k || return 1
	done
}

# total WHAT: the forgers' acks or naks, summed.
total() {
	cat /tmp/puts.* | sed -n "s/^puts .*$1=\([0-9]*\).*/\1/p" | awk '{ n += $1 } END { print n + 0 }'
}

# at_share: P holds sinks up to its share, no more, and the next would not fit; its
# excess was answered busy; A counted and logged it.
at_share() {
	local share mrs bytes acks naks held
	share=$(iface_field peer_share)
	IFS=/ read -r _ mrs bytes <<<"$share"
	held=$(peer_line)
	acks=$(total acks) naks=$(total naks)
	echo "# share $share; P holds: $held; acks $acks, naks $naks"
	local hm hb full=0
	hm=$(sed -n 's/.*mrs=\([0-9]*\).*/\1/p' <<<"$held")
	hb=$(sed -n 's/.*bytes=\([0-9]*\).*/\1/p' <<<"$held")
	[ -n "$hm" ] && [ -n "$hb" ] && [ "$acks" -gt 0 ] || { cat /tmp/puts.* "$CONNS"; return 1; }
	# The next sink (as many MRs as the others, 1 MiB) would not fit.
	[ $((hm + hm / acks)) -gt "$mrs" ] && full=1
	[ $((hb + (1 << 20))) -gt "$bytes" ] && full=1
	[ "$((acks + naks))" = 32 ] && [ "$naks" -gt 0 ] && [ "$hb" = $((acks << 20)) ] &&
		[ "$hm" -le "$mrs" ] && [ "$hb" -le "$bytes" ] && [ $full = 1 ] ||
		{ cat /tmp/puts.* "$CONNS"; return 1; }
	# Every refusal is busy (-EAGAIN).
	! grep -h '^puts' /tmp/puts.* | grep -v ' naks=0 ' | grep -qv ' status=-11$' ||
		{ cat /tmp/puts.*; return 1; }
}

# counted_logged: A counted the refusals and logged one (its share of MRs or bytes).
counted_logged() {
	[ "$(iface_field over_share)" -ge "$(total naks)" ] &&
		dmesg_has "fastreg: $A:7471: peer $P is at its share of (MRs|bytes of buffers) \(holds 4 connections, " ||
		{ grep "^iface" "$CONNS"; return 1; }
}

# nothing_held: P holds nothing on A any more, and every MR of A's pool is free.
nothing_held() {
	[ -z "$(peer_line)" ] && [ "$(sed -n "s/^$RXE_DEV0:.* live=\([0-9]*\) free=\([0-9]*\).*/\1 \2/p" "$DBG/pools" |
		awk '{ print ($1 == $2) }')" = 1 ] || { cat "$CONNS" "$DBG/pools"; return 1; }
}

# refused_test MIB: a local test from B with MIB buffers of 1 MiB is refused before it
# starts (the CLI fails, nothing ran) and B's log names both limits.
refused_test() {
	dmesg_mark
	if "$LST" --json brw write --from $B --peer $A --size 1M --concurrency "$1" --count 64 >/tmp/big.json 2>&1; then
		cat /tmp/big.json
		return 1
	fi
	dmesg_has "lst: refused a test from this node: its buffers \\($1 MiB\\) pass what the node allows a test \\(16 MiB, test_mem\\) or all its tests \\(12 MiB, tests_mem\\)"
}

ktap_begin 21
check "two $RDMA_KIND devices on a veth pair" veth_up
check "a third peer's address ($P)" third_peer
check "the hostile peer built from source (tests/peer/forge.c)" build_forge
before=$(resource_counts)
check "insmod $PARAMS" load $PARAMS
check "  a peer's share listed: 4 connections, 16 MRs, 32 MiB" [ "$(iface_field peer_share)" = 4/16/33554432 ]
dmesg_mark
hold_sinks 4
check "P opens 4 connections, 8 PUTs of 1 MiB on each, never completed" wait_for all_answered 4
check "  A holds sinks for P up to its share and no more; the excess answered busy (-EAGAIN)" at_share
check "  A counted it and logged it" counted_logged
check "  a fifth connection of P is refused (reason 9, no resources)" \
	bash -c "[ \"\$($FORGE --src $P:990 --dst $A:7471 | head -n1)\" = 'rejected reason=9' ]"
check "  B's PUTs and GETs to A are served meanwhile" \
	bash -c ". $FASTREG_TOP/tests/vm/lib.sh; . $FASTREG_TOP/tests/vm/lst.sh;
	run_clean 16 brw write --from $B --peer $A --size 1M --check full --count 16 &&
	run_clean 16 brw read --from $B --peer $A --size 1M --check full --count 16"
check "  and A's own transfers to B" \
	bash -c ". $FASTREG_TOP/tests/vm/lib.sh; . $FASTREG_TOP/tests/vm/lst.sh;
	run_clean 16 brw write --from $A --peer $B --size 1M --check full --count 16"
check "  P's connections still open (its sinks pinned all along)" bash -c "! cat /tmp/puts.* | grep -q '^held\|^closed'"
# The forgers hold until told (not for a fixed time, which a slow machine outlasted once
# before the point above and failed it).
touch /tmp/forge.release
wait
check "P lets go: its 4 connections were held to the end, none closed by A" bash -c "[ \"\$(cat /tmp/puts.* | grep -c '^held$')\" = 4 ]"
check "  nothing of P left on A: no share, every MR free" wait_for nothing_held
check "a test of 32 MiB of buffers (test_mem=16): refused before it starts" refused_test 32
check "a test of 16 MiB (tests_mem=12, all of the node's tests): refused" refused_test 16
check "  one of 12 MiB runs" run_clean 64 brw write --from $B --peer $A --size 1M --concurrency 12 --count 64
unload_checks "$before"
ktap_end
