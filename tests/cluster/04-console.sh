#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# The selftest console (Documentation/selftest.rst, "Console"): node 0 drives tests between
# the others (an arm64 64 KiB node and an x86_64 one) and itself, with fastreg-lst run,
# stat and errors. Every node installs the cluster's console key (node 0 makes it, as a
# site makes munge's; selftest.rst's command, as written, but for the file's path) and
# lists the same fingerprint. A node allows no console by default and refuses one it did not allow,
# naming the reason; runs go both ways with every byte checked and no error; --distribute
# gives each client the servers lst would; stat samples rates and bandwidth per group;
# errors ends with "Total 0 error nodes"; the example of selftest.rst runs as written (read
# from the document). When the console goes silent, the nodes' leases expire and their
# tests stop by themselves: first its fastreg-lst is SIGKILLed in the middle of a 5-minute
# run; then (step 7) the console is node 2 and its whole VM is killed. Node 2 is also
# killed (SIGKILL of its QEMU) in the middle of a run as a client (step 6): the console
# reports it as an error node, and the other client ends its run clean. Node 2 boots twice
# again (the points of its killed incarnations are shown, not counted).
#@ cluster --node x86_64 --node arm64-64k --node x86_64 --params "timeout=60" --timeout 2400
#@ interop --node x86_64 --node arm64-16k --node x86_64 --params "timeout=60" --timeout 2400
. "$FASTREG_TOP/tests/cluster/lib.sh"

C=${NODES[0]} N1=${NODES[1]} N2=${NODES[2]}
LEASE=5

# listed WHAT: this node's console listing (fastreg-lst console list --json) satisfies the
# Python expression WHAT on l.
listed() {
	"$LST" --json console list >/tmp/listing.json || return 1
	python3 -c "import json, sys; l = json.load(open('/tmp/listing.json')); sys.exit(0 if ($1) else 1)" ||
		{ cat /tmp/listing.json; return 1; }
}

# console_run NAME ARGS...: fastreg-lst run ARGS --json into /tmp/NAME.json; its status
# is the command's (checked by the callers through `expect`).
console_run() {
	local name=$1
	shift
	"$LST" run --via "$C" --json "$@" >/tmp/"$name".json 2>/tmp/"$name".err
	echo $? >/tmp/"$name".rc
}

# console_watched NAME ARGS...: console_run with a progress line a second (--json-lines) in
# /tmp/NAME.jsonl, for a test to act on while it runs; its result (the last line) in
# /tmp/NAME.json and its exit status in /tmp/NAME.rc, as console_run's.
console_watched() {
	local name=$1
	shift
	"$LST" run --via "$C" --json-lines --interval 1 "$@" >/tmp/"$name".jsonl 2>/tmp/"$name".err
	echo $? >/tmp/"$name".rc
	tail -n1 /tmp/"$name".jsonl >/tmp/"$name".json
}

# ran_clean NAME OPS: the run succeeded with OPS transfers, no error, nothing corrupt.
ran_clean() {
	[ "$(cat /tmp/"$1".rc)" = 0 ] || { cat /tmp/"$1".err /tmp/"$1".json; return 1; }
	OUT=/tmp/$1.json expect "r['status'] == 'ok' and r['ops'] == $2 and r['errors'] == 0 and r['corrupt'] == 0 and r['error_nodes'] == 0"
}

# joined_and_left: the console held this node, and no longer does.
joined_and_left() {
	logged 1 "console: $C holds this node" && listed "l['session'] is None"
}

# ran_clean_timed NAME: a timed run succeeded with transfers, no error, nothing corrupt.
ran_clean_timed() {
	[ "$(cat /tmp/"$1".rc)" = 0 ] || { cat /tmp/"$1".err /tmp/"$1".json; return 1; }
	OUT=/tmp/$1.json expect "r['status'] == 'ok' and r['ops'] > 0 and r['errors'] == 0 and r['corrupt'] == 0 and r['error_nodes'] == 0"
}

# logged N PATTERN: this node's kernel log has PATTERN at least N times since the mark.
logged() {
	local n
	n=$(dmesg_since_mark | grep -c -- "$2")
	[ "$n" -ge "$1" ] || { echo "'$2' logged $n times, not $1"; return 1; }
}

# doc_example: the commands of selftest.rst's example, one per line, without "fastreg-lst ".
doc_example() {
	sed -n '/^An example, run as written by ``tests\/cluster\/04-console.sh``/,/^lst and fastreg-lst$/p' \
		"$FASTREG_TOP/Documentation/selftest.rst" | sed -n 's/^    fastreg-lst //p' | grep -v '^console key '
}

