// SPDX-License-Identifier: GPL-2.0

//! fastreg's view of an RDMA device: what it probed and what it allocated there.

use kernel::{
    page::PAGE_SIZE,
    prelude::*,
    str::CString,
    sync::{
        atomic::{
            Acquire,
            Atomic,
            Relaxed,
            Release, //
        },
        new_mutex,
        Arc,
        Mutex, //
    },
    time::{
        delay::fsleep,
        Delta,
        Instant,
        Monotonic, //
    },
};

use crate::{
    budget::{
        self,
        Figures, //
    },
    conn::{
        Iface,
        Ifaces,
        Tunables, //
    },
    frag::Geometry,
    limits::DeviceAttrs,
    params::Params,
    pool::{
        Pool,
        PoolConfig, //
    },
    report::Show,
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
    /// Set when the device is being removed: users stop starting work on it.
    pub(crate) removed: Atomic<bool>,
    /// The high half of the incarnation stamp of every interface on the device (random):
    /// a peer whose stamp has it is an interface of this device, sharing its pool.
    pub(crate) stamp_base: u64,
    /// Connects and connection teardowns left to the module's workqueue, not done yet.
    background: Atomic<u32>,
}

impl DevRes {
    /// The device name, for messages.
    pub(crate) fn name(&self) -> &str {
        self.name.to_str().unwrap_or("?")
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

    /// Runs `f` on the module's workqueue, counted until it returns: the device's removal
    /// waits for it ([`DevRes::wait_background`]). Returns whether it was queued (not
    /// without a workqueue, while the module goes, or without memory).
    pub(crate) fn spawn(self: &Arc<Self>, f: impl FnOnce() + Send + 'static) -> bool {
        let Some(q) = verbs::module_wq() else {
            return false;
        };
        self.background.add(1, Relaxed);
        let res = self.clone();
        let counted = move || {
            f();
            res.background.fetch_sub(1, Release);
        };
        if q.try_spawn(GFP_KERNEL, counted).is_err() {
            self.background.fetch_sub(1, Release);
            return false;
        }
        true
    }

    /// Waits until the connects and teardowns left to the workqueue are done (a connect
    /// still in the device holds them: on siw, about two minutes for an unanswered SYN),
    /// saying so every 10 s. Sleeps in short steps, uninterruptibly, without looking like
    /// a hung task.
    fn wait_background(&self) {
        let start = Instant::<Monotonic>::now();
        let mut said = 0;
        loop {
            let n = self.background.load(Acquire);
            if n == 0 {
                return;
            }
            let secs = start.elapsed().as_millis() / 1000;
            if secs >= said + 10 {
                said = secs;
                pr_info!(
                    "{}: waiting for {} connection(s) still connecting in the device ({} s)\n",
                    self.name(),
                    n,
                    secs
                );
            }
            fsleep(Delta::from_millis(20));
        }
    }
}

/// What ib_core keeps for fastreg between `add` and `remove` of a device.
pub(crate) struct FrDevice {
    res: Arc<DevRes>,
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

    /// The device in use that `device` is, if any.
    pub(crate) fn find(&self, device: &verbs::Device) -> Option<Arc<DevRes>> {
        self.list.lock().iter().find(|d| d.is(device)).cloned()
    }
}

/// The `ib_client` context: module-wide settings, the devices in use and the interfaces.
pub(crate) struct Fastreg {
    /// Validated module parameters.
    pub(crate) params: Params,
    /// Devices in use.
    pub(crate) devices: Arc<Devices>,
    /// Interfaces (on the devices in use).
    pub(crate) ifaces: Arc<Ifaces>,
}

/// Pages one MR maps on a device: enough for `max_payload` at any offset, within what the
/// device allows.
fn mr_pages(attrs: &DeviceAttrs, max_payload: u32) -> u32 {
    let want = (max_payload as usize).div_ceil(PAGE_SIZE) + 1;
    attrs
        .max_fast_reg_page_list_len
        .min(u32::try_from(want).unwrap_or(u32::MAX))
}

impl Fastreg {
    /// Opens an interface with the module parameters on the device's IPv4 address, if any.
    fn default_iface(&self, device: &verbs::Device, res: &Arc<DevRes>) {
        let Some(ip) = device.ipv4() else {
            pr_info!(
                "{}: no IPv4 address: no default interface (add one through ctl)\n",
                res.name()
            );
            return;
        };
        let tun = Tunables::defaults(&self.params);
        let addr = verbs::SockAddr { ip, port: tun.port };
        let r = Iface::new(
            res.clone(),
            addr,
            tun,
            self.params.timeout.saturating_mul(1000),
        )
        .and_then(|i| self.ifaces.add(i));
        if let Err(e) = r {
            pr_warn!(
                "{}: no default interface at {}: {:?}\n",
                res.name(),
                addr,
                e
            );
        }
    }
}

impl verbs::Client for Fastreg {
    type DeviceData = KBox<FrDevice>;

