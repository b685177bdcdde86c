#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# `make run`: boots a VM on soft RoCE, loads fastreg with PARAMS (e.g. make run
# PARAMS="queue_depth=16") and runs the default selftest session (scripts/show.sh):
# ping, brw write and read of 1 MiB with full data checks, then the counters.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
# The production module (as `make` builds it): no test hooks, no debugfs commands.
FASTREG_TEST=0 exec "$FASTREG_TOP/scripts/vm.sh" --params "${PARAMS:-}" -- bash scripts/show.sh
