// SPDX-License-Identifier: GPL-2.0

//! RDMA devices (`struct ib_device`).
//!
//! C header: [`include/rdma/ib_verbs.h`](srctree/include/rdma/ib_verbs.h)

use core::ptr::NonNull;

use kernel::{
    prelude::*,
    sync::aref::{
        ARef,
        AlwaysRefCounted, //
    },
    types::Opaque, //
};

use super::ib;
use crate::rules::limits::DeviceAttrs;

/// An RDMA device registered with ib_core.
///
/// # Invariants
///
/// A `&Device` only exists while the device's registration reference count
/// (`ib_device::refcount`) is non-zero: either ib_core holds it for the duration of an
/// `ib_client` callback, or a [`DeviceRef`] holds it. ib_core does not finish unregistering
/// the device, and so does not free it, while that count is non-zero.
#[repr(transparent)]
pub(crate) struct Device(Opaque<ib::ib_device>);

/// A counted reference to a registered [`Device`].
///
/// While one exists, `ib_unregister_device()` waits: objects that hold one (PDs, CQs, QPs, ...)
/// can never outlive their device. Every holder must therefore drop it from the
/// [`Client::remove`](super::Client::remove) callback of that device at the latest.
pub(crate) type DeviceRef = ARef<Device>;

// SAFETY: `struct ib_device` is designed to be used from any thread; fastreg only reads
// attributes that are constant while the device is registered.
unsafe impl Send for Device {}
// SAFETY: As above, shared references only read constant attributes or call thread-safe verbs.
unsafe impl Sync for Device {}

// SAFETY: The registration reference count of `struct ib_device` is managed by
// `ib_device_try_get()` / `ib_device_put()`, and by the type invariant it is non-zero while a
// `&Device` exists.
unsafe impl AlwaysRefCounted for Device {
    fn inc_ref(&self) {
        // SAFETY: The device is valid by the type invariant.
        let got = unsafe { ib::fastreg_ib_device_try_get(self.as_raw()) };
        // The count is non-zero by the type invariant, so `try_get` cannot fail.
        if !got {
            pr_warn!("ib_device_try_get() failed on a device in use\n");
        }
    }

    unsafe fn dec_ref(obj: NonNull<Self>) {
        // SAFETY: The caller owns one registration reference, which this releases.
        unsafe { ib::ib_device_put(obj.as_ptr().cast()) };
    }
}

impl Device {
    /// Creates a reference to a device from a raw pointer.
    ///
    /// # Safety
    ///
    /// `ptr` must point to a registered `ib_device` whose registration reference count stays
    /// non-zero for `'a` (for example, the argument of an `ib_client` callback, for the
    /// duration of the callback).
    pub(super) unsafe fn from_raw<'a>(ptr: *mut ib::ib_device) -> &'a Device {
        // CAST: `Device` is `repr(transparent)` over `Opaque<ib_device>`.
        // SAFETY: The caller guarantees the pointer is valid for `'a`.
        unsafe { &*ptr.cast::<Device>() }
    }

    /// The raw `struct ib_device` pointer.
    pub(super) fn as_raw(&self) -> *mut ib::ib_device {
        self.0.get()
    }

    /// The device name (for example `rxe0`).
    pub(crate) fn name(&self) -> &CStr {
        // SAFETY: The device is valid; `name` is a NUL-terminated array written by ib_core at
        // registration (a rename rewrites it in place, still NUL-terminated).
        let name = unsafe { &(*self.as_raw()).name };
        // SAFETY: `name` is NUL-terminated and lives as long as `self`.
        unsafe { CStr::from_char_ptr(name.as_ptr()) }
    }

    /// The first IPv4 address of the net device under port 1, if any.
    pub(crate) fn ipv4(&self) -> Option<[u8; 4]> {
        // SAFETY: The device is valid by the type invariant; the helper takes and drops its
        // own reference to the net device.
        let addr = unsafe { ib::fastreg_ib_port_ipv4(self.as_raw(), 1) };
        // `__be32`: the bytes in memory are the address, most significant first.
        let b = addr.to_ne_bytes();
        (addr != 0).then_some(b)
    }

    /// Whether the device is an iWARP RNIC (siw among them): its work completions mean
    /// only that the transport has the data (see [`crate::verbs::SendChain`]).
    pub(crate) fn is_iwarp(&self) -> bool {
        // SAFETY: The device is valid; `node_type` is set before registration and never
        // changes.
        let t = unsafe { (*self.as_raw()).node_type };
        u32::from(t) == ib::RDMA_NODE_RNIC
    }

    /// The device's fast-registration attributes.
    pub(crate) fn attrs(&self) -> DeviceAttrs {
        // SAFETY: The device is valid; `attrs` is written by the driver before registration
        // and not changed afterwards.
        let a = unsafe { &(*self.as_raw()).attrs };
        let count = |v: i32| u32::try_from(v).unwrap_or(0);
        DeviceAttrs {
            mem_mgt_extensions: a.device_cap_flags
                & ib::ib_device_cap_flags_IB_DEVICE_MEM_MGT_EXTENSIONS as u64
                != 0,
            sg_gaps: a.kernel_cap_flags & u64::from(ib::ib_kernel_cap_flags_IBK_SG_GAPS_REG) != 0,
            has_local_dma_lkey: a.kernel_cap_flags
                & u64::from(ib::ib_kernel_cap_flags_IBK_LOCAL_DMA_LKEY)
                != 0,
            max_fast_reg_page_list_len: a.max_fast_reg_page_list_len,
            max_qp_wr: count(a.max_qp_wr),
            max_send_sge: count(a.max_send_sge),
            max_recv_sge: count(a.max_recv_sge),
            max_sge_rd: count(a.max_sge_rd),
            max_cqe: count(a.max_cqe),
            max_mr: count(a.max_mr),
            max_qp_rd_atom: count(a.max_qp_rd_atom),
            page_size_cap: a.page_size_cap,
        }
    }
}
