#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# The module's KUnit suites run at load; their KTAP results are reported here, one test
# point per KUnit case, plus one per suite for its overall result. (On the sanitizer
# kernel the suites run, under KASAN, at every load of 09 and 10; make test-debug reports
# them there.)
. "$(dirname "$0")/lib.sh"

# The plan is what the source declares (each kunit_tests(SUITE) module and its #[test]
# functions), not what the kernel reports: a suite or case that did not run fails.
expected=$(python3 - "$FASTREG_TOP/src" <<'PY'
import pathlib, re, sys
for f in sorted(pathlib.Path(sys.argv[1]).rglob("*.rs")):
    suite = None
    lines = f.read_text().splitlines()
    for i, line in enumerate(lines):
        m = re.search(r"kunit_tests\((\w+)\)", line)
        if m:
            suite = m.group(1)
            print(suite)
        elif suite and line.strip() == "#[test]":
            m = re.search(r"fn (\w+)", lines[i + 1])
            print(suite, m.group(1))
PY
)
nsuites=$(awk 'NF == 1' <<<"$expected" | wc -l)
ncases=$(awk 'NF == 2' <<<"$expected" | wc -l)
ktap_begin $((nsuites + ncases + 4))
check "the source declares KUnit suites and cases ($nsuites, $ncases)" [ "$nsuites" -gt 0 -a "$ncases" -gt 0 ]
check "insmod" load
# result SUITE [CASE]: the suite's (or case's) line in the kernel's results: ok, not, or
# missing.
result() {
	local f=/sys/kernel/debug/kunit/$1/results line
	[ -f "$f" ] || { echo missing; return; }
	if [ -n "${2:-}" ]; then
		line=$(grep -E "^\s+(not )?ok [0-9]+ $2( |\$)" "$f" | head -n1)
	else
		line=$(grep -E "^(not )?ok [0-9]+ $1( |\$)" "$f" | head -n1)
	fi
	case "$line" in
	'') echo missing ;;
	*'not ok'*) echo not ;;
	*) echo ok ;;
	esac
}
while read -r suite case; do
	[ -n "$suite" ] || continue
	if [ -n "$case" ]; then
		name="kunit: $case" r=$(result "$suite" "$case")
	else
		name="kunit suite $suite" r=$(result "$suite")
	fi
	case $r in
	ok) ok "$name" ;;
	not) sed 's/^/# /' "/sys/kernel/debug/kunit/$suite/results"; not_ok "$name" ;;
	*) echo "# $suite${case:+ $case}: not in the kernel's KUnit results"; not_ok "$name" ;;
	esac
done <<<"$expected"
check "rmmod" unload
check "no kernel errors" no_kernel_errors
ktap_end
