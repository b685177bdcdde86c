// SPDX-License-Identifier: GPL-2.0

//! fastreg: bulk data over RDMA with fast registration done right.
//!
//! The crate root: module parameters, and the module struct whose field order is the
//! teardown order. See `Documentation/index.rst` for the design.

// The layers, top down; arrows point down only (Documentation/design.rst): the control
// plane, the selftest (a client of the transport's API), the transport, registration
// (pools and regions), the verbs wrappers (the only code that calls C), and the pure rules
// beneath them all (no `kernel::`, host-tested).
mod ctl;
mod selftest;

mod api;
mod client;
mod device;
mod reg;
mod transport;

mod show;
mod verbs;

mod room;
mod rules;
mod wait;

#[cfg(CONFIG_KUNIT = "y")]
mod kunit;

use kernel::{
    prelude::*,
    sync::Arc, //
};

use client::Fastreg;
use device::Devices;
use rules::params::Params;

module! {
    type: FastregModule,
    name: "fastreg",
    authors: ["fastreg developers"],
    description: "Bulk RDMA transfers with fast registration (FRWR)",
    license: "GPL",
    params: {
        pool_size: u32 {
            default: crate::rules::params::POOL_SIZE.default,
            description: "Fast-registration MRs allocated per device at device add (1..4096)",
        },
        pool_max: u32 {
            default: crate::rules::params::POOL_MAX.default,
            description: "Most fast-registration MRs per device; the pool grows up to it (1..65536, >= pool_size)",
        },
        pool_idle: u32 {
            default: crate::rules::params::POOL_IDLE.default,
            description: "Seconds an idle MR beyond pool_size is kept before release (1..3600)",
        },
        queue_depth: u32 {
            default: crate::rules::params::QUEUE_DEPTH.default,
            description: "Transfers in flight per connection, negotiated down to the peer's (1..256)",
        },
        max_payload: u32 {
            default: crate::rules::params::MAX_PAYLOAD.default,
            description: "Largest bulk transfer in bytes, negotiated down to the peer's (4096..67108864)",
        },
        port: u32 {
            default: crate::rules::params::PORT.default,
            description: "rdma_cm service port, TCP port space (1..65535)",
        },
        timeout: u32 {
            default: crate::rules::params::TIMEOUT.default,
            description: "Seconds before an in-flight transfer fails with a timeout (1..3600)",
        },
        keepalive: u32 {
            default: crate::rules::params::KEEPALIVE.default,
            description: "Seconds without traffic before a keepalive is sent, 0 disables (0..3600)",
        },
        max_conns: u32 {
            default: crate::rules::params::MAX_CONNS.default,
            description: "Connections an interface accepts at most; more are rejected (1..65536)",
        },
        max_inline: u32 {
            default: crate::rules::params::MAX_INLINE.default,
            description: "Largest transfer carried inline in messages, unregistered; 0 disables (0..16384)",
        },
        require_privileged_port: u32 {
            default: crate::rules::params::REQUIRE_PRIVILEGED_PORT.default,
            description: "Refuse connection requests from source ports of 1024 and above, which any local user can bind; 0 accepts them (0..1)",
        },
        test_mem: u32 {
            default: crate::rules::params::TEST_MEM.default,
            description: "MiB of buffers one selftest run may allocate (1..1024)",
        },
        tests_mem: u32 {
            default: crate::rules::params::TESTS_MEM.default,
            description: "MiB of buffers all selftest runs of the node may hold at once, 0 for an eighth of its memory (0..1048576)",
        },
    },
}

/// Reads and validates the parameters given to `insmod`.
fn load_params() -> Result<Params> {
    use module_parameters as m;
    let raw = [
        *m::pool_size.value(),
        *m::pool_max.value(),
        *m::pool_idle.value(),
        *m::queue_depth.value(),
        *m::max_payload.value(),
        *m::port.value(),
        *m::timeout.value(),
        *m::keepalive.value(),
        *m::max_conns.value(),
        *m::max_inline.value(),
        *m::require_privileged_port.value(),
        *m::test_mem.value(),
        *m::tests_mem.value(),
    ];
    Params::validate(raw).map_err(|e| {
        pr_err!("{}\n", show::Show(e));
        EINVAL
    })
}