# ran_as_written LINE [REGEX...]: fastreg-lst LINE (a line of the example, split into
# words at blanks) exits 0; run says "Total 0 error nodes" and ends "status: ok", errors ends
# with "Total 0 error nodes", stat prints every group and no failure; and each REGEX
# matches a line of the output.
ran_as_written() {
	local rc line=$1 re
	local want=("${@:2}") words
	read -ra words <<<"$line" # the example quotes nothing
	set -- "${words[@]}"
	"$LST" "$@" >/tmp/example.out 2>&1
	rc=$?
	case "$1" in
	run) grep -qx 'Total 0 error nodes' /tmp/example.out && tail -n 1 /tmp/example.out | grep -qx 'status: ok' ;;
	errors) tail -n 1 /tmp/example.out | grep -qx 'Total 0 error nodes' ;;
	stat) grep -q '^\[Bandwidth of clients\]' /tmp/example.out && grep -q '^\[Bandwidth of servers\]' /tmp/example.out &&
		! grep -q '^Failed' /tmp/example.out ;;
	esac && [ $rc = 0 ] || { echo "exit $rc:"; cat /tmp/example.out; return 1; }
	for re in "${want[@]}"; do
		grep -qE -- "$re" /tmp/example.out || { echo "no line matching '$re' in:"; cat /tmp/example.out; return 1; }
	done
}

# example_shape: the example has 4 commands, two of them those ran_as_written's callers
# know the output of.
example_shape() {
	[ "$(doc_example | wc -l)" = 4 ] &&
		[ "$(doc_example | grep -c -e "^run --from $N1 --to $N2 " -e " --distribute 1:2 ")" = 2 ] ||
		{ doc_example; return 1; }
}

VM_CONSOLE_OUT=$FASTREG_RUN/vm-console.out
KEYFILE=/tmp/console.key

# doc_key: selftest.rst's key command, without "fastreg-lst ".
doc_key() {
	sed -n 's/^    fastreg-lst \(console key .*\)/\1/p' "$FASTREG_TOP/Documentation/selftest.rst"
}

# install_key: the cluster's key (node 0's file in the run directory), copied to this node
# with mode 600 as a site's would be, installed with selftest.rst's command (its path
# replaced), its fingerprint published.
install_key() {
	local line words
	line=$(doc_key)
	[ "$(wc -l <<<"$line")" = 1 ] && [[ $line == "console key /"* ]] || { echo "doc: '$line'"; return 1; }
	read -ra words <<<"$line"
	install -m 600 "$FASTREG_RUN/cluster.key" $KEYFILE &&
		"$LST" console "${words[1]}" $KEYFILE >/dev/null || return 1
	listed "l['key'] is not None" && publish fingerprint "$(python3 -c "import json; print(json.load(open('/tmp/listing.json'))['key'])")"
}

# same_fingerprint: every node lists node 0's fingerprint.
same_fingerprint() {
	local i
	for i in "${!NODES[@]}"; do
		[ "$(published "$i" fingerprint)" = "$(published 0 fingerprint)" ] || { echo "node $i: $(published "$i" fingerprint)"; return 1; }
	done
}

# vm_console_runs: node 2's fastreg-lst run (step 7) says its client runs, within 180 s
# (node 2 boots first); else what it said.
vm_console_runs() {
	within 180 grep -q "1 of 1 clients running" "$VM_CONSOLE_OUT" || { cat "$VM_CONSOLE_OUT"; return 1; }
}
if [ "$FASTREG_INCARNATION" = 1 ]; then
	# Node 2, booted again after the kill of step 6: the console of step 7, killed there.
	ktap_begin 2
	check "booted again, as incarnation 1, the killed one's output kept" reborn 1
	check "the cluster's console key installed" install_key
	barrier reborn
	barrier allowed_vm
	"$LST" run --lease "$LEASE" --timeout 2 --interval 1 --from "$N1" --to "$C" brw write --size 64k \
		--seconds 300 >"$VM_CONSOLE_OUT" 2>&1
	echo "# the run ended: its VM was not killed"
	exit 1
elif [ "$FASTREG_INCARNATION" -gt 1 ]; then
	# Node 2, booted again after the kill of step 7.
	ktap_begin 4
	check "booted again, as incarnation 2, the killed one's output kept" reborn 2
	barrier reborn_again
	check "every MR back in the pool (live == free)" all_free
	check "rmmod, no fastreg resource left" clean_unload
	check "no kernel errors" no_kernel_errors
	ktap_end
	exit 0
