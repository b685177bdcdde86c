// SPDX-License-Identifier: GPL-2.0

//! The control plane: configuration in configfs (`configfs`: interfaces, the console's
//! allowlist and key), runs and statistics through the control device (`device`,
//! `/dev/fastreg`), and the debugfs files: read-only dumps (`report`), whose text the
//! device's statistics share (`dump`), and in the test build the files that take commands
//! (`testfiles`). The commands' grammar, the device's messages, the attributes' and the
//! parameters' ranges are pure rules (`rules::command`, `rules::ctldev`, `rules::config`,
//! `rules::params`).

use kernel::{
    prelude::*,
    sync::Arc, //
};

use crate::{
    device::Devices,
    rules::params::Params,
    selftest::{
        ask,
        console::Console,
        local::Local, //
    },
    transport::Ifaces,
    verbs,
    wait::Turn,
};

pub(crate) mod configfs;
pub(crate) mod device;
pub(crate) mod dump;
pub(crate) mod report;
#[cfg(fastreg_test)]
pub(crate) mod testfiles;

/// What the control plane acts on: the node's devices, interfaces and console, the
/// module parameters (the defaults of a new interface), the node's own selftest and the
/// sessions its console holds on other nodes. Published by the module's initializer
/// ([`verbs::Published`]) for the callbacks given no context of their own (configfs's top
/// directory, the device's `open`).
#[derive(Clone)]
pub(crate) struct Node {
    pub(crate) devices: Arc<Devices>,
    pub(crate) ifaces: Arc<Ifaces>,
    pub(crate) console: Arc<Console>,
    pub(crate) params: Params,
    pub(crate) local: Arc<Local>,
    /// The sessions this node's console holds on nodes (one console command at a time:
    /// each holds the turn for its duration, the others wait for theirs interruptibly).
    pub(crate) held: Arc<Turn<KVec<ask::Held>>>,
}

impl Node {
    /// The published node (`ENODEV` while none is: before the module's initializer
    /// publishes it, after the module's teardown takes it back).
    pub(crate) fn published() -> Result<Node> {
        let v = verbs::Published::get().ok_or(ENODEV)?;
        v.downcast_ref::<Node>().cloned().ok_or(ENODEV)
    }
}
