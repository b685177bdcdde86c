#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# `make bench`: fastreg and its anchors measured back to back on the same devices
# (scripts/bench-guest.py), in four setups, each with its own results in build/bench/:
#
#   build/bench/               one VM on rxe (looping back): fastreg, perftest, nvme-rdma
#   build/bench/siw/           one VM on siw (perftest on the same siw device as the anchor)
#   build/bench/x86_64-x86_64/     two nodes (scripts/cluster.sh), each with its own vCPUs:
#   build/bench/x86_64-arm64-64k/  node 0 measures against node 1, perftest between the same two
#
# Each has results.json (every figure, versions, the VMs' shape), results.txt (the table with
# the ratios) and PNG plots, made by scripts/bench-report.py; build/bench/summary.txt puts
# the tables together. Not part of `make test`.
#
#   make bench [PARAMS="k=v ..."] [BENCH_SECONDS=4] [BENCH_QUICK=1] [BENCH_REPS=3]
#              [BENCH_CONCS="1 8 64"] (1 MiB at 256 in flight comes with 64)
#              [BENCH_BEFORE=REV] [BENCH_SETUPS="vm siw x86_64-x86_64 x86_64-arm64-64k"]
#
# Every point is BENCH_REPS interleaved runs of fastreg and perftest (median ratio and its
# spread). BENCH_BEFORE=REV also measures the module of commit REV (built once, cached under
# $FASTREG_CACHE/bench-before/) in the same VM, for before and after ratios (one-VM setups).
set -euo pipefail
. "$(dirname "$0")/lib.sh"
# What is measured is the production build (no test hooks), as `make` builds it.
export FASTREG_TEST=0

setups=${BENCH_SETUPS:-vm siw x86_64-x86_64 x86_64-arm64-64k}
# The kernels the setups need, and no others (a one-VM setup needs the x86_64 one alone).
need=(x86_64)
for s in $setups; do
	case "$s" in
	x86_64-*) need+=("${s#x86_64-}") ;;
	arm64-*) k=${s#arm64-*-}; need+=("${s%-"$k"}" "$k") ;;
	esac
done
"$FASTREG_TOP/scripts/setup.sh" bench $(printf '%s\n' "${need[@]}" | sort -u)
out=$FASTREG_TOP/build/bench
mkdir -p "$out"
params=${PARAMS:-}
env=(env BENCH_SECONDS="${BENCH_SECONDS:-4}" BENCH_QUICK="${BENCH_QUICK:-}" BENCH_REPS="${BENCH_REPS:-3}"
	BENCH_CONCS="${BENCH_CONCS:-1 8 64}")
before_ko=
if [ -n "${BENCH_BEFORE:-}" ]; then
	rev=$(git -C "$FASTREG_TOP" rev-parse --verify "$BENCH_BEFORE^{commit}") ||
		die "BENCH_BEFORE=$BENCH_BEFORE is not a commit"
	bdir=$FASTREG_CACHE/bench-before/$rev
	if [ ! -f "$bdir/fastreg.ko" ]; then
		log "bench: building the module of $rev (before)"
		rm -rf "$bdir" && mkdir -p "$bdir"
		git -C "$FASTREG_TOP" archive "$rev" | tar -x -C "$bdir"
		(cd "$bdir" && scripts/kmake.sh -s modules)
	fi
	before_ko=$bdir/fastreg.ko
fi
log "bench: ${BENCH_SECONDS:-4} s per measurement, fastreg parameters: ${params:-defaults}; setups: $setups"

report() {
	"$FASTREG_VENV/bin/python" "$FASTREG_TOP/scripts/bench-report.py" "$1/raw.txt" "$1"
}

summary=()
for s in $setups; do
	case "$s" in
	vm | siw)
		dir=$out
		[ "$s" = vm ] || dir=$out/$s
		mkdir -p "$dir"
		rdma=rxe
		[ "$s" = vm ] || rdma=$s
		log "bench: one VM on $rdma"
		# The guest sees the clone and the environment through virtme-ng.
		FASTREG_VM_NOBUILD=1 "$FASTREG_TOP/scripts/vm.sh" --rdma "$rdma" --params "$params" \
			--timeout 7200 -- "${env[@]}" BENCH_BEFORE_KO="$before_ko" python3 scripts/bench-guest.py |
			tee "$dir/raw.txt"
		;;
	*-*)
		dir=$out/$s
		mkdir -p "$dir"
		kinds=()
		# Kinds are x86_64, arm64-64k, arm64-16k: split "A-B" on the dash between them.
		case "$s" in
		x86_64-*) kinds=(x86_64 "${s#x86_64-}") ;;
		arm64-*) k=${s#arm64-*-}; kinds=("${s%-"$k"}" "$k") ;;
		esac
		for k in "${kinds[@]}"; do
			valid_kind "$k"
			FASTREG_KIND=$k "$FASTREG_TOP/scripts/kmake.sh" -s modules
		done
		log "bench: two nodes, ${kinds[0]} measuring against ${kinds[1]}"
		FASTREG_VM_NOBUILD=1 "$FASTREG_TOP/scripts/cluster.sh" --node "${kinds[0]}" --node "${kinds[1]}" \
			--params "$params" --timeout 3600 -- bash -c \
			'p=($FASTREG_NODES); role=client; [ "$FASTREG_NODE" = 0 ] || role=server
			exec "$@" env BENCH_PEER=${p[$((1 - FASTREG_NODE))]} BENCH_ROLE=$role python3 scripts/bench-guest.py' \
			bench "${env[@]}" | tee "$dir/raw.txt"
		;;
	*) die "unknown bench setup '$s'" ;;
	esac
	report "$dir"
	summary+=("$dir/results.txt")
done
for f in "${summary[@]}"; do
	echo "==== ${f#"$out"/}"
	cat "$f"
	echo
done >"$out/summary.txt"
log "bench: tables in ${out#"$FASTREG_TOP"/}/summary.txt"
