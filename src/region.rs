// SPDX-License-Identifier: GPL-2.0

//! A registrable region: a page buffer of any offset and length, DMA-mapped on one device,
//! with its registration plan, and the steps that register and invalidate it.

use kernel::{
    prelude::*,
    sync::Arc, //
};

use crate::{
    device::DevRes,
    frag::{
        self,
        Geometry,
        Span, //
    },
    mr_state::state::{
        Free,
        Invalidating,
        Registered, //
    },
    verbs::{
        Access,
        Buffer,
        DmaSgl,
        FrMr,
        SendChain,
        SglSpan, //
    },
    wire::{
        Check,
        Reg,
        Regs, //
    },
};

/// The byte at `off` of transfer `seed`: depends on both, so a misplaced or stale block
/// is caught, not only a wrong byte.
pub(crate) fn pattern(seed: u32, off: usize) -> u8 {
    let x = (off as u32).wrapping_mul(0x9e37_79b1) ^ seed.wrapping_mul(0x85eb_ca6b);
    (x ^ (x >> 13) ^ (x >> 24)) as u8
}

/// A mapped buffer and its registration plan.
pub(crate) struct Region {
    sgl: Arc<DmaSgl>,
    spans: KVec<Span>,
    lens: KVec<u64>,
    /// Pages per registration it was planned with.
    pages: u32,
}

impl Region {
    /// Allocates `len` bytes at `offset` into their first page and maps them on `res`.
    pub(crate) fn new(res: &DevRes, offset: usize, len: usize) -> Result<Self> {
        Self::new_in(res, offset, len, res.geo)
    }

    /// [`Region::new`], registered in pieces of `geo` (at most the device's MRs).
    pub(crate) fn new_in(res: &DevRes, offset: usize, len: usize, geo: Geometry) -> Result<Self> {
        let buf = Buffer::new(offset, len)?;
        let sgl = Arc::new(DmaSgl::new(res.pd.device(), buf)?, GFP_KERNEL)?;
        let segs = sgl.segs()?;
        let mut spans = KVec::new();
        let mut lens = KVec::new();
        for s in frag::plan(&segs, geo) {
            spans.push(s, GFP_KERNEL)?;
            lens.push(s.len, GFP_KERNEL)?;
        }
        Ok(Self {
            sgl,
            spans,
            lens,
            pages: geo.max_pages(),
        })
    }

    /// Pages per registration it was planned with.
    pub(crate) fn pages(&self) -> u32 {
        self.pages
    }

    /// Runs `f` on the buffer owned by the CPU (see [`DmaSgl::with_cpu`]).
    pub(crate) fn with_cpu<R>(&self, f: impl FnOnce(&crate::verbs::Buffer) -> R) -> R {
        self.sgl.with_cpu(f)
    }

    /// The buffer.
    pub(crate) fn buffer(&self) -> &Buffer {
        self.sgl.buffer()
    }

    /// MRs the region needs.
    pub(crate) fn nmrs(&self) -> u32 {
        self.spans.len() as u32
    }

    /// Its registrations, in order.
    pub(crate) fn spans(&self) -> &[Span] {
        &self.spans
    }

    /// What to map for registration `s`.
    pub(crate) fn sgl_span(&self, s: &Span) -> SglSpan {
        SglSpan {
            sgl: self.sgl.clone(),
            first: s.seg,
            nents: s.nents,
            offset: s.seg_off,
            len: s.len,
        }
    }

    /// Lengths of its registrations, in order.
    pub(crate) fn lens(&self) -> &[u64] {
        &self.lens
    }

    /// Takes MRs from the pool, maps the plan and registers it with `access`, appending
    /// the REG_MRs to `chain`; the registered MRs go to `out`, in order. On failure nothing
    /// is registered and the MRs are back in the pool.
    pub(crate) fn register(
        &self,
        res: &DevRes,
        access: Access,
        chain: &mut SendChain,
        out: &mut KVec<FrMr<Registered>>,
        wait_ms: Option<u32>,
    ) -> Result {
        let free = self.take(res, 0, wait_ms)?;
        self.register_taken(res, access, chain, out, free)
    }

