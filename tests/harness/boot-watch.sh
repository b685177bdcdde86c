#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# The harness notices a guest that never reaches its script (runs on the host, KTAP). The
# first boot of a VM of scripts/vm.sh, and of node 1 of a two-node scripts/cluster.sh, is
# starved: its QEMU is put in a cgroup with 1 % of a CPU (cgroup v2's cpu.max, v1's CFS
# quota), or, where the cgroup
# cannot be made, stopped (SIGSTOP) for good. The harness must kill it once the boot limit
# passed (FASTREG_BOOT_LIMIT: 60 s here), say so with the end of its console, boot it again,
# and the command then runs: the run ends well before its timeout.
#
#   tests/harness/boot-watch.sh [vm|cluster]...   (default: both)
set -uo pipefail
TOP=$(cd "$(dirname "$0")/../.." && pwd)
. "$TOP/scripts/lib.sh"
cd "$TOP"

parts=("$@")
[ ${#parts[@]} -gt 0 ] || parts=(vm cluster)
CG=""
LIMIT=60

_n=0
ok() { _n=$((_n + 1)); echo "ok $_n $1"; }
not_ok() { _n=$((_n + 1)); echo "not ok $_n $1"; }
check() {
	local name=$1 out
	shift
	if out=$("$@" 2>&1); then ok "$name"; else printf '%s\n' "$out" | sed 's/^/# /'; not_ok "$name"; fi
}

# descendants PID: every process under PID.
descendants() {
	local p c
	for p in "$@"; do
		for c in $(cat /proc/"$p"/task/*/children 2>/dev/null); do
			echo "$c"
			descendants "$c"
		done
	done
}

# starve_first_qemu PID CONSOLE [TAP]: waits (up to 120 s) for the first booting QEMU
# under PID (of the node whose -netdev tap is TAP, if given) and for its first kernel line
# in CONSOLE (so that the harness has a console to show however little the starved boot
# then prints), starves it, prints how ("cgroup" or "stopped").
starve_first_qemu() {
	local root=$1 console=$2 tap=${3:-} q="" p how
	for _ in $(seq 600); do
		for p in $(descendants "$root"); do
			case "$(cat /proc/"$p"/comm 2>/dev/null)" in qemu-system-*) ;; *) continue ;; esac
			# The booting QEMU (virtme-ng runs others first, to ask QEMU what it has).
			tr '\0' ' ' </proc/"$p"/cmdline | grep -q -- "-kernel " || continue
			[ -z "$tap" ] || tr '\0' ' ' </proc/"$p"/cmdline | grep -q "ifname=$tap," || continue
			q=$p
			break 2
		done
		sleep 0.2
	done
	[ -n "$q" ] || { echo "no QEMU appeared"; return 1; }
	for _ in $(seq 600); do
		grep -aq '^\[ *[0-9]' "$console" 2>/dev/null && break
		sleep 0.2
	done
	how=stopped
	if starve_cg "$q"; then how=cgroup; fi
	[ "$how" = cgroup ] || kill -STOP "$q"
	echo "$how"
}

# starve_cg PID: PID (all its threads) in a cgroup allowed 1 % of a CPU: cgroup v2's
# cpu.max, or v1's CFS quota; false where neither can be made.
starve_cg() {
	if [ "$(stat -fc %T /sys/fs/cgroup 2>/dev/null)" = cgroup2fs ]; then
		CG=/sys/fs/cgroup/fastreg-starved
		grep -qw cpu /sys/fs/cgroup/cgroup.subtree_control 2>/dev/null ||
			echo +cpu >/sys/fs/cgroup/cgroup.subtree_control 2>/dev/null || return 1
		mkdir -p "$CG" 2>/dev/null && echo "1000 100000" >"$CG/cpu.max" 2>/dev/null || return 1
	elif [ "$(stat -fc %T /sys/fs/cgroup/cpu 2>/dev/null)" = cgroupfs ]; then
		CG=/sys/fs/cgroup/cpu/fastreg-starved
		mkdir -p "$CG" 2>/dev/null && echo 100000 >"$CG/cpu.cfs_period_us" &&
			echo 1000 >"$CG/cpu.cfs_quota_us" 2>/dev/null || return 1
	else
		return 1
	fi
	echo "$1" >"$CG/cgroup.procs" 2>/dev/null
}

# said LINE FILE: FILE has LINE, followed by a kernel console line.
said() {
	grep -a -A1 -F "$1" "$2" | tail -n1 | grep -q '^\[fastreg\]   \[ *[0-9]' || { grep -a -v virtiofsd "$2"; false; }
}

uncg() { [ -z "$CG" ] || rmdir "$CG" 2>/dev/null || true; }

vm_part() {
	local out=/tmp/boot-watch.vm pid how rc start=$SECONDS
	FASTREG_BOOT_LIMIT=$LIMIT FASTREG_VM_CONSOLE=/tmp/boot-watch.console FASTREG_VM_NOBUILD=1 scripts/vm.sh --no-load --timeout 600 -- \
		bash -c 'echo "the command ran"' > >(cat >"$out") 2>&1 &
	# (Through a pipe: QEMU reopens its standard output, which truncates a file.)
	pid=$!
	how=$(starve_first_qemu $pid /tmp/boot-watch.console)
	wait $pid
	rc=$?
	echo "# vm: first boot $how; exit $rc after $((SECONDS - start)) s"
	check "vm.sh: a starved boot is killed after the boot limit, with its console" \
		said "the guest did not reach its script within $LIMIT s; its console ends:" "$out"
	check "  booted again, and the command ran (exit 0)" bash -c "[ $rc = 0 ] && grep -aq 'booting the guest again' $out && grep -aqx 'the command ran' $out || { cat $out; false; }"
	check "  well before its timeout (600 s)" [ $((SECONDS - start)) -lt 400 ]
	uncg
}

cluster_part() {
	local out=/tmp/boot-watch.cluster pid how rc start=$SECONDS
	FASTREG_BOOT_LIMIT=$((LIMIT + 30)) FASTREG_VM_NOBUILD=1 scripts/cluster.sh --node x86_64 --node x86_64 \
		--no-load --timeout 900 -- bash -c '"$FASTREG_BARRIER" both && echo "node $FASTREG_NODE ran"' \
		> >(cat >"$out") 2>&1 &
	pid=$!
	how=$(starve_first_qemu $pid build/cluster/node1.console frtap1)
	wait $pid
	rc=$?
	echo "# cluster: node 1's first boot $how; exit $rc after $((SECONDS - start)) s"
	check "cluster.sh: node 1's starved boot is killed after the boot limit, with its console" \
		said "node 1 (x86_64) did not reach its script within $((LIMIT + 30)) s; its console ends:" "$out"
	check "  booted again; both nodes ran the command (exit 0)" bash -c "[ $rc = 0 ] && grep -aq 'node 1 (x86_64) booting again' $out &&
		grep -qx 'node 1 ran' build/cluster/node1.out && [ \"\$(cat build/cluster/node1.rc)\" = 0 ] || { cat $out; false; }"
	check "  well before its timeout (900 s)" [ $((SECONDS - start)) -lt 500 ]
	uncg
}

echo "KTAP version 1"
echo "1..$((3 * ${#parts[@]}))"
for p in "${parts[@]}"; do
	case $p in
	vm) vm_part ;;
	cluster) cluster_part ;;
	*) echo "Bail out! unknown part '$p' (vm or cluster)"; exit 2 ;;
	esac
done
