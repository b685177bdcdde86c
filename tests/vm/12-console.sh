#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# The selftest console's trust model and its ends, in one VM (tests/cluster/04-console.sh
# has the runs across nodes): two consoles, A (10.1.0.1) and A2 (10.1.0.3, a second
# interface on A's device), drive node B (10.1.0.2) over the veth pair. A console that is
# not allowed is refused, with one log line however often it asks; a node is in one
# session at a time (the second console is told who holds it); Ctrl-C stops the test on
# the node and leaves the session; denying the console of a running test ends its
# session and stops the test, and that console's run ends, counting the node in error; a
# server whose interface goes away mid-run is counted lost, and the run ends.
#
# A console proves the cluster key, not its address: without a key a node refuses every
# console, and a console node refuses to send; the key is never shown back. A user-space
# console (tests/peer/console.py through tests/peer/forge.c, as root from a privileged
# port on the holder's own address, or as nobody) with a wrong key, or with the session's
# id and no key, or replaying a request, is refused and counted, and the real session and
# its test go on.
#@ vm
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/veth.sh"
. "$(dirname "$0")/lst.sh"

A=$VETH_ADDR0 B=$VETH_ADDR1 A2=10.1.0.3
KEY=/tmp/cluster.key WRONG=/tmp/wrong.key FORGE=/tmp/forge

keys_and_forger() {
	head -c 64 /dev/urandom >$KEY && head -c 64 /dev/urandom >$WRONG &&
		chmod 600 $KEY $WRONG && modprobe rdma_ucm &&
		gcc -O2 -Wall -o $FORGE "$FASTREG_TOP/tests/peer/forge.c" -lrdmacm -libverbs
}

# user_console WHO SRC CASE [ARG] [--key FILE]: tests/peer/console.py as WHO (root or
# nobody) from SRC (IP:PORT) to B, with A's incarnation (so B sees no restart); its lines
# in /tmp/uc.out.
user_console() {
	local who=$1 src=$2 stamp
	shift 2
	stamp=$(sed -n "s/^iface [^ ]* ${src%:*}:7471 .* stamp=\(0x[0-9a-f]*\).*/\1/p" "$CONNS")
	local cmd=(python3 "$FASTREG_TOP/tests/peer/console.py" --forge $FORGE --src "$src"
		--dst $B:7471 --stamp "${stamp:-0x600df00d}" "$@")
	if [ "$who" = nobody ]; then
		setpriv --reuid=nobody --regid=nogroup --clear-groups --inh-caps=-all -- "${cmd[@]}" >/tmp/uc.out 2>&1
	else
		"${cmd[@]}" >/tmp/uc.out 2>&1
	fi
}

# said LINE...: /tmp/uc.out holds exactly these lines (extended regular expressions).
said() {
	local want got
	want=$(printf '%s\n' "$@")
	got=$(cat /tmp/uc.out)
	[ "$(wc -l <<<"$got")" = "$(wc -l <<<"$want")" ] &&
		paste -d '\n' <(echo "$want") <(echo "$got") | while read -r w && read -r g; do
			[[ $g =~ ^$w$ ]] || exit 1
		done || { echo "said:"; cat /tmp/uc.out; return 1; }
}

# user_said WHO SRC CASE... -- LINE...: user_console WHO SRC CASE... said exactly LINE...
user_said() {
	local args=()
	while [ "$1" != -- ]; do
		args+=("$1")
		shift
	done
	shift
	user_console "${args[@]}" && said "$@"
}

no_key_run() {
	! "$LST" run --via $A --from $B --to $A ping --count 5 2>/tmp/nokey.err &&
		grep -q 'no console key.*fastreg-lst console key FILE' /tmp/nokey.err ||
		{ cat /tmp/nokey.err; return 1; }
}

key_installed() {
	"$LST" console key $KEY >/dev/null && listing "l['key'] is not None and len(l['key']) == 8"
}

