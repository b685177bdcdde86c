#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# `make lint`: rustfmt and clippy of the kernel's Rust version (1.96) on the module,
# rustfmt and clippy on the host test crate, checkpatch on the C files. Fails on any finding.
set -uo pipefail
. "$(dirname "$0")/lib.sh"
cd "$FASTREG_TOP"
KDIR=${KDIR:-$(scripts/kdir.sh)}
bad=0

# Crate roots: rustfmt follows their modules (and the host crate's #[path] modules).
rs=(src/fastreg.rs tests/host/src/lib.rs)
echo "rustfmt --check (${#rs[@]} files)"
/usr/bin/rustfmt --check --edition 2021 --config-path "$KDIR/.rustfmt.toml" "${rs[@]}" || bad=1

echo "clippy (module, kernel lints: the test build, then the production build)"
# Findings in the generated bindings are silenced in src/verbs/ib.rs; anything else counts.
for build in 1 0; do
	out=$(kmake_build $build CLIPPY=1 modules 2>&1)
	rc=$?
	if [ $rc -ne 0 ] || printf '%s\n' "$out" | grep -qE '^(warning|error)'; then
		printf '%s\n' "$out"
		bad=1
	fi
done
# Rebuild without clippy so the modules on disk are normal builds.
for build in 1 0; do
	kmake_build $build -s modules >/dev/null || bad=1
done

echo "unsafe only under src/verbs/"
# Code above the verbs layer is safe Rust (Documentation/design.rst): a block, fn, impl or
# trait marked unsafe anywhere else is a finding, with its line.
if git grep -nwE 'unsafe' -- 'src/*.rs' ':!src/verbs/'; then
	bad=1
fi

echo "clippy (host tests)"
(cd tests/host && env PATH="$HOME/.cargo/bin:$PATH" CARGO_TARGET_DIR="$FASTREG_TOP/build/host" \
	cargo clippy --quiet --all-targets -- -D warnings) || bad=1

echo "checkpatch (C)"
mapfile -t cfiles < <(git ls-files '*.c' '*.h' ':!tests/peer/' ':!include/*_trace.h' 2>/dev/null)
"$KDIR/scripts/checkpatch.pl" --no-tree --quiet --strict --show-types \
	-f "${cfiles[@]}" || bad=1
# Trace event headers: the layout of TRACE_EVENT (as include/trace/events/ has it) is not
# the one --strict asks of calls.
mapfile -t tfiles < <(git ls-files 'include/*_trace.h' 2>/dev/null)
[ ${#tfiles[@]} -eq 0 ] || "$KDIR/scripts/checkpatch.pl" --no-tree --quiet --strict --show-types \
	--ignore OPEN_ENDED_LINE,PARENTHESIS_ALIGNMENT -f "${tfiles[@]}" || bad=1
# User-space test peers: kernel style, but with the C library's types (u8 is not theirs).
mapfile -t ufiles < <(git ls-files 'tests/peer/*.c' 2>/dev/null)
[ ${#ufiles[@]} -eq 0 ] || "$KDIR/scripts/checkpatch.pl" --no-tree --quiet --strict --show-types \
	--ignore PREFER_KERNEL_TYPES -f "${ufiles[@]}" || bad=1

echo "shell syntax"
for f in scripts/*.sh tests/vm/*.sh tests/cluster/*.sh .ci/run; do
	bash -n "$f" || bad=1
done

echo "python syntax"
for f in scripts/fastreg-lst scripts/*.py tests/host/py/*.py; do
	python3 -m py_compile "$f" 2>&1 && continue
	bad=1
done
find scripts tests/host/py -name __pycache__ -type d -exec rm -rf {} + 2>/dev/null || true

[ $bad -eq 0 ] && echo "lint: clean" || { echo "lint: findings above"; exit 1; }
