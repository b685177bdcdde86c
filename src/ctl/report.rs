// SPDX-License-Identifier: GPL-2.0

//! What fastreg shows about itself in debugfs (`/sys/kernel/debug/fastreg/`), for debugging:
//! read-only dumps, the same text as the control device's statistics ([`dump`]).
//!
//! - `params`: the effective module parameters, one `name=value` per line.
//! - `devices`: one line per RDMA device in use: its name, then its fast-registration limits.
//! - `pools`: one line per device: the pool's size and counters.
//! - `conns`: the interfaces and their connections.
//!
//! The test build adds the files that take commands (`ctl`, `lst`, `console`:
//! [`super::testfiles`]).

use kernel::{
    debugfs::{
        Dir,
        File, //
    },
    prelude::*,
    sync::Arc,
};

use crate::{
    ctl::{
        dump,
        Node, //
    },
    device::Devices,
    rules::params::Params,
    transport::Ifaces,
};

/// The debugfs directory and its files; removed when dropped.
pub(crate) struct Report {
    _params: Pin<KBox<File<Params>>>,
    _devices: Pin<KBox<File<Arc<Devices>>>>,
    _pools: Pin<KBox<File<Arc<Devices>>>>,
    _conns: Pin<KBox<File<Arc<Ifaces>>>>,
    #[cfg(fastreg_test)]
    _test: super::testfiles::Files,
    _dir: Dir,
}

impl Report {
    /// Creates `/sys/kernel/debug/fastreg/` and its files.
    pub(crate) fn new(node: &Node) -> Result<Self> {
        let dir = Dir::new(c"fastreg");
        #[cfg(fastreg_test)]
        let test = super::testfiles::Files::new(&dir, node)?;
        let (params, devices, ifaces) = (node.params, node.devices.clone(), node.ifaces.clone());
        let p = KBox::pin_init(
            dir.read_callback_file(c"params", params, &|p: &Params, f| dump::write_params(p, f)),
            GFP_KERNEL,
        )?;
        let d = KBox::pin_init(
            dir.read_callback_file(c"devices", devices.clone(), &|d: &Arc<Devices>, f| {
                dump::write_devices(d, f)
            }),
            GFP_KERNEL,
        )?;
        let pools = KBox::pin_init(
            dir.read_callback_file(c"pools", devices, &|d: &Arc<Devices>, f| {
                dump::write_pools(d, f)
            }),
            GFP_KERNEL,
        )?;
        let conns = KBox::pin_init(
            dir.read_callback_file(c"conns", ifaces, &|i: &Arc<Ifaces>, f| {
                dump::write_conns(i, f)
            }),
            GFP_KERNEL,
        )?;
        Ok(Self {
            _params: p,
            _devices: d,
            _pools: pools,
            _conns: conns,
            #[cfg(fastreg_test)]
            _test: test,
            _dir: dir,
        })
    }
}
