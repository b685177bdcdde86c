// SPDX-License-Identifier: GPL-2.0
/*
 * forge: a hostile user-space peer of fastreg (tests/vm/13-hostile.sh).
 *
 * A librdmacm program that passes for a fastreg interface: it binds a peer's address
 * (and a source port: 0 for whatever rdma_cm picks), and sends fastreg's 48-byte
 * connection parameters (Documentation/wire.rst) to a node's listener, COUNT times, each
 * on a new rdma_cm id with a QP. It prints one line per outcome and a summary:
 *
 *   forge --src IP[:PORT] --dst IP:PORT [--count N] [--stamp N] [--dst-stamp N]
 *         [--malformed] [--quiet]
 *         [--control | --puts N [--size N] [--hold S [--release FILE]]]
 *
 *   established                 the node accepted (then this side disconnects)
 *   rejected reason=R           the node rejected, with fastreg's reason R (0: none given)
 *   error EVENT STATUS          another rdma_cm event (unreachable, timeout)
 *   bind error ERRNO            the source could not be bound (EACCES: a privileged
 *                               port and no CAP_NET_BIND_SERVICE)
 *   summary attempts=N established=E rejected=R reasons=R1:N1,... errors=X
 *
 * --malformed sends 48 bytes that are not connection parameters (a bad magic). Exit
 * status 0 once the summary is printed, 1 on a usage error.
 *
 * --control: once established (one attempt, the interface's port not said, no
 * checksums), a console's side of fastreg's control protocol: each line read on stdin is
 * a control payload in hex, sent in a CONTROL message (wire.rst, "Control"); for each,
 * one line out:
 *
 *   reply HEX                   the node's CONTROL_REPLY payload
 *   no reply                    none within 5 s
 *   closed                      the connection went down
 *
 * The requests themselves (and their proofs of the key) are built by the caller
 * (tests/peer/console.py).
 *
 * --puts N [--size BYTES] [--hold S [--release FILE]]: once established, N PUT requests
 * (at most 8, the queue depth) of BYTES (1 MiB by default) that this side never completes:
 * the node holds a sink for each it acknowledges. Prints "puts acks=A naks=N status=S" (the
 * last PUT_NAK's status), then keeps the connection S seconds (or until FILE exists) and
 * prints "held", or "closed" when the node closed it first.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <unistd.h>
#include <rdma/rdma_cma.h>
#include <infiniband/verbs.h>

#define CONN_LEN 48
#define CONN_MAGIC 0x43475246u
#define TIMEOUT_MS 5000

static void put16(uint8_t *b, int off, uint16_t v)
{
	b[off] = v;
	b[off + 1] = v >> 8;
}

static void put32(uint8_t *b, int off, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		b[off + i] = v >> (8 * i);
}

static void put64(uint8_t *b, int off, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		b[off + i] = v >> (8 * i);
}

static uint64_t get64(const uint8_t *b, int off)
{
	uint64_t v = 0;

	for (int i = 7; i >= 0; i--)
		v = v << 8 | b[off + i];
	return v;
}

static int control, n_puts, hold;
static const char *release;
static uint64_t put_size = 1 << 20;

/* Connection parameters a default fastreg interface would send (wire.rst). */
static void conn_params(uint8_t *b, uint16_t port, uint64_t stamp, uint64_t dst_stamp,
			int malformed)
{
	memset(b, 0, CONN_LEN);
	put32(b, 0, malformed ? 0xdeadbeefu : CONN_MAGIC);
	b[4] = CONN_LEN;
	b[5] = 0;
	put16(b, 6, 2);			/* version */
	put16(b, 8, 8);			/* queue_depth */
	put16(b, 10, 16);		/* max_regs */
	put32(b, 12, 1 << 20);		/* max_payload */
	put32(b, 16, 4096 + 56);	/* max_msg */
	put32(b, 20, 4096);		/* page_size */
	put32(b, 24, control || n_puts ? 0 : 3);		/* features */
	put16(b, 28, control || n_puts ? 0 : port);	/* the "interface's" port */
	put16(b, 30, 4096);		/* max_inline */
	put64(b, 32, stamp);
	put64(b, 40, dst_stamp);
}

