# SPDX-License-Identifier: GPL-2.0
"""The console half of fastreg-lst: tests between groups of remote nodes, driven from this
node through the control device /dev/fastreg (Documentation/selftest.rst, "Console"), with
the console's allowlist and key in configfs (Documentation/configfs.rst).

Imported by scripts/fastreg-lst; nothing here runs on import.
"""

import errno
import hashlib
import json
import os
import random
import signal
import socket
import sys
import time

import fastreg_device as fdev  # noqa: E402  (beside this file)

MIB = 1 << 20

Failure = fdev.Failure


def interfaces():
    """The addresses of this node's fastreg interfaces, in order."""
    out = []
    for ln in fdev.stat_sections().get("conns", "").splitlines():
        if ln.startswith("iface "):
            out.append(ln.split()[2].rsplit(":", 1)[0])
    return out


def route_from(peer):
    """The local fastreg interface whose address routes to `peer` (the kernel's choice of
    source address), or None when no interface has it."""
    local = interfaces()
    if peer in local:
        return peer
    try:
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            s.connect((peer, 9))  # no packet: a UDP connect only picks the route
            src = s.getsockname()[0]
        finally:
            s.close()
    except OSError:
        return None
    return src if src in local else None


def console_allow(what, addr):
    """console allow|deny ADDR, console list: returns the listing (configfs's
    console_allow, console_deny)."""
    if what != "list":
        fdev.config_write(f"console_{what}", addr)
    return fdev.config_read("console_allow")


KEY_MIN = 32


def key_digest(path):
    """The console key of key file `path`: the SHA-256 of its bytes, in hex. The file must
    hold at least KEY_MIN bytes and be readable by its owner only (as munge's key)."""
    try:
        st = os.stat(path)
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise Failure(f"console key {path}: {os.strerror(e.errno)}")
    if st.st_mode & 0o077:
        raise Failure(f"console key {path}: readable or writable by others than its owner "
                      f"(chmod 600 {path})")
    if len(data) < KEY_MIN:
        raise Failure(f"console key {path}: {len(data)} bytes; a key file holds at least "
                      f"{KEY_MIN} random bytes (dd if=/dev/urandom of={path} bs=1024 count=1)")
    return hashlib.sha256(data).hexdigest()


def console_key(path):
    """Installs the cluster's console key from key file `path` (`none`: removes the key);
    returns the listing. The key is never shown back."""
    if path == "none":
        fdev.config_write("console_key", "none")
    else:
        fdev.config_write("console_key", key_digest(path), shown=path)
    return fdev.config_read("console_allow")


def parse_listing(text):
    """`allowed A B; session 0x.. of C lease_left_ms=N; test STATE; refused N; key K;
    rejected no_key=N ...` as a dict."""
    out = {"allowed": [], "session": None, "test": None, "refused": 0, "key": None,
           "rejected": {}}
    for part in text.split(";"):
        w = part.split()
        if w and w[0] == "allowed":
            out["allowed"] = [a for a in w[1:] if a != "none"]
        elif w and w[0] == "session" and w[1] != "none":
            out["session"] = {"id": w[1], "console": w[3],
                              "lease_left_ms": int(w[4].split("=")[1])}
        elif w and w[0] == "test":
            out["test"] = w[1]
        elif w and w[0] == "refused":
            out["refused"] = int(w[1])
        elif w and w[0] == "key":
            out["key"] = None if w[1] == "none" else w[1]
        elif w and w[0] == "rejected":
            out["rejected"] = {k: int(v) for k, v in (x.split("=") for x in w[1:])}
    return out


ERRNO = {1: "not allowed", 3: "not in this session",
         12: "no memory (its buffers pass the node's test_mem or tests_mem)", 16: "busy",
         22: "bad request", 71: "bad reply", 95: "not supported", 110: "no answer (timed out)",
         114: "a test is running already",
         116: "replayed, or its challenge expired (try again)",
         126: "the node has no console key (there: fastreg-lst console key FILE)",
         129: "the node's console key differs from this console's (compare the key "
              "fingerprints of fastreg-lst console list)"}


def why(e):
    e = abs(int(e))
    return ERRNO.get(e) or os.strerror(e)


