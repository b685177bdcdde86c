#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""A console of fastreg's control protocol in user space (tests/vm/12-console.sh): builds
control payloads as src/selftest/control/ lays them out, with the proofs of src/selftest/auth.rs, and sends
them through tests/peer/forge.c --control from an address and port it chooses.

  console.py --forge PATH --src IP:PORT --dst IP:PORT --stamp N [--key FILE] CASE

CASE is one of:
  join SESSION      HELLO, then a challenged JOIN under --key (none: a key of zeros)
  query             HELLO, then a challenged read-only QUERY under --key
  forge SESSION     the session's requests without its key: QUERY, STOP, START, LEAVE,
                    JOIN, each with a made-up tag and sequence number
  replay SESSION    JOIN under --key, a QUERY, the QUERY again (a replay), the JOIN again,
                    then LEAVE
  flood N           N HELLOs

One line per request: `OP status=N session=N holder=IP tagged=0|1` (tagged: the reply
carries a valid tag under the request's key), `OP no reply`, or `closed`.
"""

import argparse
import hashlib
import hmac
import os
import socket
import struct
import subprocess
import sys

OPS = {"join": 1, "leave": 2, "start": 3, "stop": 4, "query": 5, "hello": 6}
NAMES = {v: k for k, v in OPS.items()}
CHALLENGED = 1
REPLY_TAGGED = 136


def mac(key, msg):
    return hmac.new(key, msg, hashlib.sha256).digest()


def tag(key, direction, body):
    return mac(key, direction + body)[:16]


def challenge_key(cluster, console, node, nc, nn):
    return mac(cluster, b"fastreg console challenge v1" + console + node + nc + nn)


def head(op, session, lease=0, flags=0):
    return struct.pack("<BBHIQ", OPS[op], flags, 0, lease, session)


def start_body(peer):
    # A brw write of 4 KiB, 10 transfers, to one peer.
    return struct.pack("<BBHIQBB6sQ", 2, 0, 1, 0, 4096, 0, 1, b"\0" * 6, 10) + peer


def sealed(key, body, seq):
    b = body + struct.pack("<Q", seq)
    return b + tag(key, b"Q", b)


def reply_fields(b):
    op, status, session = b[0], struct.unpack_from("<i", b, 4)[0], struct.unpack_from("<Q", b, 8)[0]
    return {"op": NAMES.get(op, op), "status": status, "session": session,
            "holder": socket.inet_ntoa(b[16:20]), "tag": b[REPLY_TAGGED:REPLY_TAGGED + 16]}


class Link:
    """One forged connection to a node: payloads out, replies back."""

    def __init__(self, args):
        self.p = subprocess.Popen(
            [args.forge, "--src", args.src, "--dst", args.dst, "--stamp", args.stamp,
             "--control"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        first = self.p.stdout.readline().strip()
        if first != "established":
            print(first or "closed")
            sys.exit(0)

    def ask(self, payload):
        self.p.stdin.write(payload.hex() + "\n")
        self.p.stdin.flush()
        line = self.p.stdout.readline().strip()
        if line.startswith("reply "):
            return bytes.fromhex(line[6:])
        return line or "closed"

    def close(self):
        self.p.stdin.close()
        self.p.wait(timeout=30)


def show(op, r, key=None):
    if isinstance(r, str):
        print(f"{op} {r}")
        return None
    f = reply_fields(r)
    ok = key is not None and hmac.compare_digest(tag(key, b"R", r[:REPLY_TAGGED]), f["tag"])
    print(f"{op} status={f['status']} session={f['session']} holder={f['holder']} "
          f"tagged={int(ok)}")
    return f


def challenged(link, me, node, cluster, op, session, lease=0):
    nc = os.urandom(16)
    r = link.ask(head("hello", session) + nc)
    f = show("hello", r)
    if f is None or f["status"] != 0:
        return None, None
    nn = f["tag"]
    key = challenge_key(cluster, me, node, nc, nn)
    req = sealed(key, head(op, 0 if op == "query" else session, lease, CHALLENGED) + nn, 0)
    r = link.ask(req)
    show(op, r, key)
    return key, req


def main():
    a = argparse.ArgumentParser()
    a.add_argument("--forge", required=True)
    a.add_argument("--src", required=True)
    a.add_argument("--dst", required=True)
    a.add_argument("--stamp", required=True)
    a.add_argument("--key")
    a.add_argument("case", choices=("join", "query", "forge", "replay", "flood"))
    a.add_argument("arg", nargs="?", type=int, default=1)
    args = a.parse_args()
    cluster = hashlib.sha256(open(args.key, "rb").read()).digest() if args.key else bytes(32)
    me = socket.inet_aton(args.src.split(":")[0])
    node = socket.inet_aton(args.dst.split(":")[0])
    link = Link(args)
    if args.case == "join":
        challenged(link, me, node, cluster, "join", args.arg, 10_000)
    elif args.case == "query":
        challenged(link, me, node, cluster, "query", 0)
    elif args.case == "forge":
        fake = os.urandom(32)
        for seq, op in enumerate(("query", "stop", "start", "leave", "join"), 1000):
            body = head(op, args.arg, 10_000 if op == "join" else 0)
            if op == "start":
                body += start_body(node)
            show(op, link.ask(sealed(fake, body, seq)))
    elif args.case == "replay":
        key, join = challenged(link, me, node, cluster, "join", args.arg, 10_000)
        if key is not None:
            q = sealed(key, head("query", args.arg), 1)
            show("query", link.ask(q), key)
            show("query-replayed", link.ask(q), key)
            show("join-replayed", link.ask(join), key)
            show("leave", link.ask(sealed(key, head("leave", args.arg), 2)), key)
    elif args.case == "flood":
        for _ in range(args.arg):
            r = link.ask(head("hello", 1) + os.urandom(16))
            if isinstance(r, str):
                print(f"hello {r}")
                break
        else:
            print(f"hello x{args.arg} answered")
    link.close()


if __name__ == "__main__":
    main()
