#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# Runs VM tests, each file in a fresh VM (scripts/vm.sh --no-load), and counts their KTAP
# results. A VM that fails to boot, times out or dies counts as one failed test.
#
#   scripts/vm-tests.sh [TEST...]     (default: every tests/vm/[0-9]*.sh)
#
# Prints each test's KTAP output, then "vm tests: N passed, N failed". Exit status is
# non-zero when anything failed. Counts also go to $FASTREG_COUNTS (if set) as "P F".
set -uo pipefail
. "$(dirname "$0")/lib.sh"

cd "$FASTREG_TOP"
tests=("$@")
[ ${#tests[@]} -gt 0 ] || tests=(tests/vm/[0-9]*.sh)
passed=0 failed=0
for t in "${tests[@]}"; do
	echo "# ---- $t"
	out=$(FASTREG_VM_NOBUILD=${FASTREG_VM_NOBUILD:-} scripts/vm.sh --no-load --timeout "${FASTREG_VM_TIMEOUT:-900}" -- bash "$t" 2>&1)
	rc=$?
	printf '%s\n' "$out"
	p=$(printf '%s\n' "$out" | grep -cE '^ok [0-9]+ ')
	f=$(printf '%s\n' "$out" | grep -cE '^not ok [0-9]+ ')
	plan=$(printf '%s\n' "$out" | sed -nE 's/^1\.\.([0-9]+)$/\1/p' | head -n1)
	if [ -z "$plan" ] || [ $((p + f)) -ne "$plan" ]; then
		echo "# $t: planned ${plan:-?} test points, saw $((p + f)) (exit $rc)"
		f=$((f + 1))
	elif [ $rc -ne 0 ] && [ "$f" -eq 0 ]; then
		echo "# $t: exited $rc with no failed test point"
		f=1
	fi
	echo "# $t: $p passed, $f failed"
	passed=$((passed + p))
	failed=$((failed + f))
done
[ -z "${FASTREG_COUNTS:-}" ] || echo "$passed $failed" >"$FASTREG_COUNTS"
echo "vm tests: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
