// SPDX-License-Identifier: GPL-2.0

//! A misc device that holds the module while one of its files is open.
//!
//! `kernel::miscdevice` (7.2) builds the device's file operations without `.owner`
//! (Rust-for-Linux issue 1182): the VFS would take no reference on the module for an open
//! file, `rmmod` would succeed under it, and the file's next `read` or its `release` would
//! run freed code. [`MiscDev`] therefore keeps a copy of those operations with `.owner` set
//! to the module, and the device's `open` first takes the module and switches the file to
//! the copy: the VFS then drops the reference after `release` returns, as it does for a C
//! driver's `.owner = THIS_MODULE`. `misc_open` holds `misc_mtx` across `open`, and
//! `misc_deregister` takes it, so an `open` that got past the module's check is over
//! before the module's exit can go past the deregistration. An `open` during the module's
//! init is refused (`ENODEV`): a load that then failed would free the module under it.
//!
//! What is left until the crate sets `.owner` itself (an owner in `MiscDeviceOptions`, the
//! upstream fix): a file whose `open` is refused with `ENODEV` while the module goes still
//! points at the crate's table, in the module's memory, when the VFS puts it after
//! `misc_mtx` is released; a window of a few instructions during `rmmod`.

use core::{
    marker::PhantomData,
    sync::atomic::{
        AtomicPtr,
        Ordering, //
    },
};

use kernel::{
    bindings,
    error::to_result,
    fs::{
        File,
        Kiocb, //
    },
    iov::{
        IovIterDest,
        IovIterSource, //
    },
    miscdevice::{
        MiscDevice,
        MiscDeviceOptions,
        MiscDeviceRegistration, //
    },
    prelude::*,
    types::{
        ForeignOwnable,
        Opaque, //
    },
};

use super::ib;
use crate::THIS_MODULE;

/// The operations of a device's open file.
pub(crate) trait DevFile: Sized + 'static {
    /// What an open file holds.
    type Ptr: ForeignOwnable + Send + Sync;
    /// Opens a file (the module is held already).
    fn open(file: &File) -> Result<Self::Ptr>;
    /// The file's last user is gone.
    fn release(ptr: Self::Ptr, file: &File);
    /// `read(2)`.
    fn read_iter(kiocb: Kiocb<'_, Self::Ptr>, iov: &mut IovIterDest<'_>) -> Result<usize>;
    /// `write(2)`.
    fn write_iter(kiocb: Kiocb<'_, Self::Ptr>, iov: &mut IovIterSource<'_>) -> Result<usize>;
}

/// The misc device of [`DevFile`] `T`: its `open` holds the module first. Private: the
/// only device of it is a [`MiscDev`]'s, which [`hold_module`] relies on.
struct Misc<T>(PhantomData<T>);

#[vtable]
impl<T: DevFile> MiscDevice for Misc<T> {
    type Ptr = T::Ptr;

    fn open(file: &File, _misc: &MiscDeviceRegistration<Self>) -> Result<Self::Ptr> {
        hold_module(file)?;
        // An error from here on: the VFS drops the reference with the file.
        T::open(file)
    }

    fn release(ptr: Self::Ptr, file: &File) {
        T::release(ptr, file)
    }

    fn read_iter(kiocb: Kiocb<'_, Self::Ptr>, iov: &mut IovIterDest<'_>) -> Result<usize> {
        T::read_iter(kiocb, iov)
    }

    fn write_iter(kiocb: Kiocb<'_, Self::Ptr>, iov: &mut IovIterSource<'_>) -> Result<usize> {
        T::write_iter(kiocb, iov)
    }
}

/// The owned copy of the device's file operations, while there is one ([`MiscDev`]).
static OWNED: AtomicPtr<bindings::file_operations> = AtomicPtr::new(core::ptr::null_mut());

/// fastreg's copy of a device's file operations, with `.owner` set.
///
/// # Invariants
///
/// [`OWNED`] points to the copy from before the device is registered until the copy is
/// dropped, and is null otherwise; there is at most one.
struct OwnedFops {
    _copy: KBox<Opaque<bindings::file_operations>>,
}

// SAFETY: The copy is written once, before it is published, and only read after (by the
// VFS, from any thread, through the files that use it); its `owner` points to the module,
// which outlives it. Dropping it from another thread than the one that made it is fine.
unsafe impl Send for OwnedFops {}
// SAFETY: See `Send`: shared, it is only read.
unsafe impl Sync for OwnedFops {}

impl Drop for OwnedFops {
    fn drop(&mut self) {
        OWNED.store(core::ptr::null_mut(), Ordering::Release);
    }
}

/// A registered misc device of [`DevFile`] `T` (mode 0600, root's: devtmpfs's default for a
/// misc device with no mode) whose open files hold the module. One per module.
///
/// # Invariants
///
/// `reg` is dropped before `_fops` (field order): the copy outlives the device, and with it
/// every `open` (each runs under `misc_mtx`, which the deregistration takes).
#[pin_data]
pub(crate) struct MiscDev<T: DevFile> {
    // Dropped first: no file is open then (each holds the module), and none opens after.
    #[pin]
    reg: MiscDeviceRegistration<Misc<T>>,
    _fops: OwnedFops,
}

impl<T: DevFile> MiscDev<T> {
    /// Registers misc device `name`; `EBUSY` if the module has one already.
    pub(crate) fn register(name: &'static CStr) -> Result<impl PinInit<Self, Error>> {
        let opts = MiscDeviceOptions { name };
        let raw = opts.into_raw::<Misc<T>>();
        // SAFETY: `raw.fops` is the crate's table of `Misc<T>`, a static: valid for reads.
        let mut ops = unsafe { *raw.fops };
        ops.owner = THIS_MODULE.as_ptr();
        let copy = KBox::new(Opaque::new(ops), GFP_KERNEL)?;
        if OWNED
            .compare_exchange(
                core::ptr::null_mut(),
                copy.get(),
                Ordering::AcqRel,
                Ordering::Acquire,
            )
            .is_err()
        {
            return Err(EBUSY);
        }
        // Published before the device exists: every `open` finds it.
        let fops = OwnedFops { _copy: copy };
        Ok(try_pin_init!(Self {
            reg <- MiscDeviceRegistration::register(opts),
            _fops: fops,
        }))
    }
}

/// Holds the module for as long as `file` is open (the `open` of [`Misc`]); `ENODEV` if
/// the module is being unloaded.
fn hold_module(file: &File) -> Result {
    let fops = OWNED.load(Ordering::Acquire);
    if fops.is_null() {
        return Err(ENODEV);
    }
    // SAFETY: `file` is being opened as a `Misc<T>` device's (private to this file: the
    // only such device is a `MiscDev`'s), whose copy of the device's operations is `fops`.
    // During this call `misc_open` holds `misc_mtx`, which the device's deregistration
    // takes, and the copy outlives the deregistration (`MiscDev`'s invariants): `fops` is
    // valid now. From the module reference the helper takes, the file holds the module,
    // and so the `MiscDev` and its copy, until the VFS puts the copy with the file. The
    // helper puts the copy, the same functions with `.owner`, in place of the crate's table.
    to_result(unsafe { ib::fastreg_hold_module(file.as_ptr(), fops) })
}