fi
# Step 5 runs in make interop only (FULL: about a minute; step 7's dead console covers
# the lease's expiry in make test): 2 points on each node.
if [ "$ME" = 0 ]; then
	ktap_begin $((15 + 2 * FULL + $(doc_example | wc -l)))
	head -c 1024 /dev/urandom >"$FASTREG_RUN/cluster.key"
else
	ktap_begin $((10 + 2 * FULL))
fi
dmesg_mark
barrier start

# 0. The cluster's console key, on every node.
check "the cluster's console key installed (selftest.rst's command)" install_key
barrier keyed
check "  the same fingerprint on every node" same_fingerprint

# 1. Trust: no console by default; node 1 allows node 0, node 2 does not yet.
if [ "$ME" = 1 ]; then
	"$LST" console allow "$C" >/dev/null
	check "console allow $C: listed" listed "l['allowed'] == ['$C'] and l['session'] is None"
else
	check "no console allowed by default" listed "l['allowed'] == []"
fi
barrier trust

# 2. A node that did not allow the console refuses it, with the reason, and the node that
# joined is let go.
if [ "$ME" = 0 ]; then
	console_run refused --from "$N1" --to "$N2" brw write --size 64k --count 8
	check "node 2 refuses the console, and says why" bash -c "[ \"\$(cat /tmp/refused.rc)\" = 1 ] &&
		grep -q '$N2: refused: this console ($C) is not allowed there (on $N2: fastreg-lst console allow $C)' /tmp/refused.err || { cat /tmp/refused.err; false; }"
elif [ "$ME" = 1 ]; then
	barrier refused
	check "node 1 joined, then was let go" joined_and_left
else
	barrier refused
	check "node 2 logged the refusal" logged 1 "console: refused $C: not an allowed console"
fi
[ "$ME" != 0 ] || barrier refused
# Node 0 takes part too (as a server): it allows itself.
[ "$ME" = 1 ] || "$LST" console allow "$C" >/dev/null
barrier allowed

# 3. The example of selftest.rst, as written (no --via, no --json): node 1 to node 2
# (arm64 64 KiB to x86_64), then --distribute 1:2, each client getting lst's two servers;
# stat and errors. Then back from node 2 to node 1, a read at offset 1; every byte checked.
if [ "$ME" = 0 ]; then
	check "selftest.rst's example: its 4 commands, node 1 to node 2 and --distribute 1:2" example_shape
	while IFS= read -r line; do
		want=()
		case "$line" in
		"run --from $N1 --to $N2 "*) want=("^brw write: 32 transfers .* errors 0, corrupt 0$") ;;
		*" --distribute 1:2 "*) want=("^  $N1 +client -> $C,$N1: 32 transfers, .* errors 0, corrupt 0, done$"
			"^  $N2 +client -> $N2,$C: 32 transfers, .* errors 0, corrupt 0, done$") ;;
		esac
		check "as written: fastreg-lst $line" ran_as_written "$line" "${want[@]}"
	done < <(doc_example)
	console_run r --from "$N2" --to "$N1" brw read --size 65537 --offset 1 --check full --concurrency 8 --count 64
	check "run --from node 2 --to node 1: brw read 64 KiB + 1 at offset 1, check=full, no error" ran_clean r 64
fi
barrier both_ways
if [ "$ME" != 0 ]; then
	check "this node ran tests for the console" logged 2 "console: test over (done)"
fi

# 4. stat samples a running test, per group.
if [ "$ME" = 0 ]; then
	# Sampled once both clients run and transfers are done (a progress line says so), not
	# after a guess.
	console_watched bg --from "$N1,$N2" --to "$C" brw write --size 256k --concurrency 4 --seconds 30 &
	pid=$!
	within 60 python3 -c "
import json
p = [json.loads(l)['progress'] for l in open('/tmp/bg.jsonl') if l.startswith('{\"progress\"')]
assert p and p[-1]['running'] == 2 and p[-1]['ops'] >= 16
" || echo "# stat: the run not under way after 60 s"
	"$LST" stat --via "$C" --delay 4 --count 2 --json-lines clients="$N1,$N2" servers="$C" >/tmp/stat.jsonl
	wait "$pid"
	check "stat: the clients write, the console's node reads, avg/min/max per group" python3 -c "
import json
s = [json.loads(l) for l in open('/tmp/stat.jsonl')]
assert len(s) == 2 and not s[-1]['failed'], s
g = {x['group']: x for x in s[-1]['groups']}
c, v = g['clients'], g['servers']
assert c['write_mib_per_s']['min'] > 0 and c['write_ops_per_s']['avg'] > 0, c
assert v['read_mib_per_s']['avg'] > 0 and v['nodes'] == 1, v
assert c['write_mib_per_s']['min'] <= c['write_mib_per_s']['avg'] <= c['write_mib_per_s']['max'], c
"
	check "  the sampled run: no error" ran_clean_timed bg
