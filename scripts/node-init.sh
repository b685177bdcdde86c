#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
#
# Init of an arm64 node (scripts/cluster.sh), run by the root file system's /fastreg-init
# stub once it has mounted the project tree at /fastreg/top. The root (Debian's arm64
# packages, unpacked by scripts/setup.sh) is read-only: this mounts the kernel file systems,
# the node's modules and the cluster's shared run directory, runs scripts/cluster-guest.sh
# and powers the VM off whatever happened. The kernel passes FASTREG_NODE from its command
# line.
export PATH=/usr/sbin:/usr/bin:/sbin:/bin
export LD_LIBRARY_PATH=/lib/aarch64-linux-gnu:/usr/lib/aarch64-linux-gnu
export HOME=/tmp TERM=dumb

# Powers off. sysrq's power-off is asynchronous: if init (this script) exits first (its
# sleep can fail once the file systems go: "Input/output error"), the kernel panics
# ("Attempted to kill init"); panic=-1 on the command line (scripts/cluster.sh) then
# reboots, which ends QEMU (-no-reboot) instead of leaving it to the run's timeout.
off() {
	sync
	echo o >/proc/sysrq-trigger
	sleep 30
}
trap off EXIT

p9() { mount -t 9p -o "trans=virtio,version=9p2000.L,msize=262144,$3" "$1" "$2"; }
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mountpoint -q /dev || mount -t devtmpfs devtmpfs /dev
mkdir -p /dev/pts && mount -t devpts devpts /dev/pts
# What udev or systemd would make: bash's process substitution needs /dev/fd.
[ -e /dev/fd ] || ln -s /proc/self/fd /dev/fd
for i in 0:stdin 1:stdout 2:stderr; do
	[ -e "/dev/${i#*:}" ] || ln -s "/proc/self/fd/${i%%:*}" "/dev/${i#*:}"
done
mount -t tmpfs tmpfs /tmp
mount -t tmpfs tmpfs /run
mount -t debugfs debugfs /sys/kernel/debug
p9 fastreg_run /fastreg/run rw || { echo "node-init: no run directory (tag fastreg_run)"; exit 1; }
p9 fastreg_mods /lib/modules ro,cache=loose || { echo "node-init: no modules (tag fastreg_mods)"; exit 1; }
ip link set lo up
echo "node${FASTREG_NODE:-x}" >/proc/sys/kernel/hostname

bash /fastreg/top/scripts/cluster-guest.sh "${FASTREG_NODE:?not on the kernel command line}" /fastreg/run
