#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# Installs and builds everything fastreg needs, idempotently: each step checks whether it is
# already done and skips itself. Called by the make targets; never needs to be run by hand.
#
#   scripts/setup.sh              all steps (packages, bindgen, virtme-ng, every node kind's
#                                 kernel, the x86_64 sanitizer kernel, the arm64 root file
#                                 system)
#   scripts/setup.sh test         what make test needs: the kernels of TEST_KINDS (not
#                                 arm64-16k) and the arm64 root file system
#   scripts/setup.sh kinds KIND.. what VMs of those kinds need (scripts/cluster.sh)
#   scripts/setup.sh vm           what one x86_64 VM needs (no arm64 kernels or root)
#   scripts/setup.sh debug        what one x86_64 VM on the sanitizer kernel needs
#   scripts/setup.sh host         only what host-side checks need (packages, bindgen)
#   scripts/setup.sh kernel KIND  one kind's kernel (x86_64, x86_64-debug, arm64-64k, arm64-16k)
#   scripts/setup.sh nodes        the arm64 kernels and root file system
#
# Each kernel is built once per (kernel version, node kind, config fragment, recipe) and cached
# under $FASTREG_CACHE (default ~/.cache/fastreg), outside the clone; so is the arm64 root.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

PACKAGES=(
	# Rust 1.96 with its sources, clippy and rustfmt of the same version.
	rustc-web rust-web-src rust-web-clippy rustfmt-web
	# LLVM=-19 kernel build and bindgen's libclang.
	clang-19 libclang-19-dev lld-19 llvm-19
	# Kernel build dependencies.
	make bison flex bc libelf-dev libssl-dev cpio kmod dwarves xz-utils patch
	# objdump and c++filt for scripts/stack-depth.py.
	binutils
	# VM and RDMA user space (the guest shares the host's root file system).
	qemu-system-x86 udev iproute2 rdma-core ibverbs-utils perftest
	# The hostile user-space peer (tests/peer/forge.c), built by its test from source.
	gcc libc6-dev librdmacm-dev libibverbs-dev
	# arm64 nodes: the emulator, and the tool that builds their Debian root file system.
	qemu-system-arm mmdebstrap
	# fio over nvme-rdma (nvme-cli connects it): the benchmark's anchor and 15-neighbours.
	fio nvme-cli
	# The tracepoint sessions of Documentation/trace.rst (tests/vm/16-trace.sh).
	trace-cmd linux-perf
	# Python for virtme-ng's venv.
	python3 python3-venv busybox-static
)

