#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# Runs inside the VM started by scripts/vm.sh: sets up soft RoCE and fastreg, then CMD.
#   vm-guest.sh PARAMS LOAD CMD...
# Exports to CMD: FASTREG_TOP, FASTREG_NIC (the NIC rxe0 sits on), FASTREG_ADDR (its IPv4).
set -uo pipefail
params=$1 load=$2
shift 2
FASTREG_TOP=$(cd "$(dirname "$0")/.." && pwd)
export FASTREG_TOP

fail() {
	echo "vm-guest: $*" >&2
	exit 1
}

mountpoint -q /sys/kernel/debug || mount -t debugfs none /sys/kernel/debug
# A task blocked uninterruptibly this long is reported (the VM tests fail on the report):
# no teardown or unload may hang, however the transport got there.
[ ! -w /proc/sys/kernel/hung_task_timeout_secs ] || echo 15 >/proc/sys/kernel/hung_task_timeout_secs

# The NIC: the first non-loopback device backed by hardware (udev may rename eth0).
nic=""
for d in /sys/class/net/*; do
	[ -e "$d/device" ] || continue
	nic=${d##*/}
	break
done
[ -n "$nic" ] || fail "no network interface found"
ip link set "$nic" up
addr=$(ip -4 -o addr show dev "$nic" | awk '{ split($4, a, "/"); print a[1]; exit }')
if [ -z "$addr" ]; then
	# QEMU's user network answers for 10.0.2.0/24; no DHCP needed.
	addr=10.0.2.15
	ip addr add "$addr/24" dev "$nic"
fi
export FASTREG_NIC=$nic FASTREG_ADDR=$addr

# fastreg.ko needs ib_core and rdma_cm; insmod does not load dependencies.
modprobe rdma_rxe && modprobe rdma_cm || fail "modprobe rdma_rxe rdma_cm failed"
rdma link add rxe0 type rxe netdev "$nic" || fail "rdma link add rxe0 failed"
for _ in $(seq 50); do
	rdma link show rxe0/1 2>/dev/null | grep -q 'state ACTIVE' && break
	sleep 0.1
done
rdma link show rxe0/1 | grep -q 'state ACTIVE' || fail "rxe0 did not become ACTIVE"

if [ "$load" = 1 ]; then
	# shellcheck disable=SC2086 # PARAMS is a list of k=v words.
	insmod "$FASTREG_TOP/fastreg.ko" $params || {
		dmesg | grep -i fastreg | tail -n 5 >&2
		fail "insmod fastreg.ko $params failed"
	}
fi

cd "$FASTREG_TOP" || fail "no $FASTREG_TOP in the guest"
"$@"