    /// Takes the MRs the region needs from the pool, leaving `reserve` (see
    /// [`crate::pool::Pool::reserve`]), waiting up to `wait_ms` if given.
    pub(crate) fn take(
        &self,
        res: &DevRes,
        reserve: u32,
        wait_ms: Option<u32>,
    ) -> Result<KVec<FrMr<Free>>> {
        let n = self.nmrs();
        let mut free: KVec<FrMr<Free>> = KVec::with_capacity(n as usize, GFP_KERNEL)?;
        res.pool.get_leaving(n, reserve, &mut free, wait_ms)?;
        Ok(free)
    }

    /// [`Region::register`] with MRs taken by [`Region::take`].
    pub(crate) fn register_taken(
        &self,
        res: &DevRes,
        access: Access,
        chain: &mut SendChain,
        out: &mut KVec<FrMr<Registered>>,
        mut free: KVec<FrMr<Free>>,
    ) -> Result {
        let n = self.nmrs();
        let mut mapped = KVec::with_capacity(n as usize, GFP_KERNEL)?;
        let mut err = None;
        for s in self.spans.iter() {
            let Some(mr) = free.pop() else {
                err = Some(EINVAL);
                break;
            };
            match mr.map(&self.sgl_span(s)) {
                Ok(m) => mapped.push(m, GFP_KERNEL)?,
                Err((mr, e)) => {
                    res.pool.put_free(mr);
                    err = Some(e);
                    break;
                }
            }
        }
        for mr in free.drain_all() {
            res.pool.put_free(mr);
        }
        if let Some(e) = err {
            for m in mapped.drain_all() {
                res.pool.put_free(m.unmap());
            }
            return Err(e);
        }
        out.reserve(n as usize, GFP_KERNEL)?;
        let mut r = Ok(());
        for m in mapped.drain_all() {
            let (reg, key) = res.pool.register(m);
            r = r.and_then(|()| chain.reg(&reg, key, access));
            out.push(reg, GFP_KERNEL)?;
        }
        if r.is_err() {
            // Nothing was posted: give the MRs up rather than guess their state.
            for reg in out.drain_all() {
                res.pool.destroy(reg.into_handle());
            }
        }
        r
    }
}

/// Writes the pattern of `seed` into the region's buffer unless `check` is
/// [`Check::None`].
pub(crate) fn write_pattern(region: &Region, seed: u32, check: Check) -> Result {
    if check == Check::None {
        return Ok(());
    }
    region.with_cpu(|b| b.fill(|o| pattern(seed, o)))
}

/// Fills a buffer about to be sent: the pattern of `seed`, or zeros with [`Check::None`],
/// so a reused buffer never carries the bytes of an earlier transfer (another peer's).
pub(crate) fn fill(region: &Region, seed: u32, check: Check) -> Result {
    if check == Check::None {
        return region.with_cpu(|b| b.fill(|_| 0));
    }
    write_pattern(region, seed, check)
}

/// The first byte `check` covers where the region's buffer differs from the pattern of
/// `seed`.
pub(crate) fn verify(region: &Region, seed: u32, check: Check) -> Result<Option<usize>> {
    if check == Check::None {
        return Ok(None);
    }
    let len = region.buffer().len();
    region.with_cpu(|b| b.first_mismatch_in(|o| check.covers(o, len), |o| pattern(seed, o)))
}

/// The first byte `check` covers where `data` differs from the pattern of `seed` (data
/// carried inline, as received: the byte at `flip`, if any, is taken as inverted, the
/// corruption test hook).
pub(crate) fn verify_bytes(
    data: &[u8],
    seed: u32,
    check: Check,
    flip: Option<usize>,
) -> Option<usize> {
    if check == Check::None {
        return None;
    }
    let len = data.len();
    data.iter().enumerate().position(|(o, &b)| {
        let b = if flip == Some(o) { !b } else { b };
        check.covers(o, len) && b != pattern(seed, o)
    })
}

