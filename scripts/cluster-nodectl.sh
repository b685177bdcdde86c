#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# $FASTREG_NODECTL ACTION NODE, on a node of scripts/cluster.sh: asks the host to act on
# another node's VM, as a lost machine would behave, and returns when it is done:
#
#   kill N   SIGKILL node N's QEMU (a power cut: no disconnect, no unload)
#   stop N   SIGSTOP it (the machine freezes: no CPU, no network, no timers)
#   cont N   SIGCONT it (it resumes where it froze)
#   boot N   boot node N again, same kind, MAC and address (a new incarnation: its command
#            runs again from the start with FASTREG_INCARNATION one higher)
#
# The request is a file in the cluster's shared run directory (ctl/), which the host's
# scripts/cluster.sh polls; its answer is "ok" or the reason it refused. Exits 0 on "ok",
# 1 otherwise (no answer within 120 s included).
set -uo pipefail
action=${1:-} node=${2:-}
case "$action" in kill | stop | cont | boot) ;; *)
	echo "usage: \$FASTREG_NODECTL kill|stop|cont|boot NODE" >&2
	exit 2
	;;
esac
[[ "$node" =~ ^[0-9]+$ ]] || { echo "nodectl: bad node '$node'" >&2; exit 2; }
run=${FASTREG_RUN:?not on a cluster node}
dir=$run/ctl
mkdir -p "$dir"
req=$dir/req.$FASTREG_NODE.$$.$RANDOM
echo "$action $node" >"$req.tmp" && mv "$req.tmp" "$req"
for ((i = 0; i < 1200; i++)); do
	if [ -f "$req.done" ]; then
		answer=$(cat "$req.done")
		rm -f "$req.done"
		[ "$answer" = ok ] && exit 0
		echo "nodectl $action $node: $answer" >&2
		exit 1
	fi
	sleep 0.1
done
echo "nodectl $action $node: no answer from the host within 120 s" >&2
exit 1
