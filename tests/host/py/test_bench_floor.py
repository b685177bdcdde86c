# SPDX-License-Identifier: GPL-2.0
"""Host tests of the bench's protocol floor (scripts/bench-guest.py's floor_steps,
scripts/bench-report.py's floor table): the steps named for each kind of transfer, and the
figures the table derives from a run's lines (of floor, anchor time, ceiling).

    python3 -m unittest discover -s tests/host/py     (make test runs it)
"""

import importlib.util
import os
import unittest

SCRIPTS = os.path.join(os.path.dirname(__file__), "..", "..", "..", "scripts")


def load(name, file):
    spec = importlib.util.spec_from_file_location(name, os.path.join(SCRIPTS, file))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


guest = load("bench_guest", "bench-guest.py")
report = load("bench_report", "bench-report.py")


class FloorSteps(unittest.TestCase):
    def test_inline_read_is_a_small_request_and_the_data_back(self):
        self.assertEqual(guest.floor_steps("read", 4096, 4096),
                         [("ib_send_lat", 64), ("ib_send_lat", 4096)])

    def test_inline_write_is_the_data_and_a_small_answer(self):
        self.assertEqual(guest.floor_steps("write", 100, 4096),
                         [("ib_send_lat", 100), ("ib_send_lat", 64)])

    def test_one_byte_past_max_inline_is_registered(self):
        self.assertEqual(guest.floor_steps("read", 4097, 4096),
                         [("ib_send_lat", 64), ("ib_write_lat", 4097)])
        self.assertEqual(guest.floor_steps("write", 4097, 4096),
                         [("ib_send_lat", 64), ("ib_read_lat", 4097), ("ib_send_lat", 64)])

    def test_max_inline_zero_registers_everything(self):
        self.assertEqual(guest.floor_steps("read", 1, 0)[1], ("ib_write_lat", 1))


def run(op, size, rep, mib_per_s, module="after"):
    return {"op": op, "size": size, "concurrency": 1, "rep": rep, "module": module,
            "mib_per_s": mib_per_s, "ops_per_s": mib_per_s * (1 << 20) / size}


class FloorTable(unittest.TestCase):
    def res(self):
        k = 4096
        # fastreg: 1000, 800 and 1250 transfers/s (median 1000 us); the anchor: 2000/s
        # every time (500 us); the floor 800 us.
        mib = lambda ops: ops * k / (1 << 20)  # noqa: E731
        return {
            "fastreg": [run("read", k, 0, mib(1000)), run("read", k, 1, mib(800)),
                        run("read", k, 2, mib(1250)),
                        # Another module's runs never count.
                        run("read", k, 0, mib(10), "before")],
            "perftest": [run("read", k, r, mib(2000)) for r in range(3)] +
                        [run("read", k, 0, mib(1), "before")],
            "floor": [{"op": "read", "size": k, "concurrency": 1, "us": 800.0,
                       "module": "after",
                       "parts": [{"tool": "ib_send_lat", "size": 64, "us": 300.0},
                                 {"tool": "ib_send_lat", "size": k, "us": 500.0}]}],
        }

    def test_figures(self):
        summary = {}
        lines = report.floor_table(self.res(), summary)
        f = summary["floor"][0]
        self.assertAlmostEqual(f["fastreg_us"], 1000.0)
        self.assertAlmostEqual(f["anchor_us"], 500.0)
        self.assertEqual(f["of_floor"], 0.8)
        self.assertEqual(f["ceiling"], 0.625)
        self.assertEqual(f["ratio"], 0.5)
        row = next(ln for ln in lines if ln.startswith("read"))
        self.assertIn("ib_send_lat 64 B 300 + ib_send_lat 4 KiB 500", row)
        self.assertIn("0.62", row)

    def test_no_floor_no_table(self):
        res = self.res()
        res["floor"] = []
        summary = {}
        self.assertEqual(report.floor_table(res, summary), [])
        self.assertNotIn("floor", summary)


if __name__ == "__main__":
    unittest.main()