static int parse_addr(const char *s, struct sockaddr_in *sa, int need_port)
{
	char ip[64];
	const char *colon = strchr(s, ':');
	size_t n = colon ? (size_t)(colon - s) : strlen(s);

	if (n >= sizeof(ip) || (need_port && !colon))
		return -1;
	memcpy(ip, s, n);
	ip[n] = 0;
	memset(sa, 0, sizeof(*sa));
	sa->sin_family = AF_INET;
	if (inet_pton(AF_INET, ip, &sa->sin_addr) != 1)
		return -1;
	if (colon) {
		char *end;
		unsigned long p = strtoul(colon + 1, &end, 10);

		if (*end || p > 65535)
			return -1;
		sa->sin_port = htons(p);
	}
	return 0;
}

/*
 * Waits for the next event on ch; its type, status and reason (rejects) in the out args,
 * and the stamp of an accept's connection parameters in *stamp (when not NULL).
 */
static int next_event_stamp(struct rdma_event_channel *ch, int *status, int *reason,
			    uint64_t *stamp)
{
	struct rdma_cm_event *ev;
	int type;

	if (rdma_get_cm_event(ch, &ev))
		return -1;
	type = ev->event;
	*status = ev->status;
	*reason = 0;
	if (type == RDMA_CM_EVENT_REJECTED && ev->param.conn.private_data &&
	    ev->param.conn.private_data_len >= 6) {
		const uint8_t *p = ev->param.conn.private_data;

		if (p[0] == 0x46 && p[1] == 0x52 && p[2] == 0x47 && p[3] == 0x43)
			*reason = p[5];
	}
	if (stamp && type == RDMA_CM_EVENT_ESTABLISHED && ev->param.conn.private_data &&
	    ev->param.conn.private_data_len >= CONN_LEN)
		*stamp = get64(ev->param.conn.private_data, 32);
	rdma_ack_cm_event(ev);
	return type;
}

static int next_event(struct rdma_event_channel *ch, int *status, int *reason)
{
	return next_event_stamp(ch, status, reason, NULL);
}

enum outcome { ESTABLISHED, REJECTED, ERROR, BIND_ERROR };

#define HDR_LEN 32
#define MSG_MAGIC 0x4d475246u
#define MAX_MSG (4096 + 56)
#define NRECV 10		/* queue_depth + 2: the credits the node starts with */
#define T_NOOP 0xd0
#define T_CONTROL 0xdc
#define T_CONTROL_REPLY 0xdd
#define T_PUT_REQ 0xd2
#define T_PUT_NAK 0xd3
#define T_PUT_ACK 0xd4

struct chan {
	struct rdma_cm_id *id;
	struct ibv_mr *mr;
	uint8_t *buf;		/* NRECV receive buffers, then the send buffer */
	uint64_t my_stamp, node_stamp;
	unsigned int owed;	/* messages received: credits to give back */
};

static int post_recv(struct chan *c, int i)
{
	struct ibv_sge sge = {
		.addr = (uintptr_t)(c->buf + (size_t)i * MAX_MSG),
		.length = MAX_MSG,
		.lkey = c->mr->lkey,
	};
	struct ibv_recv_wr wr = { .wr_id = i, .sg_list = &sge, .num_sge = 1 }, *bad;

	return ibv_post_recv(c->id->qp, &wr, &bad);
}

/* Sends a message of TYPE whose body is B (N bytes). */
static int send_msg(struct chan *c, int type, const uint8_t *b, size_t n)
{
	uint8_t *m = c->buf + (size_t)NRECV * MAX_MSG;
	size_t len = HDR_LEN + n;
	struct ibv_sge sge = { .addr = (uintptr_t)m, .length = len, .lkey = c->mr->lkey };
	struct ibv_send_wr wr = {
		.wr_id = NRECV, .sg_list = &sge, .num_sge = 1,
		.opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED,
	}, *bad;

	memset(m, 0, HDR_LEN);
	put32(m, 0, MSG_MAGIC);
	put16(m, 4, 2);
	m[6] = type;
	m[7] = c->owed > 255 ? 255 : c->owed;
	c->owed -= m[7];
	put32(m, 8, len);
	put64(m, 16, c->my_stamp);
	put64(m, 24, c->node_stamp);
	memcpy(m + HDR_LEN, b, n);
	return ibv_post_send(c->id->qp, &wr, &bad);
}

