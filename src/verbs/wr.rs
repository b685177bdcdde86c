// SPDX-License-Identifier: GPL-2.0

//! Chains of send work requests, built in Rust and posted with one `ib_post_send`.
//!
//! A [`SendChain`] only takes MRs in the lifecycle state the work request requires
//! (REG_MR of a `Registered` MR, LOCAL_INV of an `Invalidating` one, RDMA from a
//! `Registered` one), and holds a reference to every MR it names until its completion, so
//! the device never executes a work request on a freed MR. Its storage is kept across uses:
//! at steady state building and posting a chain allocates nothing. Chains are built under
//! a connection's spinlock: past the room reserved for them, they grow only with
//! non-sleeping allocations (`GFP_NOWAIT`).

use core::mem::ManuallyDrop;

use kernel::{
    prelude::*,
    sync::Arc, //
};

#[cfg(fastreg_test)]
use super::fault;
use super::{
    ib,
    mr::RawMr,
    trace,
    Mr,
    MsgBuf, //
};
use crate::rules::mr_state::{
    self,
    state::{
        Invalidating,
        Registered, //
    },
};

/// An MR of the lifecycle, as the chain sees it.
pub(crate) type FrMr<S> = mr_state::Mr<Mr, S>;

/// Access rights of a registration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Access(u32);

impl Access {
    /// The local device may write (RDMA READ into it, receives).
    pub(crate) const LOCAL_WRITE: Access = Access(ib::ib_access_flags_IB_ACCESS_LOCAL_WRITE);
    /// A peer may RDMA WRITE into it.
    pub(crate) const REMOTE_WRITE: Access = Access(ib::ib_access_flags_IB_ACCESS_REMOTE_WRITE);
    /// Local read only (a source of RDMA WRITEs and sends).
    pub(crate) const LOCAL_READ: Access = Access(0);

    /// Both sets of rights.
    pub(crate) const fn with(self, o: Access) -> Access {
        Access(self.0 | o.0)
    }
}

/// RDMA operations.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RdmaOp {
    /// Local memory to remote memory.
    Write,
}

/// Storage for any send work request; each starts with its `ib_send_wr`.
#[repr(C)]
union AnyWr {
    send: ManuallyDrop<ib::ib_send_wr>,
    rdma: ManuallyDrop<ib::ib_rdma_wr>,
    reg: ManuallyDrop<ib::ib_reg_wr>,
}

/// Where a work request's scatter/gather entries are in `SendChain::sges`.
#[derive(Clone, Copy)]
struct SgeRange {
    start: u32,
    count: u32,
}

/// A chain of send work requests.
pub(crate) struct SendChain {
    wrs: KVec<AnyWr>,
    ranges: KVec<SgeRange>,
    sges: KVec<ib::ib_sge>,
    mrs: KVec<Arc<RawMr>>,
    bufs: KVec<Arc<MsgBuf>>,
    fence_next: bool,
    /// The buffer of a receive work request, held apart from `bufs` so that reposting a
    /// receive (from its own completion handler) allocates nothing.
    recv: Option<Arc<MsgBuf>>,
    /// Test fault (`fastreg_fail_wr`): the error its completion reports instead of the
    /// device's.
    injected: Option<u32>,
}

// SAFETY: The raw pointers in the work requests point into the chain's own storage or at
// MRs it holds references to; the chain is only used by one thread at a time.
unsafe impl Send for SendChain {}
// SAFETY: Shared references do not touch the work requests.
unsafe impl Sync for SendChain {}

impl SendChain {
    /// An empty chain with no storage.
    pub(crate) const fn empty() -> Self {
        Self {
            wrs: KVec::new(),
            ranges: KVec::new(),
            sges: KVec::new(),
            mrs: KVec::new(),
            bufs: KVec::new(),
            fence_next: false,
            recv: None,
            injected: None,
        }
    }

