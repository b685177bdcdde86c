// SPDX-License-Identifier: GPL-2.0

//! Caches of message buffers of exactly their size (`kmem_cache`): a message of the
//! default 4,152 bytes takes about 4.6 KiB of slab, not a kmalloc block of 8 KiB.

use core::ptr::NonNull;

use kernel::{
    bindings,
    prelude::*,
    str::CString,
    sync::{
        atomic::{
            Atomic,
            Relaxed, //
        },
        new_mutex,
        Arc,
        Mutex, //
    },
};

use super::ib;

/// Numbers the caches, so that every one has its own name (and its own directory in
/// `/sys/kernel/slab/`).
static CACHES: Atomic<u64> = Atomic::new(0);

/// A `kmem_cache` of objects of one size, DMA-aligned, never merged with another cache: it
/// shows in `/proc/slabinfo` as `fastreg_msg_<size>_<n>`.
///
/// # Invariants
///
/// `cache` was created by `fastreg_msg_cache_create` and is destroyed in `Drop` only: every
/// object allocated from it holds a reference to this value ([`MsgCache::alloc`]'s callers
/// keep the `Arc`), so none is left when it drops.
pub(crate) struct MsgCache {
    cache: NonNull<bindings::kmem_cache>,
    /// Bytes per object.
    size: usize,
    /// The size it was made for.
    asked: usize,
}

// SAFETY: A `kmem_cache` may be used from any thread, and destroyed from any thread in
// process context: `kmem_cache_destroy` sleeps. The last reference goes where the last
// buffer does, with the last reference to its connection (slots drop their connection
// before their buffer), which teardown keeps in process context; the C helper says
// `might_sleep()` so that a wrong context shows.
unsafe impl Send for MsgCache {}
// SAFETY: Allocating and freeing from a `kmem_cache` are thread-safe.
unsafe impl Sync for MsgCache {}

impl MsgCache {
    /// A cache of `size`-byte objects.
    fn new(size: usize) -> Result<Arc<Self>> {
        let n = CACHES.fetch_add(1, Relaxed);
        let name = CString::try_from_fmt(fmt!("fastreg_msg_{}_{}", size, n))?;
        let size32 = u32::try_from(size).map_err(|_| EINVAL)?;
        // SAFETY: `name` is a valid C string; the cache copies it.
        let raw = unsafe { ib::fastreg_msg_cache_create(name.as_char_ptr(), size32) };
        let cache = NonNull::new(raw).ok_or(ENOMEM)?;
        let asked = size;
        // SAFETY: Created above.
        let size = unsafe { ib::fastreg_msg_cache_size(cache.as_ptr()) } as usize;
        // INVARIANT: created above. Should the allocation fail, the value dropped destroys
        // the cache.
        Ok(Arc::new(Self { cache, size, asked }, GFP_KERNEL)?)
    }

    /// Bytes per object (the size asked, rounded up to the DMA alignment).
    pub(crate) fn size(&self) -> usize {
        self.size
    }

    /// A zeroed object of [`MsgCache::size`] bytes. The caller frees it with
    /// [`MsgCache::free`] and keeps a reference to the cache until then.
    pub(super) fn alloc(&self) -> Result<NonNull<u8>> {
        // SAFETY: The cache is live (type invariant).
        let p = unsafe { ib::fastreg_msg_cache_zalloc(self.cache.as_ptr()) };
        NonNull::new(p.cast()).ok_or(ENOMEM)
    }

    /// Frees an object.
    ///
    /// # Safety
    ///
    /// `obj` was returned by [`MsgCache::alloc`] on this cache and is not used afterwards.
    pub(super) unsafe fn free(&self, obj: NonNull<u8>) {
        // SAFETY: The caller's guarantee; the cache is live (type invariant).
        unsafe { ib::fastreg_msg_cache_free(self.cache.as_ptr(), obj.as_ptr().cast()) }
    }
}

impl Drop for MsgCache {
    fn drop(&mut self) {
        // SAFETY: Every object holds a reference to the cache (type invariant): none is
        // left, and nothing uses the cache after this.
        unsafe { ib::fastreg_msg_cache_destroy(self.cache.as_ptr()) }
    }
}

/// A device's message caches, one per size its interfaces use. Sizes come from the
/// interfaces' own `max_inline` (set by root), never from a peer: a peer that negotiates
/// smaller messages gets buffers of its interface's size.
#[pin_data]
pub(crate) struct MsgCaches {
    #[pin]
    caches: Mutex<KVec<Arc<MsgCache>>>,
}

impl MsgCaches {
    /// No caches yet.
    pub(crate) fn new() -> Result<Arc<Self>> {
        Arc::pin_init(
            pin_init!(Self {
                caches <- new_mutex!(KVec::new(), "fastreg::MsgCaches::caches"),
            }),
            GFP_KERNEL,
        )
    }

    /// The cache of objects of at least `size` bytes (made on first use). May sleep.
    pub(crate) fn of(&self, size: usize) -> Result<Arc<MsgCache>> {
        let mut caches = self.caches.lock();
        if let Some(c) = caches.iter().find(|c| c.asked == size) {
            return Ok(c.clone());
        }
        let c = MsgCache::new(size)?;
        caches.push(c.clone(), GFP_KERNEL)?;
        Ok(c)
    }
}

/// The bytes kmalloc really allocates for a request of `size` (the size of its bucket).
pub(super) fn kmalloc_size(size: usize) -> usize {
    // SAFETY: No preconditions.
    unsafe { ib::fastreg_kmalloc_size(size) }
}

/// The bytes kmalloc allocates for an `Arc<T>`: the value after its reference count.
pub(crate) fn arc_footprint<T>() -> usize {
    let header = core::mem::align_of::<T>().max(core::mem::size_of::<u32>());
    kmalloc_size(core::mem::size_of::<T>() + header)
}

/// The bytes kmalloc allocated for a vector's storage.
pub(crate) fn vec_footprint<T>(v: &KVec<T>) -> usize {
    match v.capacity() * core::mem::size_of::<T>() {
        0 => 0,
        n => kmalloc_size(n),
    }
}
