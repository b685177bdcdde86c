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

# matrix_points NAME SIZES OFFSETS N: after a `brw` over the lists SIZES x OFFSETS
# (comma-separated), one test point per pair, "NAME size=S offset=O", passing when its
# run did N transfers, all good. A pair without a run (the CLI failed) fails; a failed
# run's figures and kernel lines follow its point as diagnostics.
matrix_points() {
	local name=$1 verdict point
	while read -r verdict point; do
		case $verdict in
		ok) ok "$name $point" ;;
		not) not_ok "$name $point" ;;
		*) echo "# $point" ;;
		esac
	done < <(python3 - "$OUT" "$2" "$3" "$4" <<'PY'
import json, sys
path, sizes, offsets, n = sys.argv[1], sys.argv[2].split(","), sys.argv[3].split(","), int(sys.argv[4])
try:
    r = json.load(open(path))
    runs = r.get("runs", [r])
except (OSError, ValueError):
    runs = []
by = {(x.get("size"), x.get("offset")): x for x in runs}
for s in sizes:
    for o in offsets:
        x = by.get((int(s), int(o)))
        good = x is not None and x["status"] == "ok" and x["ops"] == n and x["errors"] == 0
        print("ok" if good else "not", f"size={s} offset={o}")
        if x is None:
            print("diag", "no run" if runs else f"no result in {path}")
        elif not good:
            print("diag", {k: x[k] for k in ("ops", "errors", "corrupt", "errors_by_kind")},
                  [p["first_error"] for p in x["peers"]])
            for line in x["kernel_messages"]:
                print("diag", line)
PY
	)
}
