#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""One node's part of the soak (tests/cluster/soak.sh, `make soak`).

Until the end time, runs brw to the other nodes with a random mix: size from 1 byte to
the largest payload (log-uniform), offset, direction, concurrency, one peer or all,
check=full, 5 to 15 s each. Every run is recorded with the windows it overlapped (the
faults window, on node 0; the fuzzing window, on node 1: see WINDOWS) so that errors are
told apart from those of a quiet fabric. Every minute, samples the slab total and the
MRs fastreg holds. Writes a JSON summary at the end.

    soak.py START END NODE PEERS OUT FUZZER

PEERS: comma-separated addresses; FUZZER: the fuzzing node's address, "self" on it.
"""

import json
import math
import os
import random
import subprocess
import sys
import threading
import time

LST = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts", "fastreg-lst")
DBG = "/sys/kernel/debug/fastreg"

# Fractions of the run: faults on node 0 in [0.30, 0.45), fuzzing on node 1 in
# [0.60, 0.75); the rest is quiet. A run belongs to a window it overlaps, give or take
# the transfer timeout after it (MARGIN s: a connection a disturbance closed can fail
# transfers a little after the window) and the nodes' clock skew before it (SKEW s: each
# guest's clock comes from a 1 s RTC, nothing syncs them).
WINDOWS = {"faults": (0.30, 0.45), "fuzz": (0.60, 0.75)}
MARGIN = 70
SKEW = 10
OFFSETS = [0, 1, 511, 4095, 4096, 4097, 65535, 65537]


def window_times(start, end):
    span = end - start
    return {k: (start + a * span, start + b * span) for k, (a, b) in WINDOWS.items()}


def labels(t0, t1, windows):
    return [k for k, (a, b) in windows.items() if t0 < b + MARGIN and t1 > a - SKEW]


def max_payload():
    """The smallest max_payload of this node's interface and its connections."""
    try:
        text = open(f"{DBG}/conns").read()
    except OSError:
        return 1 << 20
    vals = [int(w.split("=", 1)[1]) for w in text.split() if w.startswith("max_payload=")]
    return min(vals) if vals else 1 << 20


def sample(t0):
    slab = 0
    for line in open("/proc/meminfo"):
        if line.startswith("Slab:"):
            slab = int(line.split()[1])
    out = subprocess.run(["rdma", "resource", "show", "mr"], capture_output=True, text=True).stdout
    mrs = sum(1 for line in out.splitlines() if "[fastreg]" in line)
    return {"minute": round((time.time() - t0) / 60, 1), "slab_kib": slab, "mrs": mrs}


def sampler(t0, end, samples, stop):
    while not stop.is_set():
        samples.append(sample(t0))
        if stop.wait(60) or time.time() >= end:
            break


def one_run(rng, peers, limit):
    size = max(1, min(limit, int(2 ** rng.uniform(0, math.log2(limit))) + rng.randrange(2)))
    args = [
        "brw", rng.choice(["read", "write"]),
        "--size", str(size),
        "--offset", str(rng.choice(OFFSETS)),
        "--concurrency", str(rng.choice([1, 2, 4, 8, 16])),
        "--seconds", str(rng.randint(5, 15)),
        "--check", "full",
    ]
    chosen = rng.sample(peers, rng.choice([1, len(peers)]))
    for p in chosen:
        args += ["--peer", p]
    t0 = time.time()
    proc = subprocess.run([LST, "--json"] + args, capture_output=True, text=True)
    t1 = time.time()
    try:
        r = json.loads(proc.stdout)
    except ValueError:
        r = {"ops": 0, "errors": 0, "corrupt": 0, "errors_by_kind": {},
             "cli_error": (proc.stderr or proc.stdout)[-300:]}
    return t0, t1, " ".join(args), chosen, r


def main():
    start, end, node, peers, out, fuzzer = float(sys.argv[1]), float(sys.argv[2]), \
        int(sys.argv[3]), sys.argv[4].split(","), sys.argv[5], sys.argv[6]
    rng = random.Random(1000 + node)
    windows = window_times(start, end)
    samples, stop = [], threading.Event()
    th = threading.Thread(target=sampler, args=(start, end, samples, stop))
    th.start()
    groups = {}
    runs = 0
    limit = max_payload()
    while time.time() < end - 20:
        t0, t1, args, chosen, r = one_run(rng, peers, limit)
        runs += 1
        within = labels(t0, t1, windows)
        key = "+".join(within) or "quiet"
        g = groups.setdefault(key, {"runs": 0, "ops": 0, "bytes": 0, "errors": 0, "corrupt": 0,
                                    "unexplained_corrupt": 0, "errors_by_kind": {},
                                    "cli_errors": 0, "first_failed": None})
        # Only the fuzzing node's messages are mutated: a corrupt transfer is explained
        # only in the fuzzing window and on a connection with that node.
        if not ("fuzz" in within and (fuzzer in chosen or fuzzer == "self")):
            g["unexplained_corrupt"] += r.get("corrupt", 0)
        if r.get("corrupt", 0):
            g.setdefault("corrupt_runs", []).append(
                {"at_s": round(t0 - start), "args": args, "corrupt": r["corrupt"],
                 "by_peer": {p.get("peer"): p.get("corrupt") for p in r.get("peers", [])}})
        g["runs"] += 1
        for k in ("ops", "bytes", "errors", "corrupt"):
            g[k] += r.get(k, 0)
        for k, v in r.get("errors_by_kind", {}).items():
            g["errors_by_kind"][k] = g["errors_by_kind"].get(k, 0) + v
        if "cli_error" in r:
            g["cli_errors"] += 1
        failed = r.get("errors", 0) or r.get("corrupt", 0) or "cli_error" in r
        if failed and g["first_failed"] is None:
            g["first_failed"] = {"at_s": round(t0 - start), "args": args,
                                 "first_error": [p.get("first_error") for p in r.get("peers", [])],
                                 "cli_error": r.get("cli_error")}
        if runs % 10 == 0:
            print(f"# node {node}: {round((time.time() - start) / 60, 1)} min, {runs} runs, "
                  + ", ".join(f"{k}: {v['ops']} ops {v['errors']} errors {v['corrupt']} corrupt"
                              for k, v in sorted(groups.items())), flush=True)
    stop.set()
    th.join()
    json.dump({"node": node, "runs": runs, "groups": groups, "samples": samples,
               "windows": {k: [round(a - start), round(b - start)] for k, (a, b) in windows.items()}},
              open(out, "w"), indent=1)


if __name__ == "__main__":
    main()
