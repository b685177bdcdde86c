#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# Runs kbuild on the module: make -C $KDIR M=<repo> with the toolchain the kernel was built
# with (LLVM=-19, Debian's rustc 1.96, the cached bindgen). Extra arguments go to make.
#
# FASTREG_KIND=arm64-64k|arm64-16k builds fastreg.ko for that node kind against its cached
# kernel instead, in build/ko/KIND (a copy of the sources, so that the x86_64 build in the
# tree and the generated bindings of each architecture never mix). FASTREG_OUT=DIR builds in
# DIR (a copy of the sources) instead of the tree or build/ko/KIND.
#
# FASTREG_TEST=1 (the default, scripts/lib.sh) is the test build, FASTREG_TEST=0 the
# production build (Kbuild).
set -euo pipefail
. "$(dirname "$0")/lib.sh"
kind=${FASTREG_KIND:-x86_64}
valid_kind "$kind"
mapfile -t flags < <(kmake_flags "$kind")
flags+=("FASTREG_TEST=$FASTREG_TEST")
if [ "$kind" = x86_64 ]; then
	KDIR=${KDIR:-$("$FASTREG_TOP/scripts/kdir.sh")}
	[ -f "$KDIR/Makefile" ] || die "no kernel tree at $KDIR (run 'make' to build the test kernel)"
	[ -n "${FASTREG_OUT:-}" ] || exec make -C "$KDIR" M="$FASTREG_TOP" "${flags[@]}" "$@"
else
	KDIR=$(cached_kdir "$kind") || die "no $kind kernel built (scripts/setup.sh kernel $kind)"
fi
out=${FASTREG_OUT:-$(dirname "$(kind_module "$kind")")}
mkdir -p "$out"
# tar keeps the sources' times, so kbuild rebuilds only what changed.
(cd "$FASTREG_TOP" && tar cf - Kbuild src include) | tar -C "$out" -xpf -
exec make -C "$KDIR" M="$out" "${flags[@]}" "$@"
