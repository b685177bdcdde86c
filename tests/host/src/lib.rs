// SPDX-License-Identifier: GPL-2.0

//! Host-side tests of fastreg's pure logic.
//!
//! The files under `src/` that do not use `kernel::` are compiled here by path, unchanged,
//! and tested with `cargo test`. Anything that needs the kernel is tested in the VM instead.

// The module uses only part of each pure file on any given build, and a library build
// without the tests uses no re-export (`rules::wire`'s).
#![allow(dead_code, unused_imports)]

// The module tree of the crate, for the pure files: each is compiled where the module has
// it (`crate::rules::wire`, ...), so its paths resolve unchanged. A `path` on an inline
// module names the folder its files are read from.
#[path = "../../../src/rules"]
pub(crate) mod rules {
    pub(crate) mod budget;
    pub(crate) mod command;
    pub(crate) mod config;
    pub(crate) mod conn_state;
    pub(crate) mod credits;
    pub(crate) mod ctldev;
    pub(crate) mod dial_state;
    pub(crate) mod frag;
    pub(crate) mod fuzz;
    pub(crate) mod limits;
    pub(crate) mod mr_state;
    pub(crate) mod negotiate;
    pub(crate) mod params;
    pub(crate) mod ratelimit;
    pub(crate) mod share;
    pub(crate) mod tally;
    pub(crate) mod wire;
    pub(crate) mod xfer_state;
}
#[path = "../../../src/selftest"]
pub(crate) mod selftest {
    pub(crate) mod auth;
    pub(crate) mod console_cmd;
    pub(crate) mod control;
    pub(crate) mod session;
    pub(crate) mod stats;
}

#[cfg(test)]
mod auth_tests;
#[cfg(test)]
mod budget_tests;
#[cfg(test)]
mod command_tests;
#[cfg(test)]
mod config_tests;
#[cfg(test)]
mod conn_state_tests;
#[cfg(test)]
mod control_tests;
#[cfg(test)]
mod credits_tests;
#[cfg(test)]
mod ctldev_tests;
#[cfg(test)]
mod dial_state_tests;
#[cfg(test)]
mod frag_tests;
#[cfg(test)]
mod fuzz_tests;
#[cfg(test)]
mod limits_tests;
#[cfg(test)]
mod mr_state_tests;
#[cfg(test)]
mod negotiate_tests;
#[cfg(test)]
mod params_tests;
#[cfg(test)]
mod ratelimit_tests;
#[cfg(test)]
mod share_tests;
#[cfg(test)]
mod stats_tests;
#[cfg(test)]
mod wire_tests;
#[cfg(test)]
mod xfer_state_tests;
