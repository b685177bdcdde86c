// SPDX-License-Identifier: GPL-2.0

//! Page-backed buffers and their DMA mappings for an RDMA device.

use kernel::{
    bindings,
    page::{
        Page,
        PAGE_SIZE, //
    },
    prelude::*,
    sync::Arc,
};

use super::{
    new_bh_spinlock,
    BhSpinLock, //
};

use super::{
    ib,
    Device,
    DeviceRef, //
};
use crate::rules::frag::Seg;

/// A buffer of `len` bytes starting `offset` bytes into a list of pages it owns.
///
/// CPU accesses are serialised by `cpu`, a page piece at a time: it is held for one copy
/// of at most a page, never across a whole buffer (a fill or check of 64 MiB), so that it
/// can be a spinlock taken where sleeping is not allowed. The device may read and write the
/// pages while they are mapped ([`DmaSgl`]) and registered: users touch the bytes from the
/// CPU only between transfers (the mapping is `DMA_BIDIRECTIONAL` on cache-coherent or
/// virtual-DMA devices), so no two whole-buffer accesses overlap in practice.
#[pin_data]
pub(crate) struct Buffer {
    pages: KVec<Page>,
    offset: usize,
    len: usize,
    #[pin]
    cpu: BhSpinLock<()>,
}

impl Buffer {
    /// Allocates zeroed pages for `len` bytes starting `offset` bytes into the first page
    /// (an offset of a page or more leaves whole pages unused in front).
    pub(crate) fn new(offset: usize, len: usize) -> Result<Arc<Self>> {
        let end = offset.checked_add(len).ok_or(EINVAL)?;
        let npages = end.div_ceil(PAGE_SIZE);
        let mut pages = KVec::with_capacity(npages, GFP_KERNEL)?;
        for _ in 0..npages {
            pages.push(Page::alloc_page(GFP_KERNEL | __GFP_ZERO)?, GFP_KERNEL)?;
        }
        Arc::pin_init(
            pin_init!(Self {
                pages,
                offset,
                len,
                cpu <- new_bh_spinlock!((), "fastreg::Buffer::cpu"),
            }),
            GFP_KERNEL,
        )
    }

    /// Number of page pieces: the pages the bytes touch.
    fn npieces(&self) -> usize {
        if self.len == 0 {
            return 0;
        }
        (self.offset + self.len).div_ceil(PAGE_SIZE) - self.offset / PAGE_SIZE
    }

    /// Calls `f(page, offset_in_page, len, buffer_offset)` for each page piece, in order,
    /// each with `cpu` held (released between pieces).
    fn pieces(&self, mut f: impl FnMut(&Page, usize, usize, usize) -> Result) -> Result {
        let mut at = self.offset;
        let end = self.offset + self.len;
        while at < end {
            let page = &self.pages[at / PAGE_SIZE];
            let in_page = at % PAGE_SIZE;
            let n = (PAGE_SIZE - in_page).min(end - at);
            let cpu = self.cpu.lock();
            f(page, in_page, n, at - self.offset)?;
            drop(cpu);
            at += n;
        }
        Ok(())
    }

    /// Its length in bytes.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Fills the buffer with `byte(buffer_offset)` for every byte.
    pub(crate) fn fill(&self, byte: impl Fn(usize) -> u8) -> Result {
        let mut chunk = [0u8; 256];
        self.pieces(|page, in_page, n, boff| {
            let mut done = 0;
            while done < n {
                let m = (n - done).min(chunk.len());
                for (i, b) in chunk[..m].iter_mut().enumerate() {
                    *b = byte(boff + done + i);
                }
                // SAFETY: `chunk` holds `m` bytes; `cpu` excludes other CPU accesses to the
                // page, and the range lies within it.
                unsafe { page.write_raw(chunk.as_ptr(), in_page + done, m)? };
                done += m;
            }
            Ok(())
        })
    }

