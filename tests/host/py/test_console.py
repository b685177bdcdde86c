# SPDX-License-Identifier: GPL-2.0
"""Host tests of the console half of fastreg-lst (scripts/fastreg_console.py): its pure
parts, the distribution of clients over servers (against lst's own code), groups, the
kernel's `console list` line, rates, totals and which nodes are error nodes.

    python3 -m unittest discover -s tests/host/py     (make test runs it)
"""

import os
import random
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "..", "scripts"))
import fastreg_console as fc  # noqa: E402

A, B, C, D, E = (f"10.0.0.{i}" for i in range(1, 6))


def lst_dstnodes(idx, dist, span, nnode):
    """lnet/selftest/console.c's lstcon_dstnodes_prep(), line for line: the indices of the
    servers that client number idx gets (or None where lst returns -EINVAL)."""
    if span > nnode:
        return None
    out = []
    start = ((idx // dist) * span) % nnode
    end = ((idx // dist) * span + span - 1) % nnode
    i = 0
    for n in range(nnode):
        if i < start:
            i += 1
            continue
        if i > (end if end >= start else nnode):
            break
        out.append(n)
        i += 1
    if start <= end:
        return out
    for n in range(nnode):
        if i > nnode + end:
            break
        out.append(n)
        i += 1
    return out


class Distribute(unittest.TestCase):
    def test_as_lst_for_every_small_shape(self):
        for nc in range(1, 9):
            for ns in range(1, 9):
                for c in range(1, 5):
                    for s in range(1, ns + 1):
                        clients = [f"c{i}" for i in range(nc)]
                        servers = [f"s{i}" for i in range(ns)]
                        plan = fc.distribute(clients, servers, (c, s))
                        for i, cl in enumerate(clients):
                            want = [servers[k] for k in lst_dstnodes(i, c, s, ns)]
                            self.assertEqual(plan[cl], want, (nc, ns, c, s, i))
                            self.assertEqual(len(set(plan[cl])), s)

    def test_random_shapes(self):
        rng = random.Random(7)
        for _ in range(2000):
            nc, ns = rng.randint(1, 64), rng.randint(1, 64)
            c, s = rng.randint(1, 70), rng.randint(1, ns)
            servers = list(range(ns))
            plan = fc.distribute(list(range(nc)), servers, (c, s))
            for i in range(nc):
                self.assertEqual(plan[i], lst_dstnodes(i, c, s, ns))

    def test_shapes_named_in_the_docs(self):
        # 04-console.sh: --from N1,N2 --to C,N1,N2 --distribute 1:2.
        self.assertEqual(fc.distribute([B, C], [A, B, C], (1, 2)), {B: [A, B], C: [C, A]})
        # 1:1 pairs them in turn; 2:1 gives two clients each server.
        self.assertEqual(fc.distribute([A, B, C], [D, E], (1, 1)), {A: [D], B: [E], C: [D]})
        self.assertEqual(fc.distribute([A, B, C, D], [D, E], (2, 1)),
                         {A: [D], B: [D], C: [E], D: [E]})

    def test_more_servers_per_client_than_servers_is_refused(self):
        self.assertIsNone(lst_dstnodes(0, 1, 3, 2))
        with self.assertRaisesRegex(fc.Failure, "gives each client 3 servers; --to has 2"):
            fc.distribute([A], [B, C], (1, 3))


class Groups(unittest.TestCase):
    def test_named_and_unnamed(self):
        self.assertEqual(fc.groups_arg(f"clients={A},{B}"), ("clients", [A, B]))
        self.assertEqual(fc.groups_arg(f"{A},,{B},"), (f"{A},,{B},", [A, B]))

    def test_bad(self):
        for bad in ("x=", "x=1.2.3", "x=1.2.3.256", "x=a.b.c.d", "x=1.2.3.4.5", "", "x=-1.2.3.4"):
            with self.assertRaises(ValueError, msg=bad):
                fc.groups_arg(bad)


class Listing(unittest.TestCase):
    def test_idle(self):
        self.assertEqual(fc.parse_listing("allowed none; session none; test idle; refused 0; "
                                          "key none; rejected no_key=3 bad_proof=0 stale=0 "
                                          "not_holder=0"),
                         {"allowed": [], "session": None, "test": "idle", "refused": 0,
                          "key": None, "rejected": {"no_key": 3, "bad_proof": 0, "stale": 0,
                                                    "not_holder": 0}})

    def test_held(self):
        line = (f"allowed {A} {B}; session 0x1f of {A} lease_left_ms=2500; test running; "
                "refused 21; key 0badf00d; rejected no_key=0 bad_proof=4 stale=1 not_holder=2")
        self.assertEqual(fc.parse_listing(line), {
            "allowed": [A, B], "session": {"id": "0x1f", "console": A, "lease_left_ms": 2500},
            "test": "running", "refused": 21, "key": "0badf00d",
            "rejected": {"no_key": 0, "bad_proof": 4, "stale": 1, "not_holder": 2}})


class Refusal(unittest.TestCase):
    def test_words(self):
        self.assertEqual(fc.refusal(C, {"status": -1}, A),
                         f"{C}: refused: this console ({A}) is not allowed there "
                         f"(on {C}: fastreg-lst console allow {A})")
        self.assertEqual(fc.refusal(C, {"status": -16, "session": 0, "holder": B,
                                        "lease_left_ms": 0}, A),
                         f"{C}: busy: in a session of console {B}")
        self.assertIn("no console key", fc.refusal(C, {"status": -126}, A))
        self.assertIn("differs", fc.refusal(C, {"status": -129}, A))


class Key(unittest.TestCase):
    def test_digest_and_checks(self):
        import hashlib
        import tempfile
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "key")
            data = bytes(range(64))
            with open(path, "wb") as f:
                f.write(data)
            os.chmod(path, 0o600)
            self.assertEqual(fc.key_digest(path), hashlib.sha256(data).hexdigest())
            os.chmod(path, 0o640)
            with self.assertRaisesRegex(fc.Failure, "chmod 600"):
                fc.key_digest(path)
            with open(path, "wb") as f:
                f.write(data[:31])
            os.chmod(path, 0o600)
            with self.assertRaisesRegex(fc.Failure, "at least 32"):
                fc.key_digest(path)
            with self.assertRaisesRegex(fc.Failure, "No such file"):
                fc.key_digest(os.path.join(d, "none"))
        self.assertEqual(fc.refusal(C, {"error": -110}, A), f"{C}: no answer (timed out)")


def answer(ops=0, nbytes=0, usecs=0, state="done", **kv):
    return {"status": 0, "ops": ops, "bytes": nbytes, "usecs": usecs, "state": state, **kv}


class Rates(unittest.TestCase):
    def test_between_samples(self):
        a = {"now_us": 1_000_000, "rx_ops": 10, "tx_ops": 0, "rx_bytes": 0, "tx_bytes": 0}
        b = {"now_us": 3_000_000, "rx_ops": 30, "tx_ops": 4, "rx_bytes": 4 << 20,
             "tx_bytes": 1 << 20}
        self.assertEqual(fc.rates(a, b), (10.0, 2.0, 2.0, 0.5))

    def test_no_time_no_rate(self):
        a = {"now_us": 5, "rx_ops": 0, "tx_ops": 0, "rx_bytes": 0, "tx_bytes": 0}
        self.assertIsNone(fc.rates(a, dict(a)))
        self.assertIsNone(fc.rates(a, dict(a, now_us=4)))


class Selectors:
    """What argparse gives stat: the selectors named set."""

    def __init__(self, *names):
        for o in ("bw", "rate", "read", "write", "avg", "min", "max"):
            setattr(self, o, o in names)


class StatLines(unittest.TestCase):
    grp = {"group": "servers",
           **{f"{side}_{k}": {"avg": base + 0.5, "min": base, "max": base + 1}
              for side, base0 in (("read", 10), ("write", 20))
              for k, base in (("ops_per_s", base0), ("mib_per_s", base0 + 100))}}

    def test_everything_by_default_as_lst(self):
        self.assertIsNone(fc.selected(Selectors()))
        self.assertEqual(fc.show_group(self.grp, None), [
            "[Rates of servers]",
            "[R] Avg: 10.50 ops/s Min: 10.00 ops/s Max: 11.00 ops/s",
            "[W] Avg: 20.50 ops/s Min: 20.00 ops/s Max: 21.00 ops/s",
            "[Bandwidth of servers]",
            "[R] Avg: 110.50 MiB/s Min: 110.00 MiB/s Max: 111.00 MiB/s",
            "[W] Avg: 120.50 MiB/s Min: 120.00 MiB/s Max: 121.00 MiB/s"])

    def test_selectors(self):
        self.assertEqual(fc.show_group(self.grp, fc.selected(Selectors("bw"))), [
            "[Bandwidth of servers]",
            "[R] Avg: 110.50 MiB/s Min: 110.00 MiB/s Max: 111.00 MiB/s",
            "[W] Avg: 120.50 MiB/s Min: 120.00 MiB/s Max: 121.00 MiB/s"])
        self.assertEqual(fc.show_group(self.grp, fc.selected(Selectors("write", "avg", "max"))), [
            "[Rates of servers]", "[W] Avg: 20.50 ops/s Max: 21.00 ops/s",
            "[Bandwidth of servers]", "[W] Avg: 120.50 MiB/s Max: 121.00 MiB/s"])
        self.assertEqual(fc.show_group(self.grp, fc.selected(Selectors("rate", "read", "min"))), [
            "[Rates of servers]", "[R] Min: 10.00 ops/s"])


class Report(unittest.TestCase):
    plan = {A: [C], B: [D]}

    def run_report(self, final, lost=None, interrupted=False):
        return fc.report({}, final, lost or {}, [A, B], [C, D], self.plan, interrupted)

    def test_clean(self):
        r = self.run_report({A: answer(10, 10 << 20, 2_000_000), B: answer(30, 30 << 20, 4_000_000)})
        self.assertEqual((r["ops"], r["bytes"], r["seconds"], r["mib_per_s"]), (40, 40 << 20, 4.0, 10.0))
        self.assertEqual((r["error_nodes"], r["status"]), (0, "ok"))
        self.assertEqual([n["node"] for n in r["nodes"]], [A, B, C, D])

    def test_error_nodes(self):
        final = {A: answer(10, 1, 1, err_timeout=1, first_error=-110), B: answer(3, 1, 1, corrupt=1)}
        r = self.run_report(final)
        self.assertEqual((r["errors"], r["corrupt"], r["error_nodes"], r["status"]), (1, 1, 2, "failed"))
        self.assertEqual(r["nodes"][0]["first_error"], os.strerror(110))

    def test_lost_nodes(self):
        r = self.run_report({A: answer(5, 1, 1)}, lost={B: {"error": -110}, D: {"error": -110}})
        n = {x["node"]: x for x in r["nodes"]}
        self.assertEqual((n[B]["state"], n[B]["error_node"]), ("lost", True))
        self.assertEqual((n[D]["state"], n[D]["error_node"], n[C]["error_node"]), ("lost", True, False))
        self.assertEqual((r["error_nodes"], r["status"]), (2, "failed"))

    def test_stopped_is_an_error_unless_the_user_stopped_it(self):
        final = {A: answer(5, 1, 1, state="stopped"), B: answer(5, 1, 1)}
        self.assertEqual(self.run_report(final)["error_nodes"], 1)
        r = self.run_report(final, interrupted=True)
        self.assertEqual((r["error_nodes"], r["status"]), (0, "interrupted"))

    def test_a_client_that_never_answered_is_an_error_node(self):
        r = self.run_report({A: answer(5, 1, 1)})
        self.assertEqual([n["error_node"] for n in r["nodes"]], [False, True, False, False])


if __name__ == "__main__":
    unittest.main()
