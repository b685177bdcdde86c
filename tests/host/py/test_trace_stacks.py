# SPDX-License-Identifier: GPL-2.0
"""Host tests of tests/vm/trace_stacks.py, the reader of the VM tests' kprobe stacks: on
traces in ftrace's own format (as a 7.2 guest prints them), each check fails when what it
names happened and passes when it did not, and one probe's stacks never count as
another's.

    python3 -m unittest discover -s tests/host/py     (make test runs it)
"""

import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "vm"))
import trace_stacks as ts  # noqa: E402

HEAD = """# tracer: nop
#
# entries-in-buffer/entries-written: {kept}/{written}   #P:2
#
"""
# A module's frames as ftrace prints them: mangled Rust names, no "[fastreg]".
TEARDOWN = "_RNvMs_NtNtCsl6QDX7gMEWm_7fastreg9transport9lifecycleNtB4_4Conn8teardown"
TICK = "_RNvXNtNtCsl6QDX7gMEWm_7fastreg9transport6ifacesNtB2_7NetTickNtNtNtB6_5verbs6ticker4Tick4tick"
HANDLER = "_RNvXs_NtNtCsl6QDX7gMEWm_7fastreg9transport4recvNtB4_4RecvNtNtB6_5verbs2cq7Handler4done"


def head(name, func, extra="", cpu=1):
    return f"    kworker/u8:2-51      [00{cpu}] .....     9.945657: {name}: ({func}+0x4/0x2b0){extra}\n"


def stack(func, frames, cpu=1):
    lines = [f"    kworker/u8:2-51      [00{cpu}] .....     9.946359: <stack trace>",
             " => kprobe_trace_func", " => kprobe_dispatcher", f" => {func}"]
    return "\n".join(lines + [f" => {f}" for f in frames]) + "\n"


def event(name, func, frames, extra="", cpu=1):
    return head(name, func, extra, cpu) + stack(func, frames, cpu)


def trace(*events, kept=None, written=None):
    n = sum(e.count("<stack trace>") * 2 for e in events)
    return HEAD.format(kept=kept if kept is not None else n,
                       written=written if written is not None else n) + "".join(events)


