# SPDX-License-Identifier: GPL-2.0
"""Host tests of tests/vm/trace_events.py, the reader of fastreg's tracepoints in
tests/vm/16-trace.sh: on traces in ftrace's text format, a transfer whose events are in
order passes, and each way of breaking the promise it checks fails (a key left alive, a
transfer that never completes or fails, an inline transfer that registered, events of
another transfer or QP); a connection's states pass only as the whole walk.

    python3 -m unittest discover -s tests/host/py     (make test runs it)
"""

import os
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "vm"))
import trace_events as te  # noqa: E402

HEAD = "# tracer: nop\n#\n# entries-in-buffer/entries-written: 9/9   #P:2\n#\n"


def line(t, name, text, comm="fastreg-lst-345", cpu=1):
    return f"     {comm}     [00{cpu}] ..s1. {t:.6f}: fastreg_{name}: {text}\n"


def sub(cookie=3, kind="put", nbytes=65536, regs=1, qp=17, t=1.0):
    return line(t, "xfer_submit", f"peer=10.0.2.15 qp={qp} cookie={cookie} kind={kind} "
                f"bytes={nbytes} regs={regs} status=0 usecs=0")


def done(cookie=3, kind="put", nbytes=65536, regs=1, qp=17, status=0, t=2.0):
    return line(t, "xfer_done", f"peer=10.0.2.15 qp={qp} cookie={cookie} kind={kind} "
                f"bytes={nbytes} regs={regs} status={status} usecs=812")


def reg(rkey, qp=17, t=1.1):
    return line(t, "reg_mr", f"qp={qp} rkey={rkey} iova=0x1000 length=65536")


def linv(rkey, qp=17, t=1.5):
    return line(t, "local_inv", f"qp={qp} rkey={rkey}")


def rinv(rkey, qp=18, sent=True, t=1.4):
    return line(t, "remote_inv", f"qp={qp} rkey={rkey} {'sent' if sent else 'received'}")


# A PUT of 64 KiB to the node itself: the source (QP 17) and the sink (QP 18) each
# register; the source's data goes with a SEND_WITH_INV of the sink's key; the source
# invalidates its own.
PUT = [sub(), reg("0x00000102"), reg("0x00000203", qp=18, t=1.2),
       rinv("0x00000203", qp=17, t=1.3), rinv("0x00000203", qp=18, sent=False, t=1.35),
       linv("0x00000102"), done()]


def check(lines, kind="put", nbytes=65536):
    return te.transfer(te.parse(HEAD + "".join(lines)), kind, nbytes)


class Transfer(unittest.TestCase):
    def test_in_order_passes(self):
        ok, shown = check(PUT)
        self.assertTrue(ok, shown)
        self.assertTrue(shown[0].startswith("submit: peer=10.0.2.15 qp=17 cookie=3"))

    def test_a_key_left_alive_fails(self):
        ok, shown = check([x for x in PUT if "local_inv" not in x])
        self.assertFalse(ok)
        self.assertIn("rkey 0x00000102 registered and not invalidated", shown[-1])

    def test_a_key_invalidated_after_done_fails(self):
        lines = [x for x in PUT if "local_inv" not in x] + [linv("0x00000102", t=3.0)]
        self.assertFalse(check(lines)[0])

    def test_invalidated_before_registered_fails(self):
        lines = [sub(), linv("0x00000102", t=1.05), reg("0x00000102"), done()]
        self.assertFalse(check(lines)[0])

    def test_no_done_fails(self):
        ok, shown = check(PUT[:-1])
        self.assertFalse(ok)
        self.assertIn("no xfer_done", shown[0])

    def test_done_of_another_cookie_does_not_count(self):
        self.assertFalse(check(PUT[:-1] + [done(cookie=4)])[0])

    def test_failed_fails(self):
        ok, shown = check(PUT[:-1] + [done(status=-5)])
        self.assertFalse(ok)
        self.assertIn("wrong: status -5", shown)

    def test_no_registration_on_its_qp_fails(self):
        lines = [sub(), reg("0x00000203", qp=18), linv("0x00000203", qp=18), done()]
        self.assertFalse(check(lines)[0])

    def test_registrations_must_match_regs(self):
        lines = [sub(regs=2)] + PUT[1:-1] + [done(regs=2)]
        self.assertFalse(check(lines)[0])

    def test_inline_passes_without_keys_and_fails_with_one(self):
        inline = [sub(kind="put_inline", nbytes=1024, regs=0),
                  done(kind="put_inline", nbytes=1024, regs=0)]
        self.assertTrue(check(inline, "put_inline", 1024)[0])
        keyed = inline[:1] + [reg("0x1"), linv("0x1")] + inline[1:]
        self.assertFalse(check(keyed, "put_inline", 1024)[0])

    def test_other_kind_or_size_is_not_found(self):
        self.assertFalse(check(PUT, "get", 65536)[0])
        self.assertFalse(check(PUT, "put", 4096)[0])

    def test_trace_cmd_report_format(self):
        # trace-cmd report: no flags column, the event name padded.
        text = "".join(x.replace("..s1. ", "") for x in PUT)
        self.assertTrue(te.transfer(te.parse(text), "put", 65536)[0])


def state(frm, to, direction="->", reason="", t=1.0, port=7471, qp=0):
    return line(t, "conn_state", f"10.0.2.15 {direction} 10.0.2.15:{port} qp={qp} {frm} -> "
                f"{to} reason={reason}")


ACTIVE = [state("idle", "resolving_addr"), state("resolving_addr", "resolving_route"),
          state("resolving_route", "connecting", qp=17), state("connecting", "established", qp=17),
          state("established", "closing", qp=17, reason="closed by command"),
          state("closing", "closed", qp=17, reason="closed by command")]
PASSIVE = [state("idle", "passive_wait", "<-", port=1021, qp=18),
           state("passive_wait", "established", "<-", port=1021, qp=18),
           state("established", "closing", "<-", port=1021, qp=18, reason="disconnected"),
           state("closing", "closed", "<-", port=1021, qp=18, reason="disconnected")]


def states(lines, direction, final):
    return te.states(te.parse(HEAD + "".join(lines)), direction, final)


class States(unittest.TestCase):
    def test_both_directions_to_closed(self):
        ok, shown = states(ACTIVE + PASSIVE, "->", "closed")
        self.assertTrue(ok, shown)
        self.assertIn("idle -> resolving_addr -> resolving_route -> connecting -> established "
                      "-> closing -> closed (reason: closed by command)", shown[0])
        self.assertTrue(states(ACTIVE + PASSIVE, "<-", "closed")[0])

    def test_up_only(self):
        self.assertTrue(states(ACTIVE[:4], "->", "established")[0])
        self.assertFalse(states(ACTIVE[:4], "->", "closed")[0])

    def test_a_skipped_state_fails(self):
        self.assertFalse(states([ACTIVE[0]] + ACTIVE[2:], "->", "closed")[0])

    def test_a_broken_chain_fails(self):
        broken = ACTIVE[:3] + [state("resolving_addr", "established", qp=17)] + ACTIVE[4:]
        self.assertFalse(states(broken, "->", "closed")[0])

    def test_the_other_direction_does_not_count(self):
        self.assertFalse(states(PASSIVE, "->", "closed")[0])


if __name__ == "__main__":
    unittest.main()
