#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# configfs (Documentation/configfs.rst): an interface made in /sys/kernel/config/fastreg/
# (mkdir, its attributes, enable) on a second address of the device's NIC, serving and
# starting transfers; every attribute fed bad input (out of range at both ends, not a
# number, too long, not an address, a device that does not exist, an address not on the
# device, an address and port taken) gets its error and one log line naming it, and
# changes nothing; a live interface refuses changes (EBUSY); disabled, enabled again;
# removed under load, it returns and leaves nothing. The console's allowlist and key as
# attributes (the key write-only, never logged). rmmod is refused while a directory
# exists. On rxe and on siw.
#@ vm
#@ vm --rdma siw
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/lst.sh"

CFG=/sys/kernel/config/fastreg
A=$FASTREG_ADDR
B=10.0.2.99
IF=$CFG/if0

mounted() {
	mountpoint -q /sys/kernel/config || mount -t configfs none /sys/kernel/config
	[ -d $CFG ] && [ -f $CFG/console_allow ] && [ -f $CFG/console_deny ] && [ -f $CFG/console_key ]
}

# second_address: B on the NIC (the device gets its GID).
second_address() {
	ip addr add $B/24 dev "$FASTREG_NIC" && wait_for eval "rdma link show | grep -q ."
}

# put FILE VALUE: writes VALUE (no newline added) to FILE; prints the error, fails with it.
put() {
	local out
	out=$( (printf '%s' "$2" >"$1") 2>&1) || { echo "${out##*: }"; return 1; }
}

# refused DIR ATTR VALUE ERROR [LOG]: writing VALUE to DIR/ATTR fails with ERROR (strerror
# text), the attribute reads the same as before, and the log names the attribute and the
# value (LOG: the text it must hold instead, for a value not shown).
refused() {
	local dir=$1 attr=$2 v=$3 want=$4 log=${5-} before after err
	before=$(cat "$dir/$attr")
	dmesg_mark
	if err=$(put "$dir/$attr" "$v"); then
		echo "$attr: '$v' taken"
		return 1
	fi
	[ "$err" = "$want" ] || { echo "$attr: '$v': '$err', not '$want'"; return 1; }
	after=$(cat "$dir/$attr")
	[ "$before" = "$after" ] || { echo "$attr changed: '$before' -> '$after'"; return 1; }
	[ -n "$log" ] || log="configfs fastreg/${dir##*/}/$attr: refused \"${v:0:32}"
	dmesg_since_mark | grep -qF "$log" || { echo "no log line '$log'"; dmesg_since_mark | tail -3; return 1; }
}

# iface_line ADDR:PORT: the interface's line in conns.
iface_line() {
	grep "^iface [^ ]* $1 " "$CONNS"
}

CONNS=$DBG/conns

# bad_inputs: each attribute of if0 refuses what it does not take.
bad_inputs() {
	local fails=0 x
	while read -r attr v want; do
		x=$(refused $IF "$attr" "$v" "$want") || { echo "$x"; fails=$((fails + 1)); }
	done <<'EOF'
queue_depth 0 Invalid argument
queue_depth 257 Invalid argument
queue_depth abc Invalid argument
queue_depth -1 Invalid argument
queue_depth 18446744073709551617 Invalid argument
port 0 Invalid argument
port 65536 Invalid argument
max_payload 4095 Invalid argument
max_payload 67108865 Invalid argument
max_regs 0 Invalid argument
max_regs 33 Invalid argument
mr_pages 0 Invalid argument
mr_pages 65537 Invalid argument
max_inline 16385 Invalid argument
address 10.0.2 Invalid argument
address 300.1.1.1 Invalid argument
address 10.0.2.99x Invalid argument
device nosuch0 No such device
enable 2 Invalid argument
EOF
	x=$(refused $IF queue_depth "$(printf '1%.0s' $(seq 100))" "Invalid argument") || { echo "$x"; fails=$((fails + 1)); }
	x=$(refused $IF device "$(printf 'rx\te0')" "Invalid argument" 'fastreg/if0/device: refused "rx\x09e0": not a device name') ||
		{ echo "$x"; fails=$((fails + 1)); }
	x=$(refused $IF enable 1 "Invalid argument" "fastreg/if0/enable: refused \"1\": set device and address first") ||
		{ echo "$x"; fails=$((fails + 1)); }
	[ $fails = 0 ]
}