key_file_mode() {
	chmod 644 $WRONG
	! "$LST" console key $WRONG 2>/tmp/k.err
	local refused=$?
	chmod 600 $WRONG
	[ $refused = 0 ] && grep -q 'chmod 600' /tmp/k.err || { cat /tmp/k.err; return 1; }
}

# running_since N: a progress line after line N of A's run says its client runs.
running_since() {
	tail -n +"$(($1 + 1))" /tmp/first.out | grep -q "1 of 1 clients running"
}

# session_id: the id of B's session (as root reads it from B's listing).
session_id() {
	"$LST" --json console list | python3 -c "import json, sys; print(int(json.load(sys.stdin)['session']['id'], 16))"
}

# key_secret: the key's digest is nowhere to be read back (ctl, listing, log).
key_secret() {
	local d
	d=$(sha256sum $KEY | cut -c1-64)
	! grep -rqs "$d" $DBG/ctl $DBG/console && ! "$LST" console list | grep -q "$d" &&
		! dmesg | grep -q "$d" && ! dmesg | grep -q "${d:0:16}"
}

# A second address on A's side, with its route and neighbour, and an interface on it.
second_console() {
	ip addr add $A2/32 dev veth_v0 &&
		ip route replace $A2/32 dev veth_v1 &&
		ip neigh replace $A2 lladdr "$(cat /sys/class/net/veth_v0/address)" dev veth_v1 nud permanent &&
		ctl iface add $RXE_DEV0 $A2
}

# listing WHAT: `fastreg-lst console list --json` satisfies the Python expression WHAT on l.
listing() {
	"$LST" --json console list >/tmp/l.json &&
		python3 -c "import json, sys; l = json.load(open('/tmp/l.json')); sys.exit(0 if ($1) else 1)" ||
		{ cat /tmp/l.json; return 1; }
}

# refused_quietly: 20 more requests of A refused: still one log line, all counted.
refused_quietly() {
	local i
	for i in $(seq 20); do
		"$LST" errors --via $A n=$B >/dev/null 2>&1
	done
	[ "$(dmesg | grep -c "console: refused $A: not an allowed console")" = 1 ] || { dmesg | grep refused; return 1; }
	"$LST" console list | grep -Eq "^refused (2[1-9]|[3-9][0-9])$" || { "$LST" console list; return 1; }
}

# long_run NAME VIA: a run from B to A in the background, driven by VIA, long enough (900 s)
# to be ended only by what the suite does to it (Ctrl-C, a deny) however slow the machine;
# its
# pid in $RUN_PID (in this shell: not inside `check`, whose command runs in a subshell).
long_run() {
	"$LST" run --via "$2" --interval 1 --from $B --to $A brw write --size 4k --concurrency 2 \
		--seconds 900 >/tmp/"$1".out 2>&1 &
	RUN_PID=$!
}

# await_end S NAME: waits (in this shell) up to S seconds for the background run to end;
# /tmp/NAME.end then says "ended RC" or "running".
await_end() {
	local i
	for i in $(seq "$1"); do
		kill -0 "$RUN_PID" 2>/dev/null || break
		sleep 1
	done
	if kill -0 "$RUN_PID" 2>/dev/null; then
		echo running >/tmp/"$2".end
		kill -9 "$RUN_PID"
	fi
	wait "$RUN_PID"
	[ -s /tmp/"$2".end ] || echo "ended $?" >/tmp/"$2".end
}

# ended NAME RC: the background run NAME ended by itself with exit status RC.
ended() {
	[ "$(cat /tmp/"$1".end)" = "ended $2" ] || { cat /tmp/"$1".end /tmp/"$1".out; return 1; }
}

within() {
	local limit=$1 start=$SECONDS
	shift
	until "$@" 2>/dev/null; do
		[ $((SECONDS - start)) -lt "$limit" ] || { "$@"; return 1; }
		sleep 0.5
	done
}

