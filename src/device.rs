// SPDX-License-Identifier: GPL-2.0

//! fastreg's view of an RDMA device: what it probed and what it allocated there.

use kernel::{
    prelude::*,
    str::CString,
    sync::{
        atomic::Atomic,
        new_mutex,
        Arc,
        Mutex, //
    },
};

use crate::{
    reg::{
        pool::Pool,
        region::Region, //
    },
    rules::{
        budget::Figures,
        frag::Geometry,
        limits::DeviceAttrs, //
    },
    verbs::{
        self,
        Pd, //
    },
};

/// The resources fastreg holds on one RDMA device.
///
/// Shared (`Arc`) by whoever uses the device; the device is not unregistered before the
/// last user is gone, because the PD holds a reference to it.
pub(crate) struct DevRes {
    /// Device name at add time.
    pub(crate) name: CString,
    /// Its fast-registration attributes.
    pub(crate) attrs: DeviceAttrs,
    /// What one MR maps.
    pub(crate) geo: Geometry,
    /// The work request budget of a connection with the module parameters.
    pub(crate) figures: Figures,
    /// The protection domain of every object fastreg creates on the device.
    pub(crate) pd: Arc<Pd>,
    /// The fast-registration pool.
    pub(crate) pool: Arc<Pool>,
    /// The caches of its interfaces' message buffers.
    pub(crate) msgs: Arc<verbs::MsgCaches>,
    /// Set when the device is being removed: users stop starting work on it.
    pub(crate) removed: Atomic<bool>,
    /// The high half of the incarnation stamp of every interface on the device (random):
    /// a peer whose stamp has it is an interface of this device, sharing its pool.
    pub(crate) stamp_base: u64,
    /// Connects and connection teardowns left to the `fastreg_connect` workqueue or to the
    /// device's answer to a connect, not done yet.
    background: verbs::WaitCount,
}

impl DevRes {
    /// A region of `len` bytes at `offset` into its first page, mapped on this device and
    /// planned in the device's registrations.
    pub(crate) fn region(&self, offset: usize, len: usize) -> Result<Region> {
        Region::new(&self.pd, self.geo, offset, len)
    }

    /// The device name, for messages.
    pub(crate) fn name(&self) -> &str {
        self.name.to_str().unwrap_or("?")
    }

    /// The resources of a device that was probed and allocated on.
    pub(crate) fn new(
        name: CString,
        attrs: DeviceAttrs,
        geo: Geometry,
        figures: Figures,
        pd: Arc<Pd>,
        pool: Arc<Pool>,
        msgs: Arc<verbs::MsgCaches>,
    ) -> Self {
        Self {
            name,
            attrs,
            geo,
            figures,
            pd,
            pool,
            msgs,
            removed: Atomic::new(false),
            stamp_base: verbs::incarnation() << 32,
            background: verbs::WaitCount::new(),
        }
    }

    /// Whether `device` is this one.
    pub(crate) fn is(&self, device: &verbs::Device) -> bool {
        core::ptr::eq(self.pd.device(), device)
    }

    /// A new incarnation stamp for an interface on this device.
    pub(crate) fn new_stamp(&self) -> u64 {
        self.stamp_base | (verbs::incarnation() & 0xffff_ffff)
    }

    /// Whether `stamp` is that of an interface on this device (see [`DevRes::stamp_base`]).
    pub(crate) fn has_stamp(&self, stamp: u64) -> bool {
        stamp & !0xffff_ffff == self.stamp_base
    }

    /// Runs `f` on the `fastreg_connect` workqueue, counted until it returns: the device's
    /// removal waits for it ([`DevRes::wait_background`]). Returns whether it was queued
    /// (not without a workqueue, while the module goes, or without memory).
    pub(crate) fn spawn(self: &Arc<Self>, f: impl FnOnce() + Send + 'static) -> bool {
        let Some(q) = verbs::queue(verbs::Wq::Connect) else {
            return false;
        };
        self.hold();
        let res = self.clone();
        let counted = move || {
            f();
            res.release();
        };
        if q.try_spawn(GFP_KERNEL, counted).is_err() {
            self.release();
            return false;
        }
        true
    }

    /// Counts a teardown that will run when the device answers a connect: no worker waits
    /// meanwhile; the device's removal waits for it until [`DevRes::release`].
    pub(crate) fn hold(&self) {
        self.background.inc();
    }

    /// Ends the count of one [`DevRes::hold`].
    pub(crate) fn release(&self) {
        self.background.dec();
    }

    /// Waits until the connects and teardowns left to the workqueue are done (a connect
    /// still in the device holds them: on siw, about two minutes for an unanswered SYN),
    /// saying so every 10 s. Sleeps until the last one ends (no polling).
    pub(crate) fn wait_background(&self) {
        let mut secs = 0;
        while !self.background.wait_zero(10_000) {
            secs += 10;
            pr_info!(
                "{}: waiting for {} connection(s) still connecting in the device ({} s)\n",
                self.name(),
                self.background.get(),
                secs
            );
        }
    }
}

/// The devices in use.
#[pin_data]
pub(crate) struct Devices {
    #[pin]
    list: Mutex<KVec<Arc<DevRes>>>,
}

impl Devices {
    /// An empty list.
    pub(crate) fn new() -> impl PinInit<Self> {
        pin_init!(Self {
            list <- new_mutex!(KVec::new(), "fastreg::Devices::list"),
        })
    }

    /// Adds a device in use.
    pub(crate) fn add(&self, res: Arc<DevRes>) -> Result {
        Ok(self.list.lock().push(res, GFP_KERNEL)?)
    }

    /// Removes a device from the list of those in use.
    pub(crate) fn remove(&self, res: &Arc<DevRes>) {
        self.list.lock().retain(|d| !Arc::ptr_eq(d, res));
    }

    /// Calls `f` on every device in use, in the order they were added.
    pub(crate) fn for_each(
        &self,
        mut f: impl FnMut(&DevRes) -> core::fmt::Result,
    ) -> core::fmt::Result {
        self.list.lock().iter().try_for_each(|d| f(d))
    }

    /// The device in use named `name`, if any.
    pub(crate) fn find_name(&self, name: &str) -> Option<Arc<DevRes>> {
        self.list.lock().iter().find(|d| d.name() == name).cloned()
    }
}
