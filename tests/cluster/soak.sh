#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# The soak (`make soak`, not in make test): every node runs a random mix of brw to the
# others for MINUTES (default 30): sizes from 1 byte to the largest payload, offsets,
# both directions, concurrency 1 to 16, one peer or all, check=full (tests/cluster/soak.py).
# Node 0 injects failures below fastreg for 15 % of the time (fastreg_fail_wr on every
# kind of work request, 2 %; fail_function on fastreg_ib_map_mr_sg, 1 %); node 1 is a
# fuzzing peer for another 15 % (1 message in 100). Each node then checks its figures:
# both disturbances fired; no corrupt transfer but in the fuzzing window on a connection
# with node 1 (a corrupt transfer there must be reported as such, and is counted); no
# error at all in runs far from both windows; slab
# and fastreg's MRs sampled every minute not growing, no kernel report, nothing left after
# rmmod. Each node's summary goes to build/cluster/soak.N.json; scripts/soak-report.py
# prints them.
#   scripts/cluster.sh --node x86_64 --node x86_64 --node arm64-64k --params timeout=60 \
#       --timeout 2700 -- bash tests/cluster/soak.sh [MINUTES]
. "$FASTREG_TOP/tests/cluster/lib.sh"

MINUTES=${1:-30}
FW=/sys/kernel/debug/fastreg_fail_wr
OUT=/tmp/soak.json
PEERS=()
for i in "${!NODES[@]}"; do
	[ "$i" = "$ME" ] || PEERS+=("${NODES[$i]}")
done

# at T: sleeps until T (seconds since the epoch).
at() {
	local d=$(($1 - $(date +%s)))
	[ "$d" -le 0 ] || sleep "$d"
}

# window NAME: the start and end (epoch seconds) of window NAME, as soak.py computes them.
window() {
	python3 -c "import sys; sys.path.insert(0, 'tests/cluster'); import soak
a, b = soak.window_times($START, $END)['$1']; print(int(a), int(b))"
}

faults() {
	local a b
	read -r a b < <(window faults)
	at "$a"
	echo "# node $ME: faults on ($(date +%T))"
	echo 15 >"$FW/kinds" && echo 2 >"$FW/probability" && echo 1 >"$FW/interval" &&
		echo -1 >"$FW/times" && echo 0 >"$FW/verbose"
	ff_arm fastreg_ib_map_mr_sg -22 1 -1
	at "$b"
	echo 0 >"$FW/probability"
	ff_disarm fastreg_ib_map_mr_sg
	publish faults "$(dmesg | grep -c 'fastreg: .*(injected)')"
	echo "# node $ME: faults off ($(date +%T)): $(published 0 faults) completions failed on purpose"
}

fuzz() {
	local a b
	read -r a b < <(window fuzz)
	at "$a"
	echo "# node $ME: fuzzing on ($(date +%T))"
	ctl fuzz "$FASTREG_ADDR" seed=7 rate=10000 count=1000000000
	at "$b"
	grep -m1 ' fuzz ' "$DBG/conns" | sed 's/^ */# fuzzing: /'
	publish mutations "$(grep -m1 ' fuzz ' "$DBG/conns" | sed -n 's/.* made=\([0-9]*\).*/\1/p')"
	ctl fuzz "$FASTREG_ADDR" off
	echo "# node $ME: fuzzing off ($(date +%T))"
}

# figure EXPR: a Python expression over the summary `s` (soak.py's JSON) is true.
figure() {
	[ "$(python3 -c "import json; s=json.load(open('$OUT')); g=s['groups']; print($1)")" = True ] ||
		{ echo "not true: $1"; python3 -c "import json; print(json.dumps(json.load(open('$OUT'))['groups'], indent=1))"; return 1; }
}

# not_growing: slab and fastreg's MRs at the end (traffic over for a minute) at most what
# they were in the first third of the run (slab: +10 % and 2 MiB of noise).
not_growing() {
	python3 - "$OUT" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
smp, last = s["samples"], s["final"]
early = smp[: max(2, len(smp) // 3)]
slab, mrs = max(x["slab_kib"] for x in early), max(x["mrs"] for x in early)
print(f"slab {[x['slab_kib'] for x in smp]} -> {last['slab_kib']} KiB; MRs {[x['mrs'] for x in smp]} -> {last['mrs']}")
ok = last["slab_kib"] <= slab * 1.10 + 2048 and last["mrs"] <= mrs
sys.exit(0 if ok else 1)
PY
}

# disturbed: node 0's faults failed completions and node 1 mutated messages.
disturbed() {
	local f m
	f=$(published 0 faults 2>/dev/null) m=$(published 1 mutations 2>/dev/null)
	echo "failed completions ${f:-none}, mutations ${m:-none}"
	[ "${f:-0}" -gt 0 ] && [ "${m:-0}" -gt 0 ]
}

ktap_begin 9
barrier start
[ "$ME" != 0 ] || publish soak_start $(($(date +%s) + 5))
barrier timed
START=$(published 0 soak_start)
END=$((START + MINUTES * 60))
rel() {
	local a b
	read -r a b
	echo "$((a - START))-$((b - START)) s"
}
echo "# node $ME: soak of $MINUTES min to ${PEERS[*]}; faults $(window faults | rel), fuzzing $(window fuzz | rel)"
case "$ME" in
0) faults & ;;
1) fuzz & ;;
esac
at "$START"
python3 tests/cluster/soak.py "$START" "$END" "$ME" "$(
	IFS=,
	echo "${PEERS[*]}"
)" "$OUT" "$([ "$ME" = 1 ] && echo self || echo "${NODES[1]}")"
wait
barrier done
# Traffic is over on every node: a minute for idle pool MRs to go, then the last sample.
sleep 60
python3 - "$OUT" <<'PY'
import json, sys
sys.path.insert(0, "tests/cluster")
import soak, time
s = json.load(open(sys.argv[1]))
s["final"] = soak.sample(time.time())
json.dump(s, open(sys.argv[1], "w"), indent=1)
PY
cp "$OUT" "$FASTREG_RUN/soak.$ME.json"
check "transfers in every phase (quiet, faults, fuzz)" \
	figure "all(any(k in x and g[x]['ops'] > 0 for x in g) for k in ('quiet', 'faults', 'fuzz'))"
check "both disturbances fired (failed completions on node 0, mutations on node 1)" disturbed
check "no corrupt transfer but those the fuzzing node may have caused" \
	figure "all(v['unexplained_corrupt'] == 0 for v in g.values())"
check "no error in quiet runs" figure "g.get('quiet', {}).get('errors', 1) == 0 and g['quiet']['cli_errors'] == 0"
check "slab and fastreg's MRs not growing" not_growing
check "every MR back in the pool" all_free
check "no kernel report" no_kernel_errors
barrier end
check "rmmod, no fastreg resource left" clean_unload
check "no kernel report after rmmod" no_kernel_errors
ktap_end
