#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# Many peers on one interface (Documentation/performance.rst, "Many peers"). N client
# interfaces, on a few addresses of the NIC (up to 200 interfaces per address, each on its
# own port: a RoCE device's connections can use only its first 256 GIDs, so not one address
# per interface; and a peer address may hold a quarter of A's max_conns), all dial the
# node's default interface A at once (the debug command `dial`: the interfaces' dial work items connect, no thread
# per attempt). All N connections come up, and each carries a round trip; then every peer
# PUTs, then GETs, at once, every byte checked: no error, the slowest peer within twice the
# average. Then the
# teardown, three ways, each timed: A's interface removed (A's N connections, and their
# peers' ends), the device removed (`rdma link delete`), and `rmmod` with N connections
# up. Nothing is left: no RDMA resource, no message cache, no kernel report, no leak where
# kmemleak runs.
#
# Figures, as "# scale:" lines: the setup rate, the memory per connection (fastreg's own
# count, conn_mem_avg, per end; the node's slab and page counts before and after, per
# connection, both ends being on this node), the PUT and GET traffic from every peer at
# once (per peer, every byte checked) and the teardown times. `make scale` runs it
# with N=1000; make test with N=100 on rxe and 50 on siw.
#
#   tests/vm/19-scale.sh [N]
#@ vm --memory 4G
#@ vm --rdma siw --memory 4G
. "$(dirname "$0")/lib.sh"

# 100 on rxe, 50 on siw (each of its connections is a TCP connection too).
case $FASTREG_DEV in
siw*) N=${1:-50} ;;
*) N=${1:-100} ;;
esac
A=$FASTREG_ADDR
DEV=$FASTREG_DEV
CONNS=$DBG/conns
# Time allowed for N connections to come up or go down: wide (emulation varies 2x and
# more between machines), and never a figure: the figures are measured, not asserted.
LIMIT=$((120 + N / 2))

# Client interfaces per address.
PER=200
ADDRS=$(((N + PER - 1) / PER))

# addr K: the address of the K-th client interface (K from 1): 10.3.0.X.
addr() {
	echo "10.3.0.$((($1 - 1) / PER + 1))"
}

# end K: the K-th client interface, ADDRESS:PORT (ports from 7472).
end() {
	echo "$(addr "$1"):$((7471 + $1))"
}

now() {
	date +%s.%N
}

# since T0: seconds since T0, 2 decimals.
since() {
	awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.2f", b - a }'
}

# field NAME: a key=value of the conns file's "connections:" or "totals:" lines.
field() {
	sed -n "s/^\(connections\|totals\):.* $1=\([0-9]*\).*/\2/p" "$CONNS"
}

# established_is K: K connections are established on the node (both ends counted).
established_is() {
	local n
	n=$(field established)
	[ "${n:-0}" = "$1" ] || { echo "$n established, not $1"; return 1; }
}

# none_left: no connection in any state (the file read whole: its last line counts them).
none_left() {
	local c
	c=$(cat "$CONNS")
	grep -q '^connections: idle=0 .* established=0 closing=0 closed=0$' <<<"$c" ||
		{ grep '^connections:' <<<"$c" || echo "no connections line"; return 1; }
	! grep -q '^  conn ' <<<"$c" || { echo "$(grep -c '^  conn ' <<<"$c") connections left"; return 1; }
}

# buffers_cached: the connections' message buffers are objects of a fastreg_msg cache of
# their size: at least 2 x (queue_depth + 2) = 20 of 4152 bytes per end, 2 ends each.
buffers_cached() {
	awk -v want=$((40 * N)) '$1 ~ /^fastreg_msg_/ && $4 == 4152 { n += $2 }
		END { if (n < want) { print n " objects of 4152 bytes, not " want; exit 1 } }' /proc/slabinfo
}

# each_counted: every connection end counts the memory of its slots.
each_counted() {
	local bad
	bad=$(grep '^  conn ' "$CONNS" | grep -vc ' mem=[1-9]')
	[ "$bad" = 0 ] || { echo "$bad connection ends with mem=0"; return 1; }
	[ "$(grep -c '^  conn ' "$CONNS")" = $((2 * N)) ]
}

# until_ok CMD...: wait_for with the limit for N connections, polling every 0.5 s (the
# conns file of 1,000 connections is some 600 KB to read).
until_ok() {
	WAIT_S=$LIMIT WAIT_POLL=0.5 wait_for "$@"
}

# add_addresses: the N client addresses on the NIC (one batch), and the device has their
# GIDs (the last one's is enough: they are added in order).
add_addresses() {
	local k
	for k in $(seq "$ADDRS"); do
		echo "addr add 10.3.0.$k/32 dev $FASTREG_NIC"
	done >/tmp/addrs
	ip -batch /tmp/addrs && until_ok gids
}

