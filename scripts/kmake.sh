#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# Runs kbuild on the module: make -C $KDIR M=<repo> with the toolchain the kernel was built
# with (LLVM=-19, Debian's rustc 1.96, the cached bindgen). Extra arguments go to make.
#
# FASTREG_KIND=arm64-64k|arm64-16k builds fastreg.ko for that node kind against its cached
# kernel instead, in build/ko/KIND (a copy of the sources, so that the x86_64 build in the
# tree and the generated bindings of each architecture never mix).
set -euo pipefail
. "$(dirname "$0")/lib.sh"
kind=${FASTREG_KIND:-x86_64}
valid_kind "$kind"
mapfile -t flags < <(kmake_flags "$kind")
if [ "$kind" = x86_64 ]; then
	KDIR=${KDIR:-$("$FASTREG_TOP/scripts/kdir.sh")}
	[ -f "$KDIR/Makefile" ] || die "no kernel tree at $KDIR (run 'make' to build the test kernel)"
	exec make -C "$KDIR" M="$FASTREG_TOP" "${flags[@]}" "$@"
fi
KDIR=$(cached_kdir "$kind") || die "no $kind kernel built (scripts/setup.sh kernel $kind)"
out=$(dirname "$(kind_module "$kind")")
mkdir -p "$out"
# tar keeps the sources' times, so kbuild rebuilds only what changed.
(cd "$FASTREG_TOP" && tar cf - Kbuild src include) | tar -C "$out" -xpf -
exec make -C "$KDIR" M="$out" "${flags[@]}" "$@"
