// SPDX-License-Identifier: GPL-2.0

//! Message buffers: small kmalloc'ed buffers DMA-mapped once, for SEND and RECV.

use kernel::{prelude::*, sync::Arc};

use super::{
    new_bh_spinlock,
    BhSpinLock, //
};

use super::{
    ib,
    Device,
    DeviceRef,
    Pd, //
};

/// A message buffer of `len` bytes, DMA-mapped for one device, used with the PD's local
/// DMA lkey.
///
/// The CPU reads and writes it through [`MsgBuf::with`] only while no work request uses
/// it (after its receive completed, before it is posted again); `with` syncs the mapping
/// for the CPU and back for the device around the access.
///
/// # Invariants
///
/// `dma` is the mapping of `data`'s `len` bytes on `device`, unmapped in `Drop`.
#[pin_data(PinnedDrop)]
pub(crate) struct MsgBuf {
    #[pin]
    data: BhSpinLock<KVec<u8>>,
    dma: u64,
    len: usize,
    lkey: u32,
    device: DeviceRef,
}

impl MsgBuf {
    /// Allocates and maps a zeroed buffer of `len` bytes on `pd`'s device.
    pub(crate) fn new(pd: &Pd, len: usize) -> Result<Arc<Self>> {
        let mut data = KVec::from_elem(0u8, len, GFP_KERNEL)?;
        let device: &Device = pd.device();
        // SAFETY: `data` holds `len` bytes that stay allocated (the `KVec` is never resized)
        // until `Drop` unmaps them.
        let dma = unsafe {
            ib::fastreg_ib_dma_map_single(device.as_raw(), data.as_mut_ptr().cast(), len)
        };
        // SAFETY: `dma` was returned by the mapping call on this device.
        if unsafe { ib::fastreg_ib_dma_mapping_error(device.as_raw(), dma) } != 0 {
            return Err(EIO);
        }
        // INVARIANT: mapped above.
        let r = Arc::pin_init(
            pin_init!(Self {
                data <- new_bh_spinlock!(data, "fastreg::MsgBuf::data"),
                dma,
                len,
                lkey: pd.local_dma_lkey(),
                device: device.into(),
            }),
            GFP_KERNEL,
        );
        if r.is_err() {
            // SAFETY: Mapped above and not used.
            unsafe { ib::fastreg_ib_dma_unmap_single(device.as_raw(), dma, len) };
        }
        r
    }

    /// Size in bytes.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// The scatter/gather entry for the first `len` bytes.
    pub(super) fn sge(&self, len: u32) -> ib::ib_sge {
        ib::ib_sge {
            addr: self.dma,
            length: len.min(self.len as u32),
            lkey: self.lkey,
        }
    }

    /// Runs `f` on the bytes, synced for the CPU before and for the device after.
    pub(crate) fn with<R>(&self, f: impl FnOnce(&mut [u8]) -> R) -> R {
        let mut data = self.data.lock();
        // SAFETY: The mapping is valid (type invariant).
        unsafe { ib::fastreg_ib_dma_sync_single_for_cpu(self.device.as_raw(), self.dma, self.len) };
        let r = f(&mut data);
        // SAFETY: As above.
        unsafe {
            ib::fastreg_ib_dma_sync_single_for_device(self.device.as_raw(), self.dma, self.len)
        };
        r
    }
}

#[pinned_drop]
impl PinnedDrop for MsgBuf {
    fn drop(self: Pin<&mut Self>) {
        // SAFETY: Mapped by the type invariant; work requests hold a reference to the buffer
        // while posted, so none uses it now.
        unsafe { ib::fastreg_ib_dma_unmap_single(self.device.as_raw(), self.dma, self.len) };
    }
}