# gids: the device has the last client address's GID (iWARP has no GID per address).
gids() {
	case $DEV in siw*) return 0 ;; esac
	local last
	last=$(addr "$N" | awk -F. '{ printf "0000:0000:0000:0000:0000:ffff:%02x%02x:%02x%02x", $1, $2, $3, $4 }')
	grep -qx "$last" -r /sys/class/infiniband/"$DEV"/ports/1/gids/
}

# clients: an interface on each client address (debug command `iface add`).
clients() {
	local k
	for k in $(seq "$N"); do
		ctl iface add "$DEV" "$(addr "$k")" port=$((7471 + k)) || return 1
	done
	[ "$(grep -c '^iface ' "$CONNS")" = $((N + 1)) ] || { echo "$(grep -c '^iface ' "$CONNS") interfaces"; return 1; }
}

# dial_all: every client dials A at once; prints the seconds until all N are up.
dial_all() {
	local k t0
	t0=$(now)
	for k in $(seq "$N"); do
		ctl dial "$(end "$k")" "$A:7471" || return 1
	done
	until_ok established_is $((2 * N)) || { why; return 1; }
	since "$t0" >/tmp/setup_s
}

# why: what the connections are doing, and the kernel's last distinct complaints.
why() {
	grep '^connections:' "$CONNS"
	grep '^  closed ' "$CONNS" | sort | uniq -c | sort -rn | head -5
	dmesg | grep fastreg | sed 's/^\[[^]]*\] //; s/10\.3\.[0-9.]*/10.3.X/g; s/:[0-9]\+/:P/g' | sort | uniq -c | sort -rn | head -8
}

# pings: one round trip on every connection.
pings() {
	local k bad=0
	for k in $(seq "$N"); do
		ctl ping "$(end "$k")" "$A:7471" 1 >/dev/null || bad=$((bad + 1))
	done
	[ $bad = 0 ] || { echo "$bad of $N pings failed"; return 1; }
}

# pings_kept: the pings, on the connections that were up (none closed, none added).
pings_kept() {
	pings && established_is $((2 * N)) && ! grep -q '^  closed ' "$CONNS"
}

# Traffic from every peer at once: each client PUTs (then GETs) COUNT transfers of SIZE
# bytes to A, every byte checked, in a process of its own (ctl commands run side by side),
# all started together.
SIZE=16384
COUNT=${SCALE_COUNT:-40}

# traffic put|get: every client's transfers at once; per client its seconds in
# /tmp/traffic/K (a failed command leaves "failed"). Zero errors, and the slowest client
# within 2x the average (each counted on its own: none starved while the others ran).
#
# traffic put|get K: the first K clients only, each with N/K times as many transfers (the
# same bytes in all: the aggregate rate beside all N's, "Many peers" in performance.rst).
traffic() {
	local op=$1 peers=${2:-$N} k count
	count=$((COUNT * N / ${2:-$N}))
	rm -rf /tmp/traffic /tmp/traffic.go && mkdir /tmp/traffic
	for k in $(seq "$peers"); do
		(
			until [ -e /tmp/traffic.go ]; do sleep 0.1; done
			t0=$(date +%s.%N)
			if echo "$op $(end "$k") $A:7471 0 $SIZE $count" >"$DBG/ctl" 2>/dev/null; then
				awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.3f\n", b - a }' >/tmp/traffic/$k
			else
				echo failed >/tmp/traffic/$k
			fi
		) &
	done
	touch /tmp/traffic.go
	wait
	awk -v n="$peers" -v op="$op" -v size=$SIZE -v count="$count" '
		$1 == "failed" { bad++; next }
		{ t[NR] = $1; sum += $1; if ($1 > max) max = $1; if (min == "" || $1 < min) min = $1; ok++ }
		END {
			if (ok + bad != n) { print ok + bad " results, not " n; exit 1 }
			if (bad) { print bad " of " n " clients failed"; exit 1 }
			avg = sum / ok
			printf "# scale: %s from %d peers at once: %d x %d bytes each, checked: per peer min %.2f s avg %.2f s max %.2f s (max/avg %.2f), %.1f MB/s in all\n", op, n, count, size, min, avg, max, max / avg, n * count * size / max / 1e6 > "/dev/stderr"
			if (max > 2 * avg) { print "the slowest peer took " max " s, more than twice the average " avg; exit 1 }
		}' /tmp/traffic/* 2>&3
}

# mem: "free_kib slab_kib vmalloc_kib" now, the caches dropped first.
mem() {
	sync
	echo 3 >/proc/sys/vm/drop_caches
	awk '/^MemFree:/ { f = $2 } /^Slab:/ { s = $2 } /^VmallocUsed:/ { v = $2 } END { print f, s, v }' /proc/meminfo
}

