// SPDX-License-Identifier: GPL-2.0

//! The control plane: configuration in configfs (`configfs`: interfaces, the console's
//! allowlist and key), and the debugfs files (`report`). The commands' grammar, the
//! attributes' and the parameters' ranges are pure rules (`rules::command`,
//! `rules::config`, `rules::params`).

pub(crate) mod configfs;
pub(crate) mod report;
