// SPDX-License-Identifier: GPL-2.0

//! The selftest, in the manner of lnet_selftest: a client of the transport's API
//! (`crate::api`). The engine (`lst`), its statistics, and the console: a node's side
//! (`console`, with its trust model in `session` and `auth`) and the console's side
//! (`ask`), speaking the control protocol of `control`. See `Documentation/selftest.rst`.
//!
//! `auth`, `control`, `console_cmd`, `session` and `stats` are pure (host-tested).

pub(crate) mod ask;
pub(crate) mod auth;
pub(crate) mod console;
pub(crate) mod console_cmd;
pub(crate) mod control;
pub(crate) mod local;
pub(crate) mod lst;
pub(crate) mod session;
pub(crate) mod stats;
