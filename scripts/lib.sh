# SPDX-License-Identifier: GPL-2.0
# Shared definitions for fastreg's scripts. Sourced, never executed.
#
# Everything that is expensive to make (the test kernel, bindgen, the virtme-ng venv, the
# downloaded kernel source) lives OUTSIDE the clone, under $FASTREG_CACHE, so that a fresh
# clone on the same machine (CI) reuses it.

FASTREG_TOP=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
FASTREG_CACHE=${FASTREG_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/fastreg}
FASTREG_TOOLS=$FASTREG_CACHE/tools
FASTREG_VENV=$FASTREG_CACHE/venv

BINDGEN_VERSION=0.72.1
VIRTME_NG_VERSION=1.42
LLVM_SUFFIX=-19
KERNEL_SOURCE_PKG=linux-source-7.2
KERNEL_SOURCE_SUITE=trixie-backports
KERNEL_FRAGMENT=$FASTREG_TOP/scripts/kernel.config
# Bump when the way the kernel is built changes (not its config: that is hashed itself).
KERNEL_RECIPE=1

export LIBCLANG_PATH=/usr/lib/llvm${LLVM_SUFFIX}/lib
# The module and the kernel must be built by Debian's rustc 1.96 (rustc-web), never by the
# rustup toolchain that may be first on PATH: its crates fail with E0514 against rust/*.rmeta.
export PATH=/usr/bin:/usr/sbin:$FASTREG_TOOLS/bin:$FASTREG_VENV/bin:$PATH

# The module's build: the test build (FASTREG_TEST=1, what every script builds unless told
# otherwise: the test hooks, the fuzzing peer, the fastreg_fail_wr fault attribute and the
# debugfs command files compiled in) or the production build (FASTREG_TEST=0: `make` and
# `make run`), which carries none of them. See Documentation/testing.rst, "The test build".
export FASTREG_TEST=${FASTREG_TEST:-1}
# Where `make test` builds the x86_64 production module beside the test one (18-device
# loads it, test.sh looks at its symbols).
PRODUCTION_KO=$FASTREG_TOP/build/ko/x86_64-production/fastreg.ko

# kmake_build 1|0 ARGS...: scripts/kmake.sh ARGS for x86_64, the test build (1, in the tree)
# or the production build (0, beside it in the directory of $PRODUCTION_KO).
kmake_build() {
	local build=$1
	shift
	if [ "$build" = 1 ]; then
		FASTREG_TEST=1 "$FASTREG_TOP/scripts/kmake.sh" "$@"
	else
		FASTREG_TEST=0 FASTREG_OUT=$(dirname "$PRODUCTION_KO") "$FASTREG_TOP/scripts/kmake.sh" "$@"
	fi
}

# Make variables for every kernel and module build.
kmake_flags() {
	printf '%s\n' "LLVM=$LLVM_SUFFIX" RUSTC=/usr/bin/rustc HOSTRUSTC=/usr/bin/rustc \
		RUSTFMT=/usr/bin/rustfmt CLIPPY_DRIVER=/usr/bin/clippy-driver \
		"BINDGEN=$FASTREG_TOOLS/bin/bindgen"
}

# Node kinds: the test kernels fastreg is built and tested on. x86_64 (4 KiB pages) is the
# default everywhere; the arm64 kinds are cross-built with clang for multi-node tests.
NODE_KINDS="x86_64 arm64-64k arm64-16k"
ARM64_FRAGMENT=$FASTREG_TOP/scripts/kernel-arm64.config
# Options of scripts/kernel.config that arm64 does not have or does not want.
ARM64_DROP="64BIT EARLY_PRINTK SERIAL_8250 SERIAL_8250_CONSOLE ACPI I6300ESB_WDT"

# The x86_64 sanitizer kernel (KASAN, kmemleak, lockdep, debug objects, SLUB debugging,
# fault injection): scripts/kernel-debug.config over the base fragment. `--kernel debug` of
# scripts/vm.sh and scripts/cluster.sh runs the x86_64 nodes on it.
DEBUG_KIND=x86_64-debug
DEBUG_FRAGMENT=$FASTREG_TOP/scripts/kernel-debug.config
KERNEL_KINDS="$NODE_KINDS $DEBUG_KIND"
# The kinds `make test` runs on, built before its first run on a fresh machine (8 to 16
# minutes each): arm64-16k is only in the larger matrices (make interop, make bench), the
# sanitizer kernel in make test-debug (its build alone took 14 to 25 minutes: with it a
# fresh machine's first make test passed CI's 90; Documentation/testing.rst, "Time").
TEST_KINDS="x86_64 arm64-64k"

