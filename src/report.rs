// SPDX-License-Identifier: GPL-2.0

//! What fastreg shows about itself in debugfs (`/sys/kernel/debug/fastreg/`).
//!
//! - `params`: the effective module parameters, one `name=value` per line.
//! - `devices`: one line per RDMA device in use: its name, then its fast-registration limits.

use kernel::{
    debugfs::{
        Dir,
        File, //
    },
    prelude::*,
    sync::Arc, //
};

use crate::{
    device::Devices,
    params::Params, //
};

/// Shows a value of a pure type (one that implements `core::fmt::Display`) in the kernel's
/// formatting macros (`pr_info!` and friends), which take `kernel::fmt::Display`.
pub(crate) struct Show<T>(pub(crate) T);

impl<T: core::fmt::Display> kernel::fmt::Display for Show<T> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        core::fmt::Display::fmt(&self.0, f)
    }
}

/// The debugfs directory and its files; removed when dropped.
pub(crate) struct Report {
    _params: Pin<KBox<File<Params>>>,
    _devices: Pin<KBox<File<Arc<Devices>>>>,
    _dir: Dir,
}

impl Report {
    /// Creates `/sys/kernel/debug/fastreg/` and its files.
    pub(crate) fn new(params: Params, devices: Arc<Devices>) -> Result<Self> {
        let dir = Dir::new(c"fastreg");
        let params = KBox::pin_init(
            dir.read_callback_file(c"params", params, &|p: &Params, f| {
                writeln!(f, "{}", p.listing("\n"))
            }),
            GFP_KERNEL,
        )?;
        let devices = KBox::pin_init(
            dir.read_callback_file(c"devices", devices, &|d: &Arc<Devices>, f| {
                d.for_each(|dev| {
                    writeln!(
                        f,
                        "{}: pd_local_dma_lkey={:#x} {}",
                        dev.name.to_str().unwrap_or("?"),
                        dev.local_dma_lkey,
                        dev.attrs
                    )
                })
            }),
            GFP_KERNEL,
        )?;
        Ok(Self {
            _params: params,
            _devices: devices,
            _dir: dir,
        })
    }
}