# ranges_named: the log line of an out-of-range value says what the attribute takes.
ranges_named() {
	dmesg | grep -q 'configfs fastreg/if0/queue_depth: refused "257": out of range (takes 1..256)' &&
		dmesg | grep -q 'configfs fastreg/if0/max_payload: refused "4095": out of range (takes 4096..67108864)'
}

configure() {
	put $IF/device "$FASTREG_DEV" && put $IF/address $B && put $IF/queue_depth 16 &&
		put $IF/max_payload 1M && [ "$(cat $IF/queue_depth)" = 16 ] &&
		[ "$(cat $IF/max_payload)" = 1048576 ] && [ "$(cat $IF/address)" = $B ] &&
		[ "$(cat $IF/device)" = "$FASTREG_DEV" ]
}

enabled() {
	put $IF/enable 1 && [ "$(cat $IF/enable)" = 1 ] && iface_line $B:7471 | grep -q "queue_depth=16"
}

# made_and_refused NAME ADDR ERROR: a directory NAME set to ADDR on the device whose enable
# fails with ERROR, leaving no interface at ADDR; then removed.
made_and_refused() {
	local d=$CFG/$1 err
	mkdir $d && put $d/device "$FASTREG_DEV" && put $d/address $2 || return 1
	if err=$(put $d/enable 1); then
		echo "enabled on $2"
		rmdir $d
		return 1
	fi
	[ "$err" = "$3" ] || { echo "'$err', not '$3'"; rmdir $d; return 1; }
	[ "$(cat $d/enable)" = 0 ] || { echo "reads enabled"; rmdir $d; return 1; }
	rmdir $d
}

ktap_begin 37
check "load" load
check "configfs: /sys/kernel/config/fastreg with the console's attributes" mounted
check "a second address on the NIC ($B)" second_address
check "mkdir if0: its attributes" eval "mkdir $IF && ls $IF | tr '\n' ' ' | grep -q 'address device enable max_inline max_payload max_regs mr_pages port queue_depth'"
check "  defaults: the module parameters" eval "[ \"\$(cat $IF/queue_depth)\" = 8 ] && [ \"\$(cat $IF/port)\" = 7471 ] && [ \"\$(cat $IF/enable)\" = 0 ]"
check "bad input refused, nothing changed, each logged with its value" bad_inputs
check "  out of range: the log says what it takes" ranges_named
check "configured: device, address, queue_depth=16, max_payload=1M" configure
check "enable: listening on $B:7471 with queue_depth 16" enabled
check "  the debugfs commands leave it be (iface del, iface add retuning it: busy)" eval \
	"! ctl iface del $B >/dev/null && ! ctl iface add $FASTREG_DEV $B queue_depth=4 >/dev/null && iface_line $B:7471 | grep -q queue_depth=16"
check "  a change to the live interface refused (EBUSY), nothing changed" \
	refused $IF queue_depth 32 "Device or resource busy" "configfs fastreg/if0/queue_depth: refused \"32\": the interface is enabled"
check "  its address too" refused $IF address 10.0.2.98 "Device or resource busy"
check "brw write from it to $A: 8 good transfers" run_clean 8 brw write --from $B --peer $A --size 64k --count 8 --check full
check "brw read from $A to it: 8 good transfers" run_clean 8 brw read --from $A --peer $B --size 256k --count 8 --check full
check "an address not on the device: enable fails, nothing made" made_and_refused if1 10.9.9.9 "Cannot assign requested address"
check "an address and port taken ($A:7471, the default interface): enable fails" made_and_refused if2 $A "Address already in use"
check "disable: the interface gone" eval "put $IF/enable 0 && [ \"\$(cat $IF/enable)\" = 0 ] && ! iface_line $B:7471"
check "  changes taken again (queue_depth 32)" eval "put $IF/queue_depth 32 && [ \"\$(cat $IF/queue_depth)\" = 32 ]"
check "enable again: back, with queue_depth 32" eval "put $IF/enable 1 && iface_line $B:7471 | grep -q queue_depth=32"

