// SPDX-License-Identifier: GPL-2.0

//! Host-side tests of fastreg's pure logic.
//!
//! The files under `src/` that do not use `kernel::` are compiled here by path, unchanged,
//! and tested with `cargo test`. Anything that needs the kernel is tested in the VM instead.

// The module uses only part of each pure file on any given build.
#![allow(dead_code)]

#[path = "../../../src/auth.rs"]
pub(crate) mod auth;
#[path = "../../../src/budget.rs"]
pub(crate) mod budget;
#[path = "../../../src/command.rs"]
pub(crate) mod command;
#[path = "../../../src/conn_state.rs"]
pub(crate) mod conn_state;
#[path = "../../../src/console_cmd.rs"]
pub(crate) mod console_cmd;
#[path = "../../../src/control.rs"]
pub(crate) mod control;
#[path = "../../../src/credits.rs"]
pub(crate) mod credits;
#[path = "../../../src/dial_state.rs"]
pub(crate) mod dial_state;
#[path = "../../../src/frag.rs"]
pub(crate) mod frag;
#[path = "../../../src/fuzz.rs"]
pub(crate) mod fuzz;
#[path = "../../../src/limits.rs"]
pub(crate) mod limits;
#[path = "../../../src/mr_state.rs"]
pub(crate) mod mr_state;
#[path = "../../../src/negotiate.rs"]
pub(crate) mod negotiate;
#[path = "../../../src/params.rs"]
pub(crate) mod params;
#[path = "../../../src/ratelimit.rs"]
pub(crate) mod ratelimit;
#[path = "../../../src/session.rs"]
pub(crate) mod session;
#[path = "../../../src/share.rs"]
pub(crate) mod share;
#[path = "../../../src/stats.rs"]
pub(crate) mod stats;
#[path = "../../../src/tally.rs"]
pub(crate) mod tally;
#[path = "../../../src/wire.rs"]
pub(crate) mod wire;
#[path = "../../../src/xfer_state.rs"]
pub(crate) mod xfer_state;

#[cfg(test)]
mod auth_tests;
#[cfg(test)]
mod budget_tests;
#[cfg(test)]
mod command_tests;
#[cfg(test)]
mod conn_state_tests;
#[cfg(test)]
mod control_tests;
#[cfg(test)]
mod credits_tests;
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
