#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# Where the time goes: perf profiles (whole system, 499 Hz) of fastreg's brw runs and of
# perftest's ib_read_bw / ib_write_bw at the same size and number in flight, on the VM's
# device. Each run is given as OP BYTES CONCURRENCY (default: read 65536 1 write 4096 1,
# the rows with one transfer at a time). Prints each run's result, then its samples by
# command and by symbol. Run it in a VM (with the module's parameters of --params):
#
#   scripts/vm.sh [--params "k=v ..."] -- bash scripts/profile-guest.sh \
#       [--callers SYM[,SYM]...] [OP BYTES CONCURRENCY]...
#
# --callers prints, for each run, the call chains (callers, 2 % and more) of the symbols
# named, for example --callers memmove,_raw_spin_unlock_irqrestore.
# (see Documentation/performance.rst). It measures nothing that a test asserts.
set -uo pipefail
. "$(dirname "$0")/../tests/vm/lib.sh"
command -v perf >/dev/null || { echo "perf not found (Debian: linux-perf)"; exit 1; }
callers=""
if [ "${1:-}" = --callers ]; then
	callers=$2
	shift 2
fi
[ $# -gt 0 ] || set -- read 65536 1 write 4096 1
[ $(($# % 3)) = 0 ] || { echo "runs are OP BYTES CONCURRENCY"; exit 2; }
# Loaded by scripts/vm.sh with its --params, or here with the defaults.
loaded || load || exit 1
out=$(mktemp -d)
LST=$FASTREG_TOP/scripts/fastreg-lst
# prof NAME CMD...: runs CMD under perf; keeps its output and the two reports.
prof() {
	local name=$1
	shift
	perf record -q -a -g -F 499 -o "$out/$name.data" -- "$@" >"$out/$name.out" 2>&1
	perf report -i "$out/$name.data" --kallsyms=/proc/kallsyms --no-children --sort comm --stdio 2>/dev/null |
		grep -E '^ +[0-9]' | head -n 8 >"$out/$name.comm"
	perf report -i "$out/$name.data" --kallsyms=/proc/kallsyms --no-children --sort sym --stdio 2>/dev/null |
		grep -E '^ +[0-9]' | head -n 15 >"$out/$name.sym"
	: >"$out/$name.callers"
	[ -z "$callers" ] || perf report -i "$out/$name.data" --kallsyms=/proc/kallsyms --no-children --sort sym \
		--symbols="$callers" -g graph,2,callee --stdio 2>/dev/null |
		grep -v '^#' | grep -v '^$' | head -n 120 >"$out/$name.callers"
}
# anchor NAME TOOL SIZE ITERS PORT DEPTH: a perftest server and client on the device.
anchor() {
	local args=(-d "$FASTREG_DEV" -R -s "$3" -n "$4" -p "$5" -F -t "$6")
	[ "$2" = ib_read_bw ] && args+=(-o "$(($6 < 128 ? $6 : 128))")
	"$2" "${args[@]}" >/dev/null 2>&1 &
	sleep 1
	prof "$1" "$2" "${args[@]}" "$FASTREG_ADDR"
	wait
}
names=()
port=18700
while [ $# -ge 3 ]; do
	op=$1 size=$2 conc=$3
	shift 3
	tool=ib_write_bw
	[ "$op" = read ] && tool=ib_read_bw
	# About 8 s at tens of MB/s, and at least 4 x the depth.
	iters=$(((8 * (20 << 20)) / size))
	[ "$iters" -ge $((4 * conc)) ] || iters=$((4 * conc))
	[ "$iters" -le 20000 ] || iters=20000
	prof "fastreg_${op}_${size}_c$conc" "$LST" brw "$op" --size "$size" --concurrency "$conc" --seconds 8
	anchor "perftest_${op}_${size}_c$conc" "$tool" "$size" "$iters" "$port" "$conc"
	port=$((port + 1))
	names+=("fastreg_${op}_${size}_c$conc" "perftest_${op}_${size}_c$conc")
done
unload
for n in "${names[@]}"; do
	echo "===== $n"
	grep -E 'MiB/s|^ *[0-9]+ +[0-9]+ ' "$out/$n.out"
	echo "--- samples by command"
	cat "$out/$n.comm"
	echo "--- samples by symbol"
	cat "$out/$n.sym"
	[ ! -s "$out/$n.callers" ] || { echo "--- callers of $callers"; cat "$out/$n.callers"; }
done
rm -rf "$out"