# timed NAME CMD...: runs CMD, then waits until no connection is left; prints the seconds.
timed() {
	local name=$1 t0
	shift
	t0=$(now)
	"$@" || return 1
	until_ok none_left || return 1
	since "$t0" >"/tmp/${name}_s"
}

# del_clients: the client interfaces removed.
del_clients() {
	local k
	for k in $(seq "$N"); do
		ctl iface del "$(addr "$k")" port=$((7471 + k)) || return 1
	done
}

# device_back: the device added again; its default interface listens, its GIDs are there.
device_back() {
	rdma link add "$DEV" type "${DEV%0}" netdev "$FASTREG_NIC" && wait_for listening 7471 && until_ok gids
}

caches_gone() {
	! grep -q '^fastreg_msg' /proc/slabinfo || { grep '^fastreg_msg' /proc/slabinfo; return 1; }
}

ktap_begin $((N > 100 ? 27 : 25))
before=$(resource_counts)
# Both ends of every connection share the device's MR pool here: N transfers in flight
# take 2 N MRs. Beyond 200 peers the pool may grow past the default pool_max (1024).
PARAMS=""
[ "$N" -le 200 ] || PARAMS="pool_max=$((4 * N))"
check "insmod $PARAMS" load $PARAMS
check "A listens" wait_for listening 7471
check "$ADDRS addresses on $FASTREG_NIC, with their GIDs" add_addresses
check "$N client interfaces" clients

m0=$(mem)
check "$N dials at once: $((2 * N)) connection ends established" dial_all
m1=$(mem)
check "a round trip on each of the $N connections, on the connections dialled" pings_kept
check "their message buffers come from a cache of their size" buffers_cached
check "each connection end counts its memory" each_counted
if [ "$N" -gt 100 ]; then
	check "PUTs from 8 peers at once (the same bytes in all), every byte checked" traffic put 8
	check "GETs from 8 peers at once (the same bytes in all), every byte checked" traffic get 8
fi
check "PUTs from all $N peers at once, every byte checked: no error, the slowest within 2x the average" \
	traffic put
check "GETs from all $N peers at once, every byte checked: no error, the slowest within 2x the average" \
	traffic get
check "still $N connections, none closed" \
	bash -c ". tests/vm/lib.sh; grep -q ' established=$((2 * N)) ' $CONNS && ! grep -q '^  closed ' $CONNS"

read -r f0 s0 v0 <<<"$m0"
read -r f1 s1 v1 <<<"$m1"
echo "# scale: n=$N setup_s=$(cat /tmp/setup_s) rate_per_s=$(awk -v n="$N" -v t="$(cat /tmp/setup_s)" 'BEGIN { printf "%.1f", n / t }')"
echo "# scale: conn_mem_avg=$(field conn_mem_avg) (fastreg's count per connection end)"
echo "# scale: per connection, both ends: used_kib=$(((f0 - f1) / N)) slab_kib=$(((s1 - s0) / N)) vmalloc_kib=$(((v1 - v0) / N))"
grep '^fastreg_msg' /proc/slabinfo | awk '{ print "# scale: slabinfo " $1 " objects=" $2 " objsize=" $4 " per_slab=" $5 " pages_per_slab=" $6 }'

# Teardown 1: A's interface removed, its N connections with it; the clients' ends follow.
check "A's interface removed: every connection down" timed iface ctl iface del "$A"
check "the clients' interfaces removed" del_clients

# Teardown 2: the device removed under N connections (its interfaces go with it).
check "A back" bash -c "echo 'iface add $DEV $A' >$DBG/ctl"
check "$N client interfaces again" clients
check "$N dials again" dial_all
echo "# scale: second setup_s=$(cat /tmp/setup_s)"
check "rdma link delete under $N connections: every connection down" \
	timed link rdma link delete "$DEV"
check "the device back, with its default interface and the GIDs" device_back

# Teardown 3: rmmod under N connections.
check "$N client interfaces a third time" clients
check "$N dials a third time" dial_all
t0=$(now)
check "rmmod under $N connections" unload
echo "# scale: teardown iface_s=$(cat /tmp/iface_s) link_s=$(cat /tmp/link_s) rmmod_s=$(since "$t0")"
check "no message cache left" caches_gone
check "no fastreg RDMA resources left" no_fastreg_resources
check "rdma resource counts back to what they were before loading" \
	bash -c "[ \"\$(. tests/vm/lib.sh; resource_counts)\" = '$before' ]"
check "no kernel report (and no leak, where kmemleak is on)" no_kernel_errors
ktap_end
