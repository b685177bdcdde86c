# SPDX-License-Identifier: GPL-2.0
# Guest-side setup shared by scripts/vm-guest.sh (one VM) and scripts/cluster-guest.sh (a
# node of a cluster). Sourced, never executed.

guest_fail() {
	echo "${0##*/}: $*" >&2
	exit 1
}

# Kernel file systems and the checks every test VM runs with.
guest_basics() {
	mountpoint -q /sys/kernel/debug || mount -t debugfs none /sys/kernel/debug
	# A task blocked uninterruptibly this long is reported (the VM tests fail on the report):
	# no teardown or unload may hang, however the transport got there.
	[ ! -w /proc/sys/kernel/hung_task_timeout_secs ] || echo 15 >/proc/sys/kernel/hung_task_timeout_secs
	# kmemleak (the sanitizer kernel): what boot left is not the tests' (scanned, then
	# cleared: only objects allocated later are reported).
	if [ -w /sys/kernel/debug/kmemleak ]; then
		echo scan >/sys/kernel/debug/kmemleak
		echo clear >/sys/kernel/debug/kmemleak
	fi
}

# rdma_up KIND DEV NETDEV: a soft RDMA device of KIND (rxe: soft RoCE, siw: soft iWARP) named
# DEV on NETDEV, waited for until its port is ACTIVE. Loads rdma_cm too (fastreg needs it;
# insmod does not load dependencies).
rdma_up() {
	local kind=$1 dev=$2 nic=$3 mod
	case "$kind" in
	rxe) mod=rdma_rxe ;;
	siw) mod=siw ;;
	*) guest_fail "unknown RDMA device kind '$kind' (rxe or siw)" ;;
	esac
	modprobe "$mod" && modprobe rdma_cm || guest_fail "modprobe $mod rdma_cm failed"
	rdma link add "$dev" type "$kind" netdev "$nic" || guest_fail "rdma link add $dev type $kind failed"
	local _
	for _ in $(seq 50); do
		rdma link show "$dev/1" 2>/dev/null | grep -q 'state ACTIVE' && return 0
		sleep 0.1
	done
	guest_fail "$dev ($kind on $nic) did not become ACTIVE"
}

# load_fastreg KO PARAMS: insmod with the parameters, showing the kernel's reason on failure.
load_fastreg() {
	# shellcheck disable=SC2086 # PARAMS is a list of k=v words.
	insmod "$1" $2 || {
		dmesg | grep -i fastreg | tail -n 5 >&2
		guest_fail "insmod $1 $2 failed"
	}
}
