#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# Two nodes of different page sizes (x86_64 4 KiB, arm64 64 KiB) moving data with fastreg,
# each node the client in turn: ping; brw write and read over every size x client offset
# that crosses a page on one side and not the other, every byte checked; sinks that split
# into more registrations than their source; the page sizes and byte limits in each side's
# connection log; perftest beside fastreg (a ratio, not an assertion); nodes with different
# queue_depth and max_payload; nothing left after rmmod.
#@ cluster --node x86_64 --node arm64-64k --params "max_payload=4194304" --timeout 2400
#@ interop --node x86_64 --node arm64-64k --rdma siw --params "max_payload=4194304" --timeout 2400
#@ interop --node x86_64 --node arm64-16k --params "max_payload=4194304" --timeout 2400
#@ interop --node arm64-16k --node arm64-64k --params "max_payload=4194304" --timeout 2400
#@ interop --node arm64-64k --node x86_64 --rdma siw --params "max_payload=4194304" --timeout 2400
. "$FASTREG_TOP/tests/cluster/lib.sh"

MAX=4194304
SIZES=(1 4095 4097 65535 65536 65537 1048575 1048576 $MAX)
OFFSETS=0,1,4095,4097,65535,65537
SIZE_LIST=$(IFS=,; echo "${SIZES[*]}")
N_OFFSETS=6
PEER=${NODES[$((1 - ME))]}
SMALL_QD=4 SMALL_PAYLOAD=262144

