// SPDX-License-Identifier: GPL-2.0

//! A connection's transfer records, in order, each in a slot that never moves.
//!
//! A record is several hundred bytes (a PUT's advertised registrations alone are
//! [`MAX_REGS`](crate::rules::wire::MAX_REGS) entries). Kept in a plain vector, taking one out of
//! the middle shifted every record behind it: at 64 in flight that was 7 to 9 % of all the
//! samples of a profile (`memmove` under the CQ handler, Documentation/performance.rst).
//! Here only the order moves (one index per record); the records stay where they are.

use kernel::{
    alloc::{Flags, KVec},
    prelude::*,
};

/// Records of type `T` in the order they were pushed.
///
/// # Invariants
///
/// - Every index in `order` names a distinct slot of `slots` holding `Some`; every other slot
///   holds `None` and its index is in `free` (exactly once).
/// - `free`'s capacity is at least `slots`' length, so giving a slot back never allocates.
pub(super) struct Records<T> {
    slots: KVec<Option<T>>,
    free: KVec<usize>,
    order: KVec<usize>,
}

impl<T> Records<T> {
    /// No record.
    pub(super) const fn new() -> Self {
        Self {
            slots: KVec::new(),
            free: KVec::new(),
            order: KVec::new(),
        }
    }

    /// How many records there are.
    pub(super) fn len(&self) -> usize {
        self.order.len()
    }

    /// Whether there is none.
    pub(super) fn is_empty(&self) -> bool {
        self.order.is_empty()
    }

    /// Makes room for `more` records beyond those here: pushing that many allocates nothing.
    pub(super) fn reserve(&mut self, more: usize, flags: Flags) -> Result {
        let want = self.len().checked_add(more).ok_or(ENOMEM)?;
        self.order
            .reserve(want.saturating_sub(self.order.len()), flags)?;
        // Free slots are used first; only the rest are new.
        let new = want.saturating_sub(self.len() + self.free.len());
        self.slots.reserve(new, flags)?;
        let cap = self.slots.capacity();
        self.free
            .reserve(cap.saturating_sub(self.free.len()), flags)?;
        Ok(())
    }

    /// `None` when `more` records can be pushed without allocating; else the room to make
    /// ([`Records::with_room`]).
    pub(super) fn short_of(&self, more: usize) -> Option<(usize, usize)> {
        let want = self.len().saturating_add(more);
        let fits = self.order.capacity() >= want
            && self.slots.capacity() >= want.max(self.slots.len())
            && self.free.capacity() >= self.slots.capacity();
        (!fits).then_some((want, self.slots.len()))
    }

    /// Empty records with the room [`Records::short_of`] named, to take the place of
    /// those under a lock ([`Records::move_into`]): allocated with the lock released.
    pub(super) fn with_room((want, slots): (usize, usize), flags: Flags) -> Result<Self> {
        let cap = want.max(slots);
        Ok(Self {
            slots: KVec::with_capacity(cap, flags)?,
            free: KVec::with_capacity(cap, flags)?,
            order: KVec::with_capacity(want, flags)?,
        })
    }

    /// Moves these records, in place (each keeps its slot and position), into `bigger`
    /// and swaps the two, when `bigger` is empty and has room for them; the old, now
    /// empty, storage is left in `bigger`, to be freed once the lock is released.
    /// Allocates nothing.
    pub(super) fn move_into(&mut self, bigger: &mut Self) {
        let fits = bigger.slots.is_empty()
            && bigger.order.is_empty()
            && bigger.free.is_empty()
            && bigger.slots.capacity() >= self.slots.len()
            && bigger.free.capacity() >= bigger.slots.capacity()
            && bigger.order.capacity() >= self.order.len();
        if !fits {
            return;
        }
        // Within the capacities checked above; slots keep their indices.
        for x in self.slots.drain_all() {
            let _ = bigger.slots.push_within_capacity(x);
        }
        for s in self.free.drain_all() {
            let _ = bigger.free.push_within_capacity(s);
        }
        for s in self.order.drain_all() {
            let _ = bigger.order.push_within_capacity(s);
        }
        core::mem::swap(self, bigger);
    }

