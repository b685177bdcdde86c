# SPDX-License-Identifier: GPL-2.0
"""Host tests of fastreg-lst's command line (scripts/fastreg-lst): --json wherever a user
puts it, and one JSON object naming the error when a run fails or is refused under --json
(a usage error included), as well as the message on stderr.

    python3 -m unittest discover -s tests/host/py     (make test runs it)
"""

import contextlib
import importlib.machinery
import importlib.util
import io
import json
import os
import sys
import unittest

SCRIPTS = os.path.join(os.path.dirname(__file__), "..", "..", "..", "scripts")
sys.path.insert(0, SCRIPTS)
_loader = importlib.machinery.SourceFileLoader("fastreg_lst", os.path.join(SCRIPTS, "fastreg-lst"))
_spec = importlib.util.spec_from_loader("fastreg_lst", _loader)
lst = importlib.util.module_from_spec(_spec)
_loader.exec_module(lst)

RUN = ["run", "--from", "10.0.0.1", "--to", "10.0.0.2"]


def call(argv):
    """main(argv): (exit code, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = lst.main(argv)
        except SystemExit as e:
            rc = e.code
    return rc, out.getvalue(), err.getvalue()


class JsonWherever(unittest.TestCase):
    def parse(self, argv):
        return lst.parser().parse_args(argv)

    def test_local_test_before_and_after(self):
        self.assertTrue(self.parse(["--json", "brw", "write", "--size", "4k"]).json)
        self.assertTrue(self.parse(["brw", "write", "--size", "4k", "--json"]).json)
        self.assertFalse(self.parse(["brw", "write", "--size", "4k"]).json)

    def test_run_before_and_after_the_test(self):
        self.assertTrue(self.parse(RUN[:1] + ["--json"] + RUN[1:] + ["ping"]).json)
        self.assertTrue(self.parse(RUN + ["brw", "write", "--size", "4k", "--json"]).json)
        self.assertTrue(self.parse(RUN + ["ping", "--json-lines"]).json_lines)
        args = self.parse(RUN + ["brw", "write", "--size", "4k"])
        self.assertFalse(args.json)
        self.assertFalse(args.json_lines)


class JsonErrors(unittest.TestCase):
    def test_refused_prints_one_object_naming_it(self):
        rc, out, err = call(["stat", "--bw", "--json"])
        self.assertEqual(rc, 1)
        obj = json.loads(out)
        self.assertEqual(obj["status"], "error")
        self.assertIn("--bw", obj["error"])
        self.assertIn("--bw", err)

    def test_without_json_only_stderr(self):
        rc, out, err = call(["stat", "--bw"])
        self.assertEqual(rc, 1)
        self.assertEqual(out, "")
        self.assertIn("--bw", err)

    def test_usage_error_under_json(self):
        rc, out, err = call(RUN + ["brw", "write", "--size", "4k", "--bogus", "--json"])
        self.assertEqual(rc, 2)
        obj = json.loads(out)
        self.assertEqual(obj["status"], "error")
        self.assertTrue(obj["usage"])
        self.assertIn("--bogus", obj["error"])
        self.assertIn("usage:", err)

    def test_usage_error_without_json_prints_no_object(self):
        rc, out, err = call(["brw", "write", "--bogus"])
        self.assertEqual(rc, 2)
        self.assertEqual(out, "")


if __name__ == "__main__":
    unittest.main()
