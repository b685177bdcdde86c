// SPDX-License-Identifier: GPL-2.0

//! fastreg's view of an RDMA device: what it probed and what it allocated there.

use kernel::{
    page::PAGE_SIZE,
    prelude::*,
    str::CString,
    sync::{
        new_mutex,
        Arc,
        Mutex, //
    },
};

use crate::{
    limits::DeviceAttrs,
    report::Show,
    verbs::{
        self,
        Pd, //
    },
};

/// What is known about one RDMA device in use, for reports.
pub(crate) struct DeviceInfo {
    /// Device name at add time.
    pub(crate) name: CString,
    /// Its fast-registration attributes.
    pub(crate) attrs: DeviceAttrs,
    /// The lkey of the PD fastreg allocated there.
    pub(crate) local_dma_lkey: u32,
}

/// The resources fastreg holds on one RDMA device, released in `Drop` from `remove`.
pub(crate) struct FrDevice {
    /// Shown in reports while the device is in use.
    info: Arc<DeviceInfo>,
    /// The protection domain of every object fastreg creates on the device.
    _pd: Pd,
}

/// The devices in use, for reports.
#[pin_data]
pub(crate) struct Devices {
    #[pin]
    list: Mutex<KVec<Arc<DeviceInfo>>>,
}

impl Devices {
    /// An empty list.
    pub(crate) fn new() -> impl PinInit<Self> {
        pin_init!(Self {
            list <- new_mutex!(KVec::new(), "fastreg::Devices::list"),
        })
    }

    /// Calls `f` on every device in use, in the order they were added.
    pub(crate) fn for_each(
        &self,
        mut f: impl FnMut(&DeviceInfo) -> core::fmt::Result,
    ) -> core::fmt::Result {
        self.list.lock().iter().try_for_each(|d| f(d))
    }
}

/// The `ib_client` context: module-wide settings and the devices in use.
pub(crate) struct Fastreg {
    /// Devices in use.
    pub(crate) devices: Arc<Devices>,
}

impl verbs::Client for Fastreg {
    type DeviceData = KBox<FrDevice>;

    const NAME: &'static CStr = c"fastreg";

    fn add(&self, device: &verbs::Device) -> Result<KBox<FrDevice>> {
        let name = device.name();
        let attrs = device.attrs();
        if let Err(why) = attrs.check_frwr(PAGE_SIZE as u64) {
            pr_info!(
                "{}: not used: {}\n",
                name.to_str().unwrap_or("?"),
                Show(why)
            );
            return Err(ENODEV);
        }
        let pd = Pd::alloc(device).inspect_err(|e| {
            pr_err!(
                "{}: ib_alloc_pd failed: {:?}\n",
                name.to_str().unwrap_or("?"),
                e
            )
        })?;
        let info = Arc::new(
            DeviceInfo {
                name: CString::try_from_fmt(fmt!("{}", name.to_str().unwrap_or("?")))?,
                attrs,
                local_dma_lkey: pd.local_dma_lkey(),
            },
            GFP_KERNEL,
        )?;
        self.devices.list.lock().push(info.clone(), GFP_KERNEL)?;
        pr_info!(
            "{}: added: {} pd_local_dma_lkey={:#x}\n",
            info.name.to_str().unwrap_or("?"),
            Show(info.attrs),
            info.local_dma_lkey
        );
        Ok(KBox::new(FrDevice { info, _pd: pd }, GFP_KERNEL)?)
    }

    fn remove(&self, _device: &verbs::Device, data: KBox<FrDevice>) {
        self.devices
            .list
            .lock()
            .retain(|d| !Arc::ptr_eq(d, &data.info));
        pr_info!("{}: removed\n", data.info.name.to_str().unwrap_or("?"));
        // Dropping `data` frees the PD (and with it the device reference) before ib_core
        // goes on unregistering the device.
        drop(data);
    }
}
