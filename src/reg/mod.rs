// SPDX-License-Identifier: GPL-2.0

//! Memory registration: a device's pool of fast-registration MRs, and a region (a buffer of
//! any offset and length, DMA-mapped, planned into registrations by `rules::frag`, keyed
//! with MRs from the pool). See `Documentation/registration.rst`.

pub(crate) mod pool;
pub(crate) mod region;
