# SPDX-License-Identifier: GPL-2.0
# Helpers for the multi-node tests (tests/cluster/*.sh), which run on every node of
# scripts/cluster.sh at once. Each node prints its own KTAP document (same plan on every
# node, whatever its role); scripts/cluster-tests.sh counts them all. Sourced.
. "$FASTREG_TOP/tests/vm/lib.sh"
. "$FASTREG_TOP/tests/vm/lst.sh"

[ -n "${FASTREG_BARRIER:-}" ] || { echo "run through scripts/cluster.sh"; exit 1; }
NODES=($FASTREG_NODES)
ME=$FASTREG_NODE
# 1 on the runs of make interop ("#@ interop" lines): the suites' long phases, which make
# test leaves out for its time budget, run there (Documentation/testing.rst, "Time").
FULL=${FASTREG_FULL:-0}
PAGE=$(getconf PAGESIZE)

barrier() {
	"$FASTREG_BARRIER" "$1"
}

# publish KEY VALUE / published NODE KEY: a value every node can read (the run directory).
publish() {
	echo "$2" >"$FASTREG_RUN/$1.$ME"
}
published() {
	cat "$FASTREG_RUN/$2.$1"
}

# within S CMD...: CMD succeeds within S seconds (tried every half second).
within() {
	local limit=$1 start=$SECONDS out
	shift
	until out=$("$@" 2>&1); do
		if [ $((SECONDS - start)) -ge "$limit" ]; then
			printf '%s\n' "$out"
			return 1
		fi
		sleep 0.5
	done
}

# reborn K: this node is incarnation K because the host killed the one before: that
# one's output, moved aside by the kill (nodeN.incK-1.out), had begun its plan. (The
# incarnation number alone is what the branch it is checked in already chose.)
reborn() {
	local prev=$FASTREG_RUN/node$FASTREG_NODE.inc$(($1 - 1)).out
	[ "$FASTREG_INCARNATION" = "$1" ] && grep -q '^1\.\.' "$prev" 2>/dev/null ||
		{ echo "incarnation $FASTREG_INCARNATION; no killed incarnation's output in $prev"; ls "$FASTREG_RUN"; return 1; }
}

# pool_count NAME: a counter of this node's pool on its RDMA device.
pool_count() {
	sed -n "s/^$FASTREG_DEV:.* $1=\([0-9]*\).*/\1/p" "$DBG/pools"
}

# all_free: every MR of this node's pool is free (live == free); no awk on the arm64 nodes.
all_free() {
	local live free
	live=$(pool_count live) free=$(pool_count free)
	[ -n "$live" ] && [ "$live" = "$free" ] || { cat "$DBG/pools"; return 1; }
}

clean_unload() {
	unload && no_fastreg_resources
}
