// SPDX-License-Identifier: GPL-2.0

//! Fast-registration memory regions (`ib_alloc_mr(IB_MR_TYPE_MEM_REG)`).

use core::ptr::NonNull;

use kernel::{
    error::from_err_ptr,
    page::PAGE_SIZE,
    prelude::*,
    sync::{
        atomic::{
            Atomic,
            Relaxed, //
        },
        Arc,
    },
};

use super::{
    new_bh_spinlock,
    BhSpinLock, //
};

use super::{
    ib,
    DmaSgl,
    Pd, //
};
use crate::rules::mr_state;

/// The ib_core MR, freed (`ib_dereg_mr`) when the last reference goes.
///
/// Work request chains hold a reference while posted, so an MR is never deregistered while
/// the device may still execute a work request on it.
///
/// # Invariants
///
/// `ptr` is an MR allocated on `pd`'s PD and not yet deregistered. `mapping` holds the
/// DMA mapping the MR's page list points into, from `map` until `release`; it is dropped
/// only after `ib_dereg_mr()` otherwise, so a key that may be valid never covers memory
/// that is no longer mapped.
#[pin_data(PinnedDrop)]
pub(crate) struct RawMr {
    ptr: NonNull<ib::ib_mr>,
    max_pages: u32,
    #[pin]
    mapping: BhSpinLock<Option<Arc<DmaSgl>>>,
    pd: Arc<Pd>,
}

// SAFETY: An `ib_mr` may be used from any thread; its fields are only written by
// `ib_map_mr_sg` and `ib_update_fast_reg_key`, which the owner of the `Mr` handle calls.
unsafe impl Send for RawMr {}
// SAFETY: As above.
unsafe impl Sync for RawMr {}

impl RawMr {
    /// The raw MR pointer.
    pub(super) fn as_raw(&self) -> *mut ib::ib_mr {
        self.ptr.as_ptr()
    }
}

#[pinned_drop]
impl PinnedDrop for RawMr {
    fn drop(self: Pin<&mut Self>) {
        // SAFETY: Valid by the type invariant; no work request references it any more
        // (chains hold a reference while posted), and this is the only deregistration.
        let ret = unsafe { ib::fastreg_ib_dereg_mr(self.ptr.as_ptr()) };
        if ret != 0 {
            pr_warn!("ib_dereg_mr failed: {}\n", ret);
        }
        // `mapping` is dropped after this, with the key dead.
    }
}

/// What to map into an MR: `len` bytes of a DMA-mapped buffer, from `offset` bytes into
/// its mapped entry `first`, spread over `nents` entries.
pub(crate) struct SglSpan {
    /// The mapped buffer.
    pub(crate) sgl: Arc<DmaSgl>,
    /// First mapped entry.
    pub(crate) first: usize,
    /// Number of entries from `first`.
    pub(crate) nents: u32,
    /// Offset in the first entry.
    pub(crate) offset: u32,
    /// Bytes to map.
    pub(crate) len: u64,
}

/// Counts the [`Mr`] handles of a pool that were dropped: however an MR goes (given back
/// and released, destroyed, or dropped on an error path), its pool stops counting it.
pub(crate) struct Tally(Atomic<u32>);

impl Tally {
    /// A new count.
    pub(crate) fn new() -> Result<Arc<Self>> {
        Ok(Arc::new(Self(Atomic::new(0)), GFP_KERNEL)?)
    }

    /// The handles dropped since the last call.
    pub(crate) fn take(&self) -> u32 {
        self.0.xchg(0, Relaxed)
    }
}

/// A fast-registration MR: the handle the lifecycle of [`crate::rules::mr_state`] drives.
pub(crate) struct Mr {
    raw: Arc<RawMr>,
    /// The pool's count of dropped handles.
    tally: Option<Arc<Tally>>,
}

impl Drop for Mr {
    fn drop(&mut self) {
        if let Some(t) = &self.tally {
            t.0.fetch_add(1, Relaxed);
        }
    }
}