class Checks(unittest.TestCase):
    def run_check(self, kind, text, *args):
        with tempfile.NamedTemporaryFile("w", suffix=".trace", delete=False) as f:
            f.write(text)
        try:
            return getattr(ts, kind)(f.name, *args)
        finally:
            os.unlink(f.name)

    def test_sleep_in_teardown_fails(self):
        t = trace(event("usleep", "usleep_range_state", ["fsleep", TEARDOWN, "process_one_work"]))
        self.assertFalse(self.run_check("sleep", t))

    def test_sleep_elsewhere_passes(self):
        t = trace(event("msleep", "msleep", ["rxe_something", "process_one_work"]),
                  event("usleep", "usleep_range_state", ["fsleep", TICK]))
        self.assertTrue(self.run_check("sleep", t))

    def test_lost_entries_fail(self):
        t = trace(event("msleep", "msleep", ["x"]), kept=2, written=9)
        self.assertFalse(self.run_check("sleep", t))

    def test_alloc_in_handler_fails(self):
        t = trace(event("krealloc", "krealloc_node_align_noprof",
                        [HANDLER, "__ib_process_cq", "ib_cq_poll_work"], " size=64"))
        self.assertFalse(self.run_check("alloc", t))

    def test_alloc_from_work_passes(self):
        t = trace(event("krealloc", "krealloc_node_align_noprof", [TICK, "process_one_work"],
                        " size=8"))
        self.assertTrue(self.run_check("alloc", t))

    def test_alloc_none_from_fastreg_fails(self):
        # The probes saw only other code: they prove nothing about fastreg.
        t = trace(event("krealloc", "krealloc_node_align_noprof", ["rxe_x", "__ib_process_cq"],
                        " size=8"))
        self.assertFalse(self.run_check("alloc", t))

    def test_other_probes_stacks_are_not_counted(self):
        # A heavy probe's event, then an allocation by ib_core's poll work (not fastreg's):
        # the allocation's stack must not be read as the heavy event's.
        t = trace(event("map_sg", "fastreg_ib_dma_map_sg", [TICK, "process_one_work"]),
                  event("krealloc", "krealloc_node_align_noprof",
                        ["ib_x", "__ib_process_cq", "ib_cq_poll_work"], " size=8"))
        self.assertTrue(self.run_check("heavy", t, "map_sg:fastreg_ib_dma_map_sg"))

    def test_stacks_go_with_their_cpu(self):
        # CPU 0's allocation line, CPU 1's map_sg line, then CPU 0's stack (a handler's),
        # then CPU 1's (the work item's): the handler's stack is the allocation's.
        alloc_frames = ["_RNvMs3_7fastreg5verbs2cm8post_recv", "__ib_process_cq", "ib_cq_poll_work"]
        t = trace(head("krealloc", "krealloc_node_align_noprof", " size=8", cpu=0),
                  head("map_sg", "fastreg_ib_dma_map_sg", cpu=1),
                  stack("krealloc_node_align_noprof", alloc_frames, cpu=0),
                  stack("fastreg_ib_dma_map_sg", [TICK, "process_one_work"], cpu=1))
        self.assertTrue(self.run_check("heavy", t, "map_sg:fastreg_ib_dma_map_sg"))
        self.assertFalse(self.run_check("alloc", t))

    def test_unloaded_module_frames_are_named(self):
        # Read after rmmod: fastreg's frames are bare addresses; the copy of kallsyms
        # taken while it was loaded names them, and the teardown's sleep is found.
        syms = [(0xffffffffa0090000, "_RNvMs_7fastreg6device6DevRes4spawn"),
                (0xffffffffa0095000, TEARDOWN)]
        saved = ts.SYMS
        ts.SYMS = sorted(syms)
        try:
            t = trace(event("msleep", "msleep", ["0xffffffffa00955e1", "process_one_work"]))
            self.assertFalse(self.run_check("sleep", t))
            # An address past fastreg's symbols is not fastreg's.
            t = trace(event("msleep", "msleep", ["0xffffffffc0000000", "process_one_work"]))
            self.assertTrue(self.run_check("sleep", t))
        finally:
            ts.SYMS = saved

    def test_heavy_in_handler_fails(self):
        t = trace(event("cpu", "fastreg_ib_dma_sync_sg_for_cpu",
                        [HANDLER, "__ib_process_cq", "ib_cq_poll_work"]))
        self.assertFalse(self.run_check("heavy", t, "cpu:fastreg_ib_dma_sync_sg_for_cpu"))

    def test_heavy_probe_that_never_fired_fails(self):
        t = trace(event("cpu", "fastreg_ib_dma_sync_sg_for_cpu", [TICK]))
        self.assertFalse(self.run_check(
            "heavy", t, "cpu:fastreg_ib_dma_sync_sg_for_cpu map_sg:fastreg_ib_dma_map_sg"))


if __name__ == "__main__":
    unittest.main()


def callback(flags, n=0, comm="<idle>-0"):
    """A hit of the completion callback probe fastreg_cq/doneN, with ftrace's flags."""
    return (f"    {comm}      [001] {flags}   102.100001: done{n}: "
            f"(_RNvMNtNtCs1_7fastreg5verbs2cqINtB2_10CompletionpE13done_callback+0x0/0x2f0)\n")


class Softirq(unittest.TestCase):
    def run_check(self, text):
        with tempfile.NamedTemporaryFile("w", suffix=".trace", delete=False) as f:
            f.write(text)
        try:
            return ts.softirq(f.name)
        finally:
            os.unlink(f.name)

    def test_all_in_softirq_passes(self):
        t = HEAD.format(kept=3, written=3) + callback("..s1.") + callback("d.s2.", 1) + \
            callback("..H1.")
        self.assertTrue(self.run_check(t))

    def test_one_on_a_workqueue_fails(self):
        t = HEAD.format(kept=2, written=2) + callback("..s1.") + \
            callback(".....", 1, "kworker/u8:2-51")
        self.assertFalse(self.run_check(t))

    def test_none_fired_fails(self):
        self.assertFalse(self.run_check(HEAD.format(kept=0, written=0)))

    def test_lost_entries_fail(self):
        t = HEAD.format(kept=1, written=2) + callback("..s1.")
        self.assertFalse(self.run_check(t))
