#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# Boots a fresh VM on the test kernel (virtme-ng, QEMU without KVM), brings up a soft RDMA
# device on its NIC (rxe0 for soft RoCE, the default; siw0 with --rdma siw, soft iWARP),
# loads fastreg.ko, runs CMD in the guest and exits with CMD's status.
#
#   scripts/vm.sh [--rdma rxe|siw] [--kernel default|debug] [--params "k=v ..."]
#                 [--no-load] [--timeout S] [--memory SIZE] [--cpus N] -- CMD...
#
# --kernel debug boots the sanitizer kernel (KASAN, kmemleak, lockdep, debug objects, SLUB
# debugging, fault injection: scripts/kernel-debug.config) with fastreg.ko built against it
# (build/ko/x86_64-debug/); the default is the test kernel of scripts/kernel.config.
# The guest sees the host's root file system read-only, so this repository (and every host
# tool: rdma, ip, perftest) is usable inside at the same path; /tmp is writable. CMD runs
# from the repository's top directory. A guest that does not finish within the timeout
# (default 900 s) is killed and reported, with exit status 124. A guest that has not
# reached its script within FASTREG_BOOT_LIMIT seconds (default 300; a boot takes about 30
# here, 90 with the machine loaded) is killed, the end of its boot log shown, and booted
# again, once: a boot that hangs (as one under a starved host once did) costs minutes, not
# the whole timeout. The guest's kernel log up to its script goes to the file named by
# FASTREG_VM_CONSOLE (default: a temporary file, removed at exit).
set -euo pipefail
. "$(dirname "$0")/lib.sh"

usage() {
	sed -n '4,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2
	exit 2
}

rdma=${FASTREG_RDMA:-rxe} kernel=${FASTREG_KERNEL:-default} params="" load=1 timeout=900
memory=2G cpus=2
while [ $# -gt 0 ]; do
	case "$1" in
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
[[ "$timeout" =~ ^[0-9]+$ ]] || die "--timeout takes seconds"
case "$rdma" in rxe | siw) ;; *) die "--rdma takes rxe or siw, not '$rdma'" ;; esac
kind=$(kernel_kind x86_64 "$kernel")
step=vm
[ "$kind" = x86_64 ] || step=debug

# Make sure the kernel, the tools and the module are there (each step is quick when done).
if [ -z "${FASTREG_VM_NOBUILD:-}" ]; then
	"$FASTREG_TOP/scripts/setup.sh" $step 2>&1 | grep -v ': .*present$\|: cached build\|packages: all' >&2 || true
	FASTREG_KIND=$kind "$FASTREG_TOP/scripts/kmake.sh" -s modules >&2 || die "module build failed"
fi
kdir=$(cached_kdir "$kind") || die "no $kind kernel built (run scripts/setup.sh $step)"
ko=$(kind_module "$kind")
[ $load -eq 0 ] || [ -f "$ko" ] || die "${ko#"$FASTREG_TOP"/} not built"

boot_limit=${FASTREG_BOOT_LIMIT:-300}
[[ "$boot_limit" =~ ^[0-9]+$ ]] || die "FASTREG_BOOT_LIMIT takes seconds"
work=$(mktemp -d /tmp/fastreg-vm.XXXXXX)
console=${FASTREG_VM_CONSOLE:-$work/console}
vng_pid=""
trap '[ -z "$vng_pid" ] || kill -KILL -- -"$vng_pid" 2>/dev/null; rm -rf "$work"' EXIT
# The guest marks that it reached its script in $work (writable there: --rwdir).
guest=$(printf '%q ' env FASTREG_UP="$work/up" bash "$FASTREG_TOP/scripts/vm-guest.sh" "$rdma" "$params" \
	"$load" "$ko" "$@")

# boot SECONDS: one boot of the guest with that timeout; its exit status, or 200 when it
# did not reach its script: not within the boot limit (then killed), or it ended before
# (a kernel that panicked at boot). The kernel's console (stderr lines "[ seconds] ...":
# --verbose) goes to $console, the rest of stderr through; stdout through a pipe (QEMU
# opens it again, which would truncate a file the caller gave). no_timer_check: the kernel's
# check that the IO-APIC timer ticks gives a starved guest too little time and panics
# ("IO-APIC + timer doesn't work!"), as it does for virtual machines generally.
boot() {
	local start=$SECONDS rc
	rm -f "$work/up"
	: >"$console"
	setsid -w timeout -k 15 "$1" vng --run "$kdir" --disable-kvm --verbose --append no_timer_check --network user \
		--memory "$memory" --cpus "$cpus" --user root --cwd "$FASTREG_TOP" --rwdir="$work" \
		--exec "$guest" </dev/null > >(cat) 2> >(awk -v con="$console" '
			/^\[ *[0-9]+\.[0-9]+\] / { print >>con; fflush(con); next }
			{ print; fflush() }' >&2) &
	vng_pid=$!
	while [ ! -e "$work/up" ] && kill -0 "$vng_pid" 2>/dev/null; do
		if [ $((SECONDS - start)) -ge "$boot_limit" ]; then
			log "vm.sh: the guest did not reach its script within $boot_limit s; its console ends:"
			console_tail "$console"
			kill -CONT -- -"$vng_pid" 2>/dev/null
			kill -KILL -- -"$vng_pid" 2>/dev/null
			wait "$vng_pid" 2>/dev/null
			vng_pid=""
			return 200
		fi
		sleep 1
	done
	wait "$vng_pid"
	rc=$?
	vng_pid=""
	if [ ! -e "$work/up" ] && [ $rc -ne 124 ] && [ $rc -ne 137 ]; then
		log "vm.sh: the guest ended (exit $rc) before it reached its script; its console ends:"
		console_tail "$console"
		return 200
	fi
	return $rc
}

set +e
start=$SECONDS
boot "$timeout"
rc=$?
if [ $rc -eq 200 ]; then
	log "vm.sh: booting the guest again (once)"
	boot $((timeout - (SECONDS - start)))
	rc=$?
	[ $rc -ne 200 ] || { log "vm.sh: the guest did not boot twice"; exit 125; }
fi
set -e
if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
	log "vm.sh: guest did not finish within $timeout s and was killed"
	exit 124
fi
exit $rc
