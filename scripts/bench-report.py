#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""Host side of `make bench`: turns the guest's `BENCH <json>` lines into
build/bench/results.json, build/bench/results.txt (the table, with the ratios fastreg /
perftest and fastreg / nvme-rdma) and PNG plots (throughput vs size, throughput vs
concurrency; one line per system).

    bench-report.py RAW_OUTPUT OUT_DIR
"""

import json
import os
import sys


def load(raw):
    res = {"meta": {}, "fastreg": [], "perftest": [], "fastreg_ping": [], "perftest_send": [],
           "nvme": [], "errors": []}
    with open(raw, errors="replace") as f:
        for ln in f:
            i = ln.find("BENCH {")
            if i < 0:
                continue
            try:
                r = json.loads(ln[i + 6:])
            except ValueError:
                continue
            kind = r.pop("kind")
            if kind == "meta":
                res["meta"] = r
            elif kind == "error":
                res["errors"].append(r)
            else:
                res.setdefault(kind, []).append(r)
    return res


def matches(r, kw):
    return all(r.get(k) == v for k, v in kw.items())


def find(rows, **kw):
    return next((r for r in rows if matches(r, kw)), None)


def size_name(n):
    for unit, shift in (("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift} {unit}"
    return f"{n} B"


def median(xs):
    xs = sorted(x for x in xs if x is not None)
    if not xs:
        return None
    n = len(xs)
    return xs[n // 2] if n % 2 else (xs[n // 2 - 1] + xs[n // 2]) / 2


def paired(res, module, **kw):
    """The ratios fastreg / perftest of one point, each from a run and the anchor run that
    followed it (same `rep`); their median, and their spread (largest minus smallest)."""
    rs = []
    for f in res["fastreg"]:
        if f.get("module", "after") != module or not matches(f, kw):
            continue
        p = find(res["perftest"], module=module, rep=f.get("rep"), **kw) if "rep" in f else \
            find(res["perftest"], **kw)
        if p and p["mib_per_s"]:
            rs.append(f["mib_per_s"] / p["mib_per_s"])
    if not rs:
        return None, None, 0
    return round(median(rs), 3), round(max(rs) - min(rs), 3), len(rs)


def ratio(a, b):
    return round(a / b, 3) if a is not None and b else None


def fmt(x, nd=2):
    return "-" if x is None else f"{x:.{nd}f}"


def table(res):
    lines = []
    m = res["meta"]
    v = m.get("versions", {})
    lines.append(f"fastreg benchmark: {m.get('device')} ({m.get('address')}), kernel "
                 f"{v.get('kernel')}, {m.get('cpus')} vCPUs, {m.get('memory_mib')} MiB, "
                 f"{m.get('seconds')} s per measurement")
    if m.get("peer"):
        lines.append(f"two nodes: this {m.get('node_kind')} node ({m.get('page_size')}-byte pages) "
                     f"against {m.get('peer')}, {m.get('rdma')}; perftest between the same nodes")
    elif m.get("rdma"):
        lines.append(f"one node, {m.get('rdma')}, looping back to its own address")
    lines.append(f"perftest: {v.get('perftest')}; fio: {v.get('fio')}; nvme-cli: "
                 f"{v.get('nvme-cli')}")
    lines.append("")
    lines.append("Throughput (MiB/s), fastreg check=none vs perftest at the same size and "
                 "operations outstanding")
    hdr = (f"{'op':<6} {'size':>8} {'conc':>5} {'fastreg':>9} {'perftest':>9} {'ratio':>6}  "
           f"{'WRs src':>7} {'WRs snk':>7} {'REG':>4} {'LINV':>4} {'RINV':>4} {'alloc_mr':>8} "
           f"{'thr':>4}")
    lines.append(hdr)
    summary = {"ratios": []}
    have = {r.get("module", "after") for r in res["fastreg"]}
    modules = [m for m in ("before", "after") if m in have]
    if any("rep" in r for r in res["fastreg"]):
        lines_ab = paired_table(res, modules, summary)
    else:
        lines_ab = []
    shown = set()
    rows = []
    for f in res["fastreg"]:
        key = (f["op"], f["size"], f["concurrency"])
        if f.get("module", "after") == "after" and key not in shown:
            shown.add(key)
            rows.append(f)
    for f in sorted(rows, key=lambda r: (r["op"], r["concurrency"], r["size"])):
        p = find(res["perftest"], op=f["op"], size=f["size"], concurrency=f["concurrency"])
        pb = p["mib_per_s"] if p else None
        rt = ratio(f["mib_per_s"], pb)
        summary["ratios"].append({"op": f["op"], "size": f["size"],
                                  "concurrency": f["concurrency"], "fastreg": f["mib_per_s"],
                                  "perftest": pb, "ratio": rt, "perftest_missing": pb is None,
                                  "threads_in_fastreg": f.get("threads_in_fastreg")})
        thr = f.get("threads_in_fastreg")
        lines.append(
            f"{f['op']:<6} {size_name(f['size']):>8} {f['concurrency']:>5} "
            f"{fmt(f['mib_per_s']):>9} {'missing' if pb is None else fmt(pb):>9} {fmt(rt):>6}  "
            f"{fmt(f['wrs_per_transfer_source'], 1):>7} {fmt(f['wrs_per_transfer_sink'], 1):>7} "
            f"{fmt(f['reg_per_transfer'], 1):>4} {fmt(f['local_inv_per_transfer'], 1):>4} "
            f"{fmt(f['remote_inv_per_transfer'], 1):>4} {f['alloc_mr_during_run']:>8} "
            f"{'-' if thr is None else thr:>4}")
    lines.append("")
    lines.append("WRs src/snk: work requests per transfer on the source's and the sink's send "
                 "queue (messages included); REG, LINV, RINV: registrations, local and remote "
                 "invalidations per transfer (both sides); alloc_mr: ib_alloc_mr calls during "
                 "the measured run; thr: most threads sleeping in fastreg's code at once during "
                 "it (the selftest's control writer is one); missing: the perftest anchor "
                 "failed twice.")
    lines.extend(lines_ab)
    lines.extend(floor_table(res, summary))
    lines.append("")
    # Message rate: a ping is two messages.
    send = res["perftest_send"][0] if res["perftest_send"] else None
    lines.append("Message rate (messages/s): fastreg ping (2 messages per round trip) vs "
                 "ib_send_bw 4 KiB, 64 outstanding")
    for pg in res["fastreg_ping"]:
        rt = ratio(pg["msgs_per_s"], send["msgs_per_s"] if send else None)
        lines.append(f"  ping concurrency {pg['concurrency']:>3}: {pg['msgs_per_s']:>10.0f}   "
                     f"ib_send_bw: {fmt(send['msgs_per_s'] if send else None, 0):>10}   "
                     f"ratio {fmt(rt)}")
        summary.setdefault("ping", []).append({"concurrency": pg["concurrency"], "ratio": rt})
    lines.append("")
    lines.append("nvme-rdma over nvmet-rdma (fio, 1 MiB O_DIRECT, queue depth 8) vs fastreg 1 MiB "
                 "at concurrency 8")
    for n in res["nvme"]:
        f = find(res["fastreg"], op=n["op"], size=1 << 20, concurrency=8)
        rt = ratio(f["mib_per_s"] if f else None, n["mib_per_s"])
        lines.append(f"  {n['op']:<5}: nvme-rdma {n['mib_per_s']:>8.2f}  fastreg "
                     f"{fmt(f['mib_per_s'] if f else None):>8}  ratio {fmt(rt)}")
        summary.setdefault("nvme", []).append({"op": n["op"], "ratio": rt})
    lines.append("")
    qd = m.get("queue_depth")
    lines.append(f"Send queue depth at queue_depth {qd}: fastreg {m.get('sq_depth')} WRs "
                 f"(a max_payload transfer: {m.get('transfer_wrs')} WRs per side); o2iblnd "
                 f"(1 + 257 + 2) x {qd} = {(1 + 257 + 2) * qd if qd else '-'} "
                 f"(with max_payload's pages: {m.get('o2iblnd_sq_depth')})")
    for op in ("write", "read"):
        a = find(res["fastreg"], op=op, size=1 << 20, concurrency=8)
        for hi in (64, 256):
            b = find(res["fastreg"], op=op, size=1 << 20, concurrency=hi)
            if a and b and a["mib_per_s"]:
                d = (b["mib_per_s"] - a["mib_per_s"]) / a["mib_per_s"] * 100
                lines.append(f"1 MiB {op}: concurrency 8 -> {hi} changes throughput by {d:+.1f}%")
                summary.setdefault(f"concurrency_8_to_{hi}_pct", {})[op] = round(d, 1)
    allocs = sum(f["alloc_mr_during_run"] for f in res["fastreg"])
    lines.append(f"ib_alloc_mr calls during measured runs (after warm-up): {allocs}")
    summary["alloc_mr_during_runs"] = allocs
    if res["errors"]:
        lines.append("")
        lines.append("Errors:")
        for e in res["errors"]:
            lines.append(f"  {e['what']}: {e['error'].splitlines()[0] if e['error'] else ''}")
    return "\n".join(lines) + "\n", summary


def paired_table(res, modules, summary):
    """Per point: the median ratio of interleaved runs (fastreg, then perftest, REPS
    times) and its spread, for each module measured; work items queued per transfer and
    the median time from a completion to the next post."""
    lines = ["", "Interleaved runs (fastreg, perftest, fastreg, ...): median ratio fastreg / "
             "perftest [spread: largest - smallest], work items fastreg queued per transfer, "
             "and c>p: the median microseconds from a completion (CQE written) to the next post"]
    hdr = f"{'op':<6} {'size':>8} {'conc':>5}"
    for m in modules:
        hdr += f"  {m + ' ratio':>14} {'[spread]':>9} {'n':>2} {'work':>6} {'c>p us':>7}"
    lines.append(hdr)
    keys = sorted({(f["op"], f["concurrency"], f["size"]) for f in res["fastreg"]})
    for op, conc, size in keys:
        ln = f"{op:<6} {size_name(size):>8} {conc:>5}"
        for m in modules:
            med, spread, n = paired(res, m, op=op, size=size, concurrency=conc)
            w = find(res.get("work_items", []), module=m, op=op, size=size, concurrency=conc)
            wi = w["per_transfer"] if w else None
            cp = w.get("comp_to_post_us") if w else None
            ln += f"  {fmt(med):>14} {'[' + fmt(spread) + ']':>9} {n:>2} {fmt(wi, 1):>6} {fmt(cp, 0):>7}"
            summary.setdefault("paired", []).append(
                {"module": m, "op": op, "size": size, "concurrency": conc, "median_ratio": med,
                 "spread": spread, "runs": n, "work_items_per_transfer": wi,
                 "comp_to_post_us": cp,
                 "comp_to_post_p90_us": w.get("comp_to_post_p90_us") if w else None})
        lines.append(ln)
    return lines


def floor_table(res, summary):
    """One transfer at a time against its protocol's floor: the time a transfer took
    (fastreg's runs of the point, median), the time the steps no request/answer protocol
    can skip take on the device with a process spinning on its CQ (perftest's latency
    tools, the same run), and the ratio to the bandwidth anchor such a protocol would reach
    at best (its ceiling)."""
    rows = [r for r in res.get("floor", []) if r.get("module", "after") == "after"]
    if not rows:
        return []
    lines = ["", "One transfer at a time against the protocol's floor (microseconds per "
             "transfer): fastreg's runs (median), the floor (perftest latency tools, same run; "
             "its steps), of floor = floor / fastreg, the perftest anchor's time per operation, "
             "ratio = fastreg / anchor (interleaved median), ceiling = anchor / floor: the "
             "best ratio a protocol at the floor reaches"]
    lines.append(f"{'op':<6} {'size':>8} {'fastreg':>8} {'floor':>8} {'of floor':>8} "
                 f"{'anchor':>8} {'ratio':>6} {'ceiling':>7}  steps")
    for fl in sorted(rows, key=lambda r: (r["op"], r["size"])):
        kw = dict(op=fl["op"], size=fl["size"], concurrency=fl["concurrency"])
        runs = [1e6 / f["ops_per_s"] for f in res["fastreg"]
                if f.get("module", "after") == "after" and matches(f, kw) and f["ops_per_s"]]
        anchors = [fl["size"] / (p["mib_per_s"] * (1 << 20)) * 1e6 for p in res["perftest"]
                   if p.get("module", "after") == "after" and matches(p, kw) and p["mib_per_s"]]
        us, anchor_us = median(runs), median(anchors)
        med, _, _ = paired(res, "after", **kw)
        of_floor = ratio(fl["us"], us)
        ceiling = ratio(anchor_us, fl["us"])
        steps = " + ".join(f"{p['tool']} {size_name(p['size'])} {p['us']:.0f}" for p in fl["parts"])
        lines.append(f"{fl['op']:<6} {size_name(fl['size']):>8} {fmt(us, 0):>8} "
                     f"{fl['us']:>8.0f} {fmt(of_floor):>8} {fmt(anchor_us, 0):>8} "
                     f"{fmt(med):>6} {fmt(ceiling):>7}  {steps}")
        summary.setdefault("floor", []).append(
            {"op": fl["op"], "size": fl["size"], "fastreg_us": us, "floor_us": fl["us"],
             "of_floor": of_floor, "anchor_us": anchor_us, "ratio": med, "ceiling": ceiling,
             "steps": fl["parts"]})
    return lines


def series(rows, key, **kw):
    """The rows matching `kw`, sorted by `key`, as (x, MiB/s) lists."""
    sel = sorted((r for r in rows if matches(r, kw)), key=lambda r: r[key])
    return [r[key] for r in sel], [r["mib_per_s"] for r in sel]


def plot(ax, xy, fmt_, **kw):
    """Plots a series unless it is empty."""
    if xy[0]:
        ax.plot(*xy, fmt_, **kw)


def finish(ax, xlabel, title, legend_size):
    ax.set_xscale("log", base=2)
    ax.set_xlabel(xlabel)
    ax.set_ylabel("MiB/s")
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=legend_size)


def save(plt, fig, out, name):
    fig.tight_layout()
    path = os.path.join(out, name)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plots(res, out):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib missing: no plots", file=sys.stderr)
        return []
    made = []
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    for ax, op, tool in ((axes[0], "write", "ib_write_bw"), (axes[1], "read", "ib_read_bw")):
        for conc, style in ((1, ":"), (8, "-"), (64, "--")):
            plot(ax, series(res["fastreg"], "size", op=op, concurrency=conc), "o" + style,
                 color="tab:blue", label=f"fastreg brw {op}, {conc} in flight")
            plot(ax, series(res["perftest"], "size", op=op, concurrency=conc), "s" + style,
                 color="tab:orange", label=f"{tool} -t {conc}")
        n = find(res["nvme"], op=op)
        if n:
            ax.plot([1 << 20], [n["mib_per_s"]], "D", color="tab:green",
                    label="nvme-rdma, fio 1 MiB QD 8")
        finish(ax, "transfer size (bytes)", f"{op}: throughput vs size (rxe, same VM run)", 7)
    made.append(save(plt, fig, out, "throughput-vs-size.png"))

    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    for op, tool, color in (("write", "ib_write_bw", "tab:blue"), ("read", "ib_read_bw", "tab:red")):
        plot(ax, series(res["fastreg"], "concurrency", op=op, size=1 << 20), "o-",
             color=color, label=f"fastreg brw {op}")
        plot(ax, series(res["perftest"], "concurrency", op=op, size=1 << 20), "s--",
             color=color, alpha=0.6, label=tool)
    finish(ax, "transfers in flight", "1 MiB: throughput vs concurrency", 8)
    made.append(save(plt, fig, out, "throughput-vs-concurrency.png"))
    return made


def main(argv):
    if len(argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    raw, out = argv[1], argv[2]
    os.makedirs(out, exist_ok=True)
    res = load(raw)
    if not res["meta"]:
        print(f"bench: no results in {raw} (did the VM run?)", file=sys.stderr)
        return 1
    text, summary = table(res)
    res["summary"] = summary
    with open(os.path.join(out, "results.json"), "w") as f:
        json.dump(res, f, indent=2)
    with open(os.path.join(out, "results.txt"), "w") as f:
        f.write(text)
    made = plots(res, out)
    print(text)
    print(f"results: {out}/results.json, {out}/results.txt" +
          "".join(f", {p}" for p in made))
    return 1 if res["errors"] else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