valid_kind() {
	case " $KERNEL_KINDS " in *" $1 "*) return 0 ;; esac
	die "unknown node kind '$1' (one of: $KERNEL_KINDS)"
}

# kernel_kind KIND KERNEL: the kind a node of KIND runs with --kernel KERNEL (default or
# debug; the sanitizer kernel is x86_64 only).
kernel_kind() {
	case "$2" in
	default) echo "$1" ;;
	debug) case "$1" in x86_64 | "$DEBUG_KIND") echo "$DEBUG_KIND" ;; *) echo "$1" ;; esac ;;
	*) die "--kernel takes default or debug, not '$2'" ;;
	esac
}

# kind_arch KIND: the kernel's ARCH for a node kind.
kind_arch() {
	case "$1" in arm64-*) echo arm64 ;; *) echo x86_64 ;; esac
}

# kind_fragment KIND: the whole config fragment of a node kind's kernel. For x86_64 it is
# scripts/kernel.config byte for byte (so its cache key is what it always was).
kind_fragment() {
	case "$1" in
	x86_64) cat "$KERNEL_FRAGMENT" ;;
	"$DEBUG_KIND")
		cat "$KERNEL_FRAGMENT"
		echo
		cat "$DEBUG_FRAGMENT"
		;;
	arm64-*)
		local drop
		drop=$(printf '^CONFIG_%s=|' $ARM64_DROP)
		grep -Ev "${drop%|}" "$KERNEL_FRAGMENT"
		echo
		cat "$ARM64_FRAGMENT"
		local page=${1#arm64-}
		echo "CONFIG_ARM64_${page^^}_PAGES=y"
		;;
	esac
}

# Make variables for every kernel and module build of a node kind (default x86_64).
kmake_flags() {
	printf '%s\n' "LLVM=$LLVM_SUFFIX" RUSTC=/usr/bin/rustc HOSTRUSTC=/usr/bin/rustc \
		RUSTFMT=/usr/bin/rustfmt CLIPPY_DRIVER=/usr/bin/clippy-driver \
		"BINDGEN=$FASTREG_TOOLS/bin/bindgen"
	[ "$(kind_arch "${1:-x86_64}")" = x86_64 ] || echo "ARCH=$(kind_arch "$1")"
}

# Cache key of a node kind's test kernel: its fragment, the compiler and the recipe.
kernel_key() {
	local kind=${1:-x86_64}
	{
		kind_fragment "$kind"
		echo "LLVM=$LLVM_SUFFIX recipe=$KERNEL_RECIPE"
		[ "$kind" = x86_64 ] || echo "kind=$kind"
	} | sha256sum | cut -c1-12
}

