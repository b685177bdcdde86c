#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# Guest side of `make run`: the default selftest session. With fastreg loaded on soft RoCE
# (rxe0), shows the device and parameters, then runs, through scripts/fastreg-lst against the
# node itself: ping, brw write and brw read of 1 MiB with check=full and 8 in flight for a
# few seconds each, then stat. Exits non-zero if any test failed.
set -uo pipefail
lst="$(dirname "$0")/fastreg-lst"
# The statistics snapshot's sections, through the control device (/dev/fastreg).
snapshot="$(dirname "$0")/fastreg_device.py"
secs=${FASTREG_RUN_SECONDS:-5}
status=0

echo "== soft RoCE"
rdma link show | sed 's/^/    /'
echo
echo "== device used by fastreg (/dev/fastreg's statistics: devices)"
while IFS= read -r line; do
	echo "    ${line%%:*}"
	for kv in ${line#*: }; do
		case ${kv%%=*} in
		fast_reg | max_fast_reg_page_list_len | page_size_cap | mr_pages | transfer_mrs | transfer_wrs | sq_depth | o2iblnd_sq_depth)
			printf '        %-28s %s\n' "${kv%%=*}" "${kv#*=}" ;;
		esac
	done
done < <(python3 "$snapshot" devices)
echo
echo "== parameters (/dev/fastreg's statistics: params)"
python3 "$snapshot" params | tr '\n' ' ' | fold -s -w 88 | sed 's/^/    /'
echo
echo

step() {
	echo "== fastreg-lst $*"
	"$lst" "$@" | sed 's/^/    /'
	local rc=${PIPESTATUS[0]}
	[ "$rc" -eq 0 ] || status=1
	echo
}

step ping --count 100 --concurrency 4
step brw write --size 1M --check full --concurrency 8 --seconds "$secs"
step brw read --size 1M --check full --concurrency 8 --seconds "$secs"
step stat
echo "== kernel log (fastreg)"
dmesg | grep -E '\] fastreg: ' | tail -n 12 | sed 's/^/    /'
echo
if [ $status -eq 0 ]; then echo "session: all tests passed"; else echo "session: FAILED"; fi
exit $status