    /// An empty chain with room for `wrs` work requests and `sges` scatter/gather entries.
    pub(crate) fn with_capacity(wrs: usize, sges: usize) -> Result<Self> {
        Ok(Self {
            wrs: KVec::with_capacity(wrs, GFP_KERNEL)?,
            ranges: KVec::with_capacity(wrs, GFP_KERNEL)?,
            sges: KVec::with_capacity(sges, GFP_KERNEL)?,
            mrs: KVec::with_capacity(wrs, GFP_KERNEL)?,
            bufs: KVec::with_capacity(1, GFP_KERNEL)?,
            fence_next: false,
            recv: None,
            injected: None,
        })
    }

    /// Bytes its storage takes (what [`SendChain::with_capacity`] allocated, as kmalloc
    /// rounds it).
    pub(crate) fn footprint(&self) -> usize {
        use super::vec_footprint as bytes;
        bytes(&self.wrs)
            + bytes(&self.ranges)
            + bytes(&self.sges)
            + bytes(&self.mrs)
            + bytes(&self.bufs)
    }

    /// Forgets the work requests and drops the MR references, keeping the storage.
    pub(crate) fn clear(&mut self) {
        self.wrs.clear();
        self.ranges.clear();
        self.sges.clear();
        self.mrs.clear();
        self.bufs.clear();
        self.fence_next = false;
        self.recv = None;
        self.injected = None;
    }

    /// Holds `buf` for a receive work request (posted by `Endpoint::post_recv`); allocates
    /// nothing.
    pub(super) fn hold_recv(&mut self, buf: &Arc<MsgBuf>) {
        self.clear();
        self.recv = Some(buf.clone());
    }

    /// Asks the `fastreg_fail_wr` fault attribute whether this chain, about to be posted,
    /// is to complete in error, and with which error: a flush for a receive, the error of
    /// the first registration or invalidation step of a send chain, a general error for
    /// other send chains.
    #[cfg(fastreg_test)]
    pub(super) fn draw_fault(&mut self) {
        let (kinds, first) = if self.recv.is_some() {
            (fault::RECV, Some(ib::ib_wc_status_IB_WC_WR_FLUSH_ERR))
        } else {
            self.wrs.iter().fold((0, None), |(k, first), w| {
                // SAFETY: Every variant of the union starts with an `ib_send_wr`.
                let (kind, status) = match unsafe { w.send.opcode } {
                    ib::ib_wr_opcode_IB_WR_REG_MR => {
                        (fault::REG, Some(ib::ib_wc_status_IB_WC_MW_BIND_ERR))
                    }
                    ib::ib_wr_opcode_IB_WR_LOCAL_INV => {
                        (fault::LOCAL_INV, Some(ib::ib_wc_status_IB_WC_LOC_PROT_ERR))
                    }
                    _ => (fault::SEND, None),
                };
                (k | kind, first.or(status))
            })
        };
        self.injected =
            fault::should_fail(kinds).then(|| first.unwrap_or(ib::ib_wc_status_IB_WC_GENERAL_ERR));
    }

    /// A production build has no fault attribute: no chain completes in error on purpose.
    #[cfg(not(fastreg_test))]
    #[inline(always)]
    pub(super) fn draw_fault(&mut self) {}

    /// The error its completion is to report instead of the device's, if the fault
    /// attribute chose it ([`SendChain::draw_fault`]).
    pub(super) fn injected_status(&self) -> Option<u32> {
        self.injected
    }

    /// Fires the tracepoints of the registrations and invalidations in this chain, about
    /// to be posted on the QP numbered `qp_num` (walked only when one of them is on).
    pub(super) fn trace(&self, qp_num: u32) {
        if !trace::wrs_on() {
            return;
        }
        for w in self.wrs.iter() {
            // SAFETY: Every variant of the union starts with an `ib_send_wr`.
            match unsafe { w.send.opcode } {
                ib::ib_wr_opcode_IB_WR_REG_MR => {
                    // SAFETY: A REG_MR is built as the `reg` variant ([`SendChain::reg`]),
                    // naming an MR this chain holds a reference on (`mrs`). Its `iova` and
                    // `length` were written by `ib_map_mr_sg`, on this path, before the
                    // registration was built, and nothing writes them until the MR is
                    // mapped again (after this chain completes); they are read through the
                    // pointer, with no reference to the MR.
                    let (key, iova, length) = unsafe {
                        let mr = w.reg.mr;
                        (w.reg.key, (*mr).iova, (*mr).length)
                    };
                    trace::reg_mr(qp_num, key, iova, length);
                }
                ib::ib_wr_opcode_IB_WR_LOCAL_INV => {
                    // SAFETY: The union holds `invalidate_rkey` for LOCAL_INV.
                    trace::local_inv(qp_num, unsafe { *w.send.ex.invalidate_rkey.as_ref() });
                }
                ib::ib_wr_opcode_IB_WR_SEND_WITH_INV => {
                    // SAFETY: The union holds `invalidate_rkey` for SEND_WITH_INV.
                    let rkey = unsafe { *w.send.ex.invalidate_rkey.as_ref() };
                    trace::remote_inv(qp_num, rkey, true);
                }
                _ => {}
            }
        }
    }

