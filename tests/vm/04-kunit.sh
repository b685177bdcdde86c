#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# The module's KUnit suites run at load; their KTAP results are reported here, one test
# point per KUnit case, plus one per suite for its overall result. (On the sanitizer
# kernel the suites run, under KASAN, at every load of 09 and 10; make test-debug reports
# them there.)
. "$(dirname "$0")/lib.sh"

load || { ktap_begin 1; not_ok "insmod"; ktap_end; }
suites=$(cd /sys/kernel/debug/kunit 2>/dev/null && ls -d fastreg_* 2>/dev/null)
if [ -z "$suites" ]; then
	ktap_begin 1
	not_ok "fastreg KUnit suites present in /sys/kernel/debug/kunit"
	ktap_end
fi
results=""
for s in $suites; do
	results+=$(cat "/sys/kernel/debug/kunit/$s/results")$'\n'
done
# Case lines are indented ("    ok 1 name"), suite lines are not ("ok 1 suite").
cases=$(printf '%s' "$results" | grep -E '^\s+(not )?ok [0-9]+ ' | sed -E 's/^\s+//')
ktap_begin $(($(printf '%s\n' "$cases" | grep -c .) + $(echo "$suites" | wc -w) + 2))
while read -r line; do
	[ -n "$line" ] || continue
	name=$(echo "$line" | sed -E 's/^(not )?ok [0-9]+ //')
	case "$line" in
	ok*) ok "kunit: $name" ;;
	*) not_ok "kunit: $name" ;;
	esac
done <<<"$cases"
for s in $suites; do
	if grep -qE "^ok [0-9]+ $s" "/sys/kernel/debug/kunit/$s/results"; then
		ok "kunit suite $s"
	else
		sed 's/^/# /' "/sys/kernel/debug/kunit/$s/results"
		not_ok "kunit suite $s"
	fi
done
check "rmmod" unload
check "no kernel errors" no_kernel_errors
ktap_end
