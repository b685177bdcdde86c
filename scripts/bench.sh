#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# `make bench`: one VM, fastreg and its anchors (perftest, nvme-rdma) measured back to back
# on the same rxe device (scripts/bench-guest.py), then the results: build/bench/results.json
# (every figure, versions, the VM's shape), build/bench/results.txt (the table with the
# ratios) and PNG plots, made by scripts/bench-report.py. Not part of `make test`.
#
#   make bench [PARAMS="k=v ..."] [BENCH_SECONDS=4] [BENCH_QUICK=1]
set -euo pipefail
. "$(dirname "$0")/lib.sh"

"$FASTREG_TOP/scripts/setup.sh" bench
out=$FASTREG_TOP/build/bench
mkdir -p "$out"
raw=$out/raw.txt
params=${PARAMS:-}
log "bench: one VM, ${BENCH_SECONDS:-4} s per measurement, fastreg parameters: ${params:-defaults}"
# The guest sees the clone and the environment through virtme-ng.
FASTREG_VM_NOBUILD=1 "$FASTREG_TOP/scripts/vm.sh" --params "$params" --timeout 1800 -- \
	env BENCH_SECONDS="${BENCH_SECONDS:-4}" BENCH_QUICK="${BENCH_QUICK:-}" \
	python3 scripts/bench-guest.py | tee "$raw"
"$FASTREG_VENV/bin/python" "$FASTREG_TOP/scripts/bench-report.py" "$raw" "$out"
