#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""Prints the soak's figures (make soak): each node's summary, build/cluster/soak.N.json,
written by tests/cluster/soak.sh. Runs are grouped by the windows they overlapped
(quiet, faults, fuzz); the samples are the slab total and fastreg's MRs, every minute.
Then each node's verdict (its KTAP points and exit status); exits non-zero if any node
failed a point, did not finish or left no summary.

    scripts/soak-report.py [RUNDIR]
"""

import glob
import json
import os
import sys


def main():
    run = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "build", "cluster")
    files = sorted(glob.glob(os.path.join(run, "soak.*.json")))
    # soak.sh publishes its start time as soak_start.0; only the summaries are soak.N.json.
    if not files:
        print(f"no soak summary in {run}")
        return 1
    total = {}
    print(f"{'node':>4} {'window':<12} {'runs':>5} {'ops':>9} {'MiB':>9} {'errors':>7} {'corrupt':>7}  errors by kind")
    for f in files:
        s = json.load(open(f))
        for k, g in sorted(s["groups"].items()):
            kinds = ", ".join(f"{a} {b}" for a, b in g["errors_by_kind"].items() if b)
            print(f"{s['node']:>4} {k:<12} {g['runs']:>5} {g['ops']:>9} {g['bytes'] >> 20:>9} "
                  f"{g['errors']:>7} {g['corrupt']:>7}  {kinds or '-'}")
            t = total.setdefault(k, [0, 0, 0, 0, 0])
            for i, key in enumerate(("runs", "ops", "bytes", "errors", "corrupt")):
                t[i] += g[key]
    for f in files:
        s = json.load(open(f))
        for k, g in sorted(s["groups"].items()):
            for c in g.get("corrupt_runs", []):
                print(f"     node {s['node']} {k}: at {c['at_s']} s, {c['corrupt']} corrupt "
                      f"(by peer {c['by_peer']}): {c['args']}")
    for k, t in sorted(total.items()):
        print(f"{'all':>4} {k:<12} {t[0]:>5} {t[1]:>9} {t[2] >> 20:>9} {t[3]:>7} {t[4]:>7}")
    print()
    print("samples (minute: slab KiB / fastreg MRs, per node; 'end' a minute after traffic)")
    sums = [json.load(open(f)) for f in files]
    rows = max(len(s["samples"]) for s in sums)
    for i in range(rows):
        cells = []
        for s in sums:
            x = s["samples"][i] if i < len(s["samples"]) else None
            cells.append(f"{x['slab_kib']:>7} / {x['mrs']:>4}" if x else " " * 14)
        minute = next((s["samples"][i]["minute"] for s in sums if i < len(s["samples"])), "")
        print(f"{minute:>6}  " + "   ".join(cells))
    print(f"{'end':>6}  " + "   ".join(f"{s['final']['slab_kib']:>7} / {s['final']['mrs']:>4}" if "final" in s else " " * 14 for s in sums))
    print()
    bad = 0
    for rc in sorted(glob.glob(os.path.join(run, "node[0-9]*.rc"))):
        node = os.path.basename(rc)[4:-3]
        out = open(os.path.join(run, f"node{node}.out")).read().splitlines()
        passed = sum(1 for x in out if x.startswith("ok "))
        failed = [x for x in out if x.startswith("not ok ")]
        code = open(rc).read().strip()
        print(f"node {node}: {passed} passed, {len(failed)} failed, exit {code}")
        for x in failed:
            print(f"  {x}")
        bad += len(failed) + (code != "0")
    nodes = 0
    try:
        for line in open(os.path.join(run, "env")):
            if line.startswith("FASTREG_NODES="):
                nodes = len(line.split("=", 1)[1].replace("\\ ", " ").strip().strip("'").split())
    except OSError:
        pass
    finished = len(glob.glob(os.path.join(run, "node[0-9]*.rc")))
    if finished < nodes or len(files) < nodes:
        print(f"{nodes} nodes: {finished} finished, {len(files)} left a summary")
        bad += 1
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