    /// Copies `src` into the buffer, which must be exactly as long.
    pub(crate) fn copy_in(&self, src: &[u8]) -> Result {
        if src.len() != self.len {
            return Err(EINVAL);
        }
        self.pieces(|page, in_page, n, boff| {
            // SAFETY: `src[boff..boff + n]` holds `n` readable bytes (the pieces cover `len`
            // bytes) and `in_page + n` is within the page. `cpu` excludes other CPU
            // accesses; the device does not touch the page now, as the type's rule says
            // (CPU accesses only between transfers: the caller's region is not registered
            // while it is filled or copied).
            unsafe { page.write_raw(src[boff..boff + n].as_ptr(), in_page, n) }
        })
    }

    /// Copies the buffer into `dst`, which must be exactly as long.
    pub(crate) fn copy_out(&self, dst: &mut [u8]) -> Result {
        if dst.len() != self.len {
            return Err(EINVAL);
        }
        self.pieces(|page, in_page, n, boff| {
            // SAFETY: As in `copy_in`, with `dst[boff..boff + n]` holding `n` writable bytes.
            unsafe { page.read_raw(dst[boff..boff + n].as_mut_ptr(), in_page, n) }
        })
    }

    /// Inverts the byte at `off` (a test hook: data corruption).
    #[cfg(fastreg_test)]
    pub(crate) fn flip(&self, off: usize) -> Result {
        if off >= self.len {
            return Err(EINVAL);
        }
        self.pieces(|page, in_page, n, boff| {
            if (boff..boff + n).contains(&off) {
                let at = in_page + off - boff;
                let mut b = [0u8; 1];
                // SAFETY: One byte within the piece; `cpu` excludes other CPU accesses.
                unsafe { page.read_raw(b.as_mut_ptr(), at, 1)? };
                b[0] = !b[0];
                // SAFETY: As above.
                unsafe { page.write_raw(b.as_ptr(), at, 1)? };
            }
            Ok(())
        })
    }

    /// Finds the first byte `covers` selects where `byte(buffer_offset)` differs from the
    /// buffer's content.
    pub(crate) fn first_mismatch_in(
        &self,
        covers: impl Fn(usize) -> bool,
        byte: impl Fn(usize) -> u8,
    ) -> Result<Option<usize>> {
        let mut chunk = [0u8; 256];
        let mut found = None;
        self.pieces(|page, in_page, n, boff| {
            let mut done = 0;
            while done < n && found.is_none() {
                let m = (n - done).min(chunk.len());
                // SAFETY: As in `fill`, and `chunk` has room for `m` bytes.
                unsafe { page.read_raw(chunk.as_mut_ptr(), in_page + done, m)? };
                found = chunk[..m]
                    .iter()
                    .enumerate()
                    .find(|(i, b)| {
                        let o = boff + done + i;
                        covers(o) && **b != byte(o)
                    })
                    .map(|(i, _)| boff + done + i);
                done += m;
            }
            Ok(())
        })?;
        Ok(found)
    }
}

/// A [`Buffer`] DMA-mapped for one device: one scatter list entry per page piece.
///
/// # Invariants
///
/// `sgl` holds `nents` initialised entries describing `buffer`, mapped with
/// `ib_dma_map_sg()` on `device` into `mapped` DMA entries, and unmapped in `Drop`.
pub(crate) struct DmaSgl {
    sgl: KVec<bindings::scatterlist>,
    nents: usize,
    mapped: usize,
    device: DeviceRef,
    buffer: Arc<Buffer>,
}

// SAFETY: The scatter list is only read after mapping; the device's DMA API is thread-safe.
unsafe impl Send for DmaSgl {}
// SAFETY: As above: shared references only read the mapped entries.
unsafe impl Sync for DmaSgl {}

