#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# Where the time of one transfer at a time goes: perf profiles (whole system, 499 Hz) of
# fastreg's brw read of 64 KiB and brw write of 4 KiB with one in flight, and of perftest's
# ib_read_bw / ib_write_bw of the same sizes with one outstanding, on the VM's device.
# Prints each run's result, then its samples by command and by symbol. Run it in a VM:
#
#   scripts/vm.sh --no-load -- bash scripts/profile-guest.sh
#
# (see Documentation/performance.rst). It measures nothing that a test asserts.
set -uo pipefail
. "$(dirname "$0")/../tests/vm/lib.sh"
command -v perf >/dev/null || { echo "perf not found (Debian: linux-perf)"; exit 1; }
load || exit 1
out=$(mktemp -d)
LST=$FASTREG_TOP/scripts/fastreg-lst
# prof NAME CMD...: runs CMD under perf; keeps its output and the two reports.
prof() {
	local name=$1
	shift
	perf record -q -a -g -F 499 -o "$out/$name.data" -- "$@" >"$out/$name.out" 2>&1
	perf report -i "$out/$name.data" --no-children --sort comm --stdio 2>/dev/null |
		grep -E '^ +[0-9]' | head -n 8 >"$out/$name.comm"
	perf report -i "$out/$name.data" --no-children --sort sym --stdio 2>/dev/null |
		grep -E '^ +[0-9]' | head -n 15 >"$out/$name.sym"
}
# anchor NAME TOOL SIZE ITERS PORT: a perftest server and client on the device, one outstanding.
anchor() {
	local args=(-d "$FASTREG_DEV" -R -s "$3" -n "$4" -p "$5" -F -t 1)
	[ "$2" = ib_read_bw ] && args+=(-o 1)
	"$2" "${args[@]}" >/dev/null 2>&1 &
	sleep 1
	prof "$1" "$2" "${args[@]}" "$FASTREG_ADDR"
	wait
}
prof fastreg_read_64k "$LST" brw read --size 64K --concurrency 1 --seconds 8
anchor perftest_read_64k ib_read_bw 65536 400 18700
prof fastreg_write_4k "$LST" brw write --size 4K --concurrency 1 --seconds 8
anchor perftest_write_4k ib_write_bw 4096 2000 18701
unload
for n in fastreg_read_64k perftest_read_64k fastreg_write_4k perftest_write_4k; do
	echo "===== $n"
	grep -E 'MiB/s|^ *[0-9]+ +[0-9]+ ' "$out/$n.out"
	echo "--- samples by command"
	cat "$out/$n.comm"
	echo "--- samples by symbol"
	cat "$out/$n.sym"
done
rm -rf "$out"
