#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# Prints the kernel tree to build the module against: the cached test kernel when it exists,
# otherwise the running kernel's build directory. Cheap: no network, no build.
. "$(dirname "$0")/lib.sh"
cached_kdir || echo "/lib/modules/$(uname -r)/build"