    /// Whether this holds a receive rather than send work requests.
    pub(super) fn is_recv(&self) -> bool {
        self.recv.is_some()
    }

    /// Appends a SEND of the first `len` bytes of `buf`; with `invalidate`, a
    /// SEND_WITH_INV that also invalidates that rkey at the peer.
    pub(crate) fn send(&mut self, buf: &Arc<MsgBuf>, len: u32, invalidate: Option<u32>) -> Result {
        let start = self.sges.len() as u32;
        self.sges.push(buf.sge(len), GFP_NOWAIT)?;
        self.bufs.push(buf.clone(), GFP_NOWAIT)?;
        let mut wr = match invalidate {
            Some(rkey) => {
                let mut wr = self.base(ib::ib_wr_opcode_IB_WR_SEND_WITH_INV);
                // SAFETY: The union holds `invalidate_rkey` for SEND_WITH_INV.
                unsafe { *wr.ex.invalidate_rkey.as_mut() = rkey };
                wr
            }
            None => self.base(ib::ib_wr_opcode_IB_WR_SEND),
        };
        wr.num_sge = 1;
        self.push(
            AnyWr {
                send: ManuallyDrop::new(wr),
            },
            SgeRange { start, count: 1 },
        )
    }

    /// Number of work requests.
    pub(crate) fn len(&self) -> usize {
        self.wrs.len()
    }

    fn push(&mut self, wr: AnyWr, sges: SgeRange) -> Result {
        self.wrs.push(wr, GFP_NOWAIT)?;
        self.ranges.push(sges, GFP_NOWAIT)?;
        Ok(())
    }

    fn base(&mut self, opcode: u32) -> ib::ib_send_wr {
        let mut wr = ib::ib_send_wr {
            opcode,
            ..Default::default()
        };
        if core::mem::take(&mut self.fence_next) {
            wr.send_flags |= ib::ib_send_flags_IB_SEND_FENCE;
        }
        wr
    }

    /// Makes the next work request wait for all earlier RDMA READs (`IB_SEND_FENCE`).
    pub(crate) fn fence(&mut self) {
        self.fence_next = true;
    }

    /// Appends a REG_MR of `mr` with `key` (from [`mr_state::Mr::register`]).
    pub(crate) fn reg(&mut self, mr: &FrMr<Registered>, key: u32, access: Access) -> Result {
        let raw = mr.handle().raw().clone();
        let wr = AnyWr {
            reg: ManuallyDrop::new(ib::ib_reg_wr {
                wr: self.base(ib::ib_wr_opcode_IB_WR_REG_MR),
                mr: raw.as_raw(),
                key,
                access: access.0 as i32,
            }),
        };
        self.push(wr, SgeRange { start: 0, count: 0 })?;
        self.mrs.push(raw, GFP_NOWAIT)?;
        Ok(())
    }

    /// Appends a LOCAL_INV of `rkey` on `mr` (from [`mr_state::Mr::invalidate`]).
    pub(crate) fn local_inv(&mut self, mr: &FrMr<Invalidating>, rkey: u32) -> Result {
        let raw = mr.handle().raw().clone();
        let mut wr = self.base(ib::ib_wr_opcode_IB_WR_LOCAL_INV);
        // SAFETY: The union holds `invalidate_rkey` for LOCAL_INV.
        unsafe { *wr.ex.invalidate_rkey.as_mut() = rkey };
        self.push(
            AnyWr {
                send: ManuallyDrop::new(wr),
            },
            SgeRange { start: 0, count: 0 },
        )?;
        self.mrs.push(raw, GFP_NOWAIT)?;
        Ok(())
    }

