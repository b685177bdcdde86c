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

# Make variables for every kernel and module build.
kmake_flags() {
	printf '%s\n' "LLVM=$LLVM_SUFFIX" RUSTC=/usr/bin/rustc HOSTRUSTC=/usr/bin/rustc \
		RUSTFMT=/usr/bin/rustfmt CLIPPY_DRIVER=/usr/bin/clippy-driver \
		"BINDGEN=$FASTREG_TOOLS/bin/bindgen"
}

# Cache key of the test kernel: the fragment, the compiler and the recipe.
kernel_key() {
	{ cat "$KERNEL_FRAGMENT"; echo "LLVM=$LLVM_SUFFIX recipe=$KERNEL_RECIPE"; } |
		sha256sum | cut -c1-12
}

# Prints the cached, completely built test kernel tree for the current key, if any.
cached_kdir() {
	local key d
	key=$(kernel_key)
	for d in "$FASTREG_CACHE"/kernel/*-"$key"/linux; do
		[ -f "$d/.fastreg-built" ] && { echo "$d"; return 0; }
	done
	return 1
}

log() { printf '[fastreg] %s\n' "$*" >&2; }
die() { printf '[fastreg] error: %s\n' "$*" >&2; exit 1; }
