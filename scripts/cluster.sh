#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# Boots one VM per node on one private Ethernet segment, brings up an RDMA device on each
# node's NIC, loads fastreg and runs CMD on every node; exits with node 0's status.
#
#   scripts/cluster.sh [--node KIND]... [--rdma rxe|siw] [--kernel default|debug]
#                      [--params "k=v ..."] [--no-load] [--timeout S] [--memory SIZE]
#                      [--cpus N] -- CMD...
#
# KIND is x86_64 (4 KiB pages), arm64-64k or arm64-16k (default: one x86_64 and one
# arm64-64k node); --rdma picks the device kind (default rxe; the device is rxe0 or siw0);
# --kernel debug runs the x86_64 nodes on the sanitizer kernel (kind x86_64-debug,
# scripts/kernel-debug.config; the arm64 nodes keep theirs).
# Node N has MAC 52:54:00:fa:00:NN and address 10.77.0.(N+1)/24. CMD runs from the project
# tree on every node with FASTREG_TOP (that tree in the guest), FASTREG_NODE (the node's
# index), FASTREG_NODES (every node's address, in node order), FASTREG_BARRIER (a command:
# "$FASTREG_BARRIER NAME" returns when every node has reached NAME), FASTREG_KIND,
# FASTREG_RDMA, FASTREG_DEV, FASTREG_NIC, FASTREG_ADDR, FASTREG_KO, FASTREG_INCARNATION
# (0, then one more at each boot of the node) and FASTREG_NODECTL (a command:
# "$FASTREG_NODECTL kill|stop|cont|boot N" has the host SIGKILL, SIGSTOP or SIGCONT node N's
# QEMU, or boot it again on the same address; see scripts/cluster-nodectl.sh). Node 0's
# output is shown as it runs; every node's output, exit status and console log are kept in
# build/cluster/ (nodeN.out, nodeN.rc, nodeN.console; those of an incarnation that was
# killed move to nodeN.incK.out and nodeN.incK.console). Nodes that do not finish within
# the timeout (default 900 s, counted from the start of the run) are killed: exit status
# 124. A node that has not reached its script within FASTREG_BOOT_LIMIT seconds of its boot
# (default 300; a boot takes about 30 here, 90 with the machine loaded), or whose VM ended
# before it did (a kernel that panicked at boot), is killed, the end of its console shown
# (kept as nodeN.hung.console), and booted again, once; if that boot fails too, every node
# is stopped and the run fails (exit status 125) rather than wait out its timeout.
#
# The segment is a bridge inside a network namespace made for the run and removed after it:
# it never touches the host's own network.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

usage() {
	sed -n '4,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2
	exit 2
}

kinds=() rdma=rxe kernel=default params="" load=1 timeout=900 memory=2G cpus=2
while [ $# -gt 0 ]; do
	case "$1" in
	--node) [ $# -ge 2 ] || usage; kinds+=("$2"); shift 2 ;;
	--node=*) kinds+=("${1#*=}"); shift ;;
	--rdma) [ $# -ge 2 ] || usage; rdma=$2; shift 2 ;;
	--rdma=*) rdma=${1#*=}; shift ;;
	--kernel) [ $# -ge 2 ] || usage; kernel=$2; shift 2 ;;
	--kernel=*) kernel=${1#*=}; shift ;;
	--params) [ $# -ge 2 ] || usage; params=$2; shift 2 ;;
	--params=*) params=${1#*=}; shift ;;
	--no-load) load=0; shift ;;
	--timeout) [ $# -ge 2 ] || usage; timeout=$2; shift 2 ;;
	--memory) [ $# -ge 2 ] || usage; memory=$2; shift 2 ;;
	--cpus) [ $# -ge 2 ] || usage; cpus=$2; shift 2 ;;
	--) shift; break ;;
	-h | --help) usage ;;
	*) usage ;;
	esac