    /// Appends an RDMA `op` between the remote `(addr, rkey)` and local pieces, each
    /// `(mr, offset in the MR, length)` of a registered MR.
    pub(crate) fn rdma<'a>(
        &mut self,
        op: RdmaOp,
        remote_addr: u64,
        rkey: u32,
        local: impl IntoIterator<Item = (&'a FrMr<Registered>, u64, u32)>,
    ) -> Result {
        let start = self.sges.len() as u32;
        for (mr, off, len) in local {
            let h = mr.handle();
            if off + u64::from(len) > h.length() {
                return Err(EINVAL);
            }
            self.sges.push(
                ib::ib_sge {
                    addr: h.iova() + off,
                    length: len,
                    lkey: h.lkey(),
                },
                GFP_NOWAIT,
            )?;
            self.mrs.push(h.raw().clone(), GFP_NOWAIT)?;
        }
        let count = self.sges.len() as u32 - start;
        let opcode = match op {
            RdmaOp::Write => ib::ib_wr_opcode_IB_WR_RDMA_WRITE,
        };
        let wr = AnyWr {
            rdma: ManuallyDrop::new(ib::ib_rdma_wr {
                wr: self.base(opcode),
                remote_addr,
                rkey,
            }),
        };
        self.push(wr, SgeRange { start, count })
    }

    /// Links the work requests for posting: every one with `err_cqe` (which only acts on
    /// failures), unsignaled, the last signaled with `cqe`. Returns the first, or null if
    /// empty.
    ///
    /// With `signal_writes` (iWARP) the RDMA WRITEs are signaled too: siw sends an
    /// unsignaled WRITE of a page or more zero-copy, its pages spliced into TCP, which
    /// reads them again to send or retransmit after the chain completed, when the buffer
    /// may already be refilled by its owner. A signaled WRITE is copied.
    ///
    /// The pointers stay valid until the chain is modified or dropped.
    pub(super) fn link(
        &mut self,
        cqe: *mut ib::ib_cqe,
        err_cqe: *mut ib::ib_cqe,
        signal_writes: bool,
    ) -> *mut ib::ib_send_wr {
        let n = self.wrs.len();
        let sges = self.sges.as_mut_ptr();
        let wrs = self.wrs.as_mut_ptr();
        for (i, r) in self.ranges.iter().enumerate() {
            // SAFETY: `i < n`; every variant of the union starts with an `ib_send_wr`.
            let wr: &mut ib::ib_send_wr = unsafe { &mut (*wrs.add(i)).send };
            wr.next = if i + 1 < n {
                // CAST: Every variant of the `repr(C)` union starts with an `ib_send_wr`.
                wrs.wrapping_add(i + 1).cast::<ib::ib_send_wr>()
            } else {
                core::ptr::null_mut()
            };
            if r.count > 0 {
                // SAFETY: The range lies within `sges`.
                wr.sg_list = unsafe { sges.add(r.start as usize) };
                wr.num_sge = r.count as i32;
            }
            let last = i + 1 == n;
            // SAFETY: Kernel ULPs use the `wr_cqe` member of the union.
            unsafe { *wr.__bindgen_anon_1.wr_cqe.as_mut() = if last { cqe } else { err_cqe } };
            if last || (signal_writes && wr.opcode == ib::ib_wr_opcode_IB_WR_RDMA_WRITE) {
                wr.send_flags |= ib::ib_send_flags_IB_SEND_SIGNALED;
            } else {
                wr.send_flags &= !(ib::ib_send_flags_IB_SEND_SIGNALED);
            }
        }
        if n == 0 {
            core::ptr::null_mut()
        } else {
            // CAST: As above.
            wrs.cast::<ib::ib_send_wr>()
        }
    }
}