    /// Adds `x` last. Allocates (with `flags`) only beyond what [`Records::reserve`] made
    /// room for; on failure `x` is given back.
    pub(super) fn push(&mut self, x: T, flags: Flags) -> core::result::Result<(), (Error, T)> {
        if let Err(e) = self.reserve(1, flags) {
            return Err((e, x));
        }
        let slot = match self.free.pop() {
            Some(s) => {
                // `s` is a slot of `slots` (type invariant).
                self.slots[s] = Some(x);
                s
            }
            None => {
                let s = self.slots.len();
                if s == self.slots.capacity() {
                    // Not after the reservation above; checked rather than assumed.
                    return Err((ENOMEM, x));
                }
                let _ = self.slots.push_within_capacity(Some(x));
                s
            }
        };
        // Within the capacity reserved above.
        let _ = self.order.push_within_capacity(slot);
        Ok(())
    }

    /// Takes out the record at position `i` (the ones after it move up by one).
    pub(super) fn remove(&mut self, i: usize) -> Option<T> {
        let slot = self.order.remove(i).ok()?;
        let x = self.slots.get_mut(slot)?.take();
        // Within the capacity the invariant keeps.
        let _ = self.free.push_within_capacity(slot);
        x
    }

    /// The record at position `i`.
    pub(super) fn get(&self, i: usize) -> Option<&T> {
        self.slots.get(*self.order.get(i)?)?.as_ref()
    }

    /// The record at position `i`.
    pub(super) fn get_mut(&mut self, i: usize) -> Option<&mut T> {
        self.slots.get_mut(*self.order.get(i)?)?.as_mut()
    }

    /// The records in order.
    pub(super) fn iter(&self) -> impl Iterator<Item = &T> {
        self.order
            .iter()
            .filter_map(|&s| self.slots.get(s)?.as_ref())
    }

    /// The records, in no particular order (for changes that do not depend on it).
    pub(super) fn iter_mut(&mut self) -> impl Iterator<Item = &mut T> {
        self.slots.iter_mut().filter_map(Option::as_mut)
    }
}

impl<T> core::ops::Index<usize> for Records<T> {
    type Output = T;

    /// The record at position `i`; panics past the end, as a slice does.
    fn index(&self, i: usize) -> &T {
        match self.get(i) {
            Some(x) => x,
            None => panic!("record {i} of {}", self.len()),
        }
    }
}

impl<T> core::ops::IndexMut<usize> for Records<T> {
    fn index_mut(&mut self, i: usize) -> &mut T {
        let n = self.len();
        match self.get_mut(i) {
            Some(x) => x,
            None => panic!("record {i} of {n}"),
        }
    }
}

#[kernel::prelude::kunit_tests(fastreg_records)]
mod tests {
    use super::Records;
    use kernel::prelude::*;

    /// Records keep their order through removals anywhere, and free slots are used again:
    /// after a reservation, pushes and removals within it never grow the storage.
    #[test]
    fn order_kept_and_slots_reused() {
        let mut r = Records::<u32>::new();
        assert!(r.reserve(8, GFP_KERNEL).is_ok());
        for v in 0..8 {
            assert!(r.push(v, GFP_NOWAIT).is_ok());
        }
        let cap = r.slots.capacity();
        assert_eq!(r.remove(3), Some(3));
        assert_eq!(r.remove(0), Some(0));
        assert_eq!(r.remove(5), Some(7));
        assert_eq!(r.remove(5), None);
        assert!(r.push(8, GFP_NOWAIT).is_ok());
        assert!(r.push(9, GFP_NOWAIT).is_ok());
        let want = [1, 2, 4, 5, 6, 8, 9];
        assert!(r.iter().copied().eq(want.iter().copied()));
        assert_eq!(r[5], 8);
        r[5] = 80;
        assert_eq!(r.get(5), Some(&80));
        assert_eq!(r.len(), 7);
        assert_eq!(r.slots.capacity(), cap);
        assert_eq!(r.slots.len(), 8);
        // Many rounds of one in, one out from the front: the storage stays as it was.
        for v in 100..1000 {
            assert!(r.push(v, GFP_NOWAIT).is_ok());
            assert!(r.remove(0).is_some());
        }
        assert_eq!(r.slots.capacity(), cap);
        assert_eq!(r.len() + r.free.len(), r.slots.len());
        let mut n = 0;
        for x in r.iter_mut() {
            *x += 1;
            n += 1;
        }
        assert_eq!(n, 7);
        while r.remove(0).is_some() {}
        assert!(r.is_empty());
        assert_eq!(r.free.len(), r.slots.len());
    }
}
