#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# Lost nodes and devices. Both nodes run 64 transfers of 1 MiB to the other
# (concurrency 8, check=full) when node 1 is lost, in four ways:
#   kill    its QEMU is SIGKILLed (a power cut); a new VM boots on the same address;
#   freeze  its QEMU is SIGSTOPped for longer than a connect round, then resumed;
#   device  `rdma link delete` of its RDMA device under load, then `rdma link add`;
#   rmmod   fastreg unloaded under its peer's load, then loaded again.
# (freeze and device in make interop only: FULL, tests/cluster/lib.sh.)
# Each time: the transfers fail (none reported good with bad data, every one accounted
# for); the survivor closes the connection within timeout + keepalive of the loss (the
# kernel's "closing" line, +2 s for the 1 s tick) and its run ends within three connect
# rounds (10 s each) more (+5 s to report: the transfers the run starts after a failed
# round's backoff, 100 ms doubling, try a new round; one CI run needed two); it then
# holds nothing for the peer (no QP, every MR
# back in its pool); and traffic both ways is clean once the node is back, for the killed
# node with its new incarnation (a new stamp). Link down and up is not here: on rxe it
# leaves the device's GSI QP in error (tests/vm/11-rxe-flap.sh, transport.rst).
# Each node prints its own plan (a killed node's first incarnation is not counted).
#@ cluster --node x86_64 --node x86_64 --params "timeout=10 keepalive=2" --timeout 1800
#@ interop --node x86_64 --node arm64-64k --params "timeout=10 keepalive=2" --timeout 2400
. "$FASTREG_TOP/tests/cluster/lib.sh"

TIMEOUT=10 KEEPALIVE=2 ROUND=10 N=64
PEER=${NODES[$((1 - ME))]}
FREEZE=$((TIMEOUT + KEEPALIVE + ROUND + 8))

# brw_bg NAME ARGS...: a brw run of 1 MiB transfers to the peer in the background, its JSON
# in /tmp/NAME.json.
brw_bg() {
	local name=$1
	shift
	"$LST" --json brw "$@" --peer "$PEER" --size 1M --check full --concurrency 8 --count $N \
		>/tmp/"$name".json 2>/tmp/"$name".err &
}

# lost_run NAME: the run NAME (brw_bg) had failures but nothing corrupt, and accounts for
# every transfer.
lost_run() {
	was_under_way "$1" || return 1
	OUT=/tmp/$1.json expect "r['corrupt'] == 0 and r['errors'] > 0 and r['ops'] + r['errors'] == $N" ||
		{ cat /tmp/"$1".err; return 1; }
}

# stopped_run NAME: the run NAME failed with nothing corrupt, and stopped early: its own
# interface went away (the transfers not started are not attempted).
stopped_run() {
	was_under_way "$1" || return 1
	OUT=/tmp/$1.json expect "r['status'] == 'failed' and r['corrupt'] == 0 and r['errors'] > 0 and r['ops'] + r['errors'] <= $N" ||
		{ cat /tmp/"$1".err; return 1; }
}

uptime_s() {
	cut -d. -f1 /proc/uptime
}

# closed_within T0 LIMIT: the kernel logged the close of a connection with the peer at
# most LIMIT seconds after T0 (uptime), since the last dmesg mark.
closed_within() {
	local line t
	line=$(dmesg_since_mark | grep -m1 -E "(->|<-) $PEER:[0-9]+: closing: ")
	t=$(sed -n 's/^\[ *\([0-9]*\)\..*/\1/p' <<<"$line")
	[ -n "$t" ] || { echo "no close of a connection with $PEER logged"; dmesg_since_mark | tail; return 1; }
	[ "$t" -ge "$1" ] || { echo "a connection with $PEER closed $(($1 - t)) s before the loss"; return 1; }
	echo "closed $((t - $1)) s after the loss (limit $2 s): ${line#\[*\] }" | tee -a /tmp/figures
	[ $((t - $1)) -le "$2" ]
}

# ended_within NAME T0 LIMIT: the run NAME ended (its JSON written) at most LIMIT seconds
# after T0 (uptime), and not before it (nothing was in flight at the loss).
ended_within() {
	local took
	took=$(($(cat /tmp/"$1".end) - $2))
	if [ "$took" -lt 0 ]; then
		echo "the run ended $((-took)) s before the loss: nothing was in flight" | tee -a /tmp/figures
		return 1
	fi
	echo "the run ended $took s after the loss (limit $3 s)" | tee -a /tmp/figures
	[ "$took" -le "$3" ]
}

