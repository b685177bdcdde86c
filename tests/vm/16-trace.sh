#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# fastreg's tracepoints (the "fastreg" trace system, Documentation/trace.rst). Enabled
# through tracefs, a brw write and a brw read of 64 KiB (registered) and of 1 KiB (inline)
# to the node itself each show their transfer in order: submitted, its keys registered,
# every key registered meanwhile invalidated (locally, or remotely by the peer) before it
# completes with status 0. The connection's states go from idle to established on both
# sides and, at unload, on to closed with the reason. A connection request from a user
# process (perftest, from a port above 1023) is traced as rejected (unprivileged_port);
# the pool's growth under load is traced. With the events off nothing is traced. trace-cmd
# and perf record the same events (the sessions of Documentation/trace.rst).
#@ vm
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/lst.sh"

T=/sys/kernel/tracing
TRACE=/tmp/fastreg.trace
EV="python3 $FASTREG_TOP/tests/vm/trace_events.py"

tracing() {
	[ -d $T/events/fastreg ] || mount -t tracefs nodev $T 2>/dev/null
	[ -d $T/events/fastreg ]
}

# trace_on / trace_off: the fastreg events on (an empty buffer), then off, the trace kept
# in $TRACE; it fails if the buffer lost entries.
trace_on() {
	echo 0 >$T/tracing_on && : >$T/trace && echo 8192 >$T/buffer_size_kb &&
		echo 1 >$T/events/fastreg/enable && echo 1 >$T/tracing_on
}
trace_off() {
	echo 0 >$T/tracing_on && echo 0 >$T/events/fastreg/enable && cat $T/trace >$TRACE || return 1
	local n
	n=$(sed -n 's/.*entries-in-buffer\/entries-written: \([0-9]*\)\/\([0-9]*\).*/\1 \2/p' $TRACE)
	[ "${n% *}" = "${n#* }" ] || { echo "lost entries: $n"; return 1; }
}

# traced_run ARGS...: one fastreg-lst run with the events on; 1 good transfer.
traced_run() {
	trace_on && run_clean 1 "$@" --count 1 && trace_off
}

# untraced_run ARGS...: the same with the events off; nothing of fastreg's traced.
untraced_run() {
	echo 0 >$T/events/fastreg/enable && : >$T/trace && echo 1 >$T/tracing_on &&
		run_clean 1 "$@" --count 1 && echo 0 >$T/tracing_on || return 1
	! grep "fastreg_" $T/trace
}

# closed: the connection to the node itself closed (both its ends gone from conns).
closed() {
	ctl close 10.0.2.15 10.0.2.15 || return 1
	wait_for eval '! grep -qE "^  conn (->|<-) 10.0.2.15:" $DBG/conns'
}

# trace_cmd: Documentation/trace.rst's trace-cmd session on a brw write of 64 KiB.
trace_cmd() {
	trace-cmd record -q -e fastreg -o /tmp/tc.dat "$LST" brw write --size 64k --count 1 \
		>/tmp/tc.out 2>&1 || { cat /tmp/tc.out; return 1; }
	trace-cmd report -i /tmp/tc.dat >/tmp/tc.txt 2>&1 || { cat /tmp/tc.txt; return 1; }
	$EV transfer put 65536 /tmp/tc.txt
}

# perf_record: its perf session on a brw read of 64 KiB.
perf_record() {
	perf record -q -a -e 'fastreg:*' -o /tmp/perf.data -- "$LST" brw read --size 64k \
		--count 1 >/tmp/perf.out 2>&1 || { cat /tmp/perf.out; return 1; }
	perf script -i /tmp/perf.data >/tmp/perf.txt 2>&1 || { cat /tmp/perf.txt; return 1; }
	grep -q "fastreg:fastreg_xfer_done: .* kind=get bytes=65536 .* status=0" /tmp/perf.txt ||
		{ head -20 /tmp/perf.txt; return 1; }
}

# perf_stat: its perf stat line, counting 4 GETs' outcomes.
perf_stat() {
	perf stat -x, -a -e 'fastreg:fastreg_xfer_done,fastreg:fastreg_reg_mr' -o /tmp/stat.out -- \
		"$LST" brw read --size 64k --count 4 >/dev/null 2>&1 || { cat /tmp/stat.out; return 1; }
	grep -q '^4,,fastreg:fastreg_xfer_done' /tmp/stat.out || { cat /tmp/stat.out; return 1; }
}

ktap_begin 30
check "load" load
check "tracefs has the fastreg events" tracing
ls $T/events/fastreg | sed 's/^/# event: /'
# Connected first, so that the transfers below are one each on a connection that is up.
check "ping to self (connects)" run_clean 4 ping --count 4

