#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# The smallest reproducer of rxe's "no new connection after a link flap", without fastreg
# (perftest's rdma_cm mode alone), and the state that is stuck: the device's GSI QP (QP1,
# ib_mad's, which carries every connection manager message). rxe moves any QP to the
# error state when a packet it sends cannot be transmitted (rxe_requester: rxe_xmit_packet
# fails, rxe_qp_error), and a send on a link that is down fails (-ENETDOWN). For QP1 that
# is final: ib_mad never resets its QPs, and rxe raises no event for it, so from then on
# every MAD of that device is flushed. A flap during which no MAD was sent is harmless;
# one during which a connection ended (its DREQ) or began (its REQ) leaves the device
# deaf to rdma_cm until it is recreated. Analysis: Documentation/robustness.rst, "Lost nodes
# and the rxe link flap". This suite checks that behaviour, so it fails once rxe is fixed
# (then the analysis and the workaround go). In make interop, not make test: it
# characterizes the kernel, not fastreg.
#@ interop --no-load
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/veth.sh"

[ "$RDMA_KIND" = rxe ] || { echo "1..0 # SKIP rxe only"; exit 0; }

# gsi_state DEV: the state of DEV's GSI QP (QP1), as `rdma resource show qp` gives it.
gsi_state() {
	rdma resource show qp | sed -n "s|^link $1/1 lqpn 1 .* state \([A-Z_]*\) .*|\1|p"
}

# gsi_is DEV STATE: DEV's GSI QP is in STATE.
gsi_is() {
	local s
	s=$(gsi_state "$1")
	[ "$s" = "$2" ] || { echo "$1's GSI QP is in state '$s', not $2"; return 1; }
}

# perftest LIMIT ARGS...: one ib_send_bw rdma_cm connection from rxe_v0 to rxe_v1 (1 s of
# sends) within LIMIT seconds; its status is the client's.
perftest() {
	local limit=$1 rc
	shift
	timeout "$limit" ib_send_bw -R -d $RXE_DEV1 -D 1 -p 18515 "$@" >/tmp/srv.out 2>&1 &
	wait_for listening 18515 # the client goes once the server is ready
	timeout "$limit" ib_send_bw -R -d $RXE_DEV0 -D 1 -p 18515 "$@" $VETH_ADDR1 >/tmp/cli.out 2>&1
	rc=$?
	wait
	[ $rc -eq 0 ] || { echo "client exit $rc:"; tail -n 3 /tmp/cli.out; }
	return $rc
}

# perftest_rts: a QP of perftest's is ready to send (its connection is up).
perftest_rts() {
	rdma resource show qp | grep -qE ' state RTS .*ib_send_bw'
}

# flap_during_connection: a perftest connection is up when rxe_v1's link goes down for
# 8 s; the connection ends meanwhile (perftest's own end: its DREQ goes out on the down
# link). Prints the GSI QP's state while the link was down.
flap_during_connection() {
	timeout 60 ib_send_bw -R -d $RXE_DEV1 -D 6 -p 18516 >/tmp/srv2.out 2>&1 &
	wait_for listening 18516
	timeout 60 ib_send_bw -R -d $RXE_DEV0 -D 6 -p 18516 $VETH_ADDR1 >/tmp/cli2.out 2>&1 &
	# Down once the connection is up (a QP of perftest's ready to send), not after a guess.
	wait_for perftest_rts || rdma resource show qp
	ip link set veth_v1 down
	sleep 8
	gsi_state $RXE_DEV1 >/tmp/during
	wait
	ip link set veth_v1 up && veth_neigh
	sleep 1
}

both_rts() {
	gsi_is $RXE_DEV0 RTS && gsi_is $RXE_DEV1 RTS
}
err_while_down() {
	[ "$(cat /tmp/during)" = ERR ] || { echo "state '$(cat /tmp/during)' while the link was down"; return 1; }
}
# no_connection: perftest's client is still waiting for its connection after 20 s (killed
# by timeout: 124), not failing for another reason.
no_connection() {
	perftest 20 >/dev/null
	local rc=$?
	[ $rc -eq 124 ] || { echo "client exit $rc, not 124 (still connecting when timed out)"; tail -n 3 /tmp/cli.out; return 1; }
}

ktap_begin 11
check "two rxe devices on a veth pair" veth_up
check "perftest (ib_send_bw -R) connects rxe_v0 to rxe_v1" perftest 30
check "both GSI QPs ready to send (RTS)" both_rts

# A flap with nothing to send: harmless.
ip link set veth_v1 down
sleep 3
ip link set veth_v1 up && veth_neigh
sleep 1
check "a flap while no connection is up leaves rxe_v1's GSI QP in RTS" gsi_is $RXE_DEV1 RTS
check "  and perftest connects after it" perftest 30

# A flap while a connection is up: the MAD sent on the down link breaks QP1 for good.
flap_during_connection
check "a flap while a connection ends: rxe_v1's GSI QP went to ERR while the link was down" \
	err_while_down
check "  and stays in ERR after the link is back up (stuck)" gsi_is $RXE_DEV1 ERR
check "  so no new connection: perftest fails (its REQ is never answered)" no_connection

# The workaround: recreate the device.
rdma link delete $RXE_DEV1 && rdma link add $RXE_DEV1 type rxe netdev veth_v1
sleep 1
check "rxe_v1 recreated: a new GSI QP in RTS" gsi_is $RXE_DEV1 RTS
check "  and perftest connects again" perftest 30
rdma link delete $RXE_DEV0
rdma link delete $RXE_DEV1
check "no kernel report" no_kernel_errors
ktap_end