# cached_kdir [KIND]: prints the cached, completely built test kernel tree of a node kind
# (default x86_64) for the current key, if any.
cached_kdir() {
	local key d
	key=$(kernel_key "${1:-x86_64}")
	for d in "$FASTREG_CACHE"/kernel/*-"$key"/linux; do
		[ -f "$d/.fastreg-built" ] && { echo "$d"; return 0; }
	done
	return 1
}

# kind_module KIND: where fastreg.ko for a node kind is built. x86_64 builds in the tree
# (as `make` always did); the others out of tree, under build/ko/KIND (kbuild's MO=).
kind_module() {
	case "$1" in
	x86_64) echo "$FASTREG_TOP/fastreg.ko" ;;
	*) echo "$FASTREG_TOP/build/ko/$1/fastreg.ko" ;;
	esac
}

# What the arm64 nodes' root file system holds: what the tests, the CLI (python3) and the
# benchmark anchors (perftest) use. The Essential set is not implied in mmdebstrap's
# "extract" variant, so the basic tools are listed too.
ROOTFS_PACKAGES=(bash coreutils util-linux mount procps grep sed mawk findutils gzip diffutils
	kmod iproute2 iputils-ping rdma-core ibverbs-utils ibverbs-providers perftest python3
	busybox-static libc-bin)
ROOTFS_SUITE=bookworm

# The stub the arm64 kernel runs as init (the root is read-only): it mounts the project tree
# shared by scripts/cluster.sh and hands over to scripts/node-init.sh there, so that what the
# node does lives in the clone, not in the cache.
rootfs_stub() {
	cat <<'STUB'
#!/bin/bash
export PATH=/usr/sbin:/usr/bin:/sbin:/bin
mount -t 9p -o trans=virtio,version=9p2000.L,ro,msize=262144,cache=loose fastreg_top /fastreg/top &&
	exec /bin/bash /fastreg/top/scripts/node-init.sh
echo "fastreg-init: cannot mount the project tree (tag fastreg_top)" >&2
echo o >/proc/sysrq-trigger
STUB
}

# Bump when the way the root is made changes (not its packages or stub: they are hashed).
ROOTFS_RECIPE=2

rootfs_key() {
	{ printf '%s\n' "${ROOTFS_PACKAGES[@]}" "$ROOTFS_SUITE" "recipe=$ROOTFS_RECIPE"; rootfs_stub; } |
		sha256sum | cut -c1-12
}

# rootfs_dir: where the arm64 root of the current key is (built when it has .fastreg-built).
rootfs_dir() {
	echo "$FASTREG_CACHE/rootfs/arm64-$ROOTFS_SUITE-$(rootfs_key)"
}

# ktap_tally NAME RC OUTPUT: counts the points of a KTAP document (OUTPUT, from a run that
# exited RC) into KTAP_P (passed), KTAP_F (failed) and KTAP_S (skipped: "ok N ... # SKIP
# why", neither passed nor failed). A document with fewer points than it planned, or a run
# that failed with no point failed, counts one failure more (and says so).
ktap_tally() {
	local name=$1 rc=$2 out=$3 plan
	KTAP_S=$(printf '%s\n' "$out" | grep -cE '^ok [0-9]+ .* # SKIP')
	KTAP_P=$(($(printf '%s\n' "$out" | grep -cE '^ok [0-9]+ ') - KTAP_S))
	KTAP_F=$(printf '%s\n' "$out" | grep -cE '^not ok [0-9]+ ')
	plan=$(printf '%s\n' "$out" | sed -nE 's/^1\.\.([0-9]+)$/\1/p' | head -n1)
	if [ -z "$plan" ] || [ $((KTAP_P + KTAP_F + KTAP_S)) -ne "$plan" ]; then
		echo "# $name: planned ${plan:-?} test points, saw $((KTAP_P + KTAP_F + KTAP_S)) (exit $rc)"
		KTAP_F=$((KTAP_F + 1))
	elif [ "$rc" != 0 ] && [ "$KTAP_F" -eq 0 ]; then
		echo "# $name: exited $rc with no failed test point"
		KTAP_F=1
	fi
}

log() { printf '[fastreg] %s\n' "$*" >&2; }
# console_tail FILE: the last lines of a guest's console, logged (a boot that failed).
console_tail() { tail -n 15 "$1" | sed 's/^/[fastreg]   /' >&2; }
die() { printf '[fastreg] error: %s\n' "$*" >&2; exit 1; }

# Progress of `make test` (scripts/test.sh): a line after each step with the time so far
# and an estimate of the whole. The run's file $FASTREG_PROGRESS holds its steps ("plan
# NAME") and those done ("done SECONDS NAME"); $FASTREG_PROGRESS_START is its start (epoch
# seconds). A step not done yet counts what it took last time on this machine
# ($FASTREG_CACHE/durations, "SECONDS NAME", kept across runs), else its figure in
# scripts/test-durations (from a named run, Documentation/testing.rst), else 60 s.
progress_plan() {
	[ -n "${FASTREG_PROGRESS:-}" ] || return 0
	local n
	for n in "$@"; do printf 'plan\t%s\n' "$n"; done >>"$FASTREG_PROGRESS"
}

# progress_done NAME SECONDS: records the step and prints the progress line.
progress_done() {
	[ -n "${FASTREG_PROGRESS:-}" ] || return 0
	local name=$1 secs=$2 durations=$FASTREG_CACHE/durations
	printf 'done\t%s\t%s\n' "$secs" "$name" >>"$FASTREG_PROGRESS"
	mkdir -p "$FASTREG_CACHE"
	{ awk -F'\t' -v n="$name" '$2 != n' "$durations" 2>/dev/null
		printf '%s\t%s\n' "$secs" "$name"; } >"$durations.new" && mv "$durations.new" "$durations"
	awk -F'\t' -v now="$(date +%s)" -v start="${FASTREG_PROGRESS_START:-$(date +%s)}" -v name="$name" -v secs="$secs" '
		FILENAME == ARGV[1] { if (!($2 in known)) known[$2] = $1; next }   # this machine
		FILENAME == ARGV[2] { if (!($2 in fallback)) fallback[$2] = $1; next }   # named run
		$1 == "plan" { plan[++n] = $2; next }
		$1 == "done" { done[$3] = 1 }
		END {
			left = 0
			for (i = 1; i <= n; i++) {
				if (plan[i] in done) continue
				left += (plan[i] in known) ? known[plan[i]] : (plan[i] in fallback) ? fallback[plan[i]] : 60
			}
			so_far = now - start
			printf "# progress: %s done in %d s; %d:%02d so far, about %d min in all\n",
				name, secs, so_far / 60, so_far % 60, (so_far + left + 30) / 60
		}' "$durations" "$FASTREG_TOP/scripts/test-durations" "$FASTREG_PROGRESS"
}