    const NAME: &'static CStr = c"fastreg";

    fn add(&self, device: &verbs::Device) -> Result<KBox<FrDevice>> {
        let name = device.name().to_str().unwrap_or("?");
        let attrs = device.attrs();
        if let Err(why) = attrs.check_frwr(PAGE_SIZE as u64) {
            pr_info!("{}: not used: {}\n", name, Show(why));
            return Err(ENODEV);
        }
        let pd = Arc::new(
            Pd::alloc(device)
                .inspect_err(|e| pr_err!("{}: ib_alloc_pd failed: {:?}\n", name, e))?,
            GFP_KERNEL,
        )?;
        let cfg = PoolConfig {
            size: self.params.pool_size,
            max: self.params.pool_max,
            idle_secs: self.params.pool_idle,
            mr_pages: mr_pages(&attrs, self.params.max_payload),
        };
        // Memory regions of IB_MR_TYPE_MEM_REG on every device: splitting a buffer over
        // several MRs makes IB_MR_TYPE_SG_GAPS unnecessary (and it is slower where offered).
        let geo = Geometry::new(PAGE_SIZE as u64, cfg.mr_pages, false).ok_or(EINVAL)?;
        let figures = budget::figures(
            &geo,
            self.params.max_payload.into(),
            self.params.queue_depth,
            Tunables::DEFAULT_MAX_REGS.into(),
        )
        .ok_or(EINVAL)?;
        let pool = Pool::new(pd.clone(), cfg)
            .inspect_err(|e| pr_err!("{}: allocating {} MRs failed: {:?}\n", name, cfg.size, e))?;
        let res = Arc::new(
            DevRes {
                name: CString::try_from_fmt(fmt!("{}", name))?,
                attrs,
                geo,
                figures,
                pd,
                pool,
                removed: Atomic::new(false),
                stamp_base: verbs::incarnation() << 32,
                background: Atomic::new(0),
            },
            GFP_KERNEL,
        )?;
        self.devices.list.lock().push(res.clone(), GFP_KERNEL)?;
        pr_info!(
            "{}: added: {} pd_local_dma_lkey={:#x}\n",
            name,
            Show(res.attrs),
            res.pd.local_dma_lkey()
        );
        pr_info!(
            "{}: pool of {} MRs of {} pages; a {}-byte transfer needs at most {} MRs and {} WRs \
             per side, SQ depth {} at queue_depth {} (o2iblnd: {})\n",
            name,
            cfg.size,
            geo.max_pages(),
            self.params.max_payload,
            figures.mrs,
            figures.wrs,
            figures.sq_depth,
            self.params.queue_depth,
            figures.o2iblnd_sq_depth
        );
        self.default_iface(device, &res);
        Ok(KBox::new(FrDevice { res }, GFP_KERNEL)?)
    }

    fn remove(&self, _device: &verbs::Device, data: KBox<FrDevice>) {
        self.devices
            .list
            .lock()
            .retain(|d| !Arc::ptr_eq(d, &data.res));
        data.res.removed.store(true, Relaxed);
        // Connections first: they hold QPs and MRs on the device.
        self.ifaces.remove_device(&data.res);
        data.res.wait_background();
        pr_info!("{}: removed\n", data.res.name());
        // Dropping the last reference frees the pool's MRs and the PD (and with it the
        // device reference) before ib_core goes on unregistering the device. A user still
        // holding the resources (a test in progress) sees `removed`, starts nothing new and
        // lets go when its transfers in flight complete; the unregistration waits for that.
        drop(data);
    }
}
