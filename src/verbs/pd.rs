// SPDX-License-Identifier: GPL-2.0

//! Protection domains (`struct ib_pd`).

use core::ptr::NonNull;

use kernel::{
    error::from_err_ptr,
    prelude::*, //
};

use super::{
    ib,
    Device,
    DeviceRef, //
};

/// A protection domain, owned.
///
/// # Invariants
///
/// `ptr` is a PD allocated by `ib_alloc_pd()` on `device` and not yet deallocated; it is
/// deallocated exactly once, in `Drop`. `device` keeps the device registered until then.
pub(crate) struct Pd {
    ptr: NonNull<ib::ib_pd>,
    device: DeviceRef,
}

// SAFETY: A PD may be used and freed from any thread; ib_core serialises what needs it.
unsafe impl Send for Pd {}
// SAFETY: Shared references only read constant fields (`local_dma_lkey`).
unsafe impl Sync for Pd {}

impl Pd {
    /// Allocates a protection domain on `device`.
    pub(crate) fn alloc(device: &Device) -> Result<Pd> {
        // SAFETY: The device is valid by the invariant of `Device`.
        let ptr = from_err_ptr(unsafe { ib::fastreg_ib_alloc_pd(device.as_raw(), 0) })?;
        // INVARIANT: `ptr` was just allocated on `device`; the reference keeps it registered.
        Ok(Pd {
            ptr: NonNull::new(ptr).ok_or(ENOMEM)?,
            device: device.into(),
        })
    }

    /// The raw PD pointer.
    pub(super) fn as_raw(&self) -> *mut ib::ib_pd {
        self.ptr.as_ptr()
    }

    /// The device the PD belongs to.
    pub(crate) fn device(&self) -> &Device {
        &self.device
    }

    /// The lkey that covers all of local memory for DMA-mapped addresses.
    pub(crate) fn local_dma_lkey(&self) -> u32 {
        // SAFETY: The PD is valid by the type invariant; the field is set at allocation.
        unsafe { (*self.ptr.as_ptr()).local_dma_lkey }
    }
}

impl Drop for Pd {
    fn drop(&mut self) {
        // SAFETY: By the type invariant the PD is valid and this is its only deallocation. Its
        // users (CQs, QPs, MRs) borrow it, so they are gone by now.
        unsafe { ib::fastreg_ib_dealloc_pd(self.ptr.as_ptr()) };
    }
}