# Each node is the client once (2 + 2 x sizes x offsets points) and the server once (1
# point); then 3 log, 2 perftest (make interop only: FULL), 7 limits and 3 final points.
ktap_begin $((3 + 2 * ${#SIZES[@]} * N_OFFSETS + 13 + 2 * FULL))
publish page "$PAGE"
barrier start
PEER_PAGE=$(published $((1 - ME)) page)
echo "# node $ME: $FASTREG_KIND, page size $PAGE; peer $PEER: page size $PEER_PAGE; $FASTREG_RDMA"

# Phase N: node N is the client; the other one serves it, counting its sink registrations
# for the split check.
for phase in 0 1; do
	barrier "phase$phase"
	if [ "$ME" = "$phase" ]; then
		check "client: ping the $PEER_PAGE-byte-page peer" run_clean 20 ping --peer "$PEER" --count 20 --concurrency 4
		# One CLI run per direction (it takes seconds to start under emulation, more on
		# arm64), a point per size and offset.
		for op in write read; do
			"$LST" --json brw $op --peer "$PEER" --size "$SIZE_LIST" --offset $OFFSETS \
				--check full --count 1 >"$OUT"
			matrix_points "client: brw $op check=full" "$SIZE_LIST" $OFFSETS 1
		done
		barrier "split$phase"
		# The server counts its registrations before this client's PUTs start.
		barrier "split$phase-go"
		# Offsets at a 4 KiB page but inside a 64 KiB one, and the other way round.
		check "client: brw write $MAX at offsets 0,4096,61440,65536 (the sink splits more)" \
			run_clean 16 brw write --peer "$PEER" --size $MAX --offset 0,4096,61440,65536 \
			--check full --count 4 --concurrency 4
		barrier "split$phase-done"
	else
		barrier "split$phase"
		# Read before the client is let go: read after the barrier that released it, the
		# count once already held the first PUT's registrations (30 of 32 counted).
		regs0=$(pool_count registrations)
		barrier "split$phase-go"
		barrier "split$phase-done"
		regs1=$(pool_count registrations)
		# 16 PUTs of 4 MiB: one registration each on 64 KiB pages (MRs of 65 pages); a
		# 4 KiB-page sink with MRs of 512 pages (rxe; 256 on siw) needs at least 2.
		if [ "$PAGE" -lt "$PEER_PAGE" ]; then
			check "server: $PAGE-byte sink: 16 PUTs of 4 MiB took >= 32 registrations ($((regs1 - regs0)))" \
				test $((regs1 - regs0)) -ge 32
		else
			skip "server: sink registrations of the split PUTs" "this node's pages are not the smaller"
		fi
	fi
done
barrier matrix-done

# Each node was the client in turn: one connection serves both (whichever node made it),
# and it says what was negotiated, in bytes, and both page sizes.
check "log: connected with max_payload=$MAX, page_size=$PAGE peer_page_size=$PEER_PAGE" \
	dmesg_has "$FASTREG_ADDR:[0-9]+ (->|<-) $PEER:[0-9]+: connected: queue_depth=8 max_payload=$MAX max_regs=16 sq_depth=[0-9]+ page_size=$PAGE peer_page_size=$PEER_PAGE"
check "conns: one connection with the peer" \
	test "$(grep -cE "^  conn (->|<-) $PEER:" "$DBG/conns")" = 1
check "conns: it shows the peer's page size" \
	grep -qE "^  conn (->|<-) $PEER:.* peer_page_size=$PEER_PAGE " "$DBG/conns"

# perftest between the nodes in the same run, fastreg's 1 MiB brw beside it: ratios.
pts=("write ib_write_bw" "read ib_read_bw")
PT_PORT=18600
perftest_pair() {
	local tool=$1 port=$PT_PORT args=(-d "$FASTREG_DEV" -R -s 1048576 -n 24 -F)
	[ "$tool" = ib_read_bw ] && args+=(-o 8)
	args+=(-t 8 -p "$port")
	PT_PORT=$((PT_PORT + 1))
	if [ "$ME" = 1 ]; then
		timeout 300 "$tool" "${args[@]}" >/tmp/pt.srv 2>&1 &
		local srv=$! rc
		# The client is let go once the server listens (an emulated node may take seconds).
		within 60 listening "$port" || echo "# $tool: the server not listening after 60 s"
		barrier "pt-$tool"
		wait $srv
		rc=$?
		barrier "pt-$tool-done"
		[ $rc -eq 0 ] || cat /tmp/pt.srv
		return $rc
	fi
	barrier "pt-$tool"
	local out i
	for i in 1 2 3 4 5; do
		out=$(timeout 300 "$tool" "${args[@]}" "$PEER" 2>&1)
		grep -q RDMA_CM_EVENT_REJECTED <<<"$out" || break
		sleep 1
	done
	barrier "pt-$tool-done"
	PT_MIB=$(awk '$1 == 1048576 && $4 ~ /^[0-9.]+$/ { print $4 }' <<<"$out" | tail -n1)
	[ -n "$PT_MIB" ] || { printf '%s\n' "$out"; return 1; }
}
ratio() {
	local op=$1 tool=$2
	perftest_pair "$tool" || return 1
	[ "$ME" = 0 ] || return 0
	lst brw $op --peer "$PEER" --size 1M --count 24 --concurrency 8 && clean_run 24 || return 1
	local fr
	fr=$(jq_ "r['mib_per_s']")
	echo "# ratio: $FASTREG_RDMA, ${FASTREG_KIND} node to its peer, 1 MiB: $tool $PT_MIB MiB/s," \
		"fastreg brw $op $fr MiB/s, fastreg/perftest $(python3 -c "print(f'{$fr / $PT_MIB:.2f}')")" >/tmp/ratio
}
# In make interop only (FULL): about 1.5 minutes.
[ "$FULL" = 1 ] || pts=()
for pt in "${pts[@]}"; do
	set -- $pt
	rm -f /tmp/ratio
	check "perftest $2 and fastreg brw $1 between the nodes, 1 MiB (node 0 reports the ratio)" ratio $1 $2
	[ ! -f /tmp/ratio ] || cat /tmp/ratio
done

# Different limits on the two nodes: node 1 retunes its interface to a smaller queue depth
# and payload; each connection, whichever side opens it, comes up with the minimum, and a
# transfer above it fails at once with EMSGSIZE, not a protocol error.
# refused_above SIZE: a PUT of SIZE fails, every transfer with EMSGSIZE.
refused_above() {
	! "$LST" --json brw write --peer "$PEER" --size "$1" --count 2 >"$OUT" &&
		expect "r['errors'] == 2 and r['peers'][0]['first_error'] == 'Message too long'"
}

barrier limits
if [ "$ME" = 1 ]; then
	check "node 1: retune to queue_depth=$SMALL_QD max_payload=$SMALL_PAYLOAD" \
		ctl iface add "$FASTREG_DEV" "$FASTREG_ADDR" queue_depth=$SMALL_QD max_payload=$SMALL_PAYLOAD
else
	check "node 0: keeps queue_depth=8 max_payload=$MAX" \
		grep -q "^iface $FASTREG_DEV $FASTREG_ADDR:[0-9]* queue_depth=8 max_payload=$MAX " "$DBG/conns"
fi
barrier retuned
dmesg_mark
for phase in 0 1; do
	barrier "limits$phase"
	if [ "$ME" = "$phase" ]; then
		check "limits: a connection comes up (ping)" within 60 lst ping --peer "$PEER" --count 4
		check "limits: it has queue_depth=$SMALL_QD max_payload=$SMALL_PAYLOAD" \
			bash -c "grep -E '^  conn (->|<-) $PEER:[0-9]+ state=established queue_depth=$SMALL_QD max_payload=$SMALL_PAYLOAD ' $DBG/conns"
		check "limits: a PUT above it fails with EMSGSIZE" refused_above $((SMALL_PAYLOAD + 1))
		check "limits: transfers at the limit still work" \
			run_clean 8 brw read --peer "$PEER" --size $SMALL_PAYLOAD --offset 1 --check full --count 8 --concurrency 8
	fi
	barrier "limits$phase-done"
done
check "limits: no protocol violation logged" bash -c "! dmesg | grep -E 'protocol violation|malformed'"
check "limits: the connections are still up" bash -c "grep -qE '^  conn (->|<-) $PEER:[0-9]+ state=established' $DBG/conns"

barrier end
check "no kernel errors" no_kernel_errors
check "rmmod, no fastreg resource left" clean_unload
check "no kernel errors after rmmod" no_kernel_errors
ktap_end
