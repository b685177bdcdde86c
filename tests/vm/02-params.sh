#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# Every out-of-range parameter makes insmod fail with a dmesg line naming the parameter, the
# value and the allowed range; in-range values are taken as given.
. "$(dirname "$0")/lib.sh"

# name min max (the documented ranges, Documentation/parameters.rst)
ranges=(
	"pool_size 1 4096"
	"pool_max 1 65536"
	"pool_idle 1 3600"
	"queue_depth 1 256"
	"max_payload 4096 67108864"
	"port 1 65535"
	"timeout 1 3600"
	"keepalive 0 3600"
	"max_conns 1 65536"
	"max_inline 0 16384"
	"require_privileged_port 0 1"
	"test_mem 1 1024"
	"tests_mem 0 1048576"
)

# rejected NAME VALUE RANGE: insmod NAME=VALUE fails with the expected message.
rejected() {
	local name=$1 value=$2 range=$3
	dmesg_mark
	if load "$name=$value"; then
		unload
		echo "insmod $name=$value succeeded"
		return 1
	fi
	dmesg_has "fastreg: invalid parameter $name=$value: allowed range is $range" && ! loaded
}

# accepted NAME=VALUE...: insmod succeeds and debugfs shows each value.
accepted() {
	load "$@" || return 1
	local kv rc=0
	for kv in "$@"; do
		grep -qx "$kv" "$DBG/params" || { echo "$kv not in params:"; cat "$DBG/params"; rc=1; }
	done
	unload || rc=1
	return $rc
}

not_loadable() {
	! load "$@" && ! loaded
}

accepted_both() {
	local name=$1 min=$2 max=$3
	shift 3
	accepted "$name=$min" "$@" && accepted "$name=$max" "$@"
}

rejected_pair() {
	dmesg_mark
	! load pool_size=64 pool_max=16 && ! loaded &&
		dmesg_has 'fastreg: invalid parameter pool_size=64: allowed range is 1..=16 \(pool_max=16\)'
}

ktap_begin $((${#ranges[@]} * 3 + 4))
for r in "${ranges[@]}"; do
	read -r name min max <<<"$r"
	if [ "$min" -gt 0 ]; then
		check "$name=$((min - 1)) rejected" rejected "$name" $((min - 1)) "$min..=$max"
	else
		# A negative number does not parse as u32: insmod fails before the module runs.
		check "$name=-1 rejected" not_loadable "$name=-1"
	fi
	check "$name=$((max + 1)) rejected" rejected "$name" $((max + 1)) "$min..=$max"
	# pool_size may not exceed pool_max: keep the pair ordered at the extremes.
	extra=""
	[ "$name" != pool_size ] || extra="pool_max=65536"
	[ "$name" != pool_max ] || extra="pool_size=1"
	check "$name=$min and $name=$max accepted" accepted_both "$name" "$min" "$max" $extra
done
check "pool_size above pool_max rejected" rejected_pair
check "non-numeric value rejected" not_loadable queue_depth=eight
check "several non-default values accepted together" \
	accepted pool_size=4 pool_max=8 pool_idle=5 queue_depth=64 max_payload=16777216 port=20000 timeout=5 keepalive=0
check "no kernel warnings" no_kernel_errors
ktap_end
