#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# production-check.sh PRODUCTION_KO TEST_KO: the production module carries none of the
# test-only code (Documentation/testing.rst, "The test build"): no symbol of the test hooks
# (transport/hooks.rs), the fuzzing peer (transport/fuzzing.rs, rules/fuzz.rs), the
# debugfs command files (ctl/testfiles.rs, rules/command/ctl.rs) or the fastreg_fail_wr
# fault attribute, and no string naming the attribute or a test hook. Each look must find
# what it looks for in the test module, so that none passes by looking at nothing. One
# line per look, "ok" or "FAILED"; the last line "production check: N passed, N failed".
set -uo pipefail
. "$(dirname "$0")/lib.sh"
[ $# = 2 ] || die "usage: $0 PRODUCTION_KO TEST_KO"
prod=$1 test=$2
for ko in "$prod" "$test"; do [ -f "$ko" ] || die "no $ko"; done

# symbols KO: its symbols, demangled (Rust's too).
symbols() {
	nm --demangle "$1" | awk '{ print $NF }'
}

passed=0 failed=0
# look WHAT KIND PATTERN: KIND is "symbols" or "strings"; PATTERN an extended regex.
look() {
	local what=$1 kind=$2 pattern=$3 in_test in_prod
	if [ "$kind" = symbols ]; then
		in_test=$(symbols "$test" | grep -cE "$pattern")
		in_prod=$(symbols "$prod" | grep -cE "$pattern")
	else
		in_test=$(strings -a "$test" | grep -cE "$pattern")
		in_prod=$(strings -a "$prod" | grep -cE "$pattern")
	fi
	if [ "$in_test" -gt 0 ] && [ "$in_prod" = 0 ]; then
		echo "ok: $what: $in_test in the test module, none in the production module"
		passed=$((passed + 1))
	else
		echo "FAILED: $what: $in_test in the test module, $in_prod in the production module"
		failed=$((failed + 1))
	fi
}

look "the fault attribute's C functions" symbols '^(fastreg_fail_wr_init|fastreg_fail_wr_exit|fastreg_should_fail_wr|fastreg_post_refused)$'
look "the test hooks (transport::hooks)" symbols 'transport::hooks::'
look "the fuzzing peer (transport::fuzzing, rules::fuzz)" symbols 'transport::fuzzing::|rules::fuzz::'
look "the debugfs command files (ctl::testfiles, rules::command::ctl)" symbols 'ctl::testfiles::|rules::command::ctl::'
look "the fault attribute's name" strings 'fastreg_fail_wr'
look "the test hooks' log lines" strings 'test hook: |corrupting byte'
echo "production check: $passed passed, $failed failed"
[ "$failed" = 0 ]
