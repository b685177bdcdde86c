# SPDX-License-Identifier: GPL-2.0
# Guest-side helpers for the VM tests: KTAP output, module load/unload, resource and dmesg
# checks. Sourced by tests/vm/*.sh, which run inside scripts/vm.sh.

KO=${FASTREG_KO:-${FASTREG_TOP:?run through scripts/vm.sh}/fastreg.ko}
DBG=/sys/kernel/debug/fastreg
_n=0
_failed=0

ktap_begin() {
	echo "KTAP version 1"
	echo "1..$1"
}

ok() {
	_n=$((_n + 1))
	echo "ok $_n $1"
}

not_ok() {
	_n=$((_n + 1))
	_failed=$((_failed + 1))
	echo "not ok $_n $1${2:+ # $2}"
}

# check NAME CMD...: one test point, passing when CMD succeeds. CMD's output is shown as
# KTAP diagnostics when it fails.
check() {
	local name=$1 out
	shift
	if out=$("$@" 2>&1); then
		ok "$name"
	else
		[ -z "$out" ] || printf '%s\n' "$out" | sed 's/^/# /'
		not_ok "$name"
	fi
}

ktap_end() {
	exit $((_failed > 0))
}

# Marks the kernel log so later checks only look at what came after.
DMESG_MARK=0
dmesg_mark() {
	DMESG_MARK=$(dmesg | wc -l)
}

dmesg_since_mark() {
	dmesg | tail -n +$((DMESG_MARK + 1))
}

# What the kernel must never log in a test: an oops, a BUG, a warning, a lockdep report, a
# task blocked past the hung-task timeout (vm-guest.sh sets it short), an RCU stall, and
# fastreg's own invariant messages.
KERNEL_ERRORS='BUG:|WARNING:|Oops|general protection|Call Trace|possible circular|inconsistent lock|UBSAN|refcount_t:'
KERNEL_ERRORS+='|INFO: task .* blocked|INFO: rcu|rcu_.* self-detected stall|detected stalls'
KERNEL_ERRORS+='|fastreg: .*(completion lost|accepted part of a chain|send queue: released|invariant)'

# Fails (printing them) if the kernel logged any of KERNEL_ERRORS.
no_kernel_errors() {
	! dmesg | grep -E -A5 "$KERNEL_ERRORS"
}

# dmesg_has REGEX: the kernel logged a line matching REGEX since the mark.
dmesg_has() {
	dmesg_since_mark | grep -E -q "$1" || {
		echo "no line matching '$1' in:"
		dmesg_since_mark | tail -n 20
		return 1
	}
}

# ctl COMMAND...: writes a command to the debugfs ctl file; prints its answer on failure.
ctl() {
	echo "$*" >"$DBG/ctl" || { echo "'$*' failed: $(cat "$DBG/ctl")"; return 1; }
}

load() {
	# shellcheck disable=SC2068 # each argument is one k=v parameter
	insmod "$KO" $@
}

unload() {
	rmmod fastreg
}

loaded() {
	grep -q '^fastreg ' /proc/modules
}

# Prints every RDMA resource (pd, cq, qp, mr, cm_id) that fastreg owns; empty when none.
fastreg_resources() {
	local r
	for r in pd cq qp mr cm_id; do
		rdma resource show "$r" 2>/dev/null | grep -F '[fastreg]' | sed "s/^/$r: /"
	done
	true
}

no_fastreg_resources() {
	local left
	left=$(fastreg_resources)
	[ -z "$left" ] || { echo "left behind: $left"; return 1; }
}

# Summary line of `rdma resource show` for all devices (counts per type), to compare.
resource_counts() {
	rdma resource show | sed 's/^[0-9]*: //'
}
