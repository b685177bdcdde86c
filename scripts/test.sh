#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# `make test`: host unit tests (cargo test, and python3 -m unittest for fastreg-lst's
# console and the VM tests' trace reader), the module builds, the VM tests, then the multi-node tests
# (tests/cluster, through scripts/cluster.sh). Ends with the line
# "N passed, N failed" over all of them; exits non-zero if anything failed. After each
# step (and each suite) a progress line: the time so far and an estimate of the whole.
set -uo pipefail
. "$(dirname "$0")/lib.sh"
cd "$FASTREG_TOP"

passed=0 failed=0
add() {
	passed=$((passed + $1))
	failed=$((failed + $2))
}

FASTREG_PROGRESS=$(mktemp) FASTREG_PROGRESS_START=$(date +%s)
export FASTREG_PROGRESS FASTREG_PROGRESS_START
trap 'rm -f "$FASTREG_PROGRESS"' EXIT
progress_plan setup "host tests" "python tests"
for kind in $TEST_KINDS; do progress_plan "module build $kind"; done
progress_plan "production build" "stack depth"
mapfile -t steps < <(scripts/vm-tests.sh --plan; scripts/cluster-tests.sh --plan)
progress_plan "${steps[@]}"
t=$SECONDS
"$FASTREG_TOP/scripts/setup.sh" test || { echo "setup failed"; echo "0 passed, 1 failed"; exit 1; }
progress_done setup $((SECONDS - t))

echo "==== host tests (cargo test)"
t=$SECONDS
out=$(cd tests/host && env PATH="$HOME/.cargo/bin:$PATH" CARGO_TARGET_DIR="$FASTREG_TOP/build/host" \
	cargo test --quiet 2>&1)
rc=$?
printf '%s\n' "$out"
p=$(printf '%s\n' "$out" | sed -nE 's/^test result: .* ([0-9]+) passed; ([0-9]+) failed.*/\1/p' | paste -sd+ | bc)
f=$(printf '%s\n' "$out" | sed -nE 's/^test result: .* ([0-9]+) passed; ([0-9]+) failed.*/\2/p' | paste -sd+ | bc)
p=${p:-0} f=${f:-0}
[ $rc -eq 0 ] || [ "$f" -gt 0 ] || f=1
echo "host tests: $p passed, $f failed"
add "$p" "$f"
progress_done "host tests" $((SECONDS - t))

echo "==== host tests (python3 -m unittest: fastreg-lst's console, tests/vm/trace_stacks.py and trace_events.py, the bench's floor, fastreg-lst's command line)"
t=$SECONDS
out=$(PYTHONDONTWRITEBYTECODE=1 python3 -m unittest discover -s tests/host/py 2>&1)
rc=$?
[ $rc -eq 0 ] && printf '%s\n' "$out" | tail -n 3 || printf '%s\n' "$out"
n=$(printf '%s\n' "$out" | sed -nE 's/^Ran ([0-9]+) tests? .*/\1/p')
f=$(printf '%s\n' "$out" | sed -nE 's/^FAILED \((.*)\)$/\1/p' | grep -oE '(failures|errors)=[0-9]+' | cut -d= -f2 | paste -sd+ | bc)
n=${n:-0} f=${f:-0}
# None found (python3 < 3.12 says OK to that) or a crash: a failure.
{ [ $rc -eq 0 ] && [ "$n" -gt 0 ]; } || [ "$f" -gt 0 ] || f=1
echo "python tests: $((n - f < 0 ? 0 : n - f)) passed, $f failed"
add $((n - f < 0 ? 0 : n - f)) "$f"
progress_done "python tests" $((SECONDS - t))

echo "==== module build (one per kernel kind: $TEST_KINDS)"
for kind in $TEST_KINDS; do
	t=$SECONDS
	if FASTREG_KIND=$kind scripts/kmake.sh modules; then
		echo "module build $kind: 1 passed, 0 failed"
		add 1 0
	else
		echo "module build $kind: 0 passed, 1 failed"
		add 0 1
		echo "$passed passed, $failed failed"
		exit 1
	fi
	progress_done "module build $kind" $((SECONDS - t))
done

# The production build (FASTREG_TEST=0, as `make` builds it), beside the test build: it
# must carry none of the test-only code (scripts/production-check.sh, 6 points);
# tests/vm/18-device.sh runs on it.
echo "==== production build (FASTREG_TEST=0, in ${PRODUCTION_KO#"$FASTREG_TOP"/})"
t=$SECONDS
if kmake_build 0 -s modules; then
	out=$(scripts/production-check.sh "$PRODUCTION_KO" fastreg.ko)
	printf '%s\n' "$out"
	p=$(printf '%s\n' "$out" | sed -nE 's/^production check: ([0-9]+) passed, ([0-9]+) failed$/\1/p')
	f=$(printf '%s\n' "$out" | sed -nE 's/^production check: ([0-9]+) passed, ([0-9]+) failed$/\2/p')
	[ -n "$p" ] || { p=0 f=1; }
	add "$p" "$f"
else
	echo "production build: 0 passed, 1 failed"
	add 0 1
fi
progress_done "production build" $((SECONDS - t))

# fastreg's own frames on the deepest path from any entry point (static; the budget, 13
# KiB of the 16 KiB stack, leaves the kernel's frames above and below: design.rst, "Stack").
echo "==== stack depth (scripts/stack-depth.py --max 13312)"
t=$SECONDS
out=$(python3 scripts/stack-depth.py fastreg.ko --max 13312)
rc=$?
printf '%s\n' "$out" | grep -E '^over the budget|^deepest entry point'
if [ $rc -eq 0 ]; then
	echo "stack depth: 1 passed, 0 failed"
	add 1 0
else
	echo "stack depth: 0 passed, 1 failed"
	add 0 1
fi
progress_done "stack depth" $((SECONDS - t))

echo "==== vm tests"
counts=$(mktemp)
FASTREG_VM_NOBUILD=1 FASTREG_COUNTS=$counts scripts/vm-tests.sh
if read -r p f <"$counts"; then add "$p" "$f"; else add 0 1; fi

echo "==== cluster tests"
: >"$counts"
FASTREG_VM_NOBUILD=1 FASTREG_COUNTS=$counts scripts/cluster-tests.sh
if read -r p f <"$counts"; then add "$p" "$f"; else add 0 1; fi
rm -f "$counts"

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
