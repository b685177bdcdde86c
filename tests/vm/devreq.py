#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""Requests to /dev/fastreg from user space as a test needs them, well-formed or not
(tests/vm/18-device.sh). Prints what came back:

  devreq.py send OP [WORDS]       one request through scripts/fastreg_device.py; prints
                                  "status=N state=S" and the reply's text
  devreq.py raw HEX               on one open file: a well-formed poll whose reply is left
                                  unread, then the bytes HEX in one write(2); prints
                                  "written" or the errno's name (EINVAL, E2BIG, ...), then
                                  what a following read returns ("read N bytes": a refused
                                  request drops the reply before it)
  devreq.py pread                 a pread(2) at offset 0 after a poll: prints the errno's
                                  name (ESPIPE: the device is a stream) or "read N bytes"
  devreq.py start-and-exit WORDS  starts a test and exits without waiting (closing the file)
  devreq.py hold SECS             keeps the device open SECS seconds ("open" once it is)
"""

import errno
import os
import sys
import time

sys.path.insert(0, os.path.join(os.environ.get("FASTREG_TOP", "."), "scripts"))
import fastreg_device as fdev  # noqa: E402


def main(argv):
    what = argv[0]
    if what == "send":
        with fdev.Device() as d:
            status, state, text = d.ask(argv[1], " ".join(argv[2:]))
        print(f"status={status} state={state}")
        sys.stdout.write(text)
        return 0
    if what == "raw":
        fd = os.open(fdev.DEV, os.O_RDWR)
        os.write(fd, fdev.request("poll"))
        try:
            os.write(fd, bytes.fromhex(argv[1]))
            print("written")
        except OSError as e:
            print(errno.errorcode[e.errno])
        print(f"read {len(os.read(fd, 1 << 16))} bytes")
        os.close(fd)
        return 0
    if what == "pread":
        fd = os.open(fdev.DEV, os.O_RDWR)
        os.write(fd, fdev.request("poll"))
        try:
            print(f"read {len(os.pread(fd, 1 << 16, 0))} bytes")
        except OSError as e:
            print(errno.errorcode[e.errno])
        os.close(fd)
        return 0
    if what == "start-and-exit":
        d = fdev.Device()
        status, state, text = d.ask("start", " ".join(argv[1:]))
        print(f"status={status} state={state}")
        sys.stdout.write(text)
        return 0
    if what == "hold":
        d = fdev.Device()
        print("open", flush=True)
        time.sleep(float(argv[1]))
        d.close()
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
