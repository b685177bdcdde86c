#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""Guest side of `make bench` (run by scripts/bench.sh through scripts/vm.sh, fastreg
loaded): measures fastreg and its anchors back to back on the same rxe device, looping back
to the device's own address, and prints one line `BENCH <json>` per measurement.

- fastreg: brw write and read at each size and concurrency (check none), and ping, each
  after warm-up runs (repeated until the pool stops growing), with fastreg's counters
  read around it;
- perftest: ib_write_bw / ib_read_bw at the same sizes with as many operations outstanding
  (-t, and -o for reads), ib_send_bw of 4 KiB for the message rate;
- nvme-rdma against nvmet-rdma (a kernel FRWR user) on the same device: fio, 1 MiB direct
  I/O at queue depth 8, write and read.

Every point is measured as BENCH_REPS short runs of fastreg and its perftest anchor in
turn (A B A B ...), so that each ratio comes from runs seconds apart and the report can give
their median and spread. With BENCH_BEFORE_KO (a module built from an earlier commit, by
scripts/bench.sh), the grid runs twice in the same VM: with that module, then with the
loaded one ("before" and "after"). After the measured runs of a point, one more short run
counts the work items fastreg queued (the workqueue_queue_work tracepoint, whose work
function is fastreg's) per transfer and the time from a completion to the next post (kprobes
on the device's CQE and post functions).

On two nodes of scripts/cluster.sh (BENCH_PEER set, by scripts/bench.sh), node 0 measures
against node 1, which serves: fastreg's side of it is its kernel, perftest's is a server for
each of node 0's clients, started in the same order (both sides walk the same grid). The
nvme-rdma anchor is left out there.
"""

import json
import os
import re
import subprocess
import sys
import threading
import time

TOP = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LST = os.path.join(TOP, "scripts", "fastreg-lst")
DBG = "/sys/kernel/debug/fastreg"
ADDR = os.environ.get("FASTREG_ADDR", "10.0.2.15")
DEV = os.environ.get("BENCH_DEV", os.environ.get("FASTREG_DEV", "rxe0"))
# Two nodes: the peer measured against, and whether this node is the one that serves.
PEER = os.environ.get("BENCH_PEER", "")
SERVER = os.environ.get("BENCH_ROLE", "client") == "server"
TARGET = PEER or ADDR
SECONDS = int(os.environ.get("BENCH_SECONDS", "4"))
QUICK = os.environ.get("BENCH_QUICK", "") != ""
REPS = max(1, int(os.environ.get("BENCH_REPS", "3")))
BEFORE_KO = os.environ.get("BENCH_BEFORE_KO", "")
TRACING = "/sys/kernel/tracing"
# The module measured now ("after" unless the earlier one is loaded).
MODULE = ["after"]


def emit(kind, **kw):
    kw["kind"] = kind
    kw.setdefault("module", MODULE[0])
    print("BENCH " + json.dumps(kw), flush=True)


def log(msg):
    print(f"# {msg}", flush=True)


def sh(cmd, **kw):
    return subprocess.run(cmd, shell=isinstance(cmd, str), capture_output=True, text=True, **kw)


def fields(line):
    return dict(w.split("=", 1) for w in line.split() if "=" in w)


def counters():
    """fastreg's counters: the device's pool, and per connection direction its WRs and
    remote invalidations."""
    c = {}
    with open(f"{DBG}/pools") as f:
        for ln in f:
            name, _, rest = ln.partition(": ")
            if name == DEV:
                c.update({k: int(v) for k, v in fields(rest).items()})
    c["wrs_out"] = c["wrs_in"] = 0
    with open(f"{DBG}/conns") as f:
        for ln in f:
            w = ln.split()
            if w[:1] == ["conn"] and "state=established" in ln:
                key = "wrs_out" if w[1] == "->" else "wrs_in"
                c[key] += int(fields(ln).get("wrs", 0))
            if ln.startswith("totals:"):
                c["wrs_posted"] = int(fields(ln)["wrs_posted"])
    return c


def lst(*args):
    r = sh([LST, "--json", *args, *(["--peer", PEER] if PEER else [])])
    try:
        return json.loads(r.stdout)
    except ValueError:
        raise RuntimeError(f"fastreg-lst {' '.join(args)}: {r.stderr.strip() or r.stdout}")


def sq_depth():
    with open(f"{DBG}/devices") as f:
        for ln in f:
            if ln.startswith(DEV + ":"):
                f_ = fields(ln)
                return int(f_["sq_depth"]), int(f_["o2iblnd_sq_depth"]), int(f_["transfer_wrs"])
    return None, None, None


def threads_in_fastreg():
    """Kernel and user threads whose kernel stack is in fastreg's code now."""
    n = 0
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        for tid in os.listdir(f"/proc/{pid}/task") if os.path.isdir(f"/proc/{pid}/task") else []:
            try:
                with open(f"/proc/{pid}/task/{tid}/stack") as f:
                    if "[fastreg]" in f.read():
                        n += 1
            except OSError:
                pass
    return n


class Sampler(threading.Thread):
    """Samples threads_in_fastreg() every 0.5 s until stopped; keeps the largest count."""

    def __init__(self):
        super().__init__(daemon=True)
        self.most = 0
        self.stop = threading.Event()

    def run(self):
        while not self.stop.wait(0.5):
            self.most = max(self.most, threads_in_fastreg())


def warm_up(op, size, conc):
    """Warm-up: the connection is up and the pool has grown to what this load needs."""
    # Warm-up: the connection is up and the pool has grown to what this load needs: timed
    # one-second runs (so that the peak demand of every worker and server side is seen),
    # repeated until one allocates no MR (at most 5).
    warmups = 0
    while warmups < 5:
        warmups += 1
        w0 = counters()["allocated"]
        lst("brw", op, "--size", str(size), "--concurrency", str(conc), "--seconds", "1")
        if counters()["allocated"] == w0:
            break
    return warmups


def fastreg_brw(op, size, conc, rep, warmups):
    before = counters()
    # The threads sleeping in fastreg while the run goes on: the selftest's control writer
    # (the CLI's write, waiting for the run), plus one per operation in flight as long as
    # the data path sleeps per operation.
    sampler = Sampler()
    sampler.start()
    r = lst("brw", op, "--size", str(size), "--concurrency", str(conc), "--seconds", str(SECONDS))
    sampler.stop.set()
    sampler.join()
    after = counters()
    d = {k: after.get(k, 0) - before.get(k, 0) for k in after}
    ops = max(r["ops"], 1)
    # A write's source is the client (out), a read's the server (in).
    src, snk = ("wrs_out", "wrs_in") if op == "write" else ("wrs_in", "wrs_out")
    emit("fastreg", op=op, size=size, concurrency=conc, rep=rep, mib_per_s=r["mib_per_s"],
         ops_per_s=r["ops_per_s"], ops=r["ops"], errors=r["errors"], seconds=r["seconds"],
         lat_avg_us=r["latency_us"]["avg"], lat_p99_us=r["latency_us"]["p99"],
         # On two nodes the peer's half of the WRs is on the peer: not counted here.
         wrs_per_transfer_source=None if PEER and src == "wrs_in" else d[src] / ops,
         wrs_per_transfer_sink=None if PEER and snk == "wrs_in" else d[snk] / ops,
         reg_per_transfer=d["registrations"] / ops,
         local_inv_per_transfer=d["local_invalidations"] / ops,
         remote_inv_per_transfer=d["remote_invalidations"] / ops,
         alloc_mr_during_run=d["allocated"], pool_live=after["live"], warmup_runs=warmups,
         threads_in_fastreg=sampler.most)


# The device's own functions that mark a completion (a CQE written) and a post (a send
# WR taken), for the time from one to the next: the same in every module and poll context.
PROBES = {"rxe": ("rxe_cq_post", "rxe_post_send"), "siw": ("siw_sqe_complete", "siw_post_send")}


def tracefs(path, value):
    with open(f"{TRACING}/{path}", "w") as f:
        f.write(value)


def comp_to_post(text):
    """Microseconds from a completion to the next post, per post that followed one: the
    first CQE written after a post starts the clock, the next send WR posted stops it
    (the time a completion waits for the handler and any work item it queues). Returns
    (median, 90th percentile, samples)."""
    gaps, since = [], None
    for m in re.finditer(r"\s(\d+\.\d+): fr_(cqe|post):", text):
        t = float(m.group(1))
        if m.group(2) == "cqe":
            since = t if since is None else since
        elif since is not None:
            gaps.append((t - since) * 1e6)
            since = None
    if not gaps:
        return None, None, 0
    gaps.sort()
    return gaps[len(gaps) // 2], gaps[min(len(gaps) - 1, len(gaps) * 9 // 10)], len(gaps)


def work_items(op, size, conc):
    """Work items fastreg queued per transfer in a one-second run (the workqueue_queue_work
    events whose work function is in fastreg: before and after alike, no counter of its own
    needed), and the time from a completion to the next post (kprobes on the device's
    functions)."""
    ev = "events/workqueue/workqueue_queue_work/enable"
    cqe, post = PROBES.get(os.environ.get("FASTREG_RDMA", "rxe"), PROBES["rxe"])
    probes = False
    try:
        tracefs("tracing_on", "0")
        open(f"{TRACING}/trace", "w").close()
        tracefs("buffer_size_kb", "16384")
        try:
            tracefs("kprobe_events", f"p:fr_cqe {cqe}\np:fr_post {post}\n")
            tracefs("events/kprobes/enable", "1")
            probes = True
        except OSError as e:
            log(f"completion to post not measured: {e}")
        tracefs(ev, "1")
        tracefs("tracing_on", "1")
        r = lst("brw", op, "--size", str(size), "--concurrency", str(conc), "--seconds", "1")
        tracefs("tracing_on", "0")
        tracefs(ev, "0")
        with open(f"{TRACING}/trace") as f:
            text = f.read()
    except OSError as e:
        log(f"work items not counted: {e}")
        return None, (None, None, 0)
    finally:
        if probes:
            try:
                tracefs("events/kprobes/enable", "0")
                tracefs("kprobe_events", "")
            except OSError:
                pass
    lost = re.search(r"entries-in-buffer/entries-written: (\d+)/(\d+)", text)
    if lost and lost.group(1) != lost.group(2):
        log(f"work items: trace entries lost ({lost.group(0)})")
        return None, (None, None, 0)
    # The event prints "function=SYMBOL"; the module's symbols are mangled Rust names
    # with the crate's name in them.
    n = sum(1 for ln in text.splitlines()
            if "workqueue_queue_work" in ln and re.search(r"function=\S*fastreg|workqueue=fastreg", ln))
    return n / max(r["ops"], 1), comp_to_post(text)


def fastreg_ping(conc):
    lst("ping", "--concurrency", str(conc), "--count", str(4 * conc))
    r = lst("ping", "--concurrency", str(conc), "--seconds", str(SECONDS))
    emit("fastreg_ping", concurrency=conc, ops_per_s=r["ops_per_s"], ops=r["ops"],
         errors=r["errors"], lat_avg_us=r["latency_us"]["avg"], msgs_per_s=2 * r["ops_per_s"])


PORT = [18515]


def anchor(tool, size, depth):
    """perftest(), tried a second time when it fails or measures nothing (0 MiB/s) on one
    node (two nodes have one server run per point: a failure there is not retried); a
    missing anchor is reported missing, never as 0."""
    err = None
    for attempt in (1,) if PEER else (1, 2):
        try:
            bw, mpps = perftest(tool, size, depth)
            if bw > 0:
                return bw, mpps
            err = RuntimeError(f"{tool} -s {size} -t {depth}: measured 0 MiB/s")
        except (RuntimeError, subprocess.TimeoutExpired) as e:
            err = e
        log(f"{tool} size={size} depth={depth}: attempt {attempt} failed: {err}")
    raise RuntimeError(f"missing after {attempt} attempt(s): {err}")


def perftest(tool, size, depth):
    """Runs a perftest server and client on the device; returns (MiB/s, Mpps)."""
    # Enough iterations for about SECONDS at tens of MB/s, never fewer than 4 x depth.
    iters = max(4 * depth, min(20000, (SECONDS * 40 << 20) // size))
    args = ["-s", str(size), "-n", str(iters)]
    if tool == "ib_read_bw":
        args += ["-o", str(min(depth, 128))]
    if tool != "ib_send_bw":
        args += ["-t", str(depth)]
    else:
        args += ["-t", str(depth), "-r", str(max(depth, 64))]
    out = perftest_pair(tool, args)
    if out is None:
        return None
    # The result line: bytes, iterations, BW peak, BW average (MB/sec, MB = 2^20), Mpps.
    for ln in out.splitlines():
        w = ln.split()
        if len(w) >= 5 and w[0] == str(size) and re.fullmatch(r"[\d.]+", w[3]):
            return float(w[3]), float(w[4])
    raise RuntimeError(f"{tool} -s {size} -t {depth}: no result:\n{out}")


def perftest_pair(tool, args):
    """A perftest server (unless a peer serves) and its client on the device, through
    rdma_cm; returns the client's output (None on the serving node)."""
    PORT[0] += 1
    args = ["-d", DEV, "-R", "-p", str(PORT[0]), "-F", *args]
    if SERVER:
        # The peer's client comes when node 0 reaches this point of the same grid.
        srv = sh([tool, *args], timeout=1800)
        if srv.returncode:
            raise RuntimeError(f"{tool} server: {srv.stdout[-400:]}{srv.stderr[-400:]}")
        return None
    srv = None
    if not PEER:
        srv = subprocess.Popen([tool, *args], stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True)
        time.sleep(1)
    # Under emulation the server may not listen yet: its rdma_cm rejects the client (no
    # listener on the service ID); try again while the server comes up.
    for _ in range(5 if srv else 60):
        cli = sh([tool, *args, TARGET], timeout=300)
        if "RDMA_CM_EVENT_REJECTED" not in cli.stdout or (srv and srv.poll() is not None):
            break
        time.sleep(1)
    if srv:
        try:
            srv.wait(timeout=30)
        except subprocess.TimeoutExpired:
            srv.kill()
    return cli.stdout + cli.stderr


def latency(tool, size):
    """A perftest latency tool's average microseconds at SIZE (the t_avg column): one way
    for ib_send_lat and ib_write_lat (half their ping-pong), the whole operation for
    ib_read_lat."""
    iters = max(200, min(2000, (SECONDS * 20 << 20) // size))
    out = perftest_pair(tool, ["-s", str(size), "-n", str(iters)])
    # bytes, iterations, t_min, t_max, t_typical, t_avg, ...
    for ln in out.splitlines():
        w = ln.split()
        if len(w) >= 6 and w[0] == str(size) and re.fullmatch(r"[\d.]+", w[5]):
            return float(w[5])
    raise RuntimeError(f"{tool} -s {size}: no result:\n{out}")


# A request or an answer without data: fastreg's messages are headers of tens of bytes.
SMALL = 64


def floor_steps(op, size, max_inline):
    """The steps a transfer of fastreg's protocol cannot do without, one after the other,
    as perftest latency measurements (tool, size): a read is a GET and the data back, a
    write a PUT and the answer; inline, the data rides in the message; registered, it is
    an RDMA WRITE from the source (read) or an RDMA READ by the sink (write). The answer
    that follows an RDMA WRITE on the same queue, registrations and invalidations are left
    out: the floor is a lower bound."""
    if size <= max_inline:
        return ([("ib_send_lat", SMALL), ("ib_send_lat", size)] if op == "read" else
                [("ib_send_lat", size), ("ib_send_lat", SMALL)])
    if op == "read":
        return [("ib_send_lat", SMALL), ("ib_write_lat", size)]
    return [("ib_send_lat", SMALL), ("ib_read_lat", size), ("ib_send_lat", SMALL)]


def protocol_floor(op, size, max_inline):
    """One transfer at a time: the time its protocol's steps take on this device when a
    user-space process spinning on its CQ does them (perftest's latency tools, measured
    now), in microseconds, with the parts."""
    parts, seen = [], {}
    for tool, sz in floor_steps(op, size, max_inline):
        if (tool, sz) not in seen:
            seen[tool, sz] = latency(tool, sz)
        parts.append({"tool": tool, "size": sz, "us": seen[tool, sz]})
    return sum(p["us"] for p in parts), parts


NQN = "fastreg-bench"


def nvme_setup():
    """nvmet-rdma with a file namespace on /dev/shm, nvme-rdma connected to it."""
    for m in ("nvmet", "nvmet-rdma", "nvme-rdma"):
        r = sh(["modprobe", m])
        if r.returncode:
            raise RuntimeError(f"modprobe {m}: {r.stderr.strip()}")
    if not os.path.ismount("/sys/kernel/config"):
        sh(["mount", "-t", "configfs", "none", "/sys/kernel/config"])
    cfg = "/sys/kernel/config/nvmet"
    backing = "/dev/shm/nvme-bench.img"
    sh(["truncate", "-s", "256M", backing])
    sub = f"{cfg}/subsystems/{NQN}"
    os.makedirs(sub, exist_ok=True)
    open(f"{sub}/attr_allow_any_host", "w").write("1")
    ns = f"{sub}/namespaces/1"
    os.makedirs(ns, exist_ok=True)
    open(f"{ns}/device_path", "w").write(backing)
    if os.path.exists(f"{ns}/buffered_io"):
        open(f"{ns}/buffered_io", "w").write("1")
    open(f"{ns}/enable", "w").write("1")
    port = f"{cfg}/ports/1"
    os.makedirs(port, exist_ok=True)
    for k, v in (("addr_trtype", "rdma"), ("addr_adrfam", "ipv4"), ("addr_traddr", ADDR),
                 ("addr_trsvcid", "4420")):
        open(f"{port}/{k}", "w").write(v)
    link = f"{port}/subsystems/{NQN}"
    if not os.path.exists(link):
        os.symlink(sub, link)
    r = sh(["nvme", "connect", "-t", "rdma", "-a", ADDR, "-s", "4420", "-n", NQN])
    if r.returncode:
        raise RuntimeError(f"nvme connect: {r.stderr.strip() or r.stdout.strip()}")
    for _ in range(50):
        out = sh(["nvme", "list"]).stdout
        m = re.search(r"(/dev/nvme\d+n\d+)", out)
        if m and os.path.exists(m.group(1)):
            return m.group(1)
        time.sleep(0.2)
    raise RuntimeError("nvme-rdma: no namespace appeared")


def nvme_teardown():
    sh(["nvme", "disconnect", "-n", NQN])


def fio(dev, rw):
    r = sh(["fio", "--name=bench", f"--filename={dev}", f"--rw={rw}", "--bs=1M", "--direct=1",
            "--ioengine=libaio", "--iodepth=8", "--size=256M", "--time_based",
            f"--runtime={SECONDS}", "--output-format=json"], timeout=120)
    try:
        j = json.loads(r.stdout[r.stdout.index("{"):])
    except ValueError:
        raise RuntimeError(f"fio {rw}: {r.stderr.strip() or r.stdout[-400:]}")
    side = j["jobs"][0]["read" if rw == "read" else "write"]
    return side["bw_bytes"] / (1 << 20), side["iops"]


def versions():
    v = {"kernel": os.uname().release}
    for tool, args in (("perftest", ["ib_write_bw", "--version"]), ("fio", ["fio", "--version"]),
                       ("nvme-cli", ["nvme", "version"])):
        r = sh(args)
        text = (r.stdout.strip() or r.stderr.strip()).splitlines()
        v[tool] = text[0] if text else "?"
    return v


def grid(max_payload):
    """The (size, concurrency) points measured, in order: the same on both nodes."""
    sizes = [4096, 65536, 262144, 1 << 20]
    if max_payload not in sizes:
        sizes.append(max_payload)
    concs = [int(c) for c in os.environ.get("BENCH_CONCS", "1 8 64").split()]
    if QUICK:
        return [(s, 8) for s in (65536, 1 << 20)]
    # And 1 MiB at 256 in flight: throughput should not fall off with the concurrency.
    return [(s, c) for c in concs for s in sizes] + ([(1 << 20, 256)] if 64 in concs else [])


def serve():
    """Node 1 of a pair: a perftest server for each of node 0's perftest clients."""
    with open(f"{DBG}/params") as f:
        params = dict(ln.strip().split("=", 1) for ln in f if "=" in ln)
    for size, conc in grid(int(params["max_payload"])):
        for tool in ("ib_write_bw", "ib_read_bw"):
            for rep in range(REPS):
                log(f"serving {tool} size={size} depth={conc} ({rep + 1}/{REPS})")
                try:
                    perftest(tool, size, conc)
                except (RuntimeError, subprocess.TimeoutExpired) as e:
                    log(f"{tool} server failed: {e}")
    log("serving ib_send_bw 4 KiB")
    try:
        perftest("ib_send_bw", 4096, 64)
    except (RuntimeError, subprocess.TimeoutExpired) as e:
        log(f"ib_send_bw server failed: {e}")
    return 0


def swap(ko, name, params):
    """Loads module `ko` in place of the loaded one, with the same parameters, and waits
    for its interface."""
    log(f"loading the {name} module: {ko}")
    sh(["rmmod", "fastreg"])
    keys = ("pool_size", "pool_max", "queue_depth", "max_payload", "max_inline", "timeout")
    r = sh(["insmod", ko, *[f"{k}={params[k]}" for k in keys if k in params]])
    if r.returncode:
        raise RuntimeError(f"insmod {ko}: {r.stderr.strip()}")
    for _ in range(100):
        try:
            with open(f"{DBG}/conns") as f:
                if any(ln.startswith("iface ") for ln in f):
                    break
        except OSError:
            pass
        time.sleep(0.2)
    MODULE[0] = name


def measure(max_payload, max_inline):
    """The grid with the loaded module: per point, REPS runs of fastreg and of its anchor
    in turn; one at a time, the protocol's floor; then the work items per transfer."""
    for size, conc in grid(max_payload):
        for op in ("write", "read"):
            tool = "ib_write_bw" if op == "write" else "ib_read_bw"
            try:
                warmups = warm_up(op, size, conc)
            except RuntimeError as e:
                emit("error", what=f"fastreg {op} {size} {conc}", error=str(e))
                continue
            for rep in range(REPS):
                log(f"{MODULE[0]}: fastreg brw {op} size={size} concurrency={conc} ({rep + 1}/{REPS})")
                try:
                    fastreg_brw(op, size, conc, rep, warmups)
                except RuntimeError as e:
                    emit("error", what=f"fastreg {op} {size} {conc}", error=str(e))
                log(f"{tool} size={size} depth={conc} ({rep + 1}/{REPS})")
                try:
                    bw, mpps = anchor(tool, size, conc)
                    emit("perftest", op=op, size=size, concurrency=conc, rep=rep,
                         mib_per_s=bw, ops_per_s=mpps * 1e6)
                except (RuntimeError, subprocess.TimeoutExpired) as e:
                    emit("error", what=f"{tool} {size} {conc}", error=str(e))
            if conc == 1 and not PEER:
                log(f"protocol floor: {op} size={size}")
                try:
                    us, parts = protocol_floor(op, size, max_inline)
                    emit("floor", op=op, size=size, concurrency=conc, us=us, parts=parts)
                except (RuntimeError, subprocess.TimeoutExpired) as e:
                    emit("error", what=f"floor {op} {size}", error=str(e))
            if not PEER:
                try:
                    per, (med, p90, n) = work_items(op, size, conc)
                    emit("work_items", op=op, size=size, concurrency=conc, per_transfer=per,
                         comp_to_post_us=med, comp_to_post_p90_us=p90, comp_to_post_n=n)
                except RuntimeError as e:
                    emit("error", what=f"work items {op} {size} {conc}", error=str(e))


def main():
    if SERVER:
        return serve()
    with open(f"{DBG}/params") as f:
        params = dict(ln.strip().split("=", 1) for ln in f if "=" in ln)
    max_payload = int(params["max_payload"])
    max_inline = min(int(params["max_inline"]), max_payload)
    sq, o2ib, twrs = sq_depth()
    emit("meta", versions=versions(), cpus=os.cpu_count(), peer=PEER or None,
         node_kind=os.environ.get("FASTREG_KIND", "x86_64"), page_size=os.sysconf("SC_PAGE_SIZE"),
         rdma=os.environ.get("FASTREG_RDMA", "rxe"),
         memory_mib=os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") >> 20,
         device=DEV, address=ADDR, params=params, seconds=SECONDS, sq_depth=sq,
         o2iblnd_sq_depth=o2ib, transfer_wrs=twrs, queue_depth=int(params["queue_depth"]))
    if BEFORE_KO:
        swap(BEFORE_KO, "before", params)
        measure(max_payload, max_inline)
        swap(os.environ["FASTREG_KO"], "after", params)
    measure(max_payload, max_inline)
    for conc in ([8] if QUICK else [1, 8, 64]):
        log(f"fastreg ping concurrency={conc}")
        try:
            fastreg_ping(conc)
        except RuntimeError as e:
            emit("error", what=f"fastreg ping {conc}", error=str(e))
    log("ib_send_bw 4 KiB")
    try:
        bw, mpps = anchor("ib_send_bw", 4096, 64)
        emit("perftest_send", size=4096, concurrency=64, mib_per_s=bw, msgs_per_s=mpps * 1e6)
    except (RuntimeError, subprocess.TimeoutExpired) as e:
        emit("error", what="ib_send_bw", error=str(e))
    if PEER:
        return 0
    log("nvme-rdma against nvmet-rdma")
    try:
        dev = nvme_setup()
        for rw in ("write", "read"):
            bw, iops = fio(dev, rw)
            emit("nvme", op=rw, size=1 << 20, concurrency=8, mib_per_s=bw, ops_per_s=iops)
    except (RuntimeError, OSError, subprocess.TimeoutExpired) as e:
        emit("error", what="nvme-rdma", error=str(e))
    finally:
        nvme_teardown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
