// SPDX-License-Identifier: GPL-2.0

//! Room in a vector made with its lock released.
//!
//! A vector guarded by a spinlock cannot grow under it (allocating may sleep). Its owner
//! reads under the lock how much room it needs, allocates an empty vector of that
//! capacity with the lock released, then, under the lock again, moves the entries into it
//! with [`swap_bigger`] and frees the old storage after unlocking.

use kernel::prelude::*;

/// Moves the entries of `v` into `bigger` and swaps the two, when `bigger` is empty and
/// has more room than `v` and enough for its entries; the old, now empty, vector is left
/// in `bigger`, to be freed once the lock is released. Allocates nothing.
pub(crate) fn swap_bigger<T>(v: &mut KVec<T>, bigger: &mut KVec<T>) {
    if !bigger.is_empty() || bigger.capacity() <= v.capacity() || bigger.capacity() < v.len() {
        return;
    }
    for e in v.drain_all() {
        // Within capacity (checked above).
        let _ = bigger.push_within_capacity(e);
    }
    core::mem::swap(v, bigger);
}