fi
barrier sampled

# 5. The console goes silent in the middle of a run: the leases expire, the tests stop.
if [ "$FULL" = 0 ]; then
	:
elif [ "$ME" = 0 ]; then
	"$LST" run --via "$C" --lease "$LEASE" --timeout 2 --interval 1 --from "$N1,$N2" --to "$C" brw write --size 64k \
		--seconds 300 >/tmp/silent.out 2>&1 &
	pid=$!
	# Killed once both clients run (its progress line says so).
	within 60 grep -q "2 of 2 clients running" /tmp/silent.out
	kill -9 "$pid"
	wait "$pid"
	rc=$?
	barrier silent-killed # the other nodes time the leases from here
	check "SIGKILL of the console's fastreg-lst while both clients run" \
		bash -c "[ $rc = 137 ] && grep -q '2 of 2 clients running' /tmp/silent.out || { cat /tmp/silent.out; false; }"
	# Gated on the state asked (both stopped), within the lease and a wide margin.
	check "both nodes' tests stopped by themselves" within $((LEASE + 60)) bash -c "$LST errors --via $C --json clients=$N1,$N2 >/tmp/after.json;
		python3 -c \"import json; r = json.load(open('/tmp/after.json')); s = [n['state'] for n in r['groups'][0]['nodes']]; assert s == ['stopped', 'stopped'], s\" || { cat /tmp/after.json; false; }"
else
	barrier silent-killed
	check "the lease of the silent console expired here" within $((LEASE + 25)) logged 1 "console: session .* of $C expired"
	check "  and the test stopped" within 20 logged 1 "console: test over (stopped)"
fi
barrier silent

# 6. A client node dies in the middle of a run: reported as an error node, the other ends.
barrier lost
if [ "$ME" = 0 ]; then
	console_watched lost --timeout 5 --from "$N1,$N2" --to "$C" brw write --size 64k --check full --seconds 40 &
	pid=$!
	within 60 grep -q '"running": 2' /tmp/lost.jsonl
	"$FASTREG_NODECTL" kill 2 || echo "# kill failed"
	wait "$pid"
	rc=$(cat /tmp/lost.rc)
	check "node 2 killed mid-run: an error node (lost), node 1's run clean, exit 1" python3 -c "
import json
lines = [json.loads(l) for l in open('/tmp/lost.jsonl')]
r = lines[-1]
n = {x['node']: x for x in r['nodes'] if x['role'] == 'client'}
assert $rc == 1 and r['error_nodes'] == 1 and r['status'] == 'failed', r
assert n['$N2']['state'] == 'lost' and n['$N2']['error_node'], n
assert n['$N1']['state'] == 'done' and n['$N1']['errors'] == 0 and n['$N1']['corrupt'] == 0 and n['$N1']['ops'] > 0, n
assert any(p['progress']['error_nodes'] == 1 for p in lines[:-1] if 'progress' in p), 'no progress line counted it'
"
	"$FASTREG_NODECTL" boot 2 || echo "# boot failed"
elif [ "$ME" = 2 ]; then
	sleep 900 # killed here
	exit 1
fi
barrier reborn

# 7. The console is node 2, and its VM dies in the middle of a run (node 1 the client,
# node 0 the server): both leases expire, node 1's test stops.
if [ "$ME" != 2 ]; then
	dmesg_mark
	"$LST" console allow "$N2" >/dev/null
fi
barrier allowed_vm
if [ "$ME" = 0 ]; then
	check "node 2 is the console of a run from node 1 to node 0" vm_console_runs
	dmesg_mark # an expiry logged from here on followed the kill
	check "the console's VM (node 2) killed mid-run" "$FASTREG_NODECTL" kill 2
	check "the lease of the dead console expired here (its server)" within $((LEASE + 25)) logged 1 "console: session .* of $N2 expired"
	"$FASTREG_NODECTL" boot 2 || echo "# boot failed"
else
	# Node 1 waits for the console's start, node 0's wait and the kill, and the lease.
	check "the lease of the dead console expired here (its client)" within $((180 + LEASE + 25)) logged 1 "console: session .* of $N2 expired"
	check "  and the test stopped" within 20 logged 1 "console: test over (stopped)"
fi
barrier reborn_again

# Node 0 served node 2's transfers when it died: those sinks go once the connection is
# found dead (keepalive and timeout).
check "every MR back in the pool (live == free)" within 90 all_free
check "rmmod, no fastreg resource left" clean_unload
check "no kernel errors" no_kernel_errors
ktap_end