/// Stops the transport's periodic work when dropped.
struct TickGuard(Arc<verbs::Ticker<transport::NetTick>>);

impl Drop for TickGuard {
    fn drop(&mut self) {
        self.0.stop();
    }
}

/// The loaded module.
struct FastregModule {
    // Fields are dropped in declaration order. The periodic work stops first, so nothing
    // runs during teardown. Then the client: unregistering it calls `remove` for every
    // device, which frees everything fastreg holds there. The debugfs files go last, so
    // they never show a device whose resources are gone.
    _tick: TickGuard,
    // The control device: no file of it is open (each holds the module), and none opens
    // once it is gone.
    _ctldev: Pin<KBox<ctl::device::Registration>>,
    // No directory of it is left: configfs holds the module while one exists. What its
    // top directory acts on goes after it.
    _configfs: Pin<KBox<kernel::configfs::Subsystem<ctl::configfs::Root>>>,
    _published: verbs::Published,
    _client: verbs::Registration<Fastreg>,
    _report: ctl::report::Report,
    // The completion fault attribute outlives every work request (it is asked when they are
    // posted, not when they complete).
    #[cfg(fastreg_test)]
    _fail_wr: verbs::FailWr,
    // Last: operations still queued (their interfaces gone, they fail at once) drain here
    // (in the order of `Workqueue::all`).
    _wq: KVec<verbs::Workqueue>,
}

impl kernel::Module for FastregModule {
    fn init(_module: &'static ThisModule) -> Result<Self> {
        let params = load_params()?;
        pr_info!("loaded: {}\n", show::Show(params.listing(" ")));
        selftest::lst::set_limits(&params);
        let wq = verbs::Workqueue::all()?;
        #[cfg(fastreg_test)]
        let fail_wr = verbs::FailWr::new();
        let devices = Arc::pin_init(Devices::new(), GFP_KERNEL)?;
        let console = selftest::console::Console::new(params.timeout.saturating_mul(1000))?;
        let ifaces = Arc::pin_init(transport::Ifaces::new(console.clone()), GFP_KERNEL)?;
        let node = ctl::Node {
            devices: devices.clone(),
            ifaces: ifaces.clone(),
            console,
            params,
            local: Arc::pin_init(selftest::local::Local::new(), GFP_KERNEL)?,
            held: Arc::pin_init(wait::Turn::new(KVec::new()), GFP_KERNEL)?,
        };
        let report = ctl::report::Report::new(&node)?;
        let tick = TickGuard(verbs::Ticker::start(
            transport::NetTick {
                ifaces: ifaces.clone(),
                keepalive: params.keepalive,
                timeout_ms: params.timeout.saturating_mul(1000),
            },
            1000,
        )?);
        let client = verbs::Registration::new(Fastreg {
            params,
            devices,
            ifaces,
        })?;
        let node: verbs::Value = Arc::new(node, GFP_KERNEL)?;
        let published = verbs::Published::new(node)?;
        // The control device refuses to open until the module is live (a file opened during
        // a load that then failed would outlive the module).
        let ctldev = KBox::pin_init(ctl::device::register()?, GFP_KERNEL)?;
        // Last of what can fail: a directory made while the module loads would outlive a
        // failed load (configfs takes the module's reference even then).
        let configfs = KBox::pin_init(ctl::configfs::subsystem(), GFP_KERNEL)?;
        Ok(Self {
            _ctldev: ctldev,
            #[cfg(fastreg_test)]
            _fail_wr: fail_wr,
            _tick: tick,
            _configfs: configfs,
            _published: published,
            _client: client,
            _report: report,
            _wq: wq,
        })
    }
}

impl Drop for FastregModule {
    fn drop(&mut self) {
        pr_info!("unloading\n");
    }
}