check "brw write 64K, traced" traced_run brw write --size 64k
check "  submitted, registered, keys invalidated, completed" $EV transfer put 65536 $TRACE
check "brw read 64K, traced" traced_run brw read --size 64k
check "  submitted, registered, keys invalidated, completed" $EV transfer get 65536 $TRACE
check "  remote invalidation sent and received" \
	eval '[ "$(grep -c "fastreg_remote_inv:.* sent" $TRACE)" -ge 1 ] && [ "$(grep -c "fastreg_remote_inv:.* received" $TRACE)" -ge 1 ]'
check "brw write 1K (inline), traced: no registration" traced_run brw write --size 1k
check "  submitted and completed, nothing registered" $EV transfer put_inline 1024 $TRACE

# Off: nothing traced.
check "events off: a run traces nothing" untraced_run brw read --size 64k

# A user process asks for a connection: rejected, traced (sent, unprivileged_port).
trace_on
timeout 60 ib_send_bw -R -d $FASTREG_DEV -p 7471 -n 5 10.0.2.15 >/tmp/pt.out 2>&1
trace_off
check "a user process's connection request traced as rejected" \
	grep -q 'fastreg_conn_reject: .* rejected 10.0.2.15 reason=10 (unprivileged_port)' $TRACE

# A console's requests, to this node itself: refused while it is not allowed (EPERM), then
# answered (a run of 2 pings).
console_key() {
	head -c 64 /dev/urandom >/tmp/ck && chmod 600 /tmp/ck && "$LST" console key /tmp/ck >/dev/null
}
check "a cluster key installed" console_key
trace_on
"$LST" run --via 10.0.2.15 --from 10.0.2.15 --to 10.0.2.15 ping --count 2 >/tmp/c1.out 2>&1
c1=$?
"$LST" console allow 10.0.2.15 >/dev/null
"$LST" run --via 10.0.2.15 --from 10.0.2.15 --to 10.0.2.15 ping --count 2 >/tmp/c2.out 2>&1
c2=$?
trace_off
check "a console not allowed: refused, traced (status -1, EPERM)" eval \
	'[ $c1 != 0 ] && grep -q "fastreg_console: from=10.0.2.15 op=[a-z]* status=-1$" $TRACE ||
	 { cat /tmp/c1.out; false; }'
check "an allowed console's run: answered, traced" eval \
	'[ $c2 = 0 ] && grep -q "fastreg_console: from=10.0.2.15 op=start status=0$" $TRACE ||
	 { cat /tmp/c2.out; grep fastreg_console $TRACE; false; }'
grep -m 8 "fastreg_console" $TRACE | sed 's/^/# /'

# The pool's growth: more MRs than it holds, on a pool of 2.
check "reload with pool_size=2" eval 'unload && load pool_size=2'
trace_on
check "brw write 256K, 8 in flight (the pool grows)" run_clean 16 brw write --size 256k --concurrency 8 --count 16
trace_off
check "  pool growth traced" grep -q "fastreg_pool: $FASTREG_DEV grow count=" $TRACE
grep -m3 fastreg_pool $TRACE | sed 's/^/# /'
run_clean 4 ping --count 4 >/dev/null

# States: a new connection up from idle on both sides, and down to closed with its
# reason (closed by command).
check "connection closed" closed
trace_on
check "ping to self (a new connection), traced" run_clean 1 ping --count 1
check "connection closed, traced" closed
trace_off
check "  the connection this node opened: idle to closed" $EV states '->' closed $TRACE
check "  the one it accepted: idle to closed" $EV states '<-' closed $TRACE

# trace-cmd and perf, as in Documentation/trace.rst.
check "no connection to self (the next one is set up under trace-cmd)" eval \
	'! grep -E "^  conn (->|<-) 10.0.2.15:" $DBG/conns'
check "trace-cmd record -e fastreg: a brw write's events" trace_cmd
check "  trace-cmd parses every event (its connection's states included)" eval \
	'grep -q "fastreg_conn_state: .* idle -> resolving_addr" /tmp/tc.txt && ! grep "FAILED TO PARSE" /tmp/tc.txt'
grep -m 16 "fastreg_" /tmp/tc.txt | sed 's/^/# trace-cmd: /'
check "perf record -e 'fastreg:*': a brw read's events" perf_record
grep -m 16 "fastreg:" /tmp/perf.txt | sed 's/^/# perf: /'
check "perf stat -e fastreg:fastreg_xfer_done: 4 transfers, 4 outcomes" perf_stat
check "unload" unload
check "no oops, warning or lockdep report" no_kernel_errors
ktap_end
