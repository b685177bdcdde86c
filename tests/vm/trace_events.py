#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""Reads fastreg's tracepoints (the "fastreg" trace system) out of a trace in ftrace's
text format (/sys/kernel/tracing/trace, or `trace-cmd report`), for tests/vm/16-trace.sh;
host-tested in tests/host/py/test_trace_events.py.

    trace_events.py transfer KIND BYTES TRACE   one transfer of KIND (put, get, put_inline,
                                                get_inline) and BYTES: submitted, its keys
                                                registered (registered kinds), every key
                                                registered meanwhile invalidated, then done
                                                with status 0, in that order
    trace_events.py states DIR FINAL TRACE      a connection's states (DIR "->" for one this
                                                node opened, "<-" for one it accepted), from
                                                idle to FINAL, through the states of DIR
    trace_events.py count EVENT TRACE           how many EVENT lines there are

Each prints what it found, and exits 1 when the trace does not show it.
"""

import re
import sys

LINE = re.compile(r"\s(\d+\.\d+): fastreg_(\w+): (.*)$")
FIELD = re.compile(r'(\w+)=("[^"]*"|\S+)')
STATE = re.compile(r"^(\S+) (->|<-) (\S+) qp=(\d+) (\w+) -> (\w+) reason=(.*)$")

# The states a connection passes on its way up, by direction.
UP = {"->": ["idle", "resolving_addr", "resolving_route", "connecting", "established"],
      "<-": ["idle", "passive_wait", "established"]}


def parse(text):
    """The fastreg events of a trace, in order: (time, name, fields, raw text)."""
    out = []
    for ln in text.splitlines():
        m = LINE.search(ln)
        if not m:
            continue
        t, name, rest = float(m.group(1)), m.group(2), m.group(3).strip()
        fields = {k: v.strip('"') for k, v in FIELD.findall(rest)}
        out.append((t, name, fields, rest))
    return out


def transfer(events, kind, nbytes):
    """Checks the first transfer of `kind` and `nbytes`; returns (ok, lines to show)."""
    registered = kind in ("put", "get")
    sub = next((i for i, (_, n, f, _) in enumerate(events) if n == "xfer_submit"
                and f.get("kind") == kind and f.get("bytes") == str(nbytes)), None)
    if sub is None:
        return False, [f"no xfer_submit of kind={kind} bytes={nbytes}"]
    f0 = events[sub][2]
    done = next((i for i in range(sub + 1, len(events)) if events[i][1] == "xfer_done"
                 and events[i][2].get("cookie") == f0["cookie"]
                 and events[i][2].get("peer") == f0["peer"]), None)
    if done is None:
        return False, [f"xfer_submit cookie={f0['cookie']}: no xfer_done"]
    window = events[sub + 1:done]
    fd = events[done][2]
    show = [f"submit: {events[sub][3]}"] + [f"  {n}: {r}" for _, n, _, r in window] + \
        [f"done: {events[done][3]}"]
    problems = []
    if fd.get("status") != "0":
        problems.append(f"status {fd.get('status')}")
    if fd.get("bytes") != str(nbytes) or fd.get("kind") != kind:
        problems.append("done names another kind or size")
    regs = [f["rkey"] for _, n, f, _ in window if n == "reg_mr"]
    own = [f["rkey"] for _, n, f, _ in window if n == "reg_mr" and f.get("qp") == f0["qp"]]
    if registered and not own:
        problems.append(f"no REG_MR on the transfer's own QP ({f0['qp']})")
    if not registered and regs:
        problems.append(f"an inline transfer registered {len(regs)} key(s)")
    if registered and str(len(own)) != f0.get("regs"):
        problems.append(f"{len(own)} REG_MR on its QP, submitted with regs={f0.get('regs')}")
    for k in regs:
        at = next(i for i, (_, n, f, _) in enumerate(window) if n == "reg_mr" and f["rkey"] == k)
        dead = any(n in ("local_inv", "remote_inv") and f.get("rkey") == k
                   for _, n, f, _ in window[at + 1:])
        if not dead:
            problems.append(f"rkey {k} registered and not invalidated before the transfer ended")
    if problems:
        return False, show + [f"wrong: {p}" for p in problems]
    return True, show


def states(events, direction, final):
    """The first connection of `direction` that reaches `final`, its states from idle in
    order; returns (ok, lines to show)."""
    seqs = {}
    for _, n, _, raw in events:
        if n != "conn_state":
            continue
        m = STATE.match(raw)
        if not m or m.group(2) != direction:
            continue
        seqs.setdefault((m.group(1), m.group(3)), []).append((m.group(5), m.group(6),
                                                              m.group(7)))
    want = UP[direction] + ([] if final == "established" else
                            ["closing", "closed"][:["closing", "closed"].index(final) + 1])
    for key, seq in seqs.items():
        walked = [seq[0][0]] + [to for _, to, _ in seq] if seq else []
        if final not in walked:
            continue
        chained = all(seq[i][1] == seq[i + 1][0] for i in range(len(seq) - 1))
        got = walked[:walked.index(final) + 1]
        line = f"{key[0]} {direction} {key[1]}: " + " -> ".join(got)
        ended = [r for _, to, r in seq if to in ("closing", "closed") and r]
        if ended:
            line += f" (reason: {ended[0]})"
        return got == want and chained, [line]
    return False, [f"no connection {direction} reaching {final}; seen: {sorted(seqs)}"]


def main(argv):
    if len(argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    with open(argv[-1], errors="replace") as f:
        events = parse(f.read())
    if argv[1] == "transfer" and len(argv) == 5:
        ok, lines = transfer(events, argv[2], int(argv[3]))
    elif argv[1] == "states" and len(argv) == 5:
        ok, lines = states(events, argv[2], argv[3])
    elif argv[1] == "count" and len(argv) == 4:
        n = sum(1 for e in events if e[1] == argv[2])
        print(n)
        return 0
    else:
        print(__doc__, file=sys.stderr)
        return 2
    for ln in lines:
        print(f"# {ln}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
