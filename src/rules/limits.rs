// SPDX-License-Identifier: GPL-2.0

//! What an RDMA device offers for fast registration, and whether fastreg can use it.
//!
//! Pure logic: no `kernel::`, compiled by the host tests too. The verbs layer fills
//! [`DeviceAttrs`] from `struct ib_device_attr`; everything above it decides from this copy.

use core::fmt;

/// The FRWR-relevant attributes of one RDMA device, copied from `struct ib_device_attr`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct DeviceAttrs {
    /// `IB_DEVICE_MEM_MGT_EXTENSIONS`: the device can do `IB_WR_REG_MR` / `IB_WR_LOCAL_INV`.
    pub(crate) mem_mgt_extensions: bool,
    /// `IBK_SG_GAPS_REG`: an MR may cover a scatter list with gaps (`IB_MR_TYPE_SG_GAPS`).
    pub(crate) sg_gaps: bool,
    /// `IBK_LOCAL_DMA_LKEY`: the device has a reserved local DMA lkey.
    pub(crate) has_local_dma_lkey: bool,
    /// Most pages one fast-registration MR can map.
    pub(crate) max_fast_reg_page_list_len: u32,
    /// Most work requests one queue can hold.
    pub(crate) max_qp_wr: u32,
    /// Most scatter/gather entries in one send work request.
    pub(crate) max_send_sge: u32,
    /// Most scatter/gather entries in one receive work request.
    pub(crate) max_recv_sge: u32,
    /// Most scatter/gather entries in one RDMA READ.
    pub(crate) max_sge_rd: u32,
    /// Most entries of one completion queue.
    pub(crate) max_cqe: u32,
    /// Most memory regions of the device.
    pub(crate) max_mr: u32,
    /// Most RDMA READs a QP can have outstanding as responder.
    pub(crate) max_qp_rd_atom: u32,
    /// Bit mask of the page sizes an MR can use.
    pub(crate) page_size_cap: u64,
}

/// Why a device cannot be used for fast registration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Unsupported {
    /// No `IB_DEVICE_MEM_MGT_EXTENSIONS`.
    NoMemMgtExtensions,
    /// A fast-registration MR cannot map a single page.
    NoPageList,
    /// The host page size is not among the page sizes the device can register.
    PageSize {
        /// The host's page size.
        page_size: u64,
    },
    /// The queues are too small to hold one transfer.
    QueueTooSmall,
}

impl fmt::Display for Unsupported {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Unsupported::NoMemMgtExtensions => {
                f.write_str("no fast registration (IB_DEVICE_MEM_MGT_EXTENSIONS missing)")
            }
            Unsupported::NoPageList => f.write_str("max_fast_reg_page_list_len is 0"),
            Unsupported::PageSize { page_size } => {
                write!(
                    f,
                    "page_size_cap does not include the host page size {page_size}"
                )
            }
            Unsupported::QueueTooSmall => f.write_str("max_qp_wr or max_cqe below 16"),
        }
    }
}

/// Smallest queue (in work requests or completions) that fastreg will run a connection on.
const MIN_QUEUE: u32 = 16;

impl DeviceAttrs {
    /// Checks that fastreg can register memory on this device with pages of `page_size` bytes.
    pub(crate) fn check_frwr(&self, page_size: u64) -> Result<(), Unsupported> {
        if !self.mem_mgt_extensions {
            return Err(Unsupported::NoMemMgtExtensions);
        }
        if self.max_fast_reg_page_list_len == 0 {
            return Err(Unsupported::NoPageList);
        }
        if self.page_size_cap & page_size == 0 {
            return Err(Unsupported::PageSize { page_size });
        }
        if self.max_qp_wr < MIN_QUEUE || self.max_cqe < MIN_QUEUE {
            return Err(Unsupported::QueueTooSmall);
        }
        Ok(())
    }
}

impl fmt::Display for DeviceAttrs {
    /// One line of `key=value` pairs, as logged at device add and shown in debugfs.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let yes_no = |b: bool| if b { "yes" } else { "no" };
        write!(
            f,
            "fast_reg={} max_fast_reg_page_list_len={} max_qp_wr={} max_send_sge={} \
             max_recv_sge={} max_sge_rd={} max_cqe={} max_mr={} max_qp_rd_atom={} \
             page_size_cap={:#x} sg_gaps={} local_dma_lkey_reserved={}",
            yes_no(self.mem_mgt_extensions),
            self.max_fast_reg_page_list_len,
            self.max_qp_wr,
            self.max_send_sge,
            self.max_recv_sge,
            self.max_sge_rd,
            self.max_cqe,
            self.max_mr,
            self.max_qp_rd_atom,
            self.page_size_cap,
            yes_no(self.sg_gaps),
            yes_no(self.has_local_dma_lkey),
        )
    }
}
