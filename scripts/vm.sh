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
# (default 900 s) is killed and reported, with exit status 124.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

usage() {
	sed -n '4,18p' "$0" | sed 's/^# \{0,1\}//' >&2
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

guest=$(printf '%q ' bash "$FASTREG_TOP/scripts/vm-guest.sh" "$rdma" "$params" "$load" "$ko" "$@")
set +e
timeout -k 15 "$timeout" vng --run "$kdir" --disable-kvm --network user \
	--memory "$memory" --cpus "$cpus" --user root --cwd "$FASTREG_TOP" \
	--exec "$guest" </dev/null
rc=$?
set -e
if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
	log "vm.sh: guest did not finish within $timeout s and was killed"
	exit 124
fi
exit $rc
