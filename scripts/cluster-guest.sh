#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# Runs on every node of scripts/cluster.sh (x86_64 nodes under virtme-ng, arm64 nodes from
# scripts/node-init.sh): brings up the node's segment NIC at its fixed address, the RDMA
# device on it and fastreg, then runs the cluster's command with its output kept in the run
# directory (nodeN.out, nodeN.rc), where scripts/cluster.sh reads it. A node booted again
# (FASTREG_NODECTL boot) runs it again, with FASTREG_INCARNATION one higher.
#   cluster-guest.sh NODE RUNDIR
set -uo pipefail
node=$1 run=$2
FASTREG_TOP=$(cd "$(dirname "$0")/.." && pwd)
. "$FASTREG_TOP/scripts/guest-lib.sh"
# shellcheck source=/dev/null # written by scripts/cluster.sh
. "$run/env" || guest_fail "no $run/env"

main() {
	# The console has the boot log (scripts/cluster.sh); from here on the tests read the
	# kernel's log themselves, and a serial console would slow every message down.
	dmesg -n 1 2>/dev/null
	# scripts/cluster.sh: this boot reached its script.
	: >"$run/node$node.up"
	guest_basics
	local addrs=($FASTREG_NODES) mac nic="" d
	mac=$(printf '52:54:00:fa:00:%02x' "$node")
	for d in /sys/class/net/*; do
		[ "$(cat "$d/address" 2>/dev/null)" = "$mac" ] && { nic=${d##*/}; break; }
	done
	[ -n "$nic" ] || guest_fail "node $node: no NIC with MAC $mac"
	ip link set "$nic" up && ip addr add "${addrs[$node]}/24" dev "$nic" ||
		guest_fail "node $node: cannot set ${addrs[$node]} on $nic"
	rdma_up "$FASTREG_RDMA" "${FASTREG_RDMA}0" "$nic"
	export FASTREG_TOP FASTREG_NODE=$node FASTREG_NODES FASTREG_RUN=$run FASTREG_TIMEOUT FASTREG_PARAMS \
		FASTREG_BARRIER="$FASTREG_TOP/scripts/cluster-barrier.sh" FASTREG_RDMA \
		FASTREG_DEV=${FASTREG_RDMA}0 FASTREG_NIC=$nic FASTREG_ADDR=${addrs[$node]} \
		FASTREG_KIND=${FASTREG_KINDS[$node]} FASTREG_NODECTL="$FASTREG_TOP/scripts/cluster-nodectl.sh" \
		FASTREG_INCARNATION=$(cat "$run/incarnation.$node" 2>/dev/null || echo 0)
	local page
	page=$(getconf PAGESIZE)
	echo "node $node: ${FASTREG_KIND} ($(uname -m), ${page}-byte pages) at $FASTREG_ADDR on $nic, $FASTREG_DEV, incarnation $FASTREG_INCARNATION"
	if [ "$FASTREG_LOAD" = 1 ]; then
		export FASTREG_KO=$FASTREG_TOP/${FASTREG_KOS[$node]}
		load_fastreg "$FASTREG_KO" "$FASTREG_PARAMS"
	fi
	cd "$FASTREG_TOP" || guest_fail "no $FASTREG_TOP"
	local rc
	"${FASTREG_CMD[@]}"
	rc=$?
	# A node whose command is done keeps serving the others until they are done too.
	"$FASTREG_BARRIER" cluster-end || rc=${rc/#0/1}
	return $rc
}

main 2>&1 | tee "$run/node$node.out"
echo "${PIPESTATUS[0]}" >"$run/node$node.rc"
