# SPDX-License-Identifier: GPL-2.0
#
# fastreg: user-facing targets. Kbuild reads ./Kbuild, not this file.
#
#   make            build fastreg.ko, the production build (sets up the toolchain and test
#                   kernel on first use); the test targets build the test build
#                   (FASTREG_TEST=1: test hooks, fault attribute, debugfs commands)
#   make test       host unit tests + module build + VM tests; last line "N passed, N failed"
#   make run        boot a VM on rxe, load fastreg, run the default selftest session
#   make interop    the larger matrix: more node kinds (arm64 16 KiB), siw across nodes, the
#                   selftest suite on siw, the rxe link-flap reproducer, the long phases of
#                   the multi-node suites, the harness's own test (a starved boot)
#   make test-debug every VM suite on the sanitizer kernel (KASAN, kmemleak, lockdep)
#   make fuzz       the fuzzing peer's long run: 100,000 mutated messages (tests/vm/10-fuzz.sh;
#                   FUZZ_COUNT=N FUZZ_SEED=S for a part, seeds S and S+1; FUZZ_RATE per million)
#   make soak       3 nodes, 30 min of mixed traffic with faults and a fuzzing peer part-time
#                   (SOAK_MINUTES=N for another length); figures from scripts/soak-report.py
#   make bench      fastreg vs perftest and nvme-rdma, one VM and two nodes: build/bench/
#   make scale      1,000 connections into one interface (tests/vm/19-scale.sh 1000; SCALE_N=N
#                   for another count): setup rate, memory per connection, teardown times
#   make lint       rustfmt, clippy (1.96, as the kernel) and checkpatch
#   make clean      remove build products (the cached kernel stays, see README)
#
# KDIR=<kernel tree> builds against another kernel (it must have CONFIG_RUST and its
# Rust metadata); by default the cached test kernel is used.

SHELL := /bin/bash

ifdef KDIR
SETUP := host
else
SETUP := vm
endif

.PHONY: all module setup test test-debug interop fuzz soak run bench scale lint clean

all: module

setup:
	@scripts/setup.sh $(SETUP)

# The production build: no test hooks (the test targets build FASTREG_TEST=1, scripts/lib.sh).
module: setup
	@FASTREG_TEST=0 scripts/kmake.sh modules

test:
	@scripts/test.sh

interop:
	@scripts/setup.sh all
	@for k in $$(. scripts/lib.sh; echo $$KERNEL_KINDS); do FASTREG_KIND=$$k scripts/kmake.sh -s modules || exit 1; done
	@FASTREG_VM_NOBUILD=1 FASTREG_INTEROP=only scripts/vm-tests.sh
	@FASTREG_VM_NOBUILD=1 FASTREG_INTEROP=1 scripts/cluster-tests.sh
	@tests/harness/boot-watch.sh

test-debug:
	@scripts/setup.sh all
	@FASTREG_KIND=x86_64-debug scripts/kmake.sh -s modules
	@FASTREG_KERNEL=debug FASTREG_VM_NOBUILD=1 FASTREG_VM_TIMEOUT=3600 scripts/vm-tests.sh

fuzz: module
	@scripts/vm.sh --no-load --timeout 50400 -- bash tests/vm/10-fuzz.sh $${FUZZ_COUNT:-100000} $${FUZZ_SEED:-1} $${FUZZ_RATE:-25000}

soak:
	@scripts/setup.sh kinds x86_64 arm64-64k
	@for k in x86_64 arm64-64k; do FASTREG_KIND=$$k scripts/kmake.sh -s modules || exit 1; done
	@m=$${SOAK_MINUTES:-30}; FASTREG_VM_NOBUILD=1 scripts/cluster.sh --node x86_64 --node x86_64 \
		--node arm64-64k --params "timeout=60" --timeout $$(( (m + 15) * 60 )) \
		-- bash tests/cluster/soak.sh $$m; scripts/soak-report.py

run: module
	@scripts/run.sh

bench: module
	@scripts/bench.sh

# The test build: the scale test dials through the debug command `dial`.
scale: setup
	@scripts/kmake.sh -s modules
	@FASTREG_VM_NOBUILD=1 scripts/vm.sh --memory 6G --timeout 5400 --no-load -- \
		bash tests/vm/19-scale.sh $${SCALE_N:-1000}

lint: setup
	@scripts/lint.sh

clean:
	@if [ -f "$$(scripts/kdir.sh)/Makefile" ]; then scripts/kmake.sh clean; fi
	rm -rf build
