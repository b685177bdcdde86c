// SPDX-License-Identifier: GPL-2.0

//! The `ib_client`: what fastreg does when ib_core adds or removes an RDMA device. It
//! wires the layers together: the device's resources ([`crate::device`]) below, the
//! interfaces of the transport ([`crate::transport`]) on top of them.

use kernel::{
    page::PAGE_SIZE,
    prelude::*,
    str::CString,
    sync::{
        atomic::Relaxed,
        Arc, //
    },
};

use crate::{
    device::{
        DevRes,
        Devices, //
    },
    reg::pool::{
        Pool,
        PoolConfig, //
    },
    rules::{
        budget,
        frag::Geometry,
        limits::DeviceAttrs,
        params::Params, //
    },
    show::Show,
    transport::{
        Iface,
        Ifaces,
        Tunables, //
    },
    verbs::{
        self,
        Pd, //
    },
};

/// What ib_core keeps for fastreg between `add` and `remove` of a device.
pub(crate) struct FrDevice {
    res: Arc<DevRes>,
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
            self.ifaces.control(),
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
            DevRes::new(
                CString::try_from_fmt(fmt!("{}", name))?,
                attrs,
                geo,
                figures,
                pd,
                pool,
                verbs::MsgCaches::new()?,
            ),
            GFP_KERNEL,
        )?;
        self.devices.add(res.clone())?;
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
        self.devices.remove(&data.res);
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
