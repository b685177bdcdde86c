#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# The control device, /dev/fastreg (Documentation/device.rst): root's (mode 0600; nobody
# cannot open it); a truncated, an oversized, an unknown-op, another version's and a
# bad-magic request from user space each fail their write with their errno and one log
# line, and start nothing. With debugfs unmounted, everything a user does works: the
# default session of `make run` (ping, brw write, brw read with every byte checked, stat),
# `stat --json`, and a console run with the key and the allowlist set through
# fastreg-lst (configfs). A test belongs to the file that started it: closed, the test
# stops; a second start while one runs is refused as busy; Ctrl-C on fastreg-lst stops its
# test. An open device holds the module (rmmod is refused until it is closed).
# All of it on the production module (build/ko/x86_64-production, built by `make test`;
# Documentation/testing.rst, "The test build"): its debugfs directory holds the read-only
# dumps only, and no fault attribute.
#@ vm
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/veth.sh"
. "$(dirname "$0")/lst.sh"

A=$VETH_ADDR0 B=$VETH_ADDR1
DEVREQ=("python3" "$FASTREG_TOP/tests/vm/devreq.py")
KEY=/tmp/cluster.key
KO=$FASTREG_TOP/build/ko/x86_64-production/fastreg.ko

production_ko() {
	[ -f "$KO" ] || { echo "no $KO: build it with FASTREG_TEST=0 FASTREG_OUT=build/ko/x86_64-production scripts/kmake.sh modules"; return 1; }
}

# debugfs of the production module: the dumps, nothing that takes a command or a fault.
dumps_only() {
	local files
	files=$(cd "$DBG" && ls | sort | tr '\n' ' ')
	[ "$files" = "conns devices params pools " ] && [ ! -e /sys/kernel/debug/fastreg_fail_wr ] &&
		grep -q "^$RXE_DEV0: " "$DBG/devices" || { echo "debugfs: $files"; ls /sys/kernel/debug | grep fastreg; return 1; }
}

# req OP [WORDS]: one well-formed request; its "status=N state=S" line and text in /tmp/req.
req() {
	"${DEVREQ[@]}" send "$@" >/tmp/req 2>&1
}

# answered STATUS STATE: the last req's reply had that status and state.
answered() {
	head -n1 /tmp/req | grep -qx "status=$1 state=$2" || { echo "got:"; cat /tmp/req; return 1; }
}

# raw_refused HEX ERRNO LOG: on a file with a reply pending, writing the bytes HEX fails
# with ERRNO, a read then returns nothing (the refused request dropped the reply), the log
# says LOG, and no test is running.
raw_refused() {
	dmesg_mark
	"${DEVREQ[@]}" raw "$1" >/tmp/raw 2>&1
	[ "$(cat /tmp/raw)" = "$2"$'\n'"read 0 bytes" ] || { echo "got:"; cat /tmp/raw; return 1; }
	dmesg_has "/dev/fastreg: refused a request: $3" && req poll && ! grep -q 'state=running' /tmp/req
}

hdr() { # MAGIC_HEX VERSION OP LEN: a request head, in hex
	printf '%s' "$1"
	printf '%02x%02x' $(($2 & 255)) $(($2 >> 8)) $(($3 & 255)) $(($3 >> 8))
	printf '00000000'
	printf '%02x%02x0000' $(($4 & 255)) $(($4 >> 8))
}
FRRQ=46525251

stream_only() {
	local got
	got=$("${DEVREQ[@]}" pread 2>&1)
	[ "$got" = ESPIPE ] || { echo "pread: $got"; return 1; }
}

device_node() {
	[ -c /dev/fastreg ] && [ "$(stat -c '%a %U' /dev/fastreg)" = "600 root" ] ||
		{ ls -l /dev/fastreg; return 1; }
}

nobody_refused() {
	! setpriv --reuid=nobody --regid=nogroup --clear-groups --inh-caps=-all -- \
		"${DEVREQ[@]}" send stat >/tmp/nobody 2>&1 && grep -q '/dev/fastreg: Permission denied' /tmp/nobody ||
		{ cat /tmp/nobody; return 1; }
}

debugfs_off() {
	if mountpoint -q /sys/kernel/debug; then umount /sys/kernel/debug || return 1; fi
	[ ! -e $DBG ] && ! mountpoint -q /sys/kernel/debug
}

stat_text() {
	"$LST" stat >/tmp/stat.txt 2>&1 && grep -q "^$RXE_DEV0: pool size" /tmp/stat.txt &&
		grep -q "^interface $A:7471 on $RXE_DEV0" /tmp/stat.txt && grep -q '^connections: ' /tmp/stat.txt ||
		{ cat /tmp/stat.txt; return 1; }
}

console_run() {
	head -c 64 /dev/urandom >$KEY && chmod 600 $KEY &&
		"$LST" console key $KEY >/dev/null && "$LST" console allow $A >/dev/null &&
		"$LST" run --via $A --json --from $B --to $A brw write --size 64k --check full --count 16 \
			>$OUT 2>/tmp/run.err || { cat $OUT /tmp/run.err; return 1; }
	expect "r['status'] == 'ok' and r['ops'] == 16 and r['errors'] == 0 and r['corrupt'] == 0 and r['error_nodes'] == 0"
}

