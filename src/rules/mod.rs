// SPDX-License-Identifier: GPL-2.0

//! The rules, as pure code: the wire format, negotiation, the state machines of a
//! connection, a dial, an MR and a transfer, fragment math, send-queue budgets, credits,
//! shares, rate limits, the fuzzing peer's mutator (test build), and what a user may ask: the
//! module parameters' ranges, the configfs attributes', the control device's messages and the
//! grammar of the commands.
//!
//! Nothing here uses `kernel::`: every file is compiled unchanged by the host tests
//! (`tests/host/`, `cargo test`, property tests included) and by the module. Nothing here
//! depends on the layers above it.

pub(crate) mod budget;
pub(crate) mod command;
pub(crate) mod config;
pub(crate) mod conn_state;
pub(crate) mod credits;
pub(crate) mod ctldev;
pub(crate) mod dial_state;
pub(crate) mod frag;
// The fuzzing peer's mutator: in the test build only (Kbuild's FASTREG_TEST=1).
#[cfg(fastreg_test)]
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
