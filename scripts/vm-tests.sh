#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# Runs VM tests, each file in a fresh VM (scripts/vm.sh --no-load), and counts their KTAP
# results. A VM that fails to boot, times out or dies counts as one failed test. A file with
# "#@ vm ARGS" lines runs once per line, with scripts/vm.sh ARGS (e.g. "#@ vm --rdma siw");
# one without runs once, on the defaults. FASTREG_INTEROP=1 adds the "#@ interop ARGS"
# lines; FASTREG_INTEROP=only (make interop) runs those alone. FASTREG_VM_FILTER=REGEX keeps
# the runs whose ARGS match it.
#
#   scripts/vm-tests.sh [--plan] [TEST...]     (default: every tests/vm/[0-9]*.sh)
#
# --plan prints the name of each run it would make, one per line, and runs nothing. Each
# run done is a step of `make test`'s progress (progress_done, scripts/lib.sh).
#
# Prints each test's KTAP output, then "vm tests: N passed, N failed". Exit status is
# non-zero when anything failed. Counts also go to $FASTREG_COUNTS (if set) as "P F".
set -uo pipefail
. "$(dirname "$0")/lib.sh"

cd "$FASTREG_TOP"
plan=0
[ "${1:-}" != --plan ] || { plan=1; shift; }
tests=("$@")
[ ${#tests[@]} -gt 0 ] || tests=(tests/vm/[0-9]*.sh)
passed=0 failed=0
log=$(mktemp)
trap 'rm -f "$log"' EXIT
case "${FASTREG_INTEROP:-}" in
'') lines=vm ;;
only) lines=interop ;;
*) lines='vm|interop' ;;
esac
for t in "${tests[@]}"; do
	cfgs=()
	while IFS= read -r line; do
		line=${line#\#@ vm}
		cfgs+=("${line#\#@ interop}")
	done < <(grep -E "^#@ ($lines)( |\$)" "$t")
	[ ${#cfgs[@]} -gt 0 ] || [ "$lines" = interop ] || grep -qE '^#@ (vm|interop)( |$)' "$t" ||
		cfgs=("")
	for cfg in "${cfgs[@]}"; do
		[[ "$cfg" =~ ${FASTREG_VM_FILTER:-.*} ]] || continue
		eval "args=($cfg)"
		name=$t${cfg:+ (${cfg# })}
		[ $plan = 0 ] || { echo "$name"; continue; }
		echo "# ---- $name"
		start=$SECONDS
		# Shown as it comes (a suite runs for minutes), and kept for the tally.
		FASTREG_VM_NOBUILD=${FASTREG_VM_NOBUILD:-} scripts/vm.sh --timeout "${FASTREG_VM_TIMEOUT:-900}" "${args[@]}" \
			--no-load -- bash "$t" 2>&1 | tee "$log"
		rc=${PIPESTATUS[0]}
		out=$(<"$log")
		ktap_tally "$name" $rc "$out"
		p=$KTAP_P f=$KTAP_F sk=""
		[ "$KTAP_S" -eq 0 ] || sk=", $KTAP_S skipped"
		echo "# $name: $p passed, $f failed$sk in $((SECONDS - start)) s"
		progress_done "$name" $((SECONDS - start))
		passed=$((passed + p))
		failed=$((failed + f))
	done
done
[ $plan = 0 ] || exit 0
[ -z "${FASTREG_COUNTS:-}" ] || echo "$passed $failed" >"$FASTREG_COUNTS"
echo "vm tests: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