closed_stops() {
	dmesg_mark
	"${DEVREQ[@]}" start-and-exit brw write size=4096 from=$A peers=$A seconds=300 >/tmp/req 2>&1 &&
		answered 0 running &&
		wait_for eval "req poll && answered 0 over" &&
		dmesg_has 'lst: the file that started the test is closed: the test stops'
}

busy_then_interrupted() {
	dmesg_mark
	# A shell's background job ignores SIGINT: fastreg-lst gets it back, as from a terminal.
	env --default-signal=INT "$LST" brw write --from $A --peer $A --size 4k --seconds 120 >/tmp/bg.out 2>&1 &
	local pid=$!
	wait_for eval "req poll && answered 0 running" || return 1
	req start ping from=$A && answered -16 running && grep -q 'a test is running already' /tmp/req || return 1
	kill -INT $pid
	local rc=0
	wait $pid || rc=$?
	[ $rc = 1 ] && grep -q 'interrupted' /tmp/bg.out || { echo "rc $rc"; cat /tmp/bg.out; return 1; }
	# Stopped by its stop request and over before fastreg-lst closed the file: not by the close.
	req poll && answered 0 over && ! dmesg_since_mark | grep -q 'the file that started the test is closed' 
}

held_module() {
	"${DEVREQ[@]}" hold 120 >/tmp/hold 2>&1 &
	local pid=$!
	wait_for grep -q open /tmp/hold || return 1
	local refused=0
	rmmod fastreg 2>/tmp/rmmod.err || refused=1
	kill $pid
	wait $pid
	[ $refused = 1 ] && loaded || { echo "rmmod with the device open:"; cat /tmp/rmmod.err; return 1; }
}

ktap_begin 34
check "two $RDMA_KIND devices on a veth pair" veth_up
BEFORE=$(resource_counts)
check "the production module is built" production_ko
check "insmod timeout=10 (the production module)" load timeout=10
check "  its debugfs: params, devices, pools, conns; no ctl, lst, console, fastreg_fail_wr" dumps_only
check "/dev/fastreg is root's, mode 0600" device_node
check "  nobody cannot open it" nobody_refused
check "no test yet: wait and result answer ENOENT" eval "req wait && answered -2 idle && req result && answered -2 idle"

check "truncated head: EINVAL" raw_refused "${FRRQ}0100060000" EINVAL truncated
check "truncated body: EINVAL" raw_refused "$(hdr $FRRQ 1 1 20)70696e67" EINVAL truncated
check "oversized write: E2BIG" raw_refused "$(hdr $FRRQ 1 1 1025)$(printf '70%.0s' $(seq 1025))" E2BIG oversized
check "  a head claiming more than a body holds: E2BIG" raw_refused "$(hdr $FRRQ 1 1 2000)70696e67" E2BIG oversized
check "unknown op: EOPNOTSUPP (ENOTSUP)" raw_refused "$(hdr $FRRQ 1 99 0)" ENOTSUP "unknown op 99"
check "another version: EPROTONOSUPPORT" raw_refused "$(hdr $FRRQ 2 6 0)" EPROTONOSUPPORT "version 2"
check "bad magic: EINVAL" raw_refused "$(hdr 46525250 1 6 0)" EINVAL 'not a fastreg request \(bad magic\)'
check "bytes after the body: EINVAL" raw_refused "$(hdr $FRRQ 1 6 0)00" EINVAL "bytes after the body"
check "a start's words refused: status EINVAL, the reason in the reply" \
	eval "req start brw write size=0 && answered -22 idle && grep -q '^refused: ' /tmp/req"
check "nothing started by any of them" eval "req poll && answered -2 idle"
check "the device is a stream: pread refused (ESPIPE)" stream_only

check "debugfs unmounted" debugfs_off
check "  ping" run_clean 10 ping --from $A --peer $A
check "  brw write 1M, check full, concurrency 8" run_clean 16 brw write --from $A --peer $A --size 1M --check full --concurrency 8 --count 16
check "  brw read 1M, check full, concurrency 8" run_clean 16 brw read --from $A --peer $A --size 1M --check full --concurrency 8 --count 16
check "  stat" stat_text
check "  stat --json" eval "lst stat && expect \"len(r['devices']) >= 2 and '$A' in [i['address'].split(':')[0] for i in r['interfaces']] and len(r['connections']) > 0\""
check "  a console run (key and allowlist set by fastreg-lst, in configfs)" console_run
check "  debugfs still unmounted" eval "! mountpoint -q /sys/kernel/debug"

check "a test stops when the file that started it is closed" closed_stops
check "a start while a test runs: EBUSY; Ctrl-C on fastreg-lst stops its test" busy_then_interrupted
check "rmmod refused while the device is open" held_module

check "debugfs mounted again (for the checks below)" mount -t debugfs none /sys/kernel/debug
unload_checks "$BEFORE"
ktap_end
