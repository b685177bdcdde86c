# SPDX-License-Identifier: GPL-2.0
# Guest-side helpers for the VM tests: KTAP output, module load/unload, resource and dmesg
# checks. Sourced by tests/vm/*.sh, which run inside scripts/vm.sh.

KO=${FASTREG_KO:-${FASTREG_TOP:?run through scripts/vm.sh}/fastreg.ko}
DBG=/sys/kernel/debug/fastreg
_n=0
_failed=0
# fd 3: the suite's own output, for diagnostics from inside a check (whose output is the
# check's). Opened here for every suite: an fd 3 inherited from the guest's init is the
# console, where a write can block for ever once the boot log is no longer read (08's
# first trace check hung there).
exec 3>&1

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
# KTAP diagnostics when it fails; a point that took 10 s or more says how long (where a
# suite's time goes).
check() {
	local name=$1 out start=$SECONDS
	shift
	if out=$("$@" 2>&1); then
		ok "$name"
	else
		[ -z "$out" ] || printf '%s\n' "$out" | sed 's/^/# /'
		not_ok "$name"
	fi
	[ $((SECONDS - start)) -lt 10 ] || echo "# (took $((SECONDS - start)) s)"
}

ktap_end() {
	exit $((_failed > 0))
}

# Marks the kernel log so later checks only look at what came after.
DMESG_MARK=0
dmesg_mark() {
	DMESG_MARK=$(dmesg | wc -l)
	MARK_UPTIME=$(cut -d' ' -f1 /proc/uptime)
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
# The sanitizer kernel's (scripts/kernel-debug.config): KASAN and lockdep say "BUG:" or
# "WARNING:" (above); SLUB debugging "BUG <cache> (...)" and "Poison overwritten"; debug
# objects "ODEBUG:". kmemleak's leaks are read from its file (kmemleak_report): its log line
# counts what boot left too.
KERNEL_ERRORS+='|BUG [^ ]+ \(|Poison overwritten|Redzone|ODEBUG:'

# kmemleak_report: on a kernel with kmemleak, with fastreg unloaded, scans twice and prints
# every unreferenced object found since the VM started (scripts/vm-guest.sh clears what
# boot left); prints nothing elsewhere.
kmemleak_report() {
	local k=/sys/kernel/debug/kmemleak
	[ -w $k ] && ! loaded || return 0
	echo scan >$k 2>/dev/null || return 0
	sleep 1
	echo scan >$k
	cat $k
}

# Fails (printing them) if the kernel logged any of KERNEL_ERRORS, or kmemleak finds a leak
# (with the module unloaded).
no_kernel_errors() {
	local leaks
	leaks=$(kmemleak_report)
	[ -z "$leaks" ] || { echo "kmemleak:"; printf '%s\n' "$leaks" | head -n 60; return 1; }
	! dmesg | grep -E -B3 -A5 "$KERNEL_ERRORS"
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
# unload_checks BEFORE: a suite's last 4 points: unload, no fastreg RDMA resource left, the
# rdma resource counts as BEFORE (resource_counts before loading), no kernel report (and,
# where kmemleak is on, no leak).
unload_checks() {
	check "unload" unload
	check "no fastreg RDMA resources left" no_fastreg_resources
	check "rdma resource counts back to what they were before loading" \
		bash -c "[ \"\$(. tests/vm/lib.sh; resource_counts)\" = '$1' ]"
	check "no kernel report (and no leak, where kmemleak is on)" no_kernel_errors
}

# lst_direct WORDS...: one selftest command written straight to the lst file (the CLI's
# start costs seconds under emulation); prints "ops errors corrupt" of its run, nothing if
# the command was refused (the file still holds the previous result: never the same line,
# its time differs). Its status is the write's: 0 only when every transfer was good.
lst_direct() {
	local before rc
	before=$(head -n1 "$DBG/lst" 2>/dev/null)
	echo "$*" >"$DBG/lst" 2>/dev/null
	rc=$?
	[ "$(head -n1 "$DBG/lst")" != "$before" ] || return 1
	sed -n '1s/^test=.* ops=\([0-9]*\) bytes=[0-9]* errors=\([0-9]*\) corrupt=\([0-9]*\) .*/\1 \2 \3/p' "$DBG/lst"
	return $rc
}

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
# A listing that fails counts as something left: a PD or MR that outlives the module makes
# `rdma resource show` fault on its name (in the module's freed memory), and the killed
# command printed nothing, which passed for "nothing left" (06 on siw, module of 1f757e2).
fastreg_resources() {
	local r out
	for r in pd cq qp mr cm_id; do
		out=$(rdma resource show "$r" 2>&1) || { echo "$r: 'rdma resource show $r' failed: $out"; return 1; }
		grep -F '[fastreg]' <<<"$out" | sed "s/^/$r: /"
	done
	true
}

no_fastreg_resources() {
	local left
	left=$(fastreg_resources) && [ -z "$left" ] || { echo "left behind: $left"; return 1; }
}

# Summary line of `rdma resource show` for all devices (counts per type), to compare.
resource_counts() {
	rdma resource show | sed 's/^[0-9]*: //'
}

# registrations DEV...: the registrations counted by the pools of DEVs, summed.
registrations() {
	local n=0 line r dev
	while read -r line; do
		for dev in "$@"; do
			case "$line" in
			"$dev: "*)
				r=${line##* registrations=}
				n=$((n + ${r%% *})) ;;
			esac
		done
	done <"$DBG/pools"
	echo $n
}

# registered N DEV...: the pools of DEVs have counted at least N registrations.
registered() {
	local want=$1 n
	shift
	n=$(registrations "$@")
	[ "$n" -ge "$want" ] || { echo "$n registrations on $*, not $want"; return 1; }
}

# listening PORT: an RDMA CM ID listens on PORT (a perftest server is ready for its client).
listening() {
	rdma resource show cm_id | grep -qE "LISTEN.*:$1( |$)"
}

# wait_for CMD...: polls CMD every WAIT_POLL seconds (0.2 unless set) until it succeeds, at
# most WAIT_S seconds (90 unless set); fails with CMD's last output if it never does. How a test knows that
# transfers it started in the background are moving data (`wait_for registered N DEV`):
# the CLI alone takes seconds to start under emulation, so a fixed sleep proves nothing.
wait_for() {
	local limit=${WAIT_S:-90}
	local deadline=$((SECONDS + limit)) out
	until out=$("$@" 2>&1); do
		[ $SECONDS -lt $deadline ] || { echo "after $limit s: ${out:-$* failed}"; return 1; }
		sleep "${WAIT_POLL:-0.2}"
	done
}

# blocked_tasks: every task in uninterruptible sleep, with its kernel stack.
blocked_tasks() {
	local t
	for t in /proc/[0-9]*; do
		grep -q '^State:.*D' "$t/status" 2>/dev/null || continue
		echo "$(cat "$t/comm" 2>/dev/null) (${t#/proc/}):"
		cat "$t/stack" 2>/dev/null
	done
}

# no_hang SECS CMD...: CMD succeeds within SECS seconds. One still running then (stuck in
# the kernel: a deadlock leaves it unkillable) fails the point with the blocked tasks'
# stacks; its output goes to a file, so that it cannot hold the point's output open.
no_hang() {
	local secs=$1 pid rc out=/tmp/no_hang.$$.out
	shift
	"$@" >"$out" 2>&1 &
	pid=$!
	local deadline=$((SECONDS + secs))
	while kill -0 $pid 2>/dev/null; do
		if [ $SECONDS -ge $deadline ]; then
			cat "$out"
			echo "still running after $secs s; blocked tasks:"
			blocked_tasks
			return 1
		fi
		sleep 0.5
	done
	wait $pid
	rc=$?
	cat "$out"
	return $rc
}

# fired TIMES_FILE TIMES: the fault attribute whose `times` file is TIMES_FILE, armed with
# TIMES, fired at least once.
fired() {
	local left
	left=$(cat "$1")
	[ "$left" -lt "$2" ] || { echo "the fault never fired (times still $left)"; return 1; }
}

# ff_arm FN RETVAL PROB TIMES: the kernel's fail_function (fault-injection.rst) makes FN
# return RETVAL on PROB % of its calls, at most TIMES times (-1: no limit), silently; fails
# if the kernel refuses any of it (then nothing is left armed). ff_disarm FN [TIMES]: FN
# runs as written again; given the TIMES it was armed with, fails unless FN failed at
# least once (removing FN leaves the attribute's `times` as it was).
FF=/sys/kernel/debug/fail_function
ff_arm() {
	local fn=$1
	echo "$fn" >"$FF/inject" || return 1
	printf '%#x\n' "$2" >"$FF/$fn/retval" && echo "$3" >"$FF/probability" &&
		echo 1 >"$FF/interval" && echo "$4" >"$FF/times" && echo 0 >"$FF/verbose" ||
		{ ff_disarm "$fn"; return 1; }
}
ff_disarm() {
	echo "!$1" >"$FF/inject"
	[ -z "${2:-}" ] || fired "$FF/times" "$2" || { echo "$1 never failed"; return 1; }
}

# Heavy work, seen from the verbs helpers only it calls: a buffer mapped
# (fastreg_ib_dma_map_sg), an MR allocated (fastreg_ib_alloc_mr), a registered buffer's data
# read or written by the CPU (fastreg_ib_dma_sync_sg_for_cpu). heavy_probes_on puts a kprobe
# with a stack trace on each; heavy_seen reads the trace: every probe fired (NAME=N hits),
# and none from a CQ's completion handler (ib_core's poll work or softirq on the stack);
# heavy_probes_off removes them.
TRACING=/sys/kernel/tracing
HEAVY="map_sg:fastreg_ib_dma_map_sg alloc_mr:fastreg_ib_alloc_mr cpu:fastreg_ib_dma_sync_sg_for_cpu"
# probes_on GROUP "NAME:FUNCTION ..." [FETCH FILTER]: a kprobe with a stack trace on each
# FUNCTION, as events GROUP/NAME, on a cleared trace (fetching FETCH and recorded only when
# FILTER holds, if given); probes_off GROUP "NAME:FUNCTION ..." removes them.
probes_on() {
	local p e
	echo 0 >$TRACING/tracing_on && echo >$TRACING/trace && echo 16384 >$TRACING/buffer_size_kb ||
		return 1
	# fastreg's symbols while it is loaded: a stack read after rmmod has bare addresses.
	grep '\[fastreg\]$' /proc/kallsyms >/tmp/fastreg.kallsyms
	for p in $2; do
		e=$TRACING/events/$1/${p%%:*}
		echo "p:$1/${p%%:*} ${p#*:} ${3:-}" >>$TRACING/kprobe_events || return 1
		if [ -n "${4:-}" ]; then
			echo "$4" >$e/filter && echo "stacktrace if $4" >$e/trigger || return 1
		else
			echo stacktrace >$e/trigger || return 1
		fi
	done
	echo 1 >$TRACING/events/$1/enable && echo 1 >$TRACING/tracing_on
}
probes_off() {
	local p
	echo 0 >$TRACING/events/$1/enable
	for p in $2; do
		echo '!stacktrace' >$TRACING/events/$1/${p%%:*}/trigger
		echo "-:$1/${p%%:*}" >>$TRACING/kprobe_events
	done
}
heavy_probes_on() { probes_on fastreg_heavy "$HEAVY"; }
heavy_probes_off() { probes_off fastreg_heavy "$HEAVY"; }

# Allocation, seen where every allocation of fastreg's Rust code goes (the kernel crate's
# allocators call krealloc_node_align or vrealloc_node_align; a free is a call of size 0,
# filtered out). alloc_probes_on adds the kprobes (after heavy_probes_on: it clears the
# trace); alloc_seen fails unless fastreg's own allocations were seen (the probes work) and
# none came from a CQ's completion handler.
ALLOCS="krealloc:krealloc_node_align_noprof vrealloc:vrealloc_node_align_noprof"
alloc_probes_on() { probes_on fastreg_alloc "$ALLOCS" 'size=$arg2:u64' 'size > 0'; }
alloc_probes_off() { probes_off fastreg_alloc "$ALLOCS"; }
alloc_seen() { stacks_seen alloc; }

# Teardown without polling: a connection's teardown, the device's removal and the drain
# wait for events (a completion, the device's answer to a connect, the last of a count),
# never in a loop of short sleeps. sleep_probes_on puts a kprobe with a stack trace on the
# kernel's timed sleeps (usleep_range_state, msleep: what fsleep calls); sleep_seen fails
# when one was called from fastreg's teardown, removal or drain (their functions on the
# stack), and shows those stacks.
SLEEPS="usleep:usleep_range_state msleep:msleep"
sleep_probes_on() { probes_on fastreg_sleep "$SLEEPS"; }
sleep_probes_off() { probes_off fastreg_sleep "$SLEEPS"; }
sleep_seen() { stacks_seen sleep; }
heavy_seen() { stacks_seen heavy "$HEAVY"; }

# Where the completion handlers run: a kprobe (no stack) on each instance of fastreg's
# completion callback (`Completion::done_callback`, what ib_core calls for each CQE), after
# the other probes (this one does not clear the trace); softirq_seen fails unless they fired
# and every hit was in softirq (ftrace's context flag "s"), where a handler that slept or
# allocated with GFP_KERNEL would be reported by DEBUG_ATOMIC_SLEEP, and lockdep would report
# a lock it shares with process context taken there with softirqs on.
handler_probes_on() {
	local i=0 sym
	for sym in $(awk '$3 ~ /done_callback/ && $4 == "[fastreg]" { print $3 }' /proc/kallsyms); do
		echo "p:fastreg_cq/done$i $sym" >>$TRACING/kprobe_events || return 1
		i=$((i + 1))
	done
	[ $i -gt 0 ] && echo 1 >$TRACING/events/fastreg_cq/enable
}
handler_probes_off() {
	echo 0 >$TRACING/events/fastreg_cq/enable
	grep -o 'fastreg_cq/done[0-9]*' $TRACING/kprobe_events | while read -r e; do
		echo "-:$e" >>$TRACING/kprobe_events
	done
}
softirq_seen() { stacks_seen softirq; }

# stacks_seen KIND [SPEC]: tests/vm/trace_stacks.py's check KIND on the trace; its figures
# as a diagnostic of the suite (fd 3, when it has one), and the check's.
stacks_seen() {
	# Read with recording stopped (events still arriving make reading the trace slow).
	echo 0 >$TRACING/tracing_on
	python3 "$FASTREG_TOP/tests/vm/trace_stacks.py" "$1" "$TRACING/trace" "${2:-}" >/tmp/stacks_seen.$1
	local rc=$?
	{ head -n1 /tmp/stacks_seen.$1 >&3; } 2>/dev/null
	cat /tmp/stacks_seen.$1
	return $rc
}

# skip NAME WHY: a test point that cannot be made here, said so (KTAP SKIP: neither passed
# nor failed in the counts).
skip() {
	_n=$((_n + 1))
	echo "ok $_n $1 # SKIP $2"
}
