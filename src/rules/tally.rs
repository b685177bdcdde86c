// SPDX-License-Identifier: GPL-2.0

//! A count of events by name, in a fixed table (counting allocates nothing): an
//! interface's connections closed, by the reason given when each went down.
//!
//! Pure logic: no `kernel::`, host-tested.

/// Most distinct names a [`Tally`] keeps; later ones are counted as `other`.
pub(crate) const TALLY_NAMES: usize = 32;

/// Counts by name.
///
/// # Invariants
///
/// `names[..n]` are distinct; `counts[i]` belongs to `names[i]`; `n <= TALLY_NAMES`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Tally {
    n: usize,
    names: [&'static str; TALLY_NAMES],
    counts: [u64; TALLY_NAMES],
    /// Events whose name did not fit.
    pub(crate) other: u64,
}

impl Default for Tally {
    fn default() -> Self {
        Self::new()
    }
}

impl Tally {
    /// Nothing counted.
    pub(crate) const fn new() -> Self {
        Tally {
            n: 0,
            names: [""; TALLY_NAMES],
            counts: [0; TALLY_NAMES],
            other: 0,
        }
    }

    /// Counts one `name`.
    pub(crate) fn count(&mut self, name: &'static str) {
        if let Some(i) = self.names[..self.n].iter().position(|&s| s == name) {
            self.counts[i] = self.counts[i].saturating_add(1);
        } else if self.n < TALLY_NAMES {
            self.names[self.n] = name;
            self.counts[self.n] = 1;
            self.n += 1;
        } else {
            self.other = self.other.saturating_add(1);
        }
    }

    /// Every name counted and its count, in the order first seen.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (&'static str, u64)> + '_ {
        self.names[..self.n]
            .iter()
            .copied()
            .zip(self.counts[..self.n].iter().copied())
    }
}