/* Sends payload P (N bytes) in a CONTROL message with COOKIE. */
static int send_control(struct chan *c, uint64_t cookie, const uint8_t *p, size_t n)
{
	uint8_t b[8 + 256];

	put64(b, 0, cookie);
	memcpy(b + 8, p, n);
	return send_msg(c, T_CONTROL, b, 8 + n);
}

/*
 * Waits up to MS milliseconds for the next message; copies it into OUT (MAX_MSG bytes) and
 * returns its length, 0 when none came, -1 when the connection is down.
 */
static int next_msg(struct chan *c, struct rdma_event_channel *ch, int ms, uint8_t *out)
{
	struct pollfd pf[2] = {
		{ .fd = c->id->recv_cq_channel->fd, .events = POLLIN },
		{ .fd = ch->fd, .events = POLLIN },
	};
	int waited = 0;

	while (waited < ms) {
		struct ibv_wc wc;
		int n = ibv_poll_cq(c->id->recv_cq, 1, &wc);

		if (n < 0)
			return -1;
		if (n == 0) {
			struct ibv_cq *cq;
			void *ctx;

			ibv_req_notify_cq(c->id->recv_cq, 0);
			if (ibv_poll_cq(c->id->recv_cq, 1, &wc) == 0) {
				if (poll(pf, 2, 100) > 0 && (pf[1].revents & POLLIN))
					return -1;
				waited += 100;
				if (pf[0].revents & POLLIN &&
				    !ibv_get_cq_event(c->id->recv_cq_channel, &cq, &ctx))
					ibv_ack_cq_events(cq, 1);
				continue;
			}
		}
		if (wc.status != IBV_WC_SUCCESS)
			return -1;
		if (wc.opcode != IBV_WC_RECV)
			continue;
		memcpy(out, c->buf + wc.wr_id * MAX_MSG, wc.byte_len);
		c->owed++;
		post_recv(c, wc.wr_id);
		return wc.byte_len;
	}
	return 0;
}

/*
 * Waits up to TIMEOUT_MS for the reply to COOKIE; prints it. Returns 0, 1 (no reply) or -1
 * (the connection is down).
 */
static int await_reply(struct chan *c, struct rdma_event_channel *ch, uint64_t cookie)
{
	static uint8_t m[MAX_MSG];
	int len;

	while ((len = next_msg(c, ch, TIMEOUT_MS, m)) > 0) {
		if (m[6] == T_CONTROL_REPLY && len > HDR_LEN + 8 && get64(m, HDR_LEN) == cookie) {
			printf("reply ");
			for (int i = HDR_LEN + 8; i < len; i++)
				printf("%02x", m[i]);
			printf("\n");
			fflush(stdout);
			return 0;
		}
	}
	return len < 0 ? -1 : 1;
}

/*
 * NPUT requests of SIZE bytes that this side never completes (no RDMA, no PUT_DONE): each
 * answered by a PUT_ACK (the node holds a sink for it) or a PUT_NAK. Prints
 * "puts acks=A naks=N status=S" (S: the last NAK's), then holds the connection HOLD
 * seconds and prints "held" (or "closed" when the node closed it first).
 */
static void puts_run(struct chan *cp, struct rdma_event_channel *ch, uint64_t my_stamp,
		     uint64_t node_stamp, int nput, uint64_t size, int hold)
{
	static uint8_t m[MAX_MSG];
	struct chan c = *cp;
	int acks = 0, naks = 0, status = 0, len = 1;

	c.my_stamp = my_stamp;
	c.node_stamp = node_stamp;
	for (int i = 0; i < nput; i++) {
		uint8_t b[24] = { 0 };

		put64(b, 0, i + 1);
		put64(b, 8, size);
		if (send_msg(&c, T_PUT_REQ, b, sizeof(b))) {
			printf("closed\n");
			return;
		}
	}
	while (acks + naks < nput && (len = next_msg(&c, ch, TIMEOUT_MS, m)) > 0) {
		if (m[6] == T_PUT_ACK)
			acks++;
		if (m[6] == T_PUT_NAK) {
			naks++;
			status = (int32_t)(m[HDR_LEN + 8] | m[HDR_LEN + 9] << 8 |
					   m[HDR_LEN + 10] << 16 | (uint32_t)m[HDR_LEN + 11] << 24);
		}
	}
	printf("puts acks=%d naks=%d status=%d\n", acks, naks, status);
	fflush(stdout);
	for (int t = 0; t < hold * 10 && len >= 0; t++) {
		if (release && access(release, F_OK) == 0)
			break;
		len = next_msg(&c, ch, 100, m) < 0 ? -1 : 0;
	}
	printf("%s\n", len < 0 ? "closed" : "held");
	fflush(stdout);
}

