#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# Guest side of `make run`: prints the RDMA devices fastreg uses with their fast-registration
# limits, and the module's effective parameters, from /sys/kernel/debug/fastreg/.
set -euo pipefail
dbg=/sys/kernel/debug/fastreg

echo "== soft RoCE"
rdma link show
echo
echo "== devices used by fastreg ($dbg/devices)"
while IFS= read -r line; do
	name=${line%%:*}
	echo "$name"
	for kv in ${line#*: }; do
		printf '    %-28s %s\n' "${kv%%=*}" "${kv#*=}"
	done
done <"$dbg/devices"
echo
echo "== effective parameters ($dbg/params)"
while IFS='=' read -r k v; do
	printf '    %-28s %s\n' "$k" "$v"
done <"$dbg/params"
echo
echo "== fast-registration pools ($dbg/pools)"
sed 's/^/    /' "$dbg/pools"
echo
echo "== loopback: 8 transfers of 1 MiB at offset 1, 4 in flight (write, read back, check)"
if echo "$FASTREG_ADDR 1 1M 8 4" >"$dbg/loopback"; then
	sed 's/^/    /' "$dbg/loopback"
else
	echo "    failed: $(cat "$dbg/loopback")"
fi
sed 's/^/    /' "$dbg/pools"
echo
echo "== transport: two interfaces on rxe devices over a veth pair"
# shellcheck source=../tests/vm/veth.sh
. "$(dirname "$0")/../tests/vm/veth.sh"
ctl=$dbg/ctl
run() {
	printf '    %-48s ' "$*"
	if echo "$*" >"$ctl"; then cat "$ctl"; else echo "failed: $(cat "$ctl")"; fi
}
if veth_up; then
	run iface add $RXE_DEV0 $VETH_ADDR0 queue_depth=16
	run iface add $RXE_DEV1 $VETH_ADDR1 queue_depth=8 max_payload=1M
	run ping $VETH_ADDR0 $VETH_ADDR1 20
	run put $VETH_ADDR0 $VETH_ADDR1 1 1M 4
	run get $VETH_ADDR0 $VETH_ADDR1 4095 1M 4
	sed 's/^/    /' "$dbg/conns"
	sed 's/^/    /' "$dbg/pools"
else
	echo "    veth setup failed"
fi
echo
echo "== kernel log"
dmesg | grep -E '\] (fastreg: |.*fastreg_)' | sed 's/^/    /'