ktap_begin 42
check "two $RDMA_KIND devices on a veth pair" veth_up
check "cluster keys, and the user-space console built (tests/peer/forge.c)" keys_and_forger
before=$(resource_counts)
check "insmod timeout=10" load timeout=10
check "a second console's interface ($A2)" second_console
dmesg_mark

# No key: the console node refuses to send, a node refuses every console.
check "no key: a run is refused, and told how to install one" no_key_run
"$LST" console allow $A >/dev/null
check "  a node without a key refuses an allowed console that proves one (ENOKEY)" \
	user_said root $A:1000 join 5 --key $KEY -- 'hello status=-126 session=0 holder=0\.0\.0\.0 tagged=0'
check "  and says how to install one" dmesg_has \
	"console: refused hello from $A: this node has no console key \(install the cluster's: fastreg-lst console key FILE\)"
"$LST" console deny $A >/dev/null
check "fastreg-lst console key FILE: installed, its fingerprint listed" key_installed
check "  the key is never shown back nor logged" key_secret
check "  a key file others can read is refused" key_file_mode

# Refused: nobody is allowed by default.
check "a console not allowed is refused, and told how to be allowed" bash -c \
	"! $LST run --via $A --from $B --to $A ping --count 5 2>/tmp/r.err &&
	grep -q '$B: refused: this console ($A) is not allowed there (on $B: fastreg-lst console allow $A)' /tmp/r.err ||
	{ cat /tmp/r.err; false; }"
check "  logged once however often it asks, every refusal counted" refused_quietly
"$LST" console allow $A >/dev/null
"$LST" console allow $A2 >/dev/null
check "console allow: both listed" listing "l['allowed'] == ['$A', '$A2']"

# One session at a time.
long_run first $A
check "a run from A holds B" within 60 grep -q "1 of 1 clients running" /tmp/first.out
check "  a second console (A2) is refused: busy, and told who holds B" bash -c \
	"! $LST run --via $A2 --from $B --to $A ping --count 5 2>/tmp/busy.err &&
	grep -q '$B: busy: in a session of console $A' /tmp/busy.err ||
	{ cat /tmp/busy.err; false; }"
SID=$(session_id)
LINES=$(wc -l </tmp/first.out)
"$LST" --json console list >/tmp/base.json
check "  B's session as root reads it ($SID)" test -n "$SID"
check "a user-space console on A's address, port 1000, with a wrong key: refused (EKEYREJECTED)" \
	user_said root $A:1000 join 77 --key $WRONG -- \
	'hello status=0 session=0 holder=10\.1\.0\.1 tagged=0' 'join status=-129 session=0 holder=10\.1\.0\.1 tagged=0'
check "  with the cluster's key: busy, the session not named" \
	user_said root $A:1000 join 77 --key $KEY -- \
	'hello status=0 session=0 holder=10\.1\.0\.1 tagged=0' 'join status=-16 session=0 holder=10\.1\.0\.1 tagged=1'
check "  with the session's id and no key: QUERY, STOP, START, LEAVE, JOIN refused" \
	user_said root $A:1000 forge "$SID" -- 'query status=-129 session=0 .*' 'stop status=-129 session=0 .*' \
	'start status=-129 session=0 .*' 'leave status=-129 session=0 .*' 'join status=-129 session=0 .*'
check "  as nobody: its connection is refused (reason 10)" \
	user_said nobody $A:0 forge "$SID" -- 'rejected reason=10'
check "  a read-only QUERY proves the key, and learns no session" \
	user_said root $A2:1000 query --key $KEY -- 'hello status=0 .*' 'query status=0 session=0 holder=10\.1\.0\.1 tagged=1'
check "  the real session goes on: the same id, the test running, refusals counted" listing \
	"l['session'] and int(l['session']['id'], 16) == $SID and l['test'] == 'running' and
	(lambda b: l['rejected']['bad_proof'] - b['bad_proof'] == 6 and
	l['rejected']['not_holder'] - b['not_holder'] == 1)(json.load(open('/tmp/base.json'))['rejected'])"
