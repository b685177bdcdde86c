#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# `make run`: boots a VM on soft RoCE, loads fastreg with PARAMS (e.g. make run
# PARAMS="queue_depth=16") and prints what it found: the device limits and the effective
# module parameters.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
exec "$FASTREG_TOP/scripts/vm.sh" --params "${PARAMS:-}" -- bash scripts/show.sh
