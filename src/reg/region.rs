// SPDX-License-Identifier: GPL-2.0

//! A registrable region: a page buffer of any offset and length, DMA-mapped on one device,
//! with its registration plan, and the steps that register and invalidate it.

use kernel::{
    prelude::*,
    sync::Arc, //
};

use crate::{
    reg::pool::Pool,
    rules::{
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
        wire::{
            Check,
            Reg,
            Regs, //
        },
    },
    verbs::{
        Access,
        Buffer,
        DmaSgl,
        FrMr,
        Pd,
        SendChain,
        SglSpan, //
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
    /// Allocates `len` bytes at `offset` into their first page and maps them on `pd`'s
    /// device, to be registered in pieces of `geo` (at most what the device's MRs map).
    pub(crate) fn new(pd: &Pd, geo: Geometry, offset: usize, len: usize) -> Result<Self> {
        let buf = Buffer::new(offset, len)?;
        let sgl = Arc::new(DmaSgl::new(pd.device(), buf)?, GFP_KERNEL)?;
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
    /// is posted: the MRs not registered go back to the pool, those registered are
    /// destroyed (see [`Region::register_taken`]).
    pub(crate) fn register(
        &self,
        pool: &Pool,
        access: Access,
        chain: &mut SendChain,
        out: &mut KVec<FrMr<Registered>>,
    ) -> Result {
        let free = self.take(pool, 0)?;
        self.register_taken(pool, access, chain, out, free)
    }

    /// Takes the MRs the region needs from the pool, leaving `reserve` (see
    /// [`crate::reg::pool::Pool::reserve`]); `EAGAIN` when they cannot be had now.
    pub(crate) fn take(&self, pool: &Pool, reserve: u32) -> Result<KVec<FrMr<Free>>> {
        let n = self.nmrs();
        let mut free: KVec<FrMr<Free>> = KVec::with_capacity(n as usize, GFP_KERNEL)?;
        pool.get_leaving(n, reserve, &mut free)?;
        Ok(free)
    }

    /// [`Region::register`] with MRs taken by [`Region::take`]. Each MR is mapped and
    /// registered in turn, into `out` (whose room a transfer's record reserved: nothing is
    /// allocated then); on failure those registered are destroyed rather than reused, their
    /// REG_MRs never posted.
    pub(crate) fn register_taken(
        &self,
        pool: &Pool,
        access: Access,
        chain: &mut SendChain,
        out: &mut KVec<FrMr<Registered>>,
        mut free: KVec<FrMr<Free>>,
    ) -> Result {
        let n = self.nmrs();
        // Room the caller (a transfer's record, a served transfer's lists) reserved
        // already: no allocation then (and never a sleeping one: callers hold a spinlock).
        out.reserve(n as usize, GFP_NOWAIT)?;
        let start = out.len();
        let mut r = Ok(());
        for s in self.spans.iter() {
            let Some(mr) = free.pop() else {
                r = Err(EINVAL);
                break;
            };
            match mr.map(&self.sgl_span(s)) {
                Ok(m) => {
                    let (reg, key) = pool.register(m);
                    let appended = chain.reg(&reg, key, access);
                    // Within the capacity reserved above.
                    let _ = out.push(reg, GFP_NOWAIT);
                    if let Err(e) = appended {
                        r = Err(e);
                        break;
                    }
                }
                Err((mr, e)) => {
                    pool.put_free(mr);
                    r = Err(e);
                    break;
                }
            }
        }
        for mr in free.drain_all() {
            pool.put_free(mr);
        }
        if r.is_err() {
            // Nothing was posted: give the MRs up rather than guess their state.
            while out.len() > start {
                if let Some(reg) = out.pop() {
                    pool.destroy(reg.into_handle());
                }
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
    // A message carries at most `MAX_REGS` registrations: no allocation per transfer.
    let mut lens = [0u64; crate::rules::wire::MAX_REGS];
    let rl = lens.get_mut(..remote.len()).ok_or(EINVAL)?;
    for (l, r) in rl.iter_mut().zip(remote) {
        *l = u64::from(r.len);
    }
    for p in frag::pieces(local_lens, rl) {
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
    pool: &Pool,
    region: &Region,
    remote: &[Reg],
    taken: KVec<FrMr<Free>>,
    chain: &mut SendChain,
    local: &mut KVec<FrMr<Registered>>,
    inv: &mut KVec<FrMr<Invalidating>>,
) -> Result {
    if taken.is_empty() {
        region.register(pool, Access::LOCAL_READ, chain, local)?;
    } else {
        region.register_taken(pool, Access::LOCAL_READ, chain, local, taken)?;
    }
    writes(chain, local, region.lens(), remote)?;
    chain.fence();
    invalidate(pool, local, None, chain, inv)
}

/// Invalidates every MR of `regs` except the one whose rkey the peer invalidated; the
/// LOCAL_INVs go to `chain`, the MRs (all `Invalidating` or done) to `inv`/`done`.
pub(crate) fn invalidate(
    pool: &Pool,
    regs: &mut KVec<FrMr<Registered>>,
    remote_inv: Option<u32>,
    chain: &mut SendChain,
    inv: &mut KVec<FrMr<Invalidating>>,
) -> Result {
    for reg in regs.drain_all() {
        let reg = match remote_inv {
            Some(rkey) => match pool.remotely_invalidated(reg, rkey) {
                Ok(done) => {
                    pool.put(done);
                    continue;
                }
                Err(reg) => reg,
            },
            None => reg,
        };
        let (i, rkey) = pool.invalidate(reg);
        chain.local_inv(&i, rkey)?;
        // Within the room the caller reserved (see `register_taken`).
        inv.push(i, GFP_NOWAIT)?;
    }
    Ok(())
}