static int hexval(int ch)
{
	if (ch >= '0' && ch <= '9')
		return ch - '0';
	if (ch >= 'a' && ch <= 'f')
		return ch - 'a' + 10;
	if (ch >= 'A' && ch <= 'F')
		return ch - 'A' + 10;
	return -1;
}

/* The console's side on C's connection: stdin's payloads out, the replies printed. */
static void control_run(struct chan *cp, struct rdma_event_channel *ch, uint64_t my_stamp,
			uint64_t node_stamp)
{
	struct chan c = *cp;
	char line[1024];
	uint64_t cookie = 0;

	c.my_stamp = my_stamp;
	c.node_stamp = node_stamp;
	while (fgets(line, sizeof(line), stdin)) {
		uint8_t p[256];
		size_t n = 0;
		int r;

		for (char *s = line; hexval(s[0]) >= 0 && hexval(s[1]) >= 0 && n < sizeof(p);
		     s += 2)
			p[n++] = hexval(s[0]) << 4 | hexval(s[1]);
		if (send_control(&c, ++cookie, p, n)) {
			printf("closed\n");
			break;
		}
		r = await_reply(&c, ch, cookie);
		if (r < 0) {
			printf("closed\n");
			break;
		}
		if (r > 0)
			printf("no reply\n");
		fflush(stdout);
	}
	fflush(stdout);
}

static enum outcome attempt(struct sockaddr_in *src, struct sockaddr_in *dst,
			    const uint8_t *priv, int *reason, int *detail, int *status)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_cm_id *id = NULL;
	struct ibv_qp_init_attr qa;
	struct rdma_conn_param cp;
	enum outcome out = ERROR;
	struct chan ctl = { 0 };
	struct ibv_mr *mr = NULL;
	uint8_t *buf = NULL;
	uint64_t node_stamp = 0;
	int type;

	*reason = 0;
	*detail = 0;
	*status = 0;
	if (!ch || rdma_create_id(ch, &id, NULL, RDMA_PS_TCP)) {
		*detail = -1;
		*status = errno;
		goto out;
	}
	if (rdma_bind_addr(id, (struct sockaddr *)src)) {
		*status = errno;
		out = BIND_ERROR;
		goto out;
	}
	if (rdma_resolve_addr(id, NULL, (struct sockaddr *)dst, TIMEOUT_MS)) {
		*detail = -2;
		*status = errno;
		goto out;
	}
	type = next_event(ch, status, reason);
	if (type != RDMA_CM_EVENT_ADDR_RESOLVED) {
		*detail = type;
		goto out;
	}
	if (rdma_resolve_route(id, TIMEOUT_MS)) {
		*detail = -3;
		*status = errno;
		goto out;
	}
	type = next_event(ch, status, reason);
	if (type != RDMA_CM_EVENT_ROUTE_RESOLVED) {
		*detail = type;
		goto out;
	}
	memset(&qa, 0, sizeof(qa));
	qa.qp_type = IBV_QPT_RC;
	qa.cap.max_send_wr = 16;	/* every send signaled, its CQ never polled */
	qa.cap.max_recv_wr = 4;
	qa.cap.max_send_sge = 1;
	qa.cap.max_recv_sge = 1;
	qa.cap.max_recv_wr = NRECV;
	if (rdma_create_qp(id, NULL, &qa)) {
		*detail = -4;
		*status = errno;
		goto out;
	}
	if (control || n_puts) {
		buf = calloc(NRECV + 1, MAX_MSG);
		mr = buf ? ibv_reg_mr(id->pd, buf, (size_t)(NRECV + 1) * MAX_MSG,
				      IBV_ACCESS_LOCAL_WRITE) : NULL;
		if (!mr) {
			*detail = -6;
			*status = errno;
			goto out;
		}
		ctl.id = id;
		ctl.mr = mr;
		ctl.buf = buf;
		for (int i = 0; i < NRECV; i++)
			post_recv(&ctl, i);
	}
	memset(&cp, 0, sizeof(cp));
	cp.private_data = priv;
	cp.private_data_len = CONN_LEN;
	cp.responder_resources = 1;
	cp.initiator_depth = 1;
	cp.retry_count = 3;
	cp.rnr_retry_count = 3;
	if (rdma_connect(id, &cp)) {
		*detail = -5;
		*status = errno;
		goto out;
	}
	type = next_event_stamp(ch, status, reason, &node_stamp);
	if (type == RDMA_CM_EVENT_ESTABLISHED) {
		out = ESTABLISHED;
		if (control) {
			printf("established\n");
			fflush(stdout);
			control_run(&ctl, ch, get64(priv, 32), node_stamp);
		}
		if (n_puts)
			puts_run(&ctl, ch, get64(priv, 32), node_stamp, n_puts, put_size, hold);
		rdma_disconnect(id);
		/* The disconnect's own event, so the id goes down cleanly. */
		next_event(ch, status, &type);
	} else if (type == RDMA_CM_EVENT_REJECTED) {
		out = REJECTED;
	} else {
		*detail = type;
	}