impl DmaSgl {
    /// Maps `buffer` for DMA by `device`, for both directions.
    pub(crate) fn new(device: &Device, buffer: Arc<Buffer>) -> Result<Self> {
        let nents = buffer.npieces();
        if nents == 0 {
            return Err(EINVAL);
        }
        let mut sgl = KVec::with_capacity(nents, GFP_KERNEL)?;
        for _ in 0..nents {
            sgl.push(bindings::scatterlist::default(), GFP_KERNEL)?;
        }
        // SAFETY: `sgl` has `nents` entries; `sg_init_table` zeroes them and marks the last.
        unsafe { bindings::sg_init_table(sgl.as_mut_ptr(), nents as u32) };
        let mut n = 0usize;
        buffer.pieces(|page, in_page, len, _| {
            if n >= nents {
                return Err(EINVAL);
            }
            // SAFETY: `n < nents`; the page outlives the mapping, which holds `buffer`.
            unsafe {
                ib::fastreg_sg_set_page(
                    sgl.as_mut_ptr().add(n),
                    page.as_ptr(),
                    len as u32,
                    in_page as u32,
                )
            };
            n += 1;
            Ok(())
        })?;
        // SAFETY: The first `n` entries are initialised and describe pages held by `buffer`.
        let mapped =
            unsafe { ib::fastreg_ib_dma_map_sg(device.as_raw(), sgl.as_mut_ptr(), n as i32) };
        if mapped <= 0 {
            pr_err!(
                "{}: ib_dma_map_sg of {} entries ({} bytes) failed\n",
                device.name(),
                n,
                buffer.len()
            );
            return Err(EIO);
        }
        // INVARIANT: mapped above; `Drop` unmaps.
        Ok(Self {
            sgl,
            nents: n,
            mapped: mapped as usize,
            device: device.into(),
            buffer,
        })
    }

    /// The buffer.
    pub(crate) fn buffer(&self) -> &Arc<Buffer> {
        &self.buffer
    }

    /// Runs `f` on the buffer owned by the CPU: what the device wrote is visible to it
    /// (`dma_sync_sg_for_cpu`), and what it writes is visible to the device afterwards
    /// (`..._for_device`). Every CPU access to a mapped buffer goes through here; the
    /// device must not be using the buffer meanwhile (no registration of it is live).
    pub(crate) fn with_cpu<R>(&self, f: impl FnOnce(&Buffer) -> R) -> R {
        let dev = self.device.as_raw();
        let sgl = self.sgl.as_ptr().cast_mut();
        // SAFETY: The entries are mapped for this device (type invariant).
        unsafe { ib::fastreg_ib_dma_sync_sg_for_cpu(dev, sgl, self.nents as i32) };
        let r = f(&self.buffer);
        // SAFETY: As above.
        unsafe { ib::fastreg_ib_dma_sync_sg_for_device(dev, sgl, self.nents as i32) };
        r
    }

    /// The mapped entries as segments (DMA address and length), for planning registrations.
    pub(crate) fn segs(&self) -> Result<KVec<Seg>> {
        let mut v = KVec::with_capacity(self.mapped, GFP_KERNEL)?;
        for i in 0..self.mapped {
            let sg = self.raw_entry(i);
            // SAFETY: Entry `i` is one of the `mapped` DMA entries.
            let (addr, len) =
                unsafe { (ib::fastreg_sg_dma_address(sg), ib::fastreg_sg_dma_len(sg)) };
            v.push(Seg { addr, len }, GFP_KERNEL)?;
        }
        Ok(v)
    }

    /// Number of mapped entries.
    pub(crate) fn mapped_nents(&self) -> usize {
        self.mapped
    }

    /// Raw pointer to mapped entry `i` (`i < mapped`).
    pub(super) fn raw_entry(&self, i: usize) -> *mut bindings::scatterlist {
        self.sgl.as_ptr().wrapping_add(i).cast_mut()
    }
}

impl Drop for DmaSgl {
    fn drop(&mut self) {
        // SAFETY: Mapped by the type invariant with these entries; unmapped once, here.
        unsafe {
            ib::fastreg_ib_dma_unmap_sg(
                self.device.as_raw(),
                self.sgl.as_mut_ptr(),
                self.nents as i32,
            )
        };
    }
}
