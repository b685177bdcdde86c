#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# A hostile user on a node of the fabric: an unprivileged process (setpriv as nobody) that
# binds a peer's address and sends fastreg's connection parameters with a made-up
# incarnation (tests/peer/forge.c, built here from source), to A from B's address and to
# B from A's. fastreg's own connections come from privileged ports; a request from any
# other port is refused (reason 10, unprivileged_port) before anything in it is acted
# upon: the real connection between A and B is untouched and traffic goes on. A burst of
# forged requests costs a bounded number of log lines. With require_privileged_port=0 the
# same forgery is accepted: what that setting opens.
#@ vm
#@ vm --rdma siw
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/veth.sh"

A=$VETH_ADDR0 B=$VETH_ADDR1
FORGE=/tmp/forge
# 10,000 on rxe; 2,000 on siw, where each is a TCP connection and an MPA exchange.
BURST=${FASTREG_HOSTILE_BURST:-$([ "$RDMA_KIND" = siw ] && echo 2000 || echo 10000)}

build_forge() {
	gcc -O2 -Wall -o "$FORGE" "$FASTREG_TOP/tests/peer/forge.c" -lrdmacm -libverbs
}

# as_nobody CMD...: CMD as the unprivileged user nobody, no capabilities.
as_nobody() {
	setpriv --reuid=nobody --regid=nogroup --clear-groups --inh-caps=-all -- "$@"
}

# forged WHO SRC DST WANT: one forged request (WHO: nobody or root) from SRC (IP[:PORT])
# to DST:7471 ends with the line WANT.
forged() {
	local who=$1 src=$2 dst=$3 want=$4 out
	shift 4
	if [ "$who" = nobody ]; then
		out=$(as_nobody "$FORGE" --src "$src" --dst "$dst:7471" "$@")
	else
		out=$("$FORGE" --src "$src" --dst "$dst:7471" "$@")
	fi
	[ "$(head -n1 <<<"$out")" = "$want" ] || { echo "forge said: $out"; return 1; }
}

# privileged_active FROM TO: fastreg's connection FROM -> TO left from a port below 1024, as
# the passive side sees it.
privileged_active() {
	local line port
	line=$(conn_line "$2" "<-" "$1")
	port=$(sed -n 's/^ *conn <- [0-9.]*:\([0-9]*\) .*/\1/p' <<<"$line")
	[ -n "$port" ] && [ "$port" -lt 1024 ] || { echo "B's line: $line"; cat "$CONNS"; return 1; }
}

# untouched: A's connection with B is the one of before (one, established, the same
# source port) and nothing since the mark closed, restarted or failed one.
untouched() {
	[ "$(conn_line $A "->" $B | awk '{ print $3, $4 }')" = "$REAL" ] &&
		[ "$(pair_conns $A $B)" = 1 ] && [ "$(pair_conns $B $A)" = 1 ] &&
		! dmesg_since_mark | grep -E 'restarted|closing|stale|disconnected by the peer' ||
		{ cat "$CONNS"; dmesg_since_mark | tail -n 20; return 1; }
}

# refused_logged ME PEER: ME logged the refusal, naming PEER's address and source port.
refused_logged() {
	dmesg_has "fastreg: $1:7471 <- $2:([0-9]+): rejecting: source port [0-9]+ is not privileged"
}

# rejects IFACE_ADDR N: the interface counted N unprivileged_port rejects.
rejects() {
	grep -q "^iface [^ ]* $1:7471 .* rejects_sent=\([^ ]*,\)\?unprivileged_port:$2\( \|,\)" "$CONNS" ||
		{ grep "^iface" "$CONNS"; return 1; }
}

# burst: BURST forged requests from B's address to A, all refused as unprivileged; the
# kernel log grows (since the mark) by at most the rate limit's lines for the time they
# took: 10 lines and a count of those held back per 5 s, and two windows' more for the
# partial ones at both ends.
burst() {
	local start=$SECONDS out t lines bound
	out=$(as_nobody "$FORGE" --src $B --dst $A:7471 --count "$BURST" --quiet | tail -n1)
	t=$((SECONDS - start))
	lines=$(dmesg_since_mark | grep -cE 'rejecting: source port|held back \(rate limit\)')
	bound=$((11 * (t / 5 + 2)))
	echo "# $BURST forged requests in $t s: $lines log lines (bound $bound); $out" | tee /tmp/burst.txt
	# On siw a reject's private data (its reason) can be lost when the node closes the TCP
	# connection right behind its MPA reply: such a reject reaches the forger as reason 0.
	# The node's own count (the next point) shows it refused every one as unprivileged.
	local reasons="10:$BURST"
	[ "$RDMA_KIND" != siw ] ||
		reasons=$(sed -n 's/.* reasons=\(0:[0-9]*,\)\?\(10:[0-9]*\) .*/\1\2/p' <<<"$out")
	[ "$out" = "summary attempts=$BURST established=0 rejected=$BURST reasons=$reasons errors=0" ] &&
		[ "$lines" -le "$bound" ]
}

ktap_begin 28
check "two $RDMA_KIND devices on a veth pair" veth_up
check "user-space rdma_cm (rdma_ucm) loaded" modprobe rdma_ucm
check "the hostile peer built from source (tests/peer/forge.c)" build_forge
before=$(resource_counts)
check "insmod timeout=5 (require_privileged_port=1 by default)" load timeout=5
check "ping A -> B" ctl ping $A $B 5
check "fastreg's connection left A from a privileged port" privileged_active $A $B
REAL=$(conn_line $A "->" $B | awk '{ print $3, $4 }')
dmesg_mark
check "forged request as nobody from B's address to A: refused, reason 10" \
	forged nobody $B $A "rejected reason=10" --stamp 0x1234 --dst-stamp 0
check "  A logged it, naming B's address and the source port" refused_logged $A $B
check "  A counted it" rejects $A 1
check "  A's connection with B untouched" untouched
check "forged request as nobody from A's address to B: refused, reason 10" \
	forged nobody $A $B "rejected reason=10" --stamp 0x5678 --dst-stamp 0
check "  B logged it, naming A's address and the source port" refused_logged $B $A
check "  B counted it" rejects $B 1
check "  the connection untouched" untouched
check "a privileged source port is refused to nobody by rdma_cm itself" \
	forged nobody $B:1000 $A "bind error Permission denied"
check "root from a privileged port passes the port check (refused as malformed, reason 1)" \
	forged root $B:1000 $A "rejected reason=1" --malformed
dmesg_mark
check "$BURST forged requests as nobody: all refused, a bounded number of log lines" burst
cat /tmp/burst.txt 2>/dev/null
check "  all counted" rejects $A $((BURST + 1))
check "  the connection untouched" untouched
check "the node keeps serving: 50 round trips A -> B, then B -> A" \
	bash -c ". tests/vm/lib.sh; ctl ping $A $B 50 && ctl ping $B $A 50"
unload_checks "$before"
check "insmod require_privileged_port=0 timeout=5" load require_privileged_port=0 timeout=5
check "  the same forgery as nobody is accepted: any local user passes for a peer" \
	forged nobody $B $A "established" --stamp 0x1234 --dst-stamp 0
check "  unload" unload
check "  no fastreg RDMA resources left" no_fastreg_resources
ktap_end