out:
	if (id) {
		if (id->qp)
			rdma_destroy_qp(id);
		if (mr)
			ibv_dereg_mr(mr);
		rdma_destroy_id(id);
	}
	free(buf);
	if (ch)
		rdma_destroy_event_channel(ch);
	return out;
}

static void bad_args(void)
{
	fputs("usage: forge --src IP[:PORT] --dst IP:PORT [OPTIONS] (see forge.c)\n", stderr);
	exit(1);
}

int main(int argc, char **argv)
{
	struct sockaddr_in src, dst;
	int have_src = 0, have_dst = 0, malformed = 0, quiet = 0;
	unsigned long count = 1, n_est = 0, n_rej = 0, n_err = 0;
	unsigned long reasons[256] = { 0 };
	uint64_t stamp = 0x600df00d, dst_stamp = 0;
	uint8_t priv[CONN_LEN];

	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;

		if (!strcmp(a, "--malformed")) {
			malformed = 1;
			continue;
		}
		if (!strcmp(a, "--quiet")) {
			quiet = 1;
			continue;
		}
		if (!strcmp(a, "--control")) {
			control = 1;
			continue;
		}
		if (!v)
			bad_args();
		i++;
		if (!strcmp(a, "--src"))
			have_src = !parse_addr(v, &src, 0);
		else if (!strcmp(a, "--dst"))
			have_dst = !parse_addr(v, &dst, 1);
		else if (!strcmp(a, "--count"))
			count = strtoul(v, NULL, 0);
		else if (!strcmp(a, "--stamp"))
			stamp = strtoull(v, NULL, 0);
		else if (!strcmp(a, "--dst-stamp"))
			dst_stamp = strtoull(v, NULL, 0);
		else if (!strcmp(a, "--puts"))
			n_puts = strtoul(v, NULL, 0);
		else if (!strcmp(a, "--size"))
			put_size = strtoull(v, NULL, 0);
		else if (!strcmp(a, "--hold"))
			hold = strtoul(v, NULL, 0);
		else if (!strcmp(a, "--release"))
			release = v;
		else
			bad_args();
	}
	if (!have_src || !have_dst || !count || ((control || n_puts) && count != 1) ||
	    (control && n_puts) || n_puts > 8)
		bad_args();
	/* The forged interface "listens" where the node does, as a real peer would. */
	conn_params(priv, ntohs(dst.sin_port), stamp, dst_stamp, malformed);
	for (unsigned long k = 0; k < count; k++) {
		int reason, detail, status;
		enum outcome o = attempt(&src, &dst, priv, &reason, &detail, &status);

		switch (o) {
		case ESTABLISHED:
			n_est++;
			if (!quiet && !control && !n_puts)
				printf("established\n");
			break;
		case REJECTED:
			n_rej++;
			reasons[reason & 0xff]++;
			if (!quiet)
				printf("rejected reason=%d\n", reason);
			break;
		case BIND_ERROR:
			n_err++;
			printf("bind error %s\n", strerror(status));
			break;
		default:
			n_err++;
			printf("error %d %d\n", detail, status);
			break;
		}
	}
	printf("summary attempts=%lu established=%lu rejected=%lu reasons=", count, n_est, n_rej);
	for (int r = 0, any = 0; r < 256; r++) {
		if (reasons[r]) {
			printf("%s%d:%lu", any ? "," : "", r, reasons[r]);
			any = 1;
		}
	}
	printf(" errors=%lu\n", n_err);
	return 0;
}
