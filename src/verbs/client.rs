// SPDX-License-Identifier: GPL-2.0

//! `ib_client` registration: how fastreg learns about RDMA devices coming and going.

use core::{
    marker::PhantomPinned,
    ptr, //
};

use kernel::{
    prelude::*,
    sync::atomic::{
        Atomic,
        Relaxed, //
    },
    types::{
        ForeignOwnable,
        Opaque, //
    },
};

use super::{
    ib,
    Device, //
};

/// What a module does when RDMA devices are added and removed.
pub(crate) trait Client: Send + Sync + 'static {
    /// Per-device state, held by ib_core's client-data slot from `add` to `remove`.
    type DeviceData: ForeignOwnable + Send + Sync;

    /// The client's name in ib_core.
    const NAME: &'static CStr;

    /// Called for every device present at registration and every device added later.
    ///
    /// An error means the device is not used: ib_core makes no further call for it.
    fn add(&self, device: &Device) -> Result<Self::DeviceData>;

    /// Called when `device` is being removed, or the client unregistered.
    ///
    /// Everything that refers to the device must be released before this returns: ib_core
    /// waits for the device's references to go before it finishes unregistering it.
    fn remove(&self, device: &Device, data: Self::DeviceData);
}

/// The registration of this module's one `ib_client`.
///
/// `add()` receives only the device, so the callbacks find the registration through
/// [`CURRENT`]; a module can therefore register one client at a time.
///
/// # Invariants
///
/// `inner.client` is registered with ib_core from construction until `Drop`, and
/// [`CURRENT`] points at `inner` for that whole time.
pub(crate) struct Registration<T: Client> {
    inner: Pin<KBox<Inner<T>>>,
}

struct Inner<T: Client> {
    client: Opaque<ib::ib_client>,
    ctx: T,
    _pin: PhantomPinned,
}

/// The registered client's `Inner<T>`, type-erased; null when none is registered.
static CURRENT: Atomic<*mut c_void> = Atomic::new(ptr::null_mut());

// SAFETY: `Inner<T>` is only shared with ib_core's callbacks, which run on any thread and
// only take shared references to `ctx`, which is `Sync`.
unsafe impl<T: Client> Send for Registration<T> {}
// SAFETY: As above.
unsafe impl<T: Client> Sync for Registration<T> {}

impl<T: Client> Registration<T> {
    /// Registers a client whose callbacks call into `ctx`.
    ///
    /// `ctx.add()` runs for every device already present before this returns.
    pub(crate) fn new(ctx: T) -> Result<Self> {
        let inner = KBox::pin(
            Inner {
                client: Opaque::new(ib::ib_client {
                    name: T::NAME.as_char_ptr(),
                    add: Some(Self::add_callback),
                    remove: Some(Self::remove_callback),
                    ..Default::default()
                }),
                ctx,
                _pin: PhantomPinned,
            },
            GFP_KERNEL,
        )?;
        let raw = ptr::from_ref::<Inner<T>>(&inner)
            .cast_mut()
            .cast::<c_void>();
        if CURRENT.cmpxchg(ptr::null_mut(), raw, Relaxed).is_err() {
            return Err(EBUSY);
        }
        // SAFETY: `client` is pinned in `inner` and initialised; it stays registered until
        // `Drop`, which runs before `inner` is freed. `CURRENT` points at it for the callbacks.
        let ret = unsafe { ib::ib_register_client(inner.client.get()) };
        if ret != 0 {
            CURRENT.store(ptr::null_mut(), Relaxed);
            return Err(Error::from_errno(ret));
        }
        // INVARIANT: registered above, and `CURRENT` set before.
        Ok(Self { inner })
    }

    /// The registered `Inner<T>`.
    ///
    /// # Safety
    ///
    /// Must only be called from an `ib_client` callback of the registration, during which
    /// `CURRENT` points at a live `Inner<T>` (ib_core does not call back after
    /// `ib_unregister_client()` returns, and `Drop` only then frees `Inner`).
    unsafe fn current<'a>() -> &'a Inner<T> {
        // SAFETY: By the function's safety requirements `CURRENT` points at a live `Inner<T>`:
        // only `Registration<T>::new` stores a non-null value in it, and these callbacks are
        // only installed by that same `T`.
        unsafe { &*CURRENT.load(Relaxed).cast::<Inner<T>>() }
    }

    /// # Safety
    ///
    /// Called by ib_core only, with a registered device.
    unsafe extern "C" fn add_callback(raw: *mut ib::ib_device) -> c_int {
        // SAFETY: Called by ib_core during this registration.
        let inner = unsafe { Self::current() };
        // SAFETY: ib_core holds a registration reference to `raw` during `add`.
        let device = unsafe { Device::from_raw(raw) };
        match inner.ctx.add(device) {
            Ok(data) => {
                // SAFETY: `raw` and the registered client are valid. ib_core hands the pointer
                // back to `remove_callback` only, which takes ownership back.
                unsafe { ib::ib_set_client_data(raw, inner.client.get(), data.into_foreign()) };
                0
            }
            Err(e) => e.to_errno(),
        }
    }

    /// # Safety
    ///
    /// Called by ib_core only, with the client data set by `add_callback` (or null).
    unsafe extern "C" fn remove_callback(raw: *mut ib::ib_device, data: *mut c_void) {
        if data.is_null() {
            return;
        }
        // SAFETY: Called by ib_core during this registration.
        let inner = unsafe { Self::current() };
        // SAFETY: ib_core holds a registration reference to `raw` during `remove`.
        let device = unsafe { Device::from_raw(raw) };
        // SAFETY: `data` came from `into_foreign` in `add_callback`, and ib_core passes it to
        // `remove` exactly once.
        let data = unsafe { T::DeviceData::from_foreign(data) };
        inner.ctx.remove(device, data);
    }
}

impl<T: Client> Drop for Registration<T> {
    fn drop(&mut self) {
        // SAFETY: Registered by the type invariant. This calls `remove` for every device and
        // returns after the last callback has finished.
        unsafe { ib::ib_unregister_client(self.inner.client.get()) };
        CURRENT.store(ptr::null_mut(), Relaxed);
    }
}
