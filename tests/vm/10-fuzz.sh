#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# The fuzzing peer: interface B mutates what it sends (messages and the connection
# parameters of its requests, accepts and rejects: `fuzz` on the ctl file, src/rules/fuzz.rs),
# reproducibly from a seed, while interface A runs brw with check=full against it, both
# ways, and then while B itself runs brw against A (A serves B's mutated requests: GET
# registrations, sizes, checks). Two rxe devices on a veth pair in one VM.
#
# A must never oops or report a KASAN error (on the sanitizer kernel), never report a
# transfer good whose data is bad (its reads are checked against the pattern here, by A;
# B's corrupted verdicts on A's writes are reported as failures), close each bad
# connection naming the reason, count the reasons (fastreg-lst stat), serve again once
# the fuzzing stops, and leave nothing after rmmod.
#
# Usage in the VM: 10-fuzz.sh [MUTATIONS [SEED [RATE]]] (default 1000 from seed 1, one
# message in 40 mutated, in make test; `make fuzz` runs 100,000, FUZZ_COUNT, FUZZ_SEED and
# FUZZ_RATE to run them in parts; the two phases take seeds SEED and SEED + 1; RATE is per
# million messages; on the sanitizer kernel, where a mutation costs about 1.7 s, make
# test-debug).
#@ vm --timeout 2400
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/veth.sh"
. "$(dirname "$0")/lst.sh"

# fd 3: the suite's own output, for progress from inside a check.
exec 3>&1

TOTAL=${1:-1000}
SEED=${2:-1}
CTL=$DBG/ctl
A=$VETH_ADDR0
B=$VETH_ADDR1
# One message in 40 mutated by default: a connection lives for a few dozen messages.
RATE=${3:-25000}
[[ $RATE =~ ^[0-9]+$ ]] && [ "$RATE" -ge 1 ] && [ "$RATE" -le 1000000 ] ||
	{ echo "Bail out! RATE is mutations per million messages, 1 to 1000000, not '$RATE'"; exit 1; }

# fuzz_left: mutations B still has to make (empty when it is not fuzzing).
fuzz_left() {
	awk -v b="$B:" '$1 == "iface" { cur = $3 } $1 == "fuzz" && index(cur, b) == 1 {
		sub("left=", "", $3); print $3 }' "$DBG/conns"
}

# fuzz_phase SEED COUNT FROM TO: B fuzzes COUNT mutations from SEED while FROM runs brw
# write and read to TO (sizes inline and registered, offsets 0 and 1, 8 in flight,
# check=full, a second each, straight through the lst file: the CLI's start costs seconds
# under emulation) until B made them all, or 10 minutes and 2 seconds per mutation
# went. The runs' figures ("ops errors corrupt status") go to /tmp/fuzz-SEED.
fuzz_phase() {
	local seed=$1 count=$2 from=$3 to=$4 i=0 start=$SECONDS left op size off r rc
	local limit=$((600 + 2 * count))
	: >"/tmp/fuzz-$seed"
	ctl fuzz "$B" seed="$seed" rate="$RATE" count="$count" || return 1
	while :; do
		for op in write read; do
			for size in 1000 4096 65537 1048576; do
				off=$((i % 2))
				# "ops errors corrupt status" per run with a result (none when
				# it could not start: the pair was between connections).
				r=$(lst_direct brw $op size=$size offset=$off check=full concurrency=8 seconds=1 \
					from=$from peers=$to)
				rc=$?
				[ -z "$r" ] || echo "$r $rc" >>"/tmp/fuzz-$seed"
			done
		done
		i=$((i + 1))
		left=$(fuzz_left)
		[ -n "$left" ] && [ "$left" -gt 0 ] || break
		[ $((SECONDS - start)) -lt $limit ] || { echo "# $left mutations left after $limit s"; return 1; }
		# To the suite's own output (fd 3): `check` keeps what its command prints.
		[ $((i % 20)) -ne 0 ] ||
			echo "# seed $seed: $((count - left)) of $count mutations, $((SECONDS - start)) s" >&3
	done
	ctl fuzz "$B" off
}

