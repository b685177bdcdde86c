# SPDX-License-Identifier: GPL-2.0
"""Host tests of the control device's client (scripts/fastreg_device.py) and of how
fastreg-lst drives it: the request and reply bytes against the golden vectors of the
module's own host tests (tests/host/src/ctldev_tests.rs), refusals of malformed replies,
the framing of a reply read in pieces, and a local test's start, wait and stop.

    python3 -m unittest discover -s tests/host/py     (make test runs it)
"""

import importlib.machinery
import importlib.util
import os
import socket
import struct
import sys
import threading
import unittest

SCRIPTS = os.path.join(os.path.dirname(__file__), "..", "..", "..", "scripts")
sys.path.insert(0, SCRIPTS)
import fastreg_device as fdev  # noqa: E402

_loader = importlib.machinery.SourceFileLoader("fastreg_lst", os.path.join(SCRIPTS, "fastreg-lst"))
_spec = importlib.util.spec_from_loader("fastreg_lst", _loader)
lst = importlib.util.module_from_spec(_spec)
_loader.exec_module(lst)


def reply(op, status=0, state=0, body=b"", reserved=0):
    return struct.pack("<4sHHiIII", b"FRRP", 1, op, status, state, len(body), reserved) + body


class Golden(unittest.TestCase):
    def test_start_request(self):
        # ctldev_tests.rs, golden_start_request.
        want = (b"FRRQ" + bytes([1, 0, 1, 0, 0, 0, 0, 0, 27, 0, 0, 0])
                + b"ping concurrency=1 count=10")
        self.assertEqual(fdev.request("start", "ping concurrency=1 count=10"), want)

    def test_empty_requests(self):
        # ctldev_tests.rs, golden_empty_requests.
        for op, n in (("wait", 2), ("poll", 3), ("stop", 4), ("result", 5), ("stat", 6)):
            self.assertEqual(fdev.request(op), b"FRRQ" + bytes([1, 0, n, 0] + [0] * 8), op)

    def test_reply(self):
        # ctldev_tests.rs, golden_reply.
        head = bytes([0x46, 0x52, 0x52, 0x50, 1, 0, 2, 0, 0xfb, 0xff, 0xff, 0xff, 2, 0, 0, 0,
                      0x2c, 1, 0, 0, 0, 0, 0, 0])
        self.assertEqual(fdev.parse_reply(head + b"x" * 300), (2, -5, "over", "x" * 300))

    def test_too_long_a_body_is_not_sent(self):
        with self.assertRaises(fdev.Failure):
            fdev.request("start", "x" * (fdev.MAX_BODY + 1))


class BadReplies(unittest.TestCase):
    def test_each_refused(self):
        for bad in (b"", reply(6)[:23], b"FRRX" + reply(6)[4:],
                    reply(6)[:4] + b"\x02\x00" + reply(6)[6:],
                    reply(6, status=1), reply(6, state=3), reply(6, reserved=1),
                    reply(6, body=b"abc")[:-1], reply(6) + b"x", reply(99)):
            with self.assertRaises(fdev.Failure, msg=bad):
                fdev.parse_reply(bad)


class Sections(unittest.TestCase):
    def test_stat_sections(self):
        text = "[params]\nqueue_depth=8\n[devices]\nrxe0: a=1\n[pools]\n[conns]\niface x\n"
        self.assertEqual(fdev.sections(text), {"params": "queue_depth=8\n",
                                               "devices": "rxe0: a=1\n", "pools": "",
                                               "conns": "iface x\n"})


class Framing(unittest.TestCase):
    def test_reply_read_in_pieces(self):
        """Device.ask reads until the device has no more of the reply (a read of 0)."""
        a, b = socket.socketpair()
        body = b"y" * 5000
        got = []

        def peer():
            got.append(b.recv(4096))
            data = reply(6, state=1, body=body)
            for i in range(0, len(data), 700):
                b.sendall(data[i:i + 700])
            b.shutdown(socket.SHUT_WR)

        t = threading.Thread(target=peer)
        t.start()
        dev = fdev.Device.__new__(fdev.Device)
        dev.fd = a.fileno()
        status, state, text = dev.ask("stat")
        t.join()
        self.assertEqual(got[0], fdev.request("stat"))
        self.assertEqual((status, state, text), (0, "running", body.decode()))
        a.close()
        b.close()


REPORT = ("test=write size=4096 offset=0 check=full concurrency=1 peers=1 workers=1 ops=8 "
          "bytes=32768 errors=0 err_timeout=0 err_connection=0 err_refused=0 err_other=0 "
          "corrupt=0 seconds=0.5 mib_per_s=0.06 ops_per_s=16.0 lat_min_us=1 lat_avg_us=2 "
          "lat_p99_us=3 lat_max_us=4\n")


class FakeDevice:
    """What fastreg-lst sees of /dev/fastreg: canned answers by op, requests recorded."""

    def __init__(self, answers):
        self.answers = answers
        self.asked = []

    def __call__(self):
        return self

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        pass

    def lock(self):
        pass

    def ask(self, op, body=""):
        self.asked.append((op, body))
        a = self.answers[op]
        if isinstance(a, BaseException):
            self.answers[op] = (0, "over", REPORT)
            raise a
        return a


class LocalTest(unittest.TestCase):
    def setUp(self):
        self.saved = fdev.Device

    def tearDown(self):
        fdev.Device = self.saved

    def run_with(self, answers):
        fake = FakeDevice(answers)
        fdev.Device = fake
        return fake

    def test_start_then_wait(self):
        fake = self.run_with({"start": (0, "running", ""), "wait": (0, "over", REPORT)})
        r = lst.run_test("brw write size=4096 count=8", lst.KernelLog())
        self.assertEqual([op for op, _ in fake.asked], ["start", "wait"])
        self.assertEqual(fake.asked[0][1], "brw write size=4096 count=8")
        self.assertEqual((r["test"], r["ops"], r["status"]), ("brw write", 8, "ok"))

    def test_refusal_names_the_reason(self):
        self.run_with({"start": (-22, "idle", "refused: size: must be 1..67108864\n")})
        with self.assertRaises(lst.Failure) as c:
            lst.run_test("brw write size=0", lst.KernelLog())
        self.assertIn("refused the command", str(c.exception))
        self.assertIn("size: must be", str(c.exception))

    def test_busy(self):
        self.run_with({"start": (-16, "running", "a test is running already\n")})
        with self.assertRaises(lst.Failure) as c:
            lst.run_test("ping", lst.KernelLog())
        self.assertEqual(str(c.exception), "a test is running already")

    def test_interrupted_wait_stops_the_test(self):
        fake = self.run_with({"start": (0, "running", ""), "wait": KeyboardInterrupt(),
                              "stop": (0, "running", "")})
        with self.assertRaises(KeyboardInterrupt):
            lst.run_test("ping", lst.KernelLog())
        self.assertEqual([op for op, _ in fake.asked], ["start", "wait", "stop", "wait"])


if __name__ == "__main__":
    unittest.main()