# nothing_for_peer: no QP of fastreg's left (all of them were to the peer), every MR back
# in its pool.
nothing_for_peer() {
	local qps
	qps=$(rdma resource show qp | grep -cF '[fastreg]')
	[ "$qps" -eq 0 ] || { echo "$qps fastreg QPs left:"; rdma resource show qp; return 1; }
	all_free
}

# my_stamp / peer_stamp: this node's interface stamp; the peer's, on an established
# connection to it.
my_stamp() {
	sed -n "s/^iface $FASTREG_DEV .* stamp=\(0x[0-9a-f]*\).*/\1/p" "$DBG/conns"
}
peer_stamp() {
	grep -m1 -E "(->|<-) $PEER:.* state=established" "$DBG/conns" |
		sed -n 's/.* peer_stamp=\(0x[0-9a-f]*\).*/\1/p'
}
same() {
	[ -n "$1" ] && [ "$1" = "$2" ] || { echo "'$1' is not '$2'"; return 1; }
}
differ() {
	[ -n "$1" ] && [ -n "$2" ] && [ "$1" != "$2" ] || { echo "'$1' and '$2'"; return 1; }
}

# clean_both_ways: brw write and read to the peer, both clean, while the peer does the
# same; the first is tried for up to 90 s (the peer may still be coming back).
clean_both_ways() {
	within 90 run_clean $N brw write --peer "$PEER" --size 256k --check full --concurrency 8 --count $N &&
		run_clean $N brw read --peer "$PEER" --size 256k --offset 1 --check full --concurrency 8 --count $N
}

# survivor_checks NAME T0: node 0's points after losing node 1 at T0 (uptime) in the
# middle of run NAME: 4 points.
survivor_checks() {
	wait
	check "$1: the transfers failed, none corrupt" lost_run "$1"
	check "$1: the connection closed within timeout + keepalive" closed_within "$2" $((TIMEOUT + KEEPALIVE + 2))
	check "$1: the run ended within three connect rounds more" ended_within "$1" "$2" $((TIMEOUT + KEEPALIVE + 3 * ROUND + 5))
	check "$1: everything held for the peer freed within 30 s" within 30 nothing_for_peer
	sed "s/^/# $1: /" /tmp/figures
	rm -f /tmp/figures
}

# sent: messages this node sent on its established connections to the peer.
sent() {
	local n=0 tx
	for tx in $(grep -E "(->|<-) $PEER:.* state=established" "$DBG/conns" | sed -n 's/.* tx=\([0-9]*\) .*/\1/p'); do
		n=$((n + tx))
	done
	echo $n
}

# busy BASE: this node has sent 16 messages more than BASE to the peer (a run started
# after BASE was taken is under way).
busy() {
	[ "$(sent)" -ge $(($1 + 16)) ]
}

# under_way BASE: this node's own run is in the kernel (fastreg-lst holds the control
# device's lock for the whole of it: flock exits 1 on that conflict) and has sent 16 messages
# more than BASE to the peer (the count alone would also grow by serving the peer's run).
under_way() {
	flock -n /dev/fastreg true
	[ $? -eq 1 ] || { echo "no run of this node's in the kernel"; return 1; }
	busy "$1"
}

# not_under_way NAME: the run NAME did not get under way; lost_run and stopped_run fail it
# (was_under_way) rather than pass a loss that hit nothing.
not_under_way() {
	echo "# $1: not under way after 60 s"
	: >/tmp/"$1".idle
}
was_under_way() {
	[ ! -e /tmp/"$1".idle ] || { echo "the run was not under way at the loss"; return 1; }
}

# loaded_run NAME ARGS...: meets the other node at barrier NAME-go, starts brw_bg NAME ARGS,
# then meets it at barrier NAME once it is under way, so the transfers are in flight when
# node 1 is lost; the run's end time (uptime) goes to /tmp/NAME.end. Both runs start
# together: a node still busy with the phase before (a retried clean_both_ways) must not
# hold the other at barrier NAME until its run has ended.
loaded_run() {
	local name=$1
	shift
	local base
	dmesg_mark
	barrier "$name-go"
	base=$(sent)
	(brw_bg "$name" "$@"; wait; uptime_s >/tmp/"$name".end) &
	within 60 under_way "$base" || not_under_way "$name"
	barrier "$name"
}

# freeze and device run in make interop only (FULL: about 2 minutes): 11 points on node 0,
# 10 on node 1.
if [ "$ME" = 0 ]; then
	ktap_begin $((16 + 11 * FULL))