class Console:
    """Control requests from this node's interface `via` to nodes."""

    def __init__(self, via, timeout_ms=5000):
        self.via = via
        self.timeout_ms = timeout_ms

    def ask(self, op, nodes, **kv):
        """Sends `op` to every node at once; returns {node: fields} (an "error" field when
        the node did not answer, "status" otherwise)."""
        if not nodes:
            return {}
        words = [op, "nodes=" + ",".join(nodes), f"timeout={self.timeout_ms}"]
        if self.via:
            words.append(f"from={self.via}")
        words += [f"{k}={v}" for k, v in kv.items()]
        with fdev.Device() as dev:
            status, _, text = dev.ask("console", " ".join(words))
        if status == -errno.EINVAL:
            raise Failure(f"the module refused the console command: {' '.join(words)}: "
                          f"{text.strip()}")
        if status == -errno.ENOENT:
            raise Failure(f"no local interface {self.via}")
        if status == -errno.ENOKEY:
            raise Failure("this node has no console key: install the cluster's with "
                          "fastreg-lst console key FILE")
        if status:
            raise Failure(os.strerror(-status))
        out = {}
        for ln in text.splitlines():
            f = {}
            for w in ln.split():
                if "=" in w:
                    k, v = w.split("=", 1)
                    f[k] = v
            if "node" not in f:
                continue
            for k, v in f.items():
                if k not in ("node", "op", "holder", "state", "bad_reply"):
                    f[k] = int(v)
            out[f["node"]] = f
        return out


def refusal(node, f, via):
    """Why `node` refused or did not answer, in words."""
    if "error" in f:
        return f"{node}: {why(f['error'])}"
    s = f["status"]
    if s == -1:
        return (f"{node}: refused: this console ({via}) is not allowed there "
                f"(on {node}: fastreg-lst console allow {via})")
    if s == -16:
        return f"{node}: busy: in a session of console {f['holder']}"
    return f"{node}: {why(s)}"


def groups_arg(text):
    """[NAME=]ADDR[,ADDR...] -> (name, [addr, ...])."""
    name, _, addrs = text.rpartition("=")
    nodes = [a for a in addrs.split(",") if a]
    for a in nodes:
        p = a.split(".")
        if len(p) != 4 or not all(x.isdigit() and int(x) < 256 for x in p):
            raise ValueError(f"bad IPv4 address '{a}'")
    if not nodes:
        raise ValueError("empty group")
    return (name or addrs, nodes)


