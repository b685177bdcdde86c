#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# Runs the multi-node tests: each tests/cluster/*.sh file once per "#@ cluster ARGS" line
# it holds, through scripts/cluster.sh ARGS -- bash FILE. Every node prints a KTAP document;
# all of them are counted. A node that does not finish, or prints fewer points than it
# planned, counts as one failed test.
#
#   scripts/cluster-tests.sh [--plan] [TEST...]     (default: every tests/cluster/[0-9]*.sh)
#
# --plan prints the name of each run it would make, one per line, and runs nothing. Each
# run done is a step of `make test`'s progress (progress_done, scripts/lib.sh).
#
# Prints each node's KTAP output, then "cluster tests: N passed, N failed"; counts also go
# to $FASTREG_COUNTS (if set) as "P F". FASTREG_CLUSTER_FILTER=REGEX runs only the
# configurations whose "#@ cluster" line matches (e.g. 'rdma siw'). FASTREG_INTEROP=1 (make
# interop) also runs the "#@ interop ARGS" lines: the larger matrix kept out of make test,
# with FASTREG_FULL=1 on the nodes: the suites' long phases (tests/cluster/lib.sh, FULL).
set -uo pipefail
. "$(dirname "$0")/lib.sh"

cd "$FASTREG_TOP"
plan=0
[ "${1:-}" != --plan ] || { plan=1; shift; }
tests=("$@")
[ ${#tests[@]} -gt 0 ] || tests=(tests/cluster/[0-9]*.sh)
passed=0 failed=0 run=build/cluster
mkdir -p build
for t in "${tests[@]}"; do
	while IFS= read -r line; do
		cfg=${line#\#@ cluster}
		cfg=${cfg#\#@ interop}
		pre=()
		[[ $line != "#@ interop"* ]] || pre=(env FASTREG_FULL=1)
		[[ "$cfg" =~ ${FASTREG_CLUSTER_FILTER:-.} ]] || continue
		[ $plan = 0 ] || { echo "$t:$cfg"; continue; }
		echo "# ---- $t:$cfg"
		eval "args=($cfg)"
		start=$SECONDS
		FASTREG_VM_NOBUILD=${FASTREG_VM_NOBUILD:-} scripts/cluster.sh "${args[@]}" -- "${pre[@]}" bash "$t" >/dev/null 2>"$run.err"
		rc=$?
		cat "$run.err"
		nodes=$(. "$run/env" 2>/dev/null && wc -w <<<"$FASTREG_NODES")
		for ((i = 0; i < ${nodes:-0}; i++)); do
			# An incarnation killed on purpose (FASTREG_NODECTL kill): shown, not counted.
			for old in "$run/node$i".inc*.out; do
				[ -f "$old" ] || continue
				k=${old##*.inc}
				echo "# node $i: incarnation ${k%.out}, killed:"
				sed 's/^/#   /' "$old"
			done
			out=$(cat "$run/node$i.out" 2>/dev/null)
			echo "# node $i:"
			printf '%s\n' "$out"
			r=$(cat "$run/node$i.rc" 2>/dev/null || echo none)
			ktap_tally "node $i" "$r" "$out"
			p=$KTAP_P f=$KTAP_F sk=""
			[ "$KTAP_S" -eq 0 ] || sk=", $KTAP_S skipped"
			if ! grep -q '^1\.\.' <<<"$out" || [ "$r" = none ]; then
				echo "# node $i: its console:"
				tail -n 30 "$run/node$i.console" | sed 's/^/#   /'
			fi
			echo "# node $i: $p passed, $f failed$sk"
			passed=$((passed + p))
			failed=$((failed + f))
		done
		if [ "${nodes:-0}" -eq 0 ] && [ $rc -ne 0 ]; then
			echo "# $t:$cfg: no node ran (exit $rc)"
			failed=$((failed + 1))
		fi
		echo "# $t:$cfg: exit $rc in $((SECONDS - start)) s"
		progress_done "$t:$cfg" $((SECONDS - start))
	done < <(grep -E "^#@ (cluster${FASTREG_INTEROP:+|interop})( |\$)" "$t")
done
[ $plan = 0 ] || exit 0
rm -f "$run.err"
[ -z "${FASTREG_COUNTS:-}" ] || echo "$passed $failed" >"$FASTREG_COUNTS"
echo "cluster tests: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