/// Fills inline data about to be sent as [`fill`] does a buffer.
pub(crate) fn fill_bytes(data: &mut [u8], seed: u32, check: Check) {
    for (o, b) in data.iter_mut().enumerate() {
        *b = if check == Check::None {
            0
        } else {
            pattern(seed, o)
        };
    }
}

/// What a peer is told about registered MRs: bytes, never pages.
pub(crate) fn advertise(regs: &[FrMr<Registered>]) -> Result<Regs> {
    let mut out = Regs::new();
    for r in regs {
        let h = r.handle();
        let ok = out.push(Reg {
            addr: h.iova(),
            len: u32::try_from(h.length()).map_err(|_| EINVAL)?,
            rkey: r.rkey(),
        });
        if !ok {
            return Err(EMSGSIZE);
        }
    }
    Ok(out)
}

/// Appends the RDMA WRITEs that move `local` (registered, lengths `local_lens`) into the
/// peer's `remote` registrations: one work request per piece.
pub(crate) fn writes(
    chain: &mut SendChain,
    local: &[FrMr<Registered>],
    local_lens: &[u64],
    remote: &[Reg],
) -> Result {
    let mut rl = KVec::with_capacity(remote.len(), GFP_KERNEL)?;
    for r in remote {
        rl.push(u64::from(r.len), GFP_KERNEL)?;
    }
    for p in frag::pieces(local_lens, &rl) {
        let dst = &remote[p.b];
        chain.rdma(
            crate::verbs::RdmaOp::Write,
            dst.addr + p.b_off,
            dst.rkey,
            [(&local[p.a], p.a_off, p.len as u32)],
        )?;
    }
    Ok(())
}

/// Appends the source's side of a transfer to `chain`: the REG_MRs of `region` (with the
/// MRs `taken` from the pool, or new ones if none), the RDMA WRITEs into the peer's `remote`
/// registrations, a fence, and the LOCAL_INVs of the local MRs. The registered MRs go to
/// `local` until they are invalidating, then to `inv`.
pub(crate) fn source_chain(
    res: &DevRes,
    region: &Region,
    remote: &[Reg],
    taken: KVec<FrMr<Free>>,
    chain: &mut SendChain,
    local: &mut KVec<FrMr<Registered>>,
    inv: &mut KVec<FrMr<Invalidating>>,
) -> Result {
    if taken.is_empty() {
        region.register(res, Access::LOCAL_READ, chain, local, None)?;
    } else {
        region.register_taken(res, Access::LOCAL_READ, chain, local, taken)?;
    }
    writes(chain, local, region.lens(), remote)?;
    chain.fence();
    invalidate(res, local, None, chain, inv)
}

/// Invalidates every MR of `regs` except the one whose rkey the peer invalidated; the
/// LOCAL_INVs go to `chain`, the MRs (all `Invalidating` or done) to `inv`/`done`.
pub(crate) fn invalidate(
    res: &DevRes,
    regs: &mut KVec<FrMr<Registered>>,
    remote_inv: Option<u32>,
    chain: &mut SendChain,
    inv: &mut KVec<FrMr<Invalidating>>,
) -> Result {
    for reg in regs.drain_all() {
        let reg = match remote_inv {
            Some(rkey) => match res.pool.remotely_invalidated(reg, rkey) {
                Ok(done) => {
                    res.pool.put(done);
                    continue;
                }
                Err(reg) => reg,
            },
            None => reg,
        };
        let (i, rkey) = res.pool.invalidate(reg);
        chain.local_inv(&i, rkey)?;
        inv.push(i, GFP_KERNEL)?;
    }
    Ok(())
}