def distribute(clients, servers, dist):
    """lst's --distribute C:S: client i gets the S consecutive servers (wrapping) from
    ((i // C) * S) % len(servers). 1:1 pairs them; 1:N gives every client N servers. S
    may not exceed the servers (lst refuses it too: a client would get one twice)."""
    c, s = dist
    if s > len(servers):
        raise Failure(f"--distribute {c}:{s} gives each client {s} servers; --to has "
                      f"{len(servers)}")
    out = {}
    for i, node in enumerate(clients):
        first = ((i // c) * s) % len(servers)
        out[node] = [servers[(first + k) % len(servers)] for k in range(s)]
    return out


def figures(f):
    errors = sum(f.get("err_" + k, 0) for k in ("timeout", "connection", "refused", "other"))
    secs = f.get("usecs", 0) / 1e6
    return {"ops": f.get("ops", 0), "bytes": f.get("bytes", 0), "errors": errors,
            "corrupt": f.get("corrupt", 0), "seconds": round(secs, 3),
            "mib_per_s": round(f.get("bytes", 0) / MIB / secs, 2) if secs else 0.0}


def first_via(args, nodes):
    via = args.via or route_from(nodes[0])
    if via is None:
        raise Failure(f"no local fastreg interface routes to {nodes[0]} (give --via ADDR)")
    return via


def emit(obj, lines):
    print(json.dumps(obj, indent=None if lines else 2), flush=True)


MAX_NODES = 64   # console_cmd.rs
MAX_PEERS = 32   # control.rs


def run(args, test_words):
    """fastreg-lst run: JOIN, START on every client, QUERY every second (renewing the
    lease, reporting progress), then LEAVE; Ctrl-C stops the test on every node (a second
    Ctrl-C leaves at once)."""
    clients, servers = args.from_nodes, args.to_nodes
    nodes = list(dict.fromkeys(clients + servers))
    plan = distribute(clients, servers, args.distribute)
    if len(nodes) > MAX_NODES:
        raise Failure(f"at most {MAX_NODES} nodes in a run, not {len(nodes)}")
    if args.distribute[1] > MAX_PEERS:
        raise Failure(f"at most {MAX_PEERS} servers per client, not {args.distribute[1]}")
    via = first_via(args, nodes)
    con = Console(via, args.timeout * 1000)
    session = random.getrandbits(62) + 1
    js = args.json or args.json_lines
    out = {"session": session, "console": via, "test": test_words["test"]}
    interrupts = 0

    def on_sigint(_sig, _frm):
        nonlocal interrupts
        interrupts += 1
        if interrupts > 1:
            raise KeyboardInterrupt

    old = signal.signal(signal.SIGINT, on_sigint)
    joined, started = [], False
    try:
        answers = con.ask("join", nodes, session=session, lease=args.lease * 1000)
        joined = [n for n, f in answers.items() if f.get("status") == 0]
        refused = [refusal(n, f, via) for n, f in answers.items() if f.get("status") != 0]
        if refused:
            for r in refused:
                print(f"fastreg-lst: {r}", file=sys.stderr)
            raise Failure(f"{len(refused)} of {len(nodes)} nodes refused the session")
        # Clients with the same servers start in one command.
        by_peers = {}
        for c, peers in plan.items():
            by_peers.setdefault(tuple(peers), []).append(c)
        lost, final = {}, {}
        started = True
        for peers, group in by_peers.items():
            r = con.ask("start", group, session=session, peers=",".join(peers),
                        **test_words["kv"])
            for n, f in r.items():
                if f.get("status") != 0:
                    print(f"fastreg-lst: {refusal(n, f, via)}: its test did not start",
                          file=sys.stderr)
                    lost[n] = f
        watch(args, con, session, nodes, clients, test_words, lost, final, js,
              lambda: interrupts)
    finally:
        signal.signal(signal.SIGINT, old)
        if started:
            con.ask("stop", joined, session=session)
        con.ask("leave", joined, session=session)
    result = report(out, final, lost, clients, servers, plan, interrupts > 0)
    if js:
        emit(result, args.json_lines)
    else:
        show_run(result)
    return 0 if result["status"] == "ok" else 1


def watch(args, con, session, nodes, clients, test_words, lost, final, js, interrupted):
    """Queries every node once a second until no client runs; a node that does not answer
    is lost (an error node, not asked again). Progress every --interval seconds."""
    start = time.monotonic()
    last_print = start
    span = test_words["seconds"]
    running = [c for c in clients if c not in lost]
    stopped_sent = False
    while True:
        time.sleep(1.0)
        if interrupted() and not stopped_sent:
            con.ask("stop", [c for c in running if c not in lost], session=session)
            stopped_sent = True
            if not js:
                print("fastreg-lst: interrupted: stopping the test on every node",
                      file=sys.stderr)
        # A timed test that overstays by a wide margin is stopped (its clients' clocks run
        # it; this is a backstop).
        if span and not stopped_sent and time.monotonic() - start > span + 60:
            con.ask("stop", running, session=session)
            stopped_sent = True
        q = con.ask("query", [n for n in nodes if n not in lost], session=session)
        for n, f in q.items():
            if "error" in f or f.get("status") != 0:
                lost[n] = f
                print(f"fastreg-lst: {refusal(n, f, con.via)}: counted as an error node",
                      file=sys.stderr)
            elif n in clients:
                final[n] = f
        running = [c for c in clients if c not in lost and
                   final.get(c, {}).get("state") in (None, "starting", "running")]
        now = time.monotonic()
        if now - last_print >= args.interval or not running:
            last_print = now
            tot = totals(final, clients)
            left = max(0, span - (now - start)) if span else None
            line = {"elapsed": round(now - start, 1), **tot, "running": len(running),
                    "error_nodes": len(lost)}
            if left is not None:
                line["seconds_left"] = round(left)
            if args.json_lines:
                emit({"progress": line}, True)
            elif not args.json and running:
                print(f"[{now - start:6.0f} s] {tot['ops']} transfers, "
                      f"{tot['mib_per_s']:.2f} MiB/s, errors {tot['errors']}, corrupt "
                      f"{tot['corrupt']}, {len(running)} of {len(clients)} clients running"
                      + (f", {left:.0f} s left" if left is not None else ""), flush=True)
        if not running:
            return


def totals(final, clients):
    t = {"ops": 0, "bytes": 0, "errors": 0, "corrupt": 0, "seconds": 0.0}
    for c in clients:
        if c in final:
            f = figures(final[c])
            for k in ("ops", "bytes", "errors", "corrupt"):
                t[k] += f[k]
            t["seconds"] = max(t["seconds"], f["seconds"])
    t["mib_per_s"] = round(t["bytes"] / MIB / t["seconds"], 2) if t["seconds"] else 0.0
    return t


def report(out, final, lost, clients, servers, plan, interrupted):
    out.update(totals(final, clients))
    out["nodes"] = []
    error_nodes = 0
    for c in clients:
        n = {"node": c, "role": "client", "peers": plan[c]}
        if c in lost:
            n.update({"state": "lost", "why": why(lost[c].get("error", lost[c].get("status", 0)))})
        if c in final:
            n.update(figures(final[c]))
            n["state"] = n.get("state", final[c].get("state"))
            e = final[c].get("first_error", 0)
            n["first_error"] = os.strerror(-e) if e else None
        # A client stopped by the user's Ctrl-C is not in error; stopped otherwise (its lease,
        # a deny, its interface gone) it is.
        ended = ("done", "stopped") if interrupted else ("done",)
        bad = c in lost or n.get("errors", 0) or n.get("corrupt", 0) or \
            n.get("state") not in ended
        n["error_node"] = bool(bad)
        error_nodes += bool(bad)
        out["nodes"].append(n)
    for s in servers:
        if s in clients:
            continue
        n = {"node": s, "role": "server"}
        if s in lost:
            n.update({"state": "lost", "why": why(lost[s].get("error", lost[s].get("status", 0)))})
        n["error_node"] = s in lost
        error_nodes += s in lost
        out["nodes"].append(n)
    out["error_nodes"] = error_nodes
    out["status"] = "interrupted" if interrupted else "ok" if error_nodes == 0 else "failed"
    return out


def show_run(r):
    print(f"{r['test']}: {r['ops']} transfers in {r['seconds']:.2f} s, {r['mib_per_s']:.2f} MiB/s, "
          f"errors {r['errors']}, corrupt {r['corrupt']}")
    for n in r["nodes"]:
        if n["role"] == "client" and "ops" in n:
            print(f"  {n['node']:<15} client -> {','.join(n['peers'])}: {n['ops']} transfers, "
                  f"{n['mib_per_s']:.2f} MiB/s, errors {n['errors']}, corrupt {n['corrupt']}, "
                  f"{n['state']}" + (f" (first error: {n['first_error']})" if n.get("first_error") else ""))
        else:
            print(f"  {n['node']:<15} {n['role']}: " + (n.get("why", "ok") if n.get("error_node") else "ok"))
    print(f"Total {r['error_nodes']} error nodes")
    print(f"status: {r['status']}")


def sample(con, nodes):
    q = con.ask("query", nodes)
    return {n: f for n, f in q.items() if "error" not in f and f.get("status") == 0}, q


def rates(a, b):
    """Per node: (R ops/s, W ops/s, R MiB/s, W MiB/s) between samples a and b."""
    dt = (b["now_us"] - a["now_us"]) / 1e6
    if dt <= 0:
        return None
    return (
        (b["rx_ops"] - a["rx_ops"]) / dt, (b["tx_ops"] - a["tx_ops"]) / dt,
        (b["rx_bytes"] - a["rx_bytes"]) / dt / MIB, (b["tx_bytes"] - a["tx_bytes"]) / dt / MIB,
    )


STAT_SELECT = {"what": ("rate", "bw"), "side": ("read", "write"), "figure": ("avg", "min", "max")}


def selected(args):
    """lst stat's selectors given (--bw --rate, --read --write, --avg --min --max), or
    None: each kind not named means all of its kind."""
    sel = {kind: [o for o in opts if getattr(args, o, False)] for kind, opts in STAT_SELECT.items()}
    if not any(sel.values()):
        return None
    return {kind: sel[kind] or list(STAT_SELECT[kind]) for kind in sel}


def show_group(grp, sel):
    """A group's sample as lst prints it ([Rates of G], [R]/[W] Avg/Min/Max; [Bandwidth
    of G] likewise), the parts `sel` (selected()) names, or all of them."""
    sel = sel or STAT_SELECT
    out = []
    for what, title, unit, key in (("rate", "Rates", "ops/s", "ops_per_s"),
                                   ("bw", "Bandwidth", "MiB/s", "mib_per_s")):
        if what not in sel["what"]:
            continue
        out.append(f"[{title} of {grp['group']}]")
        for side, tag in (("read", "R"), ("write", "W")):
            if side not in sel["side"]:
                continue
            v = grp[f"{side}_{key}"]
            out.append(f"[{tag}] " + " ".join(f"{f.capitalize()}: {v[f]:.2f} {unit}"
                                             for f in ("avg", "min", "max") if f in sel["figure"]))
    return out


def stat(args):
    """fastreg-lst stat GROUP...: rates and bandwidth per group, read [R] and write [W]
    sides, avg/min/max across the group's nodes, every --delay seconds."""
    groups = args.groups
    nodes = list(dict.fromkeys(n for _, g in groups for n in g))
    con = Console(first_via(args, nodes), args.timeout * 1000)
    prev, _ = sample(con, nodes)
    done = 0
    while args.count is None or done < args.count:
        time.sleep(args.delay)
        cur, raw = sample(con, nodes)
        failed = [n for n in nodes if n not in cur]
        out = {"groups": []}
        for name, g in groups:
            rs = [rates(prev[n], cur[n]) for n in g if n in prev and n in cur]
            rs = [r for r in rs if r]
            grp = {"group": name, "nodes": len(g), "sampled": len(rs)}
            for i, k in enumerate(("read_ops_per_s", "write_ops_per_s", "read_mib_per_s",
                                   "write_mib_per_s")):
                v = [r[i] for r in rs] or [0.0]
                grp[k] = {"avg": round(sum(v) / len(v), 2), "min": round(min(v), 2),
                          "max": round(max(v), 2)}
            out["groups"].append(grp)
        out["failed"] = [refusal(n, raw.get(n, {"error": -110}), con.via) for n in failed]
        if args.json or args.json_lines:
            emit(out, args.json_lines)
        else:
            for grp in out["groups"]:
                for line in show_group(grp, selected(args)):
                    print(line)
            if failed:
                print(f"Failed to stat on {len(failed)} nodes:")
                for f in out["failed"]:
                    print(f"  {f}")
            sys.stdout.flush()
        prev = cur
        done += 1
    return 0


def errors(args):
    """fastreg-lst errors GROUP...: each node's last test (errors, corrupt), or why it did
    not answer; ends with "Total N error nodes"."""
    groups = args.groups
    nodes = list(dict.fromkeys(n for _, g in groups for n in g))
    con = Console(first_via(args, nodes), args.timeout * 1000)
    q = con.ask("query", nodes)
    out = {"groups": [], "error_nodes": 0}
    bad_all = set()
    for name, g in groups:
        grp = {"group": name, "nodes": [], "error_nodes": 0}
        for n in g:
            f = q.get(n, {"error": -110})
            e = {"node": n}
            if "error" in f or f.get("status") != 0:
                e.update({"answer": refusal(n, f, con.via), "error_node": True})
            else:
                e.update(figures(f))
                e["state"] = f["state"]
                fe = f.get("first_error", 0)
                e["first_error"] = os.strerror(-fe) if fe else None
                # As run counts them, but a stopped test: whether that was asked is not known
                # here.
                e["error_node"] = bool(e["errors"] or e["corrupt"] or f["state"] == "failed")
            grp["error_nodes"] += e["error_node"]
            if e["error_node"]:
                bad_all.add(n)
            grp["nodes"].append(e)
        out["groups"].append(grp)
    out["error_nodes"] = len(bad_all)
    if args.json:
        emit(out, False)
    else:
        for grp in out["groups"]:
            for e in grp["nodes"]:
                if "answer" in e:
                    print(f"  {e['answer']}")
                elif e["error_node"]:
                    print(f"  {e['node']}: [test {e['state']}: {e['errors']} errors, "
                          f"{e['corrupt']} corrupt" +
                          (f", first: {e['first_error']}" if e["first_error"] else "") + "]")
            print(f"Total {grp['error_nodes']} error nodes in {grp['group']}")
        print(f"Total {out['error_nodes']} error nodes")
    return 0 if out["error_nodes"] == 0 else 1
