# SPDX-License-Identifier: GPL-2.0
# Sourced by VM tests that drive the selftest through its CLI (scripts/fastreg-lst).

LST="$FASTREG_TOP/scripts/fastreg-lst"
OUT=/tmp/lst.json

# lst ARGS...: runs fastreg-lst --json, keeping its JSON in $OUT; shows it on failure.
lst() {
	"$LST" --json "$@" >"$OUT" || { cat "$OUT"; return 1; }
}

# jq_ EXPR: evaluates a Python expression over the last JSON result `r`.
jq_() {
	python3 -c "import json,sys; r=json.load(open('$OUT')); print($1)"
}

# expect EXPR: the Python expression over the last result `r` is true.
expect() {
	[ "$(jq_ "$1")" = True ] || { echo "not true: $1"; cat "$OUT"; return 1; }
}

# clean_run N: the last run did N operations, all good.
clean_run() {
	expect "r['status'] == 'ok' and r['errors'] == 0 and r['corrupt'] == 0 and r['ops'] == $1"
}

# run_clean N ARGS...: runs fastreg-lst ARGS; it must do N operations, all good.
run_clean() {
	local n=$1
	shift
	lst "$@" && clean_run "$n"
}
