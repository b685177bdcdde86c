#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# Runs inside the VM started by scripts/vm.sh: sets up the soft RDMA device and fastreg,
# then CMD.
#   vm-guest.sh RDMA PARAMS LOAD KO CMD...
# RDMA is the device kind: rxe (soft RoCE, device rxe0) or siw (soft iWARP, device siw0); KO
# the module built for the kernel the VM runs.
# Exports to CMD: FASTREG_TOP, FASTREG_RDMA (the device kind), FASTREG_DEV (the device),
# FASTREG_NIC (the NIC it sits on), FASTREG_ADDR (its IPv4), FASTREG_KO (the module).
set -uo pipefail
rdma=$1 params=$2 load=$3 ko=$4
shift 4
FASTREG_TOP=$(cd "$(dirname "$0")/.." && pwd)
export FASTREG_TOP FASTREG_RDMA=$rdma FASTREG_DEV=${rdma}0 FASTREG_KO=$ko

. "$FASTREG_TOP/scripts/guest-lib.sh"
# The console had the boot log (scripts/vm.sh keeps it); from here on the tests read the
# kernel's log themselves. Then scripts/vm.sh is told the guest reached its script.
dmesg -n 1 2>/dev/null
[ -z "${FASTREG_UP:-}" ] || : >"$FASTREG_UP"
guest_basics

# The NIC: the first non-loopback device backed by hardware (udev may rename eth0).
nic=""
for d in /sys/class/net/*; do
	[ -e "$d/device" ] || continue
	nic=${d##*/}
	break
done
[ -n "$nic" ] || guest_fail "no network interface found"
ip link set "$nic" up
addr=$(ip -4 -o addr show dev "$nic" | awk '{ split($4, a, "/"); print a[1]; exit }')
if [ -z "$addr" ]; then
	# QEMU's user network answers for 10.0.2.0/24; no DHCP needed.
	addr=10.0.2.15
	ip addr add "$addr/24" dev "$nic"
fi
export FASTREG_NIC=$nic FASTREG_ADDR=$addr

rdma_up "$rdma" "$FASTREG_DEV" "$nic"
[ "$load" = 0 ] || load_fastreg "$FASTREG_KO" "$params"

cd "$FASTREG_TOP" || guest_fail "no $FASTREG_TOP in the guest"
"$@"
