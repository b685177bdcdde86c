// SPDX-License-Identifier: GPL-2.0

//! Fragment math: how a buffer of any byte offset and length is split into registrations.
//!
//! Pure logic: no `kernel::`, compiled by the host tests too.
//!
//! A buffer is a list of [`Seg`]s (address and length, in order). One fast-registration MR
//! maps a list of pages, so without `IB_MR_TYPE_SG_GAPS` (rxe, siw) the segments it covers
//! must follow the rules of `ib_map_mr_sg()` / `ib_sg_to_pages()`:
//!
//! - the first segment may start anywhere in a page;
//! - every later segment either continues the previous one byte for byte, or starts on a
//!   page boundary right after a segment that ended on one;
//! - the last segment may end anywhere;
//! - the MR covers at most `max_pages` pages.
//!
//! [`plan`] cuts the buffer greedily into the fewest runs that obey these rules, splitting a
//! segment at a page boundary when an MR is full, so there is no "too many fragments"
//! failure for any buffer: a 1 MiB buffer at offset 1 spans 257 pages of 4 KiB and needs one
//! MR of 512 pages (rxe) or two of 256. What is advertised to a peer for each registration
//! is in bytes (address, length, key), never in pages, so peers with different page sizes
//! agree by construction.

/// A piece of a buffer: `len` bytes at `addr`.
///
/// `addr` is the address the device will use (a DMA address); only its offset in a page and
/// whether it continues the previous segment matter here.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Seg {
    /// Address of the first byte.
    pub(crate) addr: u64,
    /// Number of bytes; zero-length segments are skipped.
    pub(crate) len: u32,
}

/// What one MR can map on a device.
///
/// # Invariants
///
/// `page_size` is a power of two, `max_pages >= 1`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Geometry {
    page_size: u64,
    max_pages: u32,
    sg_gaps: bool,
}

impl Geometry {
    /// MRs of `max_pages` pages of `page_size` bytes; `sg_gaps` when the device can register
    /// scatter lists with gaps (`IB_MR_TYPE_SG_GAPS`), in which case `max_pages` bounds the
    /// number of contiguous runs per MR instead.
    ///
    /// Returns `None` unless `page_size` is a power of two and `max_pages` is at least 1.
    pub(crate) const fn new(page_size: u64, max_pages: u32, sg_gaps: bool) -> Option<Self> {
        if !page_size.is_power_of_two() || max_pages == 0 {
            return None;
        }
        // INVARIANT: checked above.
        Some(Self {
            page_size,
            max_pages,
            sg_gaps,
        })
    }

    /// The same registrations, but of at most `pages` pages each (at least 1, at most
    /// what the MRs map): a side that cuts its buffers finer than its device must.
    pub(crate) const fn at_most(self, pages: u32) -> Self {
        let max_pages = if pages == 0 {
            1
        } else if pages < self.max_pages {
            pages
        } else {
            self.max_pages
        };
        // INVARIANT: 1 <= max_pages; the page size is unchanged.
        Self { max_pages, ..self }
    }

    /// The page size of the registrations.
    pub(crate) const fn page_size(&self) -> u64 {
        self.page_size
    }

    /// Pages (or runs, with gaps) one MR can map.
    pub(crate) const fn max_pages(&self) -> u32 {
        self.max_pages
    }

    /// Pages that `bytes` bytes from the start of a page cover.
    pub(crate) const fn pages_of(&self, bytes: u64) -> u64 {
        let ps = self.page_size();
        (bytes >> ps.trailing_zeros()) + if bytes & (ps - 1) != 0 { 1 } else { 0 }
    }

    /// MRs that `pages` pages need (division without a zero-divisor path: `max_pages >= 1`).
    const fn mrs_of(&self, pages: u64) -> u64 {
        let m = self.max_pages as u64;
        if m == 0 {
            return pages;
        }
        pages / m + if pages.is_multiple_of(m) { 0 } else { 1 }
    }

    /// The largest number of MRs a contiguous buffer of `len` bytes can need, whatever its
    /// offset in a page. Without gaps support this also holds for any buffer whose interior
    /// segment boundaries fall on page boundaries (a list of whole pages with a partial first
    /// and last one, as the page cache and the selftest build).
    pub(crate) const fn max_mrs_for(&self, len: u64) -> u32 {
        if len == 0 {
            return 0;
        }
        // Worst at the last byte of a page: (len + page_size - 2) / page_size + 1 pages.
        let pages = ((len + self.page_size - 2) >> self.page_size.trailing_zeros()) + 1;
        let mrs = self.mrs_of(pages);
        if mrs > u32::MAX as u64 {
            u32::MAX
        } else {
            mrs as u32
        }
    }
}

