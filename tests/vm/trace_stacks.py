#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""Reads the kprobe events of tests/vm/lib.sh (probes_on: a kprobe with a stack trace
on each function) from the trace, and checks where they were called from.

    trace_stacks.py heavy TRACE "NAME:FUNCTION ..."   every probe fired, none from a CQ's
                                                       completion handler
    trace_stacks.py alloc TRACE                        fastreg allocated (the probes see
                                                       it), never in a completion handler
    trace_stacks.py sleep TRACE                        no timed sleep from fastreg's
                                                       teardown, removal or drain
    trace_stacks.py softirq TRACE                      fastreg's completion callbacks
                                                       fired, every one in softirq

The first line printed is the figures. An event's stack is the lines " => FRAME" after
the next "<stack trace>" line of the same CPU (the trace interleaves the CPUs' entries by
time; other probes' events and stacks are never counted as this one's). ftrace prints a module's frames without the
module's name: fastreg's are its Rust symbols (mangled, with the crate's name: "7fastreg")
and its C helpers ("fastreg_..."); once fastreg is unloaded, bare addresses, named from the
copy of /proc/kallsyms that probes_on keeps (FASTREG_KALLSYMS, /tmp/fastreg.kallsyms).
"""

import bisect
import os
import re
import sys

FASTREG = re.compile(r"7fastreg|\bfastreg_|\[fastreg\]")
HANDLER = re.compile(r"ib_cq_poll_work|__ib_process_cq|ib_poll_handler|irq_poll")
TEARDOWN = re.compile(
    r"teardown|out_of_connect|wait_background|wait_flushed|wait_idle|remove_device|shutdown")


def symbols(path):
    """fastreg's symbols from a copy of /proc/kallsyms taken while it was loaded: sorted
    (address, name). ftrace names a frame when the trace is read, so a module unloaded
    since prints its frames as bare addresses."""
    out = []
    try:
        for line in open(path, errors="replace"):
            w = line.split()
            if len(w) >= 3 and w[-1] == "[fastreg]":
                out.append((int(w[0], 16), w[2]))
    except OSError:
        pass
    return sorted(out)


SYMS = symbols(os.environ.get("FASTREG_KALLSYMS", "/tmp/fastreg.kallsyms"))


def name(frame):
    """A frame's name: as printed, or looked up in fastreg's symbols when printed as a bare
    address (within fastreg's symbols, plus 64 KiB past the last one)."""
    m = re.fullmatch(r"0x([0-9a-f]+)", frame)
    if not m or not SYMS:
        return frame
    addr = int(m.group(1), 16)
    i = bisect.bisect_right(SYMS, (addr, "\uffff")) - 1
    if i < 0 or addr > SYMS[-1][0] + (64 << 10):
        return frame
    return SYMS[i][1]


def header_lost(line, lost):
    """The entries the trace lost, from its header line "entries-in-buffer/entries-written"
    (or `lost` as it was, for another comment line)."""
    m = re.search(r"entries-in-buffer/entries-written: (\d+)/(\d+)", line)
    return int(m.group(2)) - int(m.group(1)) if m else lost


def events(path, names):
    """(name, stack) for each event of `names` in the trace, and the entries lost. The
    trace merges the CPUs' buffers by time, so another CPU's entry may come between an
    event and its stack: a stack belongs to the last event of its own CPU."""
    out, lost, cur, stack = [], 0, {}, None
    event = re.compile(r":\s+(%s):\s+\(" % "|".join(map(re.escape, names)))
    cpu = re.compile(r"\[(\d+)\]")
    for line in open(path, errors="replace"):
        if line.startswith("#"):
            lost = header_lost(line, lost)
            continue
        if line.startswith(" => "):
            if stack is not None:
                stack.append(name(line[4:].strip()))
            continue
        c = cpu.search(line)
        c = c.group(1) if c else "?"
        if "<stack trace>" in line:
            # Each event has one stack: the next one on this CPU is another event's.
            stack = cur.pop(c, None)
            continue
        stack = None
        m = event.search(line)
        if m:
            ev = (m.group(1), [])
            out.append(ev)
            cur[c] = ev[1]
        else:
            cur.pop(c, None)
    return out, lost


def ours(stack):
    return [f for f in stack if FASTREG.search(f)]


def from_handler(stack):
    return any(HANDLER.search(f) for f in stack)


def distinct(stacks, n=3):
    """The `n` most frequent call sites (fastreg's first frames) among `stacks`, with
    their counts."""
    sites = {}
    for st in stacks:
        key = tuple(ours(st)[:4]) or tuple(st[-4:])
        sites[key] = sites.get(key, 0) + 1
    return sorted(sites.items(), key=lambda kv: -kv[1])[:n]


def heavy(path, spec):
    names = [p.split(":")[0] for p in spec.split()]
    evs, lost = events(path, names)
    hits = dict.fromkeys(names, 0)
    bad = []
    for name, stack in evs:
        hits[name] += 1
        if from_handler(stack):
            bad.append((name, stack[:12]))
    print("# heavy work seen: " + " ".join("%s=%d" % kv for kv in hits.items()) +
          ", %d from a completion handler, %d trace entries lost" % (len(bad), lost))
    for site, n in distinct([st for _, st in bad]):
        print("# %d in a completion handler from: %s" % (n, " < ".join(site)))
    return all(hits.values()) and not bad and lost == 0


def alloc(path):
    evs, lost = events(path, ["krealloc", "vrealloc"])
    mine = [st for _, st in evs if ours(st)]
    bad = [st for st in mine if from_handler(st)]
    print("# allocations seen: %d, %d from fastreg, %d from a completion handler, "
          "%d trace entries lost" % (len(evs), len(mine), len(bad), lost))
    for site, n in distinct(bad):
        print("# %d allocations in a completion handler from: %s" % (n, " < ".join(site)))
    return bool(mine) and not bad and lost == 0


def sleep(path):
    evs, lost = events(path, ["usleep", "msleep"])
    mine = [ours(st) for _, st in evs if ours(st)]
    bad = [m for m in mine if any(TEARDOWN.search(f) for f in m)]
    print("# timed sleeps seen: %d, %d from fastreg, %d in its teardown, removal or drain, "
          "%d trace entries lost" % (len(evs), len(mine), len(bad), lost))
    for m in bad[:3]:
        print("# polling in teardown: " + " < ".join(m[:6]))
    return not bad and lost == 0


FLAGS = re.compile(r"\]\s+(\S{4,5})\s+\d+\.\d+:\s+(done\d+):")


def softirq(path):
    """fastreg's completion callbacks (kprobes fastreg_cq/doneN, no stacks) fired, and
    every hit ran in softirq: ftrace's context flag (the third of the flags field) is "s"
    (softirq) or "H" (hardirq inside softirq)."""
    hits, outside, lost = 0, 0, 0
    for line in open(path, errors="replace"):
        if line.startswith("#"):
            lost = header_lost(line, lost)
            continue
        m = FLAGS.search(line)
        if not m:
            continue
        hits += 1
        if m.group(1)[2] not in "sH":
            outside += 1
    print("# completion callbacks seen: %d, %d outside softirq, %d trace entries lost"
          % (hits, outside, lost))
    return hits > 0 and outside == 0 and lost == 0


def main(argv):
    kind, path = argv[1], argv[2]
    if kind == "heavy":
        ok = heavy(path, argv[3])
    elif kind == "alloc":
        ok = alloc(path)
    elif kind == "sleep":
        ok = sleep(path)
    elif kind == "softirq":
        ok = softirq(path)
    else:
        raise SystemExit("usage: trace_stacks.py heavy|alloc|sleep|softirq TRACE [SPEC]")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