done
[ $# -gt 0 ] || usage
[ ${#kinds[@]} -gt 0 ] || kinds=(x86_64 arm64-64k)
[ ${#kinds[@]} -le 16 ] || die "at most 16 nodes"
[[ "$timeout" =~ ^[0-9]+$ ]] || die "--timeout takes seconds"
case "$rdma" in rxe | siw) ;; *) die "--rdma takes rxe or siw, not '$rdma'" ;; esac
for i in "${!kinds[@]}"; do
	valid_kind "${kinds[$i]}"
	kinds[$i]=$(kernel_kind "${kinds[$i]}" "$kernel")
done
[ "$(id -u)" -eq 0 ] || die "needs root (network namespace, tap devices)"

# Kernels, root file system and modules (each step is quick when done).
if [ -z "${FASTREG_VM_NOBUILD:-}" ]; then
	distinct=$(printf '%s\n' "${kinds[@]}" | sort -u)
	"$FASTREG_TOP/scripts/setup.sh" kinds $distinct 2>&1 | grep -v ': .*present$\|: cached\|packages: all' >&2 || true
	for k in $distinct; do
		FASTREG_KIND=$k "$FASTREG_TOP/scripts/kmake.sh" -s modules >&2 || die "module build for $k failed"
	done
fi

run=$FASTREG_TOP/build/cluster
mkdir -p "$run"
exec 9>"$run/.lock"
flock -n 9 || die "another scripts/cluster.sh is running on this clone"
rm -rf "${run:?}"/* # what the last run left (published values included), not .lock
addrs=() kos=()
for i in "${!kinds[@]}"; do
	addrs+=("10.77.0.$((i + 1))")
	ko=$(kind_module "${kinds[$i]}")
	[ $load -eq 0 ] || [ -f "$ko" ] || die "${ko#"$FASTREG_TOP"/} not built"
	kos+=("${ko#"$FASTREG_TOP"/}")
done
{
	printf 'FASTREG_NODES=%q\n' "${addrs[*]}"
	printf 'FASTREG_KINDS=(%s)\n' "$(printf '%q ' "${kinds[@]}")"
	printf 'FASTREG_KOS=(%s)\n' "$(printf '%q ' "${kos[@]}")"
	printf 'FASTREG_RDMA=%q FASTREG_PARAMS=%q FASTREG_LOAD=%q FASTREG_TIMEOUT=%q\n' \
		"$rdma" "$params" "$load" "$timeout"
	printf 'FASTREG_CMD=(%s)\n' "$(printf '%q ' "$@")"
} >"$run/env"

ns=fastreg-cluster-$$
pids=() npid=() incarnation=() booted_at=() reboots=()
boot_limit=${FASTREG_BOOT_LIMIT:-300}
[[ "$boot_limit" =~ ^[0-9]+$ ]] || die "FASTREG_BOOT_LIMIT takes seconds"
deadline=$((SECONDS + timeout))
cleanup() {
	local p
	for p in "${pids[@]}"; do kill -- -"$p" 2>/dev/null || true; done
	sleep 1
	for p in "${pids[@]}"; do kill -9 -- -"$p" 2>/dev/null || true; done
	ip netns del "$ns" 2>/dev/null || true
	[ -z "${tailpid:-}" ] || kill "$tailpid" 2>/dev/null || true
}
trap cleanup EXIT
trap 'exit 130' INT TERM
ip netns add "$ns"
ip -n "$ns" link add frbr0 type bridge
ip -n "$ns" link set frbr0 up

# boot_node N: starts node N's VM in the background, inside the namespace, on tap frtapN
# (made at its first boot, kept for the next), with what is left of the run's timeout.
boot_node() {
	local i=$1 kind=${kinds[$1]} kdir mac tap=frtap$1 net timeout=$((deadline - SECONDS))
	[ "$timeout" -gt 0 ] || return 1
	kdir=$(cached_kdir "$kind") || die "no $kind kernel built (scripts/setup.sh nodes)"
	mac=$(printf '52:54:00:fa:00:%02x' "$i")
	if ! ip -n "$ns" link show "$tap" >/dev/null 2>&1; then
		ip -n "$ns" tuntap add dev "$tap" mode tap
		ip -n "$ns" link set "$tap" master frbr0 up
	fi
	echo "${incarnation[$i]:=0}" >"$run/incarnation.$i"
	# Written by cluster-guest.sh when the node reaches its script.
	rm -f "$run/node$i.up"
	booted_at[$i]=$SECONDS
	net="-netdev tap,id=fr0,ifname=$tap,script=no,downscript=no -device virtio-net-pci,netdev=fr0,mac=$mac"
	case "$kind" in
	x86_64 | "$DEBUG_KIND")
		# --verbose: the kernel's boot log goes to nodeN.console, so that a node that never
		# reaches its script shows where it stopped (cluster-guest.sh quiets the console).
		# no_timer_check: see scripts/vm.sh (a starved guest's timer check panics).
		setsid ip netns exec "$ns" timeout -k 10 "$timeout" vng --run "$kdir" --disable-kvm --verbose \
			--append no_timer_check \
			--memory "$memory" --cpus "$cpus" --user root --cwd "$FASTREG_TOP" --rwdir="$run" \
			--qemu-opts="$net" --exec "bash $FASTREG_TOP/scripts/cluster-guest.sh $i $run" \
			</dev/null >"$run/node$i.console" 2>&1 &
		;;
	arm64-*)
		local root mods
		root=$(rootfs_dir) && [ -f "$root/.fastreg-built" ] ||
			die "no arm64 root file system (scripts/setup.sh nodes)"
		mods=$(dirname "$kdir")/mods/lib/modules
		local fs=() tag path ro
		for tag in /dev/root:"$root":on fastreg_top:"$FASTREG_TOP":on fastreg_run:"$run":off fastreg_mods:"$mods":on; do
			IFS=: read -r tag path ro <<<"$tag"
			fs+=(-fsdev "local,id=fs${#fs[@]},path=$path,security_model=none,readonly=$ro"
				-device "virtio-9p-pci,fsdev=fs${#fs[@]},mount_tag=$tag")
		done
		# shellcheck disable=SC2086 # $net is a list of QEMU options.
		setsid ip netns exec "$ns" timeout -k 10 "$timeout" qemu-system-aarch64 -M virt \
			-cpu max,pauth-impdef=on -smp "$cpus" -m "$memory" -nographic -no-reboot \
			-kernel "$kdir/arch/arm64/boot/Image" \
			-append "panic=-1 console=ttyAMA0 root=/dev/root rootfstype=9p rootflags=trans=virtio,version=9p2000.L,msize=262144,cache=loose ro init=/fastreg-init loglevel=4 FASTREG_NODE=$i" \
			"${fs[@]}" $net </dev/null >"$run/node$i.console" 2>&1 &
		;;
	esac
	pids+=($!)
	npid[$i]=$!
}

# hung_boot N: node N's boot failed: its VM has not reached its script within the boot
# limit, or ended before it did (not killed on request: npid is cleared then).
hung_boot() {
	[ -n "${npid[$1]:-}" ] && [ ! -e "$run/node$1.up" ] || return 1
	if alive "$1"; then
		[ $((SECONDS - ${booted_at[$1]})) -ge "$boot_limit" ] || return 1
		why="did not reach its script within $boot_limit s"
	else
		why="ended before it reached its script"
	fi
}

# alive N: node N's VM (its current incarnation) is still running.
alive() {
	[ -n "${npid[$1]:-}" ] && kill -0 "${npid[$1]}" 2>/dev/null
}

# hard_kill N: SIGKILL of node N's process group, continued first (it may be stopped).
hard_kill() {
	kill -CONT -- -"${npid[$1]}" 2>/dev/null || true
	kill -KILL -- -"${npid[$1]}" 2>/dev/null || true
}

# forget N: node N's VM killed, waited for, and no longer signalled by cleanup (its
# process group id may be reused).
forget() {
	local p kept=()
	hard_kill "$1"
	wait "${npid[$1]}" 2>/dev/null || true # (set -e: its status is 137)
	for p in "${pids[@]}"; do [ "$p" = "${npid[$1]}" ] || kept+=("$p"); done
	pids=("${kept[@]}")
	npid[$1]=""
}

# nodectl ACTION N: what scripts/cluster-nodectl.sh asks for; prints "ok" or why not.
nodectl() {
	local action=$1 i=$2 k
	[[ "$i" =~ ^[0-9]+$ ]] && [ "$i" -lt ${#kinds[@]} ] || { echo "no node '$i'"; return; }
	case "$action" in
	kill)
		alive "$i" || { echo "node $i is not running"; return; }
		forget "$i"
		k=${incarnation[$i]:-0}
		mv "$run/node$i.out" "$run/node$i.inc$k.out" 2>/dev/null || true
		mv "$run/node$i.console" "$run/node$i.inc$k.console" 2>/dev/null || true
		rm -f "$run/node$i.rc"
		log "cluster: node $i (${kinds[$i]}) killed (incarnation $k)"
		;;
	stop | cont)
		alive "$i" || { echo "node $i is not running"; return; }
		kill "-${action^^}" -- -"${npid[$i]}" || { echo "kill -${action^^} failed"; return; }
		log "cluster: node $i (${kinds[$i]}) $([ "$action" = stop ] && echo stopped || echo continued)"
		;;
	boot)
		alive "$i" && { echo "node $i is running"; return; }
		incarnation[$i]=$((${incarnation[$i]:-0} + 1))
		boot_node "$i" || { echo "no time left to boot node $i"; return; }
		log "cluster: node $i (${kinds[$i]}) booting (incarnation ${incarnation[$i]})"
		;;
	*) echo "unknown action '$action'"; return ;;
	esac
	echo ok
}

log "cluster: ${#kinds[@]} nodes (${kinds[*]}) on $rdma, timeout $timeout s; logs in ${run#"$FASTREG_TOP"/}/"
for i in "${!kinds[@]}"; do boot_node "$i"; done
touch "$run/node0.out"
tail -n +1 -F "$run/node0.out" 2>/dev/null &
tailpid=$!

# Every node ends by itself (its command returns, the VM powers off) or by its timeout;
# until then the nodes' requests (scripts/cluster-nodectl.sh) are served.
mkdir -p "$run/ctl"
while :; do
	for req in "$run"/ctl/req.*; do
		case "$req" in *.tmp | *.done | *'*'*) continue ;; esac
		read -r action i <"$req" || continue
		nodectl "$action" "$i" >"$req.answer"
		mv "$req.answer" "$req.done"
		rm -f "$req"
	done
	# A boot that hangs: shown, killed, booted again once (same incarnation: its script
	# never ran); a second hang stops the run.
	for i in "${!kinds[@]}"; do
		hung_boot "$i" || continue
		log "cluster: node $i (${kinds[$i]}) $why; its console ends:"
		console_tail "$run/node$i.console"
		forget "$i"
		mv "$run/node$i.console" "$run/node$i.hung.console" 2>/dev/null || true
		if [ "${reboots[$i]:-0}" -ge 1 ]; then
			log "cluster: node $i (${kinds[$i]}) failed to boot twice: stopping the run"
			for k in "${!kinds[@]}"; do alive "$k" && hard_kill "$k"; done
			exit 125
		fi
		reboots[$i]=1
		log "cluster: node $i (${kinds[$i]}) booting again (once)"
		boot_node "$i" || log "cluster: no time left to boot node $i again"
	done
	up=0
	for i in "${!kinds[@]}"; do alive "$i" && up=1; done
	[ $up -eq 1 ] || break
	# A stopped node's timeout is stopped with it: past the run's timeout (and the grace
	# of timeout -k), every node left is continued and killed here.
	if [ $SECONDS -gt $((deadline + 15)) ]; then
		for i in "${!kinds[@]}"; do
			alive "$i" || continue
			log "cluster: node $i (${kinds[$i]}) still running after the timeout: killed"
			hard_kill "$i"
		done
		break
	fi
	sleep 0.2
done
for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
sleep 0.5
kill "$tailpid" 2>/dev/null || true
tailpid=""
rc=""
for i in "${!kinds[@]}"; do
	if [ -f "$run/node$i.rc" ]; then
		r=$(cat "$run/node$i.rc")
	else
		r=124
		log "cluster: node $i (${kinds[$i]}) did not finish: see ${run#"$FASTREG_TOP"/}/node$i.console"
	fi
	[ -n "$rc" ] || rc=$r
	[ "$r" = 0 ] || [ "$i" = 0 ] || log "cluster: node $i (${kinds[$i]}) exited $r"
done
exit "$rc"
