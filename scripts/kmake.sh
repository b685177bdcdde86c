#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# Runs kbuild on the module: make -C $KDIR M=<repo> with the toolchain the kernel was built
# with (LLVM=-19, Debian's rustc 1.96, the cached bindgen). Extra arguments go to make.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
KDIR=${KDIR:-$("$FASTREG_TOP/scripts/kdir.sh")}
[ -f "$KDIR/Makefile" ] || die "no kernel tree at $KDIR (run 'make' to build the test kernel)"
mapfile -t flags < <(kmake_flags)
exec make -C "$KDIR" M="$FASTREG_TOP" "${flags[@]}" "$@"