check "  and A's run still runs (a progress line since)" within 20 running_since "$LINES"

# Ctrl-C.
kill -INT "$RUN_PID"
await_end 15 first
check "Ctrl-C: the run ends within 15 s" ended first 1
check "  the test stopped on B, the session left" listing "l['test'] == 'stopped' and l['session'] is None"
check "  interrupted, the client not counted in error" bash -c \
	"grep -q 'stopping the test on every node' /tmp/first.out && grep -qx 'Total 0 error nodes' /tmp/first.out &&
	grep -qx 'status: interrupted' /tmp/first.out || { cat /tmp/first.out; false; }"
check "  and the forged requests never made A's run fail" bash -c "! grep -q 'refused\|error nodes: [1-9]' /tmp/first.out"
check "a user-space console with the key: JOIN, QUERY; each replayed: refused (ESTALE)" \
	user_said root $A:1000 replay 99 --key $KEY -- 'hello status=0 session=0 .*' \
	'join status=0 session=99 holder=10\.1\.0\.1 tagged=1' 'query status=0 session=99 .* tagged=1' \
	'query-replayed status=-116 session=99 .* tagged=1' 'join-replayed status=-116 session=0 .* tagged=0' \
	'leave status=0 session=0 .* tagged=1'
check "  counted, and B left free" listing "l['session'] is None and l['rejected']['stale'] == 2"
check "a START asking more buffers than B allows its tests (1 GiB): refused, no memory" bash -c \
	"! $LST run --via $A --from $B --to $A brw write --size 64M --concurrency 16 --count 1 2>/tmp/big.err &&
	grep -q '$B: no memory (its buffers pass the node.s test_mem or tests_mem): its test did not start' /tmp/big.err ||
	{ cat /tmp/big.err; false; }"
check "  B says so, runs nothing, and is left free" bash -c \
	"dmesg | grep -q 'lst: refused a test from $A: its buffers (1024 MiB) pass what the node allows a test' &&
	$LST --json console list | python3 -c \"import json, sys; l = json.load(sys.stdin); sys.exit(0 if l['test'] != 'running' and l['session'] is None else 1)\""

# Deny ends the session of a running test.
long_run second $A2
check "a run from A2 holds B" within 60 grep -q "1 of 1 clients running" /tmp/second.out
"$LST" console deny $A2 >/dev/null
check "console deny A2: the session ends, the test stops" within 15 listing \
	"l['test'] == 'stopped' and l['session'] is None and l['allowed'] == ['$A']"
await_end 20 second
check "  A2's run ends, B in error (refused from then on)" ended second 1
check "  and it says so" grep -q "$B: refused: this console ($A2) is not allowed there" /tmp/second.out

# A server gone in the middle of a run (its interface deleted; 04-console kills a client
# node): counted lost, the client's transfers to it fail, and the run ends by itself.
"$LST" run --via $A --json-lines --interval 1 --timeout 3 --from $B --to $A2 brw write --size 4k \
	--concurrency 2 --seconds 20 >/tmp/third.out 2>/tmp/third.err &
RUN_PID=$!
check "a run from B to A2 (A the console)" within 60 grep -q '"running": 1' /tmp/third.out
ctl iface del $A2
await_end 60 third
check "A2's interface deleted mid-run: the run ends by itself, exit 1" ended third 1
check "  A2 lost and an error node; B's transfers to it failed, none corrupt" python3 -c "
import json
r = json.loads(open('/tmp/third.out').read().splitlines()[-1])
n = {x['node']: x for x in r['nodes']}
assert r['status'] == 'failed' and r['error_nodes'] == 2, r
assert n['$A2']['role'] == 'server' and n['$A2']['state'] == 'lost' and n['$A2']['error_node'], n
assert n['$B']['errors'] > 0 and n['$B']['corrupt'] == 0 and n['$B']['error_node'], n
"

unload_checks "$before"
ktap_end