else
	ktap_begin $((12 + 10 * FULL))
fi
[ "$FASTREG_INCARNATION" -gt 0 ] || publish stamp "$(my_stamp)"

# 1. kill
if [ "$FASTREG_INCARNATION" = 0 ]; then
	barrier start
	old1=$(published 1 stamp) # node 1 publishes its new stamp once it is back
	[ "$ME" = 1 ] || check "ping both ways before the losses" run_clean 8 ping --peer "$PEER" --count 8
	loaded_run kill write
	if [ "$ME" = 1 ]; then
		sleep 900 # killed here
		exit 1
	fi
	t0=$(uptime_s)
	"$FASTREG_NODECTL" kill 1 || echo "# kill failed"
	survivor_checks kill "$t0"
	"$FASTREG_NODECTL" boot 1 || echo "# boot failed"
else
	check "kill: booted again, as incarnation 1, the killed one's output kept" reborn 1
	check "kill: the new incarnation has a new stamp" differ "$(my_stamp)" "$(published 1 stamp)"
fi
barrier reborn
check "kill: traffic both ways clean after the reboot" clean_both_ways
if [ "$ME" = 0 ]; then
	check "kill: connected to the new incarnation (the peer's stamp changed)" \
		differ "$(peer_stamp)" "$old1"
else
	check "kill: connected to the survivor's same incarnation" same "$(peer_stamp)" "$(published 0 stamp)"
fi
publish stamp "$(my_stamp)"

# 2. freeze: long enough for node 0's run to end while node 1 is stopped.
if [ "$FULL" = 1 ]; then
loaded_run freeze read --offset 1
if [ "$ME" = 0 ]; then
	t0=$(uptime_s)
	"$FASTREG_NODECTL" stop 1 || echo "# stop failed"
	sleep $FREEZE
	survivor_checks freeze "$t0"
	"$FASTREG_NODECTL" cont 1 || echo "# cont failed"
else
	wait
	check "freeze: after resuming, its transfers failed, none corrupt" lost_run freeze
	check "freeze: the connection found dead is closed" dmesg_has "(->|<-) $PEER:[0-9]+: closing: "
fi
barrier thawed
check "freeze: traffic both ways clean after resuming" clean_both_ways
check "freeze: same incarnations on both sides" same "$(peer_stamp)" "$(published $((1 - ME)) stamp)"

# 3. device: node 1's RDMA device deleted under load, then added again.
loaded_run device write
if [ "$ME" = 0 ]; then
	t0=$(uptime_s)
	barrier deleted
	survivor_checks device "$t0"
else
	dmesg_mark
	check "device: rdma link delete under load" rdma link delete "$FASTREG_DEV"
	barrier deleted
	wait
	check "device: its own run stopped, failed, none corrupt" stopped_run device
	check "device: fastreg let go of the device" within 30 bash -c "! grep -q '^$FASTREG_DEV:' $DBG/devices"
	check "device: nothing left on the device" no_fastreg_resources
	check "device: rdma link add, fastreg opens its interface again" \
		bash -c "rdma link add $FASTREG_DEV type $FASTREG_RDMA netdev $FASTREG_NIC &&
			. tests/vm/lib.sh && . tests/cluster/lib.sh && within 30 grep -q '^iface $FASTREG_DEV ' $DBG/conns"
fi
barrier device-back
check "device: traffic both ways clean after it came back" clean_both_ways
fi

# 4. rmmod: fastreg unloaded on node 1 under node 0's load (node 1's own run would hold
# the module), then loaded again.
dmesg_mark
barrier rmmod-go
if [ "$ME" = 0 ]; then
	base=$(sent)
	(brw_bg rmmod write; wait; uptime_s >/tmp/rmmod.end) &
	within 60 under_way "$base" || not_under_way rmmod
	barrier rmmod
	t0=$(uptime_s)
	barrier unloaded
	survivor_checks rmmod "$t0"
else
	barrier rmmod
	check "rmmod: under load" unload
	barrier unloaded
	check "rmmod: no fastreg resource left" no_fastreg_resources
	check "rmmod: loaded again" load $FASTREG_PARAMS
fi
barrier reloaded
check "rmmod: traffic both ways clean after reloading" clean_both_ways

barrier end
check "every MR back in the pool" all_free
check "no kernel errors" no_kernel_errors
check "rmmod, no fastreg resource left" clean_unload
check "no kernel errors after rmmod" no_kernel_errors
ktap_end
