#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# $FASTREG_BARRIER NAME, on a node of scripts/cluster.sh: returns when every node has reached
# NAME. Each node leaves a mark in the cluster's shared run directory and waits for the
# others' marks. A node that never comes (it died, it took another path) makes the others
# fail here after FASTREG_BARRIER_TIMEOUT seconds (default: the cluster's timeout) with a
# message naming the missing nodes, rather than hang.
set -uo pipefail
name=${1:?usage: \$FASTREG_BARRIER NAME}
[[ "$name" =~ ^[A-Za-z0-9._-]+$ ]] || { echo "barrier: bad name '$name'" >&2; exit 2; }
run=${FASTREG_RUN:?not on a cluster node}
dir=$run/barrier
n=$(wc -w <<<"$FASTREG_NODES")
mkdir -p "$dir"
touch "$dir/$name.$FASTREG_NODE"
limit=${FASTREG_BARRIER_TIMEOUT:-${FASTREG_TIMEOUT:-900}}
start=$SECONDS
while :; do
	missing=""
	for ((i = 0; i < n; i++)); do
		[ -e "$dir/$name.$i" ] || missing+=" $i"
	done
	[ -n "$missing" ] || exit 0
	if [ $((SECONDS - start)) -ge "$limit" ]; then
		echo "barrier $name: nodes$missing did not arrive within $limit s" >&2
		exit 1
	fi
	sleep 0.2
done
