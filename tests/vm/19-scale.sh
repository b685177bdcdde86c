#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# Many peers on one interface (Documentation/performance.rst, "Many peers"). N client
# interfaces, on a few addresses of the NIC (up to 200 interfaces per address, each on its
# own port: a RoCE device's connections can use only its first 256 GIDs, so not one address
# per interface; and a peer address may hold a quarter of A's max_conns), all dial the
# node's default interface A at once (the debug command `dial`: the interfaces' dial work items connect, no thread
# per attempt). All N connections come up, and each carries a round trip. Then the
# teardown, three ways, each timed: A's interface removed (A's N connections, and their
# peers' ends), the device removed (`rdma link delete`), and `rmmod` with N connections
# up. Nothing is left: no RDMA resource, no message cache, no kernel report, no leak where
# kmemleak runs.
#
# Figures, as "# scale:" lines: the setup rate, the memory per connection (fastreg's own
# count, conn_mem_avg, per end; the node's slab and page counts before and after, per
# connection, both ends being on this node) and the teardown times. `make scale` runs it
# with N=1000 (scripts/scale.sh); make test with N=100.
#
#   tests/vm/19-scale.sh [N]
#@ vm --memory 4G
. "$(dirname "$0")/lib.sh"

N=${1:-100}
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

# none_left: no connection in any state.
none_left() {
	[ -z "$(grep '^  conn ' "$CONNS")" ] || { echo "$(grep -c '^  conn ' "$CONNS") connections left"; return 1; }
}

# until_ok CMD...: polls CMD every 0.5 s until it succeeds, at most LIMIT seconds.
until_ok() {
	local deadline=$((SECONDS + LIMIT)) out
	until out=$("$@" 2>&1); do
		[ $SECONDS -lt $deadline ] || { echo "after $LIMIT s: $out"; return 1; }
		sleep 0.5
	done
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

# gids: the device has the last client address's GID.
gids() {
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

ktap_begin 22
before=$(resource_counts)
check "insmod" load
check "A listens" wait_for listening 7471
check "$ADDRS addresses on $FASTREG_NIC, with their GIDs" add_addresses
check "$N client interfaces" clients

m0=$(mem)
check "$N dials at once: $((2 * N)) connection ends established" dial_all
m1=$(mem)
check "a round trip on each of the $N connections" pings
check "A's connections have their message buffers from a cache of their size" \
	grep -q '^fastreg_msg_' /proc/slabinfo
check "each connection counts its memory" \
	bash -c "[ \"\$(sed -n 's/^totals:.* conn_mem_avg=\([0-9]*\).*/\1/p' $CONNS)\" -gt 0 ]"

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