step_packages() {
	local missing=() p
	for p in "${PACKAGES[@]}"; do
		dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' ||
			missing+=("$p")
	done
	if [ ${#missing[@]} -eq 0 ]; then
		log "packages: all ${#PACKAGES[@]} installed"
		return
	fi
	log "packages: installing ${missing[*]}"
	[ "$(id -u)" -eq 0 ] || die "need root to install packages: ${missing[*]}"
	apt-get update -q
	DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"
}

step_bindgen() {
	if "$FASTREG_TOOLS/bin/bindgen" --version 2>/dev/null | grep -qx "bindgen $BINDGEN_VERSION"; then
		log "bindgen: $BINDGEN_VERSION present"
		return
	fi
	command -v cargo >/dev/null || die "cargo not found (needed once to build bindgen-cli)"
	log "bindgen: building bindgen-cli $BINDGEN_VERSION (about 2 minutes)"
	# The host toolchain builds this host tool; only the kernel and module need rustc 1.96.
	env PATH="$HOME/.cargo/bin:$PATH" cargo install --quiet --locked \
		--root "$FASTREG_TOOLS" bindgen-cli --version "$BINDGEN_VERSION"
}

step_venv() {
	if [ -x "$FASTREG_VENV/bin/vng" ] &&
		"$FASTREG_VENV/bin/vng" --version 2>/dev/null | grep -q "$VIRTME_NG_VERSION"; then
		log "virtme-ng: $VIRTME_NG_VERSION present"
		return
	fi
	log "virtme-ng: creating venv with virtme-ng $VIRTME_NG_VERSION"
	local py
	py=$(command -v python3)
	# Prefer a python whose venv module works (Debian's needs python3-venv).
	for cand in "$HOME/.pyenv/shims/python3" /usr/bin/python3; do
		[ -x "$cand" ] && "$cand" -c 'import venv, ensurepip' 2>/dev/null && { py=$cand; break; }
	done
	rm -rf "$FASTREG_VENV"
	"$py" -m venv "$FASTREG_VENV"
	"$FASTREG_VENV/bin/pip" install -q "virtme-ng==$VIRTME_NG_VERSION"
}

# matplotlib in the venv, for the benchmark's plots (make bench only).
step_plot() {
	if "$FASTREG_VENV/bin/python" -c 'import matplotlib' 2>/dev/null; then
		log "matplotlib: present"
		return
	fi
	log "matplotlib: installing into the venv"
	"$FASTREG_VENV/bin/pip" install -q matplotlib
}

# The Debian mirror this machine already uses (never a host name written into the repo).
mirror_uri() {
	local uri
	uri=$(awk '/^URIs:/ { print $2; exit }' /etc/apt/sources.list.d/*.sources 2>/dev/null || true)
	[ -n "$uri" ] || uri=$(awk '/^deb / && $0 !~ /security/ { for (i = 2; i <= NF; i++) if ($i ~ /:\/\//) { print $i; exit } }' \
		/etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null | head -n1)
	[ -n "$uri" ] || die "no Debian mirror URI found in /etc/apt"
	echo "$uri"
}

# Downloads the kernel source .deb through a private apt state directory: the system's apt
# sources are never touched, and the mirror URI is the one this machine already uses.
fetch_kernel_source() {
	local deb
	deb=$(ls "$FASTREG_CACHE"/src/${KERNEL_SOURCE_PKG}_*.deb 2>/dev/null | sort -V | tail -n1 || true)
	if [ -n "$deb" ]; then
		echo "$deb"
		return
	fi
	local uri apt=$FASTREG_CACHE/apt
	uri=$(mirror_uri)
	mkdir -p "$apt"/{state,lists/partial,cache/archives/partial,etc} "$FASTREG_CACHE/src"
	echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $uri $KERNEL_SOURCE_SUITE main" \
		>"$apt/etc/sources.list"
	local aopts=(-o "Dir::State=$apt/state" -o "Dir::State::Lists=$apt/lists"
		-o "Dir::Etc::SourceList=$apt/etc/sources.list" -o Dir::Etc::SourceParts=/nonexistent
		-o "Dir::Cache=$apt/cache" -o Debug::NoLocking=1 -o APT::Sandbox::User=root)
	log "kernel: downloading $KERNEL_SOURCE_PKG from $KERNEL_SOURCE_SUITE"
	apt-get "${aopts[@]}" update -q >&2
	(cd "$FASTREG_CACHE/src" && apt-get "${aopts[@]}" download "$KERNEL_SOURCE_PKG" >&2)
	deb=$(ls "$FASTREG_CACHE"/src/${KERNEL_SOURCE_PKG}_*.deb | sort -V | tail -n1)
	echo "$deb"
}

# step_kernel [KIND]: the test kernel of a node kind (default x86_64), cached by its key.
step_kernel() {
	local kind=${1:-x86_64} kdir
	if kdir=$(cached_kdir "$kind"); then
		log "kernel $kind: cached build $kdir"
		step_kernel_fixes "$kind"
		return
	fi
	local deb ver key dir arch image
	deb=$(fetch_kernel_source)
	ver=$(dpkg-deb -f "$deb" Version)
	key=$(kernel_key "$kind")
	arch=$(kind_arch "$kind")
	dir=$FASTREG_CACHE/kernel/$ver-$key
	[ "$kind" = x86_64 ] || dir=$FASTREG_CACHE/kernel/$ver-$kind-$key
	kdir=$dir/linux
	if [ ! -f "$kdir/Makefile" ]; then
		log "kernel $kind: unpacking $ver"
		rm -rf "$dir"
		mkdir -p "$dir/deb"
		dpkg-deb -x "$deb" "$dir/deb"
		mkdir -p "$kdir"
		tar -C "$kdir" --strip-components=1 -xf "$dir"/deb/usr/src/linux-source-*.tar.xz
		rm -rf "$dir/deb"
	fi
	local flags frag=$dir/fragment.config
	mapfile -t flags < <(kmake_flags "$kind")
	kind_fragment "$kind" >"$frag"
	local jobs=$(($(nproc) + 1))
	log "kernel $kind: configuring $ver (fragment key $key)"
	make -C "$kdir" -s "${flags[@]}" allnoconfig
	(cd "$kdir" && scripts/kconfig/merge_config.sh -m -O . .config "$frag" >/dev/null)
	make -C "$kdir" -s "${flags[@]}" olddefconfig
	make -C "$kdir" -s "${flags[@]}" rustavailable
	check_config "$kdir/.config" "$frag"
	case "$arch" in x86_64) image=bzImage ;; *) image=Image ;; esac
	log "kernel $kind: building $image and modules with -j$jobs (10 to 15 minutes on 2 cores)"
	local start=$SECONDS
	make -C "$kdir" "${flags[@]}" -j"$jobs" $image modules >"$dir/build.log" 2>&1 ||
		{ tail -n 40 "$dir/build.log" >&2; die "kernel build failed, see $dir/build.log"; }
	if [ "$arch" != x86_64 ]; then
		# The guests of other architectures cannot use the host's /lib/modules: theirs is
		# installed beside the tree and shared into the guest (scripts/cluster.sh).
		rm -rf "$dir/mods"
		make -C "$kdir" -s "${flags[@]}" INSTALL_MOD_PATH="$dir/mods" modules_install >>"$dir/build.log" 2>&1 ||
			die "modules_install failed, see $dir/build.log"
	fi
	log "kernel $kind: built in $((SECONDS - start)) s"
	touch "$kdir/.fastreg-built"
	step_kernel_fixes "$kind"
}

# step_kernel_fixes KIND: the fixes the test kernels carry (scripts/kernel-patches/*.patch;
# Documentation/testing.rst, "Kernel fixes"), applied to the cached tree once each, then
# the modules rebuilt (incremental: only what a fix touched) and, for arm64, installed
# again beside the tree; only then is each fix marked done (a mark per patch content), so
# an interrupted rebuild is done again next time. The trees stay keyed by their
# configuration: a fix costs a module rebuild, not a kernel build. Under a lock: the cache
# is shared by every clone.
step_kernel_fixes() {
	local kind=$1 kdir dir p mark flags marks=()
	kdir=$(cached_kdir "$kind") || die "kernel $kind: not built"
	dir=$(dirname "$kdir")
	exec 8>"$dir/.fixes.lock"
	flock 8
	for p in "$FASTREG_TOP"/scripts/kernel-patches/*.patch; do
		[ -f "$p" ] || continue
		mark=$kdir/.fastreg-fix-$(sha256sum "$p" | cut -c1-16)
		[ -f "$mark" ] && continue
		# Applied already (a run stopped before its mark) if it reverses cleanly.
		if ! patch -d "$kdir" -p1 -R --dry-run -s -f <"$p" >/dev/null 2>&1; then
			patch -d "$kdir" -p1 --forward --dry-run -s <"$p" >/dev/null &&
				patch -d "$kdir" -p1 --forward -s <"$p" || die "kernel $kind: ${p##*/} does not apply"
			log "kernel $kind: fix ${p##*/} applied"
		fi
		marks+=("$mark")
	done
	if [ ${#marks[@]} -gt 0 ]; then
		mapfile -t flags < <(kmake_flags "$kind")
		make -C "$kdir" "${flags[@]}" -j$(($(nproc) + 1)) modules >>"$dir/build.log" 2>&1 ||
			{ tail -n 40 "$dir/build.log" >&2; die "kernel $kind: module rebuild failed, see $dir/build.log"; }
		if [ "$(kind_arch "$kind")" != x86_64 ]; then
			make -C "$kdir" -s "${flags[@]}" INSTALL_MOD_PATH="$dir/mods" modules_install >>"$dir/build.log" 2>&1 ||
				die "kernel $kind: modules_install failed, see $dir/build.log"
		fi
		touch "${marks[@]}"
		log "kernel $kind: modules rebuilt with the fixes"
	fi
	exec 8>&-
}

# Every option the fragment asks for must have survived olddefconfig (a missing dependency
# silently drops it otherwise).
check_config() {
	local cfg=$1 frag=$2 bad=0 line opt val got
	while IFS= read -r line; do
		case "$line" in CONFIG_*=*) ;; *) continue ;; esac
		opt=${line%%=*}
		val=${line#*=}
		got=$(grep -E "^$opt=|^# $opt is not set" "$cfg" || true)
		case "$val" in
		n) [ -z "$got" ] || [[ "$got" == "# $opt is not set" ]] || { log "config: $opt wanted n, got $got"; bad=1; } ;;
		*) [ "$got" = "$opt=$val" ] || { log "config: $opt wanted $val, got ${got:-unset}"; bad=1; } ;;
		esac
	done <"$frag"
	[ $bad -eq 0 ] || die "kernel config does not match $frag"
}

# The arm64 nodes' root file system: Debian's arm64 packages unpacked (not configured: no
# arm64 code runs on the host), cached by the package list and the stub.
step_rootfs() {
	local dir
	dir=$(rootfs_dir)
	if [ -f "$dir/.fastreg-built" ]; then
		log "rootfs arm64: cached $dir"
		return
	fi
	local uri
	uri=$(mirror_uri)
	log "rootfs arm64: unpacking ${#ROOTFS_PACKAGES[@]} packages and their dependencies from $ROOTFS_SUITE"
	rm -rf "$dir"
	mkdir -p "$(dirname "$dir")"
	local list
	list=$(IFS=,; echo "${ROOTFS_PACKAGES[*]}")
	mmdebstrap --quiet --mode=root --variant=extract --architectures=arm64 --include="$list" \
		"$ROOTFS_SUITE" "$dir" "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $uri $ROOTFS_SUITE main" \
		>"$dir.log" 2>&1 || { tail -n 20 "$dir.log" >&2; die "mmdebstrap failed, see $dir.log"; }
	ln -sf bash "$dir/bin/sh"
	# The root is read-only in the guest, so Python there could never cache its bytecode and
	# would compile every module it imports, each time (seconds under emulation). Bytecode
	# does not depend on the machine: the host's Python of the same version compiles it.
	local py
	py=$(ls "$dir"/usr/bin/python3.* | grep -E '/python3\.[0-9]+$' | head -n1)
	py=/usr/bin/${py##*/}
	[ -x "$py" ] || die "rootfs arm64: $py (the guest's Python version) missing on the host"
	"$py" -m compileall -q -j0 "$dir/usr/lib/${py##*/}" >/dev/null 2>&1 || true
	mkdir -p "$dir/fastreg/top" "$dir/fastreg/run" "$dir/lib/modules"
	rootfs_stub >"$dir/fastreg-init"
	chmod 755 "$dir/fastreg-init"
	[ -x "$dir/usr/bin/python3" ] && [ -x "$dir/usr/bin/ib_write_bw" ] && [ -x "$dir/usr/bin/rdma" ] ||
		die "rootfs arm64: python3, ib_write_bw or rdma missing in $dir"
	touch "$dir/.fastreg-built"
}

# Everything the multi-node tests need beyond the x86_64 kernel: the arm64 kernels and their
# root file system (scripts/cluster.sh).
step_nodes() {
	local kind
	for kind in $NODE_KINDS; do
		[ "$kind" = x86_64 ] || step_kernel "$kind"
	done
	step_rootfs
}

# step_kinds KIND...: what VMs of those kinds need: the toolchain, their kernels, and the
# arm64 root file system if one of them is arm64.
step_kinds() {
	local kind
	step_packages
	step_bindgen
	step_venv
	for kind in "$@"; do
		valid_kind "$kind"
		step_kernel "$kind"
	done
	case " $* " in *" arm64-"*) step_rootfs ;; esac
}

main() {
	mkdir -p "$FASTREG_CACHE"
	case "${1:-all}" in
	host) step_packages; step_bindgen ;;
	all) step_packages; step_bindgen; step_venv; step_kernel; step_kernel "$DEBUG_KIND"; step_nodes ;;
	test) step_kinds $TEST_KINDS ;;
	kinds) shift; step_kinds "$@" ;;
	vm) step_kinds x86_64 ;;
	kernel) step_kernel "${2:-x86_64}" ;;
	debug) step_kinds "$DEBUG_KIND" ;;
	nodes) step_nodes ;;
	rootfs) step_rootfs ;;
	bench) shift; step_kinds "${@:-x86_64}"; step_plot ;;
	*) die "usage: $0 [all|test|kinds KIND...|vm|debug|host|kernel [KIND]|nodes|rootfs|bench [KIND...]]" ;;
	esac
}

main "$@"
