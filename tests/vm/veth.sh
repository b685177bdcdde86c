# SPDX-License-Identifier: GPL-2.0
# Sourced by VM tests: two soft RDMA devices (of the VM's kind, FASTREG_RDMA: rxe or siw)
# on a veth pair in one namespace, as the kernel's net/rds selftest sets them up
# (accept_local, no reverse-path filter, host routes, permanent neighbours). Sets
# VETH_ADDR0/1 and RXE_DEV0/1 (the names say rxe for either kind).

VETH_ADDR0=10.1.0.1
VETH_ADDR1=10.1.0.2
RXE_DEV0=rxe_v0
RXE_DEV1=rxe_v1
RDMA_KIND=${FASTREG_RDMA:-rxe}

# Host routes, and neighbours (ARP does not resolve them on /32 routes): set again after a
# link goes down, which flushes both.
veth_neigh() {
	ip route replace $VETH_ADDR1/32 dev veth_v0 && ip route replace $VETH_ADDR0/32 dev veth_v1 || return 1
	local mac0 mac1
	mac0=$(cat /sys/class/net/veth_v0/address)
	mac1=$(cat /sys/class/net/veth_v1/address)
	ip neigh replace $VETH_ADDR1 lladdr "$mac1" dev veth_v0 nud permanent &&
		ip neigh replace $VETH_ADDR0 lladdr "$mac0" dev veth_v1 nud permanent
}

veth_up() {
	ip link add veth_v0 type veth peer name veth_v1 || return 1
	ip link set veth_v0 up && ip link set veth_v1 up || return 1
	local d
	for d in veth_v0 veth_v1; do
		sysctl -qw "net.ipv4.conf.$d.accept_local=1" "net.ipv4.conf.$d.rp_filter=0" || return 1
	done
	sysctl -qw net.ipv4.conf.all.rp_filter=0
	ip addr add $VETH_ADDR0/32 dev veth_v0 && ip addr add $VETH_ADDR1/32 dev veth_v1 || return 1
	veth_neigh || return 1
	rdma link add $RXE_DEV0 type "$RDMA_KIND" netdev veth_v0 && rdma link add $RXE_DEV1 type "$RDMA_KIND" netdev veth_v1 || return 1
	sleep 1
}

# The interfaces and connections of the pair, as fastreg lists them.
CONNS=$DBG/conns

# conn_line FROM_ADDR ARROW PEER_ADDR: the connection line of an interface.
conn_line() {
	awk -v me="$1" -v dir="$2" -v peer="$3" '
		$1 == "iface" { cur = $3 }
		$1 == "conn" && index(cur, me ":") == 1 && $2 == dir && index($3, peer ":") == 1 { print }
	' "$CONNS"
}

# pair_conns FROM PEER: how many connections the interface at FROM lists with PEER (made
# by either side, in any state).
pair_conns() {
	awk -v me="$1" -v peer="$2" '
		$1 == "iface" { cur = $3 }
		$1 == "conn" && index(cur, me ":") == 1 && index($3, peer ":") == 1 { n++ }
		END { print n + 0 }' "$CONNS"
}