# a_survived SEED: A's transfers ran while B fuzzed (every read A reports good was
# checked by A against the pattern: check=full; B's lies about A's writes are failures),
# the fuzzing reached them (some failed), and every run reported what went wrong in it:
# a run with a failed or corrupt transfer ended in error (EIO), and only such a run. A
# corrupt transfer counted good would leave its run clean, and fail this.
a_survived() {
	local ops errs corrupt runs silent
	read -r runs ops errs corrupt silent < <(awk '{ n++; o += $1; e += $2; c += $3
		if (($2 + $3 > 0) != ($4 != 0)) s++ } END { print n + 0, o + 0, e + 0, c + 0, s + 0 }' "/tmp/fuzz-$1")
	echo "seed $1: $runs runs, $ops transfers good, $errs failed, $corrupt reported corrupt" >>/tmp/fuzz-figures
	[ "$ops" -gt 0 ] || { echo "no transfer was good"; return 1; }
	[ "$errs" -gt 0 ] || { echo "no transfer failed: the fuzzing never reached A's transfers"; return 1; }
	[ "$silent" -eq 0 ] || { echo "$silent runs whose status does not match their counts:"; cat "/tmp/fuzz-$1"; return 1; }
}

# closed_by_reason: A's interface counts connections closed by reason, and names them.
closed_by_reason() {
	"$LST" --json stat >/tmp/fuzz-stat.json || return 1
	python3 - "$A" <<'PY'
import json, sys
s = json.load(open("/tmp/fuzz-stat.json"))
closed = s["closed"]
with open("/tmp/fuzz-figures", "a") as out:
    for why, n in sorted(closed.items(), key=lambda x: -x[1]):
        print(f"closed {n:6d} {why}", file=out)
assert sum(closed.values()) > 0, "no connection closed"
assert all(w and w != "?" for w in closed), closed
PY
}

# made_all SEED COUNT: the fuzz line of B said it made COUNT mutations (and logged so).
made_all() {
	dmesg | grep -q "$B:[0-9]*: test hook: fuzzing done: $2 mutations" ||
		{ dmesg | grep "test hook: fuzzing" | tail -n 3; return 1; }
}

recovered() {
	wait_for ctl ping "$A" "$B" 1 >/dev/null &&
		run_clean 64 --from "$A" brw write --peer "$B" --size 1k,64k --concurrency 8 --check full --count 32 &&
		run_clean 64 --from "$A" brw read --peer "$B" --size 1k,64k --concurrency 8 --check full --count 32 &&
		run_clean 64 --from "$B" brw write --peer "$A" --size 1k,64k --concurrency 8 --check full --count 32
}

half=$((TOTAL / 2))
ktap_begin 14
check "two $RDMA_KIND devices on a veth pair" veth_up
before=$(resource_counts)
check "insmod timeout=5 keepalive=2" load timeout=5 keepalive=2
check "A and B connected" wait_for ctl ping "$A" "$B" 1
dmesg_mark
start=$SECONDS
S2=$((SEED + 1))
check "A runs brw to B while B mutates $half messages (seed $SEED, $RATE per million)" fuzz_phase "$SEED" "$half" "$A" "$B"
check "  B made all $half mutations" made_all "$SEED" "$half"
check "  A: transfers ran and some failed; every run reported its failed and corrupt ones" a_survived "$SEED"
check "B runs brw to A while B mutates $((TOTAL - half)) of its requests (seed $S2)" \
	fuzz_phase "$S2" $((TOTAL - half)) "$B" "$A"
check "  B made all $((TOTAL - half)) mutations" made_all "$S2" $((TOTAL - half))
echo "$TOTAL mutations in $((SECONDS - start)) s" >>/tmp/fuzz-figures
check "A counts its closed connections by reason (fastreg-lst stat)" closed_by_reason
check "fuzzing off: traffic recovers both ways without reloading" recovered
# The figures (Documentation/robustness.rst, "The fuzzing peer").
sed 's/^/# /' /tmp/fuzz-figures
unload_checks "$before"
ktap_end