impl Mr {
    /// The handle, counted by `tally` when it is dropped.
    pub(crate) fn counted(mut self, tally: &Arc<Tally>) -> Self {
        self.tally = Some(tally.clone());
        self
    }

    /// Allocates an MR on `pd` that maps at most `max_pages` pages.
    pub(crate) fn alloc(pd: &Arc<Pd>, max_pages: u32) -> Result<Self> {
        // SAFETY: The PD is valid while `pd` lives.
        let ptr = from_err_ptr(unsafe { ib::fastreg_ib_alloc_mr(pd.as_raw(), max_pages) })?;
        let ptr = NonNull::new(ptr).ok_or(ENOMEM)?;
        // INVARIANT: `ptr` was just allocated on `pd` and has no mapping.
        let raw = Arc::pin_init(
            pin_init!(RawMr {
                ptr,
                max_pages,
                mapping <- new_bh_spinlock!(None, "fastreg::RawMr::mapping"),
                pd: pd.clone(),
            }),
            GFP_KERNEL,
        );
        match raw {
            Ok(raw) => Ok(Self { raw, tally: None }),
            Err(e) => {
                // SAFETY: Just allocated and never used.
                unsafe { ib::fastreg_ib_dereg_mr(ptr.as_ptr()) };
                Err(e)
            }
        }
    }

    /// A reference that keeps the ib_core MR alive (for work request chains).
    pub(crate) fn raw(&self) -> &Arc<RawMr> {
        &self.raw
    }

    /// I/O virtual address of the first mapped byte (set by `map`).
    pub(crate) fn iova(&self) -> u64 {
        // SAFETY: Valid by the invariant of `RawMr`; only `map` writes it, through `&mut self`.
        unsafe { (*self.raw.as_raw()).iova }
    }

    /// Bytes mapped (set by `map`).
    pub(crate) fn length(&self) -> u64 {
        // SAFETY: As for `iova`.
        unsafe { (*self.raw.as_raw()).length }
    }

    /// The local key.
    pub(crate) fn lkey(&self) -> u32 {
        // SAFETY: As for `iova`; only `bump_key` writes it.
        unsafe { (*self.raw.as_raw()).lkey }
    }
}

impl mr_state::Handle for Mr {
    type Error = Error;
    type Sgl = SglSpan;

    fn map(&mut self, span: &SglSpan) -> Result {
        if span.nents == 0 || span.first + span.nents as usize > span.sgl.mapped_nents() {
            return Err(EINVAL);
        }
        let mut offset = span.offset;
        // SAFETY: The MR is valid and not in use (the lifecycle only maps a free MR); the
        // entries are mapped and stay so: `mapping` keeps them until `release`.
        let n = unsafe {
            ib::fastreg_ib_map_mr_sg(
                self.raw.as_raw(),
                span.sgl.raw_entry(span.first),
                span.nents as i32,
                &mut offset,
                PAGE_SIZE as u32,
            )
        };
        // The span ends on a page boundary when the MR is full, so the last entry may be
        // mapped in part; what must match is the length.
        if n < 0 {
            limited!(
                pr_err,
                "ib_map_mr_sg of {} entries ({} bytes) failed ({})\n",
                span.nents,
                span.len,
                n
            );
            return Err(Error::from_errno(n));
        }
        if self.length() != span.len {
            return Err(EINVAL);
        }
        *self.raw.mapping.lock() = Some(span.sgl.clone());
        Ok(())
    }

    fn release(&mut self) {
        *self.raw.mapping.lock() = None;
    }

    fn bump_key(&mut self) -> u32 {
        // SAFETY: The MR is valid; a free MR's key is not in use by any work request.
        unsafe {
            let rkey = (*self.raw.as_raw()).rkey;
            ib::fastreg_ib_update_fast_reg_key(
                self.raw.as_raw(),
                ib::fastreg_ib_inc_rkey(rkey) as u8,
            );
            (*self.raw.as_raw()).rkey
        }
    }

    fn rkey(&self) -> u32 {
        // SAFETY: As for `iova`.
        unsafe { (*self.raw.as_raw()).rkey }
    }
}
