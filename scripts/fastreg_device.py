# SPDX-License-Identifier: GPL-2.0
"""The client side of fastreg's control device, /dev/fastreg (Documentation/device.rst),
and of its configfs attributes: what fastreg-lst and its console half use to run tests,
read statistics and set the console's allowlist and key. The message formats are those of
src/rules/ctldev.rs, byte for byte (tests/host/py/test_device.py checks them against the
same golden vectors as the module's host tests).

Imported by scripts/fastreg-lst and scripts/fastreg_console.py; nothing here runs on import.
"""

import errno
import fcntl
import os
import struct

DEV = "/dev/fastreg"
CONFIGFS = "/sys/kernel/config"
CONFIG_DIR = os.path.join(CONFIGFS, "fastreg")

REQUEST_MAGIC = b"FRRQ"
REPLY_MAGIC = b"FRRP"
VERSION = 1
HEAD = struct.Struct("<4sHHII")          # magic, version, op, flags, body length
REPLY_HEAD = struct.Struct("<4sHHiIII")  # magic, version, op, status, state, length, reserved
MAX_BODY = 1024

OPS = {"start": 1, "wait": 2, "poll": 3, "stop": 4, "result": 5, "stat": 6, "console": 7}
STATES = {0: "idle", 1: "running", 2: "over"}


class Failure(Exception):
    """A one-line error for the user."""


def request(op, body=""):
    """The bytes of request `op` (a name of OPS) with words `body`."""
    data = body.encode()
    if len(data) > MAX_BODY:
        raise Failure(f"request too long ({len(data)} bytes; at most {MAX_BODY})")
    return HEAD.pack(REQUEST_MAGIC, VERSION, OPS[op], 0, len(data)) + data


def parse_reply(data):
    """(op, status, state, text) of reply `data`, checked as the module checks requests."""
    if len(data) < REPLY_HEAD.size:
        raise Failure(f"truncated reply from {DEV} ({len(data)} bytes)")
    magic, version, op, status, state, length, reserved = REPLY_HEAD.unpack_from(data)
    if magic != REPLY_MAGIC or version != VERSION or reserved or status > 0 \
            or state not in STATES or op not in OPS.values():
        raise Failure(f"{DEV} answered in a format this tool does not know (version "
                      f"{version}; this tool speaks {VERSION})")
    body = data[REPLY_HEAD.size:]
    if len(body) != length:
        raise Failure(f"reply of {len(body)} bytes from {DEV}, its head says {length}")
    return op, status, STATES[state], body.decode(errors="replace")


def not_loaded():
    return Failure(f"fastreg is not loaded (no {DEV}); load it with insmod fastreg.ko")


class Device:
    """An open file of /dev/fastreg: one request at a time, each answered."""

    def __init__(self, path=DEV):
        try:
            self.fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
        except FileNotFoundError:
            raise not_loaded()
        except OSError as e:
            if e.errno == errno.ENODEV:
                raise not_loaded()
            raise Failure(f"{path}: {os.strerror(e.errno)}" + (
                " (the device is root's; run as root)" if e.errno == errno.EACCES else ""))

    def close(self):
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def lock(self):
        """Waits until no other fastreg-lst runs a test from this node (their tests would
        be refused as busy), and holds that until closed."""
        fcntl.flock(self.fd, fcntl.LOCK_EX)

    def ask(self, op, body=""):
        """Sends request `op`; returns (status, state, text) of its reply (status 0 or a
        negative errno). A signal during a wait raises as it would in any system call."""
        data = request(op, body)
        try:
            n = os.write(self.fd, data)
        except OSError as e:
            raise Failure(f"{DEV} refused the {op} request: {os.strerror(e.errno)}")
        if n != len(data):
            raise Failure(f"{DEV} took {n} of the {len(data)} bytes of a request")
        chunks = []
        while True:
            chunk = os.read(self.fd, 1 << 20)
            if not chunk:
                break
            chunks.append(chunk)
        got, status, state, text = parse_reply(b"".join(chunks))
        if got != OPS[op]:
            raise Failure(f"{DEV} answered op {got} to op {OPS[op]}")
        return status, state, text


def sections(text):
    """The [name] sections of a stat reply, as {name: text}."""
    out, name = {}, None
    for ln in text.splitlines(keepends=True):
        if ln.startswith("[") and ln.rstrip().endswith("]"):
            name = ln.strip()[1:-1]
            out[name] = ""
        elif name is not None:
            out[name] += ln
    return out


def stat_sections():
    """The statistics snapshot's sections: params, devices, pools, conns."""
    with Device() as d:
        status, _, text = d.ask("stat")
    if status:
        raise Failure(f"stat: {os.strerror(-status)}")
    return sections(text)


def ensure_configfs():
    """The configfs directory of fastreg (configfs mounted if it was not)."""
    if not os.path.isdir(CONFIG_DIR):
        if not os.path.ismount(CONFIGFS):
            import subprocess  # only here: importing it costs startup time under emulation
            subprocess.run(["mount", "-t", "configfs", "none", CONFIGFS],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
        if not os.path.isdir(CONFIG_DIR):
            if not os.path.exists(DEV):
                raise not_loaded()
            raise Failure(f"no {CONFIG_DIR} (configfs not mounted at {CONFIGFS}?)")
    return CONFIG_DIR


def config_write(attr, value, shown=None):
    """Writes `value` to fastreg's top configfs attribute `attr`; an error names the value
    as `shown` (default: the value)."""
    path = os.path.join(ensure_configfs(), attr)
    try:
        with open(path, "w") as f:
            f.write(value + "\n")
    except OSError as e:
        raise Failure(f"{attr} {shown or value}: {os.strerror(e.errno)} (the kernel log "
                      "says why)")


def config_read(attr):
    with open(os.path.join(ensure_configfs(), attr)) as f:
        return f.read().strip()


if __name__ == "__main__":
    # fastreg_device.py [SECTION...]: the statistics snapshot's sections (params, devices,
    # pools, conns; default: all), as the module writes them.
    import sys
    try:
        secs = stat_sections()
        for name in sys.argv[1:] or list(secs):
            if name not in secs:
                raise Failure(f"no section '{name}' (there are: {', '.join(secs)})")
            sys.stdout.write(secs[name] if len(sys.argv) == 2 else f"[{name}]\n{secs[name]}")
    except Failure as e:
        print(f"fastreg_device.py: {e}", file=sys.stderr)
        sys.exit(1)