# Removed under load: 1 MiB writes, 8 in flight, from the interface to A, for up to 60 s.
R0=$(registrations $FASTREG_DEV)
"$LST" --json brw write --from $B --peer $A --size 1M --concurrency 8 --seconds 60 >/tmp/load.json 2>&1 &
LOAD=$!
check "  under load (32 registrations more)" wait_for eval "[ \"\$(registrations $FASTREG_DEV)\" -gt $((R0 + 32)) ]"
check "rmdir under load returns" timeout 120 rmdir $IF
check "  the interface is gone" eval "! iface_line $B:7471"
check "  the run ends" wait_for eval "[ ! -d /proc/$LOAD ] || grep -q '^State:.*Z' /proc/$LOAD/status"
check "  no connection of it left (its peer's end closed too)" wait_for eval "! grep -E '^  conn (->|<-) $B:' $CONNS"

# The device removed under an enabled interface: the removal returns (the directory names
# its interface, it does not hold it: it once held the device's resources, and
# ib_unregister_device waited for them until the directory was disabled), the directory
# reads disabled and takes changes, and enables again once the device is back.
device_gone() {
	mkdir $IF && put $IF/device "$FASTREG_DEV" && put $IF/address $B && put $IF/enable 1 &&
		iface_line $B:7471 >/dev/null || return 1
	timeout 120 rdma link delete "$FASTREG_DEV" || { echo "rdma link delete did not return"; return 1; }
	[ "$(cat $IF/enable)" = 0 ] || { echo "still reads enabled"; return 1; }
	! iface_line $B:7471 || { echo "interface listed"; return 1; }
	put $IF/queue_depth 4 || { echo "a change refused"; return 1; }
}
device_back() {
	rdma link add "$FASTREG_DEV" type "$FASTREG_RDMA" netdev "$FASTREG_NIC" &&
		wait_for eval "grep -q '^$FASTREG_DEV:' $DBG/devices" &&
		wait_for eval "rdma link show $FASTREG_DEV/1 | grep -q 'state ACTIVE'" &&
		wait_for put $IF/enable 1 && iface_line $B:7471 | grep -q queue_depth=4 && rmdir $IF
}
check "device removed under an enabled interface: returns, reads disabled, takes changes" device_gone
check "  device back: enabled again, then removed" device_back

# The console's attributes.
check "console_allow: $A listed" eval "put $CFG/console_allow $A && grep -q '$A' $CFG/console_allow"
check "  a bad address refused" refused $CFG console_allow 10.0.2 "Invalid argument" "configfs fastreg/./console_allow: refused \"10.0.2\""
check "console_deny: $A no longer listed" eval "put $CFG/console_deny $A && ! grep -q '$A' $CFG/console_allow"
KEY=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')
check "console_key: a key installed, its fingerprint listed" eval "put $CFG/console_key $KEY && grep -q 'key [0-9a-f]\{8\};' $CFG/console_allow"
check "  reading it is refused" eval "! cat $CFG/console_key 2>/dev/null"
check "  a bad key refused, and not logged" eval "dmesg_mark; ! put $CFG/console_key ${KEY:0:63}z && ! dmesg | grep -q '${KEY:0:16}' && dmesg_since_mark | grep -q 'console_key: refused: not 64 hex digits'"
check "  removed (none)" eval "put $CFG/console_key none && grep -q 'key none;' $CFG/console_allow"

check "rmmod refused while a directory exists" eval "mkdir $CFG/if3 && ! rmmod fastreg 2>/dev/null && loaded"
check "  rmdir, then unload" eval "rmdir $CFG/if3 && unload"
check "no RDMA resources left" no_fastreg_resources
check "no oops, warning or lockdep report" no_kernel_errors
ktap_end
