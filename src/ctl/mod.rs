// SPDX-License-Identifier: GPL-2.0

//! The control plane: the files a user writes commands to and reads results from (`report`,
//! debugfs). The commands' grammar and the parameters' ranges are pure rules
//! (`rules::command`, `rules::params`).

pub(crate) mod report;