/// One registration of a plan: `len` bytes starting `seg_off` bytes into segment `seg`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Span {
    /// Index of the first segment it covers.
    pub(crate) seg: usize,
    /// Byte offset in that segment where it starts.
    pub(crate) seg_off: u32,
    /// Byte offset in the whole buffer where it starts.
    pub(crate) buf_off: u64,
    /// Bytes it covers.
    pub(crate) len: u64,
    /// Pages it maps (runs, with gaps support).
    pub(crate) pages: u32,
    /// Segment pieces it covers (scatter list entries needed to map it).
    pub(crate) nents: u32,
}

/// Splits `segs` into registrations; see the module documentation for the rules.
///
/// Yields the registrations in buffer order; together they cover every byte exactly once.
pub(crate) fn plan(segs: &[Seg], geo: Geometry) -> Plan<'_> {
    Plan {
        segs,
        geo,
        seg: 0,
        off: 0,
        buf_off: 0,
    }
}

/// Iterator returned by [`plan`].
#[derive(Clone, Debug)]
pub(crate) struct Plan<'a> {
    segs: &'a [Seg],
    geo: Geometry,
    /// Next segment to place, and bytes of it already placed.
    seg: usize,
    off: u32,
    /// Bytes of the buffer already placed.
    buf_off: u64,
}

impl Plan<'_> {
    /// Skips exhausted and empty segments; returns the current one, if any.
    fn current(&mut self) -> Option<Seg> {
        while let Some(s) = self.segs.get(self.seg) {
            if self.off < s.len {
                return Some(*s);
            }
            self.seg += 1;
            self.off = 0;
        }
        None
    }
}

impl Iterator for Plan<'_> {
    type Item = Span;

    fn next(&mut self) -> Option<Span> {
        let first = self.current()?;
        // Page arithmetic with shifts and masks: `page_size` is a power of two.
        let shift = self.geo.page_size.trailing_zeros();
        let off_mask = self.geo.page_size - 1;
        let mut span = Span {
            seg: self.seg,
            seg_off: self.off,
            buf_off: self.buf_off,
            len: 0,
            pages: 0,
            nents: 0,
        };
        // End address of what the span covers so far (meaningful once `span.len > 0`).
        let mut end = first.addr + u64::from(self.off);
        while let Some(s) = self.current() {
            let a = s.addr + u64::from(self.off);
            let rem = s.len - self.off;
            let contiguous = span.len > 0 && a == end;
            let take;
            if self.geo.sg_gaps {
                // Each contiguous run is one entry of the MR; runs have no length limit.
                if !contiguous {
                    if span.pages == self.geo.max_pages {
                        break;
                    }
                    span.pages += 1;
                }
                take = rem;
            } else {
                if span.len > 0 && !contiguous && (end & off_mask != 0 || a & off_mask != 0) {
                    // A gap in the middle of a page: ib_map_mr_sg() would stop here.
                    break;
                }
                // First page this piece may add: the one after the last page already
                // mapped when it continues the span, else its own first page.
                let first_new = if contiguous {
                    ((end - 1) >> shift) + 1
                } else {
                    a >> shift
                };
                let room = u64::from(self.geo.max_pages - span.pages);
                let limit = (first_new + room) << shift;
                if limit <= a {
                    // The MR is full and this piece starts on a new page.
                    break;
                }
                take = rem.min((limit - a).min(u64::from(u32::MAX)) as u32);
                let last_page = (a + u64::from(take) - 1) >> shift;
                if last_page >= first_new {
                    span.pages += (last_page - first_new + 1) as u32;
                }
            }
            span.len += u64::from(take);
            span.nents += 1;
            end = a + u64::from(take);
            self.off += take;
            self.buf_off += u64::from(take);
            if self.off < s.len {
                // The MR is full in the middle of this segment.
                break;
            }
        }
        Some(span)
    }
}

/// A piece of a transfer: `len` bytes at offset `a_off` of registration `a` on one side and
/// offset `b_off` of registration `b` on the other.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Piece {
    /// Registration index on the first side.
    pub(crate) a: usize,
    /// Offset in it.
    pub(crate) a_off: u64,
    /// Registration index on the second side.
    pub(crate) b: usize,
    /// Offset in it.
    pub(crate) b_off: u64,
    /// Bytes.
    pub(crate) len: u64,
}

/// Walks two sets of registrations covering the same bytes (their lengths, in buffer
/// order) and yields the pieces where they overlap, in order. Stops at the shorter side.
pub(crate) fn pieces<'a>(a: &'a [u64], b: &'a [u64]) -> impl Iterator<Item = Piece> + 'a {
    let (mut i, mut j, mut ao, mut bo) = (0usize, 0usize, 0u64, 0u64);
    core::iter::from_fn(move || {
        while i < a.len() && ao == a[i] {
            i += 1;
            ao = 0;
        }
        while j < b.len() && bo == b[j] {
            j += 1;
            bo = 0;
        }
        if i >= a.len() || j >= b.len() {
            return None;
        }
        let len = (a[i] - ao).min(b[j] - bo);
        let p = Piece {
            a: i,
            a_off: ao,
            b: j,
            b_off: bo,
            len,
        };
        ao += len;
        bo += len;
        Some(p)
    })
}
