#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# Three nodes, each running brw to both others at the same time, concurrency 8, every byte
# checked: zero errors, every node serving and being served at once; afterwards every MR is
# back in its pool, and rmmod leaves no fastreg resource on any node. In make test two
# x86_64 nodes (4 KiB pages) and an arm64 64 KiB one: each node has a peer of its own page
# size and one of another. make interop runs three page sizes (arm64 16 KiB too; its
# kernel is not built for make test, to keep a fresh machine's first run within CI's
# time). Three emulated VMs share two host cores here: a node moves well under 1 MiB/s
# while it serves two peers and is served by them, so the transfers are of 256 KiB and wait
# for their turn behind 15 others (8 in flight per peer) under a timeout of 120 s; with
# 1 MiB and the default 20 s some timed out (load, not loss).
#@ cluster --node x86_64 --node arm64-64k --node x86_64 --params "timeout=120" --timeout 2400
#@ interop --node x86_64 --node arm64-64k --node arm64-16k --params "timeout=120" --timeout 2400
#@ interop --node x86_64 --node arm64-64k --node arm64-16k --rdma siw --params "timeout=120" --timeout 2400
. "$FASTREG_TOP/tests/cluster/lib.sh"

OTHERS=()
for i in "${!NODES[@]}"; do
	[ "$i" = "$ME" ] || OTHERS+=(--peer "${NODES[$i]}")
done

ktap_begin 10
publish page "$PAGE"
barrier start
echo "# node $ME: $FASTREG_KIND, page size $PAGE; peers' page sizes:" \
	"$(for i in "${!NODES[@]}"; do [ "$i" = "$ME" ] || printf '%s ' "$(published "$i" page)"; done)"
check "ping both others" run_clean 20 ping "${OTHERS[@]}" --count 20 --concurrency 4

# All three at once, so every node is client and server of both others at the same time.
barrier write
check "brw write 256 KiB at offset 4097 to both others, concurrency 8, check=full" \
	run_clean 32 brw write "${OTHERS[@]}" --size 256k --offset 4097 --check full --concurrency 8 --count 32
check "  both peers served their share" expect "len(r['peers']) == 2 and all(p['ops'] > 0 and p['errors'] == 0 for p in r['peers'])"
barrier read
check "brw read 65537 bytes at offset 1 from both others, concurrency 8, check=full" \
	run_clean 64 brw read "${OTHERS[@]}" --size 65537 --offset 1 --check full --concurrency 8 --count 64
check "  both peers served their share" expect "len(r['peers']) == 2 and all(p['ops'] > 0 and p['errors'] == 0 for p in r['peers'])"
barrier mixed
check "brw write 4 KiB + 1 at offset 65535, concurrency 8, check=full" \
	run_clean 64 brw write "${OTHERS[@]}" --size 4097 --offset 65535 --check full --concurrency 8 --count 64

barrier end
check "every MR back in the pool (live == free)" all_free
check "no kernel errors" no_kernel_errors
check "rmmod, no fastreg resource left" clean_unload
check "no kernel errors after rmmod" no_kernel_errors
ktap_end
