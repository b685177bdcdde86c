// SPDX-License-Identifier: GPL-2.0

//! Message buffers: objects of a message cache ([`MsgCache`]) DMA-mapped once, for SEND
//! and RECV.

use core::ptr::NonNull;

use kernel::{prelude::*, sync::Arc};

use super::MsgCache;

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

/// A message buffer of `len` bytes (in an object of its cache, at least that large),
/// DMA-mapped for one device, used with the PD's local DMA lkey.
///
/// The CPU reads and writes it through [`MsgBuf::with`] only while no work request uses
/// it (after its receive completed, before it is posted again); `with` syncs the mapping
/// for the CPU and back for the device around the access.
///
/// # Invariants
///
/// `data` is an object of `cache`, of at least `len` bytes, freed in `Drop`; `dma` is the
/// mapping of its first `len` bytes on `device`, unmapped in `Drop` before the free. The
/// CPU touches the bytes only under `lock`.
#[pin_data(PinnedDrop)]
pub(crate) struct MsgBuf {
    #[pin]
    lock: BhSpinLock<()>,
    data: NonNull<u8>,
    dma: u64,
    len: usize,
    lkey: u32,
    device: DeviceRef,
    cache: Arc<MsgCache>,
}

// SAFETY: The bytes behind `data` are the buffer's own (type invariant) and touched only
// under `lock`; the other fields are thread-safe.
unsafe impl Send for MsgBuf {}
// SAFETY: As above.
unsafe impl Sync for MsgBuf {}

impl MsgBuf {
    /// Allocates and maps a zeroed buffer of `len` bytes on `pd`'s device, from `cache`
    /// (`EINVAL` if its objects are smaller).
    pub(crate) fn new(pd: &Pd, cache: &Arc<MsgCache>, len: usize) -> Result<Arc<Self>> {
        if len > cache.size() {
            return Err(EINVAL);
        }
        let data = cache.alloc()?;
        let device: &Device = pd.device();
        // SAFETY: `data` is an object of at least `len` bytes that stays allocated until
        // `Drop` unmaps, then frees it.
        let dma =
            unsafe { ib::fastreg_ib_dma_map_single(device.as_raw(), data.as_ptr().cast(), len) };
        // SAFETY: `dma` was returned by the mapping call on this device.
        if unsafe { ib::fastreg_ib_dma_mapping_error(device.as_raw(), dma) } != 0 {
            // SAFETY: Allocated above from `cache`, not used.
            unsafe { cache.free(data) };
            return Err(EIO);
        }
        // INVARIANT: allocated and mapped above.
        let r = Arc::pin_init(
            pin_init!(Self {
                lock <- new_bh_spinlock!((), "fastreg::MsgBuf::lock"),
                data,
                dma,
                len,
                lkey: pd.local_dma_lkey(),
                device: device.into(),
                cache: cache.clone(),
            }),
            GFP_KERNEL,
        );
        if r.is_err() {
            // SAFETY: Mapped above and not used.
            unsafe { ib::fastreg_ib_dma_unmap_single(device.as_raw(), dma, len) };
            // SAFETY: Allocated above from `cache`, unmapped, not used.
            unsafe { cache.free(data) };
        }
        r
    }

    /// Bytes this buffer takes: its cache's object and its own allocation (a lower bound:
    /// the slab's slack, at most an eighth of the object at the default size, is not
    /// counted).
    pub(crate) fn footprint(&self) -> usize {
        self.cache.size() + super::arc_footprint::<Self>()
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
        let _guard = self.lock.lock();
        // SAFETY: The mapping is valid (type invariant).
        unsafe { ib::fastreg_ib_dma_sync_single_for_cpu(self.device.as_raw(), self.dma, self.len) };
        // SAFETY: `data` holds at least `len` bytes, the buffer's own, touched by the CPU
        // only under the lock held here (type invariant).
        let data = unsafe { core::slice::from_raw_parts_mut(self.data.as_ptr(), self.len) };
        let r = f(data);
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
        // SAFETY: An object of `cache` (type invariant), unmapped above, never used again.
        unsafe { self.cache.free(self.data) };
    }
}
