#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# Another RDMA user beside fastreg: nvme-rdma over nvmet-rdma on the same device (rxe0,
# looping back), whose target completes on ib_core's shared completion workqueue, as
# fastreg's CQs do. Its 4 KiB reads at queue depth 1 are timed (fio's completion latency)
# alone, then while fastreg moves 32 MiB transfers with every byte checked, both ways: a
# check or fill of 32 MiB must never run where it holds the other user's completions (it
# runs on fastreg_conn, not in a CQ handler), so the reads' latency under that load stays
# far below the time one such transfer takes. In make interop (about 4 minutes).
#@ interop
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/lst.sh"

NQN=fastreg-neighbour
CFG=/sys/kernel/config/nvmet
BACKING=/dev/shm/neighbour.img
A=$FASTREG_ADDR

nvme_up() {
	local m sub ns port i dev
	for m in nvmet nvmet-rdma nvme-rdma; do modprobe $m || return 1; done
	mountpoint -q /sys/kernel/config || mount -t configfs none /sys/kernel/config || return 1
	truncate -s 64M $BACKING
	sub=$CFG/subsystems/$NQN ns=$sub/namespaces/1 port=$CFG/ports/1
	mkdir -p $ns $port || return 1
	echo 1 >$sub/attr_allow_any_host && echo $BACKING >$ns/device_path &&
		echo 1 >$ns/enable || return 1
	echo rdma >$port/addr_trtype && echo ipv4 >$port/addr_adrfam &&
		echo "$A" >$port/addr_traddr && echo 4420 >$port/addr_trsvcid || return 1
	ln -s $sub $port/subsystems/$NQN || return 1
	nvme connect -t rdma -a "$A" -s 4420 -n $NQN || return 1
	for i in $(seq 100); do
		dev=$(nvme list 2>/dev/null | grep -o '/dev/nvme[0-9]*n[0-9]*' | head -n1)
		[ -n "$dev" ] && [ -b "$dev" ] && { echo "$dev" >/tmp/nvme.dev; return 0; }
		sleep 0.2
	done
	return 1
}

nvme_down() {
	nvme disconnect -n $NQN >/dev/null 2>&1
	rm -f $CFG/ports/1/subsystems/$NQN
	rmdir $CFG/subsystems/$NQN/namespaces/1 $CFG/subsystems/$NQN $CFG/ports/1 2>/dev/null
	rm -f $BACKING
}

# reads NAME: 4 KiB random reads at queue depth 1 for 15 s; their completion latency in
# /tmp/fio.NAME ("ios p50 p99 max", microseconds).
reads() {
	fio --name=neighbour --filename="$(cat /tmp/nvme.dev)" --rw=randread --bs=4k \
		--direct=1 --ioengine=libaio --iodepth=1 --time_based --runtime=15 \
		--output-format=json >/tmp/fio.$1.json 2>/tmp/fio.$1.err || { cat /tmp/fio.$1.err; return 1; }
	python3 - /tmp/fio.$1.json >/tmp/fio.$1 <<'PY' || return 1
import json, sys
text = open(sys.argv[1]).read()
r = json.loads(text[text.index('{'):])['jobs'][0]['read']
c, p = r['clat_ns'], r['clat_ns']['percentile']
print(r['total_ios'], int(p['50.000000']) // 1000, int(p['99.000000']) // 1000, int(c['max']) // 1000)
PY
	echo "reads $1: ios p50 p99 max (us): $(cat /tmp/fio.$1)"
	[ "$(cut -d' ' -f1 /tmp/fio.$1)" -gt 0 ]
}

ktap_begin 13
# Four 32 MiB buffers at each end of the loop: within tests_mem.
# Under emulation a checked 32 MiB transfer takes seconds, four at once beside the reads
# up to about 20: timeout=120.
check "nvme-rdma connected to nvmet-rdma on the same device" nvme_up
check "4 KiB reads alone" reads alone
# The device's counts with nvme-rdma up, before fastreg (what fastreg takes must come back;
# nvmet-rdma's CQs come from the device's shared CQ pool, which keeps them until the device
# goes).
before=$(resource_counts)
check "load with max_payload=32 MiB" load max_payload=33554432 tests_mem=768 timeout=120
# Two 32 MiB transfers each way, every byte checked (fills and checks of 32 MiB), for
# longer than the reads below take.
"$LST" --json brw write --from $A --peer $A --size 32M --concurrency 2 --check full --seconds 60 \
	>/tmp/w.json 2>&1 &
w=$!
"$LST" --json brw read --from $A --peer $A --size 32M --concurrency 2 --check full --seconds 60 \
	>/tmp/r.json 2>&1 &
r=$!
check "fastreg's 32 MiB transfers under way" wait_for registered 8 $FASTREG_DEV
check "4 KiB reads beside them" reads loaded
# all_good FILE: the run whose JSON is in FILE did transfers, all good.
all_good() {
	local OUT=$1
	expect "r['ops'] > 0 and r['errors'] == 0 and r['corrupt'] == 0"
}
wait $w
check "  the writes: some, all good" all_good /tmp/w.json
wait $r
check "  the reads: some, all good" all_good /tmp/r.json
# held_behind: the reads' worst latency under the load against a 32 MiB transfer's average
# (write or read, the shorter): a completion held behind a check or fill of 32 MiB would
# wait about that long.
held_behind() {
	local worst xfer
	worst=$(cut -d' ' -f4 /tmp/fio.loaded)
	xfer=$(python3 -c "import json; print(int(min(json.load(open(f))['latency_us']['avg'] for f in ('/tmp/w.json', '/tmp/r.json'))))")
	echo "worst 4 KiB read beside the load: $worst us; a 32 MiB transfer: $xfer us on average"
	[ "$worst" -lt $((xfer / 2)) ]
}
check "  no read held behind a 32 MiB check or fill" held_behind
unload_checks "$before"
nvme_down
check "nvme-rdma disconnected" bash -c "! nvme list 2>/dev/null | grep -q /dev/nvme"
modprobe -r nvme-rdma nvmet-rdma nvmet
ktap_end
