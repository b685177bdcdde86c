// SPDX-License-Identifier: GPL-2.0

//! Tests of `src/rules/frag.rs`: every plan is checked against a model of the kernel's
//! `ib_sg_to_pages()` (drivers/infiniband/core/verbs.c), the function that decides what an
//! MR really maps.

use crate::rules::frag::{pieces, plan, Geometry, Piece, Seg, Span};
use proptest::prelude::*;

/// Model of the RDMA WRITE work requests [`pieces`] gives (the module no longer counts them
/// this way): the work requests that move a buffer between two sets of registrations, given the lengths of the remote ones (`sink`) and of the local ones
/// (`source`), in buffer order, and the scatter/gather entries one work request may carry.
///
/// A work request targets one remote registration and gathers from up to `max_sge` local
/// pieces; a local registration that straddles two remote ones contributes a piece to each.
/// Returns `None` if the two sides do not cover the same number of bytes, or `max_sge` is 0.
fn rdma_wr_count(
    sink: impl IntoIterator<Item = u64>,
    source: impl IntoIterator<Item = u64>,
    max_sge: u32,
) -> Option<u32> {
    if max_sge == 0 {
        return None;
    }
    let mut source = source.into_iter().filter(|&l| l > 0);
    let mut src_left = 0u64;
    let mut wrs = 0u32;
    for mut sink_left in sink.into_iter().filter(|&l| l > 0) {
        let mut pieces = 0u32;
        while sink_left > 0 {
            if src_left == 0 {
                src_left = source.next()?;
            }
            let n = sink_left.min(src_left);
            sink_left -= n;
            src_left -= n;
            pieces += 1;
        }
        wrs = wrs.checked_add(pieces.div_ceil(max_sge))?;
    }
    if src_left > 0 || source.next().is_some() {
        return None;
    }
    Some(wrs)
}

/// Model of `ib_sg_to_pages()` with a `set_page` that fails past `max_pages` pages:
/// returns (entries mapped, bytes mapped, pages used).
fn sg_to_pages(sgl: &[Seg], page_size: u64, max_pages: u32) -> (usize, u64, u32) {
    let mask = !(page_size - 1);
    let mut last_end = 0u64;
    let mut last_page_off = 0u64;
    let mut length = 0u64;
    let mut npages = 0u32;
    for (i, sg) in sgl.iter().enumerate() {
        let dma = sg.addr;
        let end = dma + u64::from(sg.len);
        let mut page = dma & mask;
        if i > 0 && (last_page_off != 0 || page != dma) {
            if last_end != dma {
                return (i, length, npages);
            }
            // Coalesced with the previous element: continue from the next page.
            page += page_size;
        }
        while page < end {
            if npages >= max_pages {
                return (i, length, npages); // Partial: the caller treats it as failure.
            }
            npages += 1;
            page += page_size;
        }
        length += u64::from(sg.len);
        last_end = end;
        last_page_off = end & !mask;
    }
    (sgl.len(), length, npages)
}

/// The scatter list entries of one span: its pieces of the segments.
fn entries(segs: &[Seg], span: &Span) -> Vec<Seg> {
    let mut out = Vec::new();
    let mut left = span.len;
    let mut i = span.seg;
    let mut off = span.seg_off;
    while left > 0 {
        let s = segs[i];
        let n = u64::from(s.len - off).min(left);
        if n > 0 {
            out.push(Seg {
                addr: s.addr + u64::from(off),
                len: n as u32,
            });
        }
        left -= n;
        i += 1;
        off = 0;
    }
    out
}

/// Checks every property a plan must have; returns the spans.
fn check_plan(segs: &[Seg], geo: Geometry) -> Vec<Span> {
    // Geometry does not say: probe with two separate runs in one MR.
    let gaps = plan(
        &[
            Seg { addr: 1, len: 1 },
            Seg {
                addr: 1 << 40,
                len: 1,
            },
        ],
        geo,
    )
    .count()
        == 1;
    let spans: Vec<Span> = plan(segs, geo).collect();
    let total: u64 = segs.iter().map(|s| u64::from(s.len)).sum();
    // The spans cover the buffer exactly once, in order.
    let mut at = 0u64;
    for sp in &spans {
        assert!(sp.len > 0, "empty span {sp:?}");
        assert_eq!(sp.buf_off, at, "gap or overlap before {sp:?}");
        at += sp.len;
    }
    assert_eq!(at, total);
    for sp in &spans {
        let sgl = entries(segs, sp);
        assert_eq!(sgl.len() as u32, sp.nents, "{sp:?}");
        assert!(sp.pages <= geo.max_pages(), "{sp:?}");
        if !gaps {
            // The kernel maps the whole span, and needs exactly the pages counted.
            let (n, len, pages) = sg_to_pages(&sgl, geo.page_size(), geo.max_pages());
            assert_eq!(
                n,
                sgl.len(),
                "ib_sg_to_pages stops early on {sp:?}: {sgl:x?}"
            );
            assert_eq!(len, sp.len);
            assert_eq!(pages, sp.pages, "{sp:?}");
        }
    }
    // Greedy is maximal: no span could have taken the first byte of the next one.
    if !gaps {
        for w in spans.windows(2) {
            let mut sgl = entries(segs, &w[0]);
            let next = entries(segs, &w[1]);
            let first = next[0];
            let one = first.len.min(1);
            sgl.push(Seg {
                addr: first.addr,
                len: one,
            });
            let (n, _, _) = sg_to_pages(&sgl, geo.page_size(), geo.max_pages());
            assert!(n < sgl.len(), "span {:?} could have been longer", w[0]);
        }
    }
    spans
}

/// A virtually contiguous buffer of `len` bytes at `off` into a page, given as the list of
/// its pages (scattered in memory), as the selftest and the page cache present buffers.
fn page_list(off: u64, len: u64, ps: u64, scatter: u64) -> Vec<Seg> {
    let mut segs = Vec::new();
    let mut left = len;
    let mut in_page = off % ps;
    let mut page = 0u64;
    while left > 0 {
        let n = (ps - in_page).min(left);
        // Pages land far apart: (page * scatter) keeps them non-adjacent when scatter > 1.
        let base = 0x1_0000_0000 + page * ps * scatter;
        segs.push(Seg {
            addr: base + in_page,
            len: n as u32,
        });
        left -= n;
        in_page = 0;
        page += 1;
    }
    segs
}

#[test]
fn lu_5718_one_mib_at_offset_one() {
    let segs = page_list(1, 1 << 20, 4096, 3);
    assert_eq!(segs.len(), 257);
    let rxe = Geometry::new(4096, 512, false).unwrap();
    let spans = check_plan(&segs, rxe);
    assert_eq!(spans.len(), 1);
    assert_eq!(spans[0].pages, 257);
    let siw = Geometry::new(4096, 256, false).unwrap();
    let spans = check_plan(&segs, siw);
    assert_eq!(spans.len(), 2);
    assert_eq!((spans[0].pages, spans[1].pages), (256, 1));
    // The split falls on a page boundary of the buffer.
    assert_eq!(spans[0].len, 256 * 4096 - 1);
}

#[test]
fn issue_matrix_on_4k_pages() {
    let geo = Geometry::new(4096, 512, false).unwrap();
    for off in [0u64, 1, 8, 4095, 4096, 4097] {
        for len in [
            1u64,
            4095,
            4096,
            4097,
            65536,
            1048575,
            1048576,
            1048577,
            16 << 20,
        ] {
            let spans = check_plan(&page_list(off, len, 4096, 2), geo);
            let pages = (off % 4096 + len).div_ceil(4096);
            assert_eq!(
                spans.len() as u64,
                pages.div_ceil(512),
                "off {off} len {len}"
            );
            assert!(spans.len() as u32 <= geo.max_mrs_for(len));
        }
    }
}

#[test]
fn sixty_four_k_pages_need_fewer_pages_for_the_same_bytes() {
    let geo4 = Geometry::new(4096, 512, false).unwrap();
    let geo64 = Geometry::new(65536, 512, false).unwrap();
    let s4 = check_plan(&page_list(1, 1 << 20, 4096, 1), geo4);
    let s64 = check_plan(&page_list(1, 1 << 20, 65536, 1), geo64);
    assert_eq!(s4[0].pages, 257);
    assert_eq!(s64[0].pages, 17);
    // What a peer is told is the same: one registration of 1 MiB.
    assert_eq!(s4.iter().map(|s| s.len).collect::<Vec<_>>(), vec![1 << 20]);
    assert_eq!(s64.iter().map(|s| s.len).collect::<Vec<_>>(), vec![1 << 20]);
}

#[test]
fn unaligned_interior_fragment_starts_a_new_registration() {
    let geo = Geometry::new(4096, 512, false).unwrap();
    // Second segment ends mid-page, third starts on a new page elsewhere: a gap.
    let segs = [
        Seg {
            addr: 0x10_000,
            len: 4096,
        },
        Seg {
            addr: 0x20_000,
            len: 100,
        },
        Seg {
            addr: 0x30_000,
            len: 4096,
        },
        // Continues the previous one byte for byte: no gap, same registration.
        Seg {
            addr: 0x31_000,
            len: 10,
        },
    ];
    let spans = check_plan(&segs, geo);
    assert_eq!(spans.len(), 2);
    assert_eq!((spans[0].len, spans[1].len), (4196, 4106));
    assert_eq!((spans[1].seg, spans[1].seg_off), (2, 0));
}

#[test]
fn one_page_mrs_split_every_page() {
    let geo = Geometry::new(4096, 1, false).unwrap();
    let spans = check_plan(&page_list(4095, 8194, 4096, 1), geo);
    assert_eq!(
        spans.iter().map(|s| s.len).collect::<Vec<_>>(),
        vec![1, 4096, 4096, 1]
    );
}

#[test]
fn gaps_capable_device_counts_runs() {
    let geo = Geometry::new(4096, 2, true).unwrap();
    let segs = [
        Seg {
            addr: 0x10_001,
            len: 10,
        },
        Seg {
            addr: 0x20_005,
            len: 10,
        },
        Seg {
            addr: 0x20_00f,
            len: 10,
        },
        Seg {
            addr: 0x30_000,
            len: 10,
        },
    ];
    let spans = check_plan(&segs, geo);
    assert_eq!(
        spans.iter().map(|s| s.len).collect::<Vec<_>>(),
        vec![30, 10]
    );
}

#[test]
fn empty_and_zero_length_segments() {
    let geo = Geometry::new(4096, 4, false).unwrap();
    assert_eq!(plan(&[], geo).count(), 0);
    let segs = [
        Seg { addr: 5, len: 0 },
        Seg {
            addr: 4096,
            len: 10,
        },
        Seg { addr: 0, len: 0 },
    ];
    let spans = check_plan(&segs, geo);
    assert_eq!((spans.len(), spans[0].seg), (1, 1));
}

#[test]
fn geometry_rejects_bad_values() {
    assert!(Geometry::new(4095, 1, false).is_none());
    assert!(Geometry::new(4096, 0, false).is_none());
    assert!(Geometry::new(0, 1, false).is_none());
}

#[test]
fn rdma_wr_counts() {
    // One sink registration, one source registration: one WRITE.
    assert_eq!(rdma_wr_count([1 << 20], [1 << 20], 32), Some(1));
    // Two sink registrations, one source: one WRITE per sink registration.
    assert_eq!(rdma_wr_count([100, 200], [300], 1), Some(2));
    // Source straddles: 3 pieces into the first sink registration, gathered in one WR.
    assert_eq!(rdma_wr_count([300], [100, 100, 100], 32), Some(1));
    assert_eq!(rdma_wr_count([300], [100, 100, 100], 2), Some(2));
    // Mismatched totals.
    assert_eq!(rdma_wr_count([300], [100], 2), None);
    assert_eq!(rdma_wr_count([100], [300], 2), None);
    assert_eq!(rdma_wr_count([100], [100], 0), None);
}

fn geometry() -> impl Strategy<Value = Geometry> {
    (
        prop_oneof![Just(4096u64), Just(16384), Just(65536)],
        1u32..=512,
    )
        .prop_map(|(ps, mp)| Geometry::new(ps, mp, false).unwrap())
}

/// Arbitrary segment lists: runs that are sometimes contiguous, sometimes page aligned,
/// sometimes neither.
fn segments() -> impl Strategy<Value = Vec<Seg>> {
    prop::collection::vec((0u8..3, 0u64..70_000, 0u32..300_000), 1..24).prop_map(|v| {
        let mut segs: Vec<Seg> = Vec::new();
        let mut next_free = 0x1000_0000u64;
        for (kind, off, len) in v {
            let addr = match (kind, segs.last()) {
                (0, Some(p)) => p.addr + u64::from(p.len), // Contiguous.
                (1, _) => (next_free + 0xffff) & !0xffff,  // Aligned to 64 KiB.
                _ => next_free + off,                      // Anywhere.
            };
            next_free = addr + u64::from(len) + 0x10_0000;
            segs.push(Seg { addr, len });
        }
        segs
    })
}

proptest! {
    #[test]
    fn any_buffer_is_planned_within_the_rules(segs in segments(), geo in geometry()) {
        check_plan(&segs, geo);
    }

    #[test]
    fn page_lists_need_the_fewest_mrs(
        off in 0u64..65536,
        len in 1u64..(20 << 20),
        geo in geometry(),
    ) {
        let ps = geo.page_size();
        let spans = check_plan(&page_list(off, len, ps, 2), geo);
        let pages = ((off % ps) + len).div_ceil(ps);
        prop_assert_eq!(spans.len() as u64, pages.div_ceil(u64::from(geo.max_pages())));
        prop_assert!(spans.len() as u32 <= geo.max_mrs_for(len));
    }

    #[test]
    fn wr_count_is_at_least_one_per_sink_registration(
        cuts_a in prop::collection::vec(1u64..5000, 1..20),
        cuts_b in prop::collection::vec(1u64..5000, 1..20),
        max_sge in 1u32..40,
    ) {
        // Two partitions of the same total.
        let total: u64 = cuts_a.iter().sum();
        let mut b: Vec<u64> = Vec::new();
        let mut left = total;
        for c in cuts_b {
            if left == 0 { break; }
            let n = c.min(left);
            b.push(n);
            left -= n;
        }
        if left > 0 { b.push(left); }
        let n = rdma_wr_count(cuts_a.iter().copied(), b.iter().copied(), max_sge).unwrap();
        prop_assert!(n as usize >= cuts_a.len());
        // Never more than one WR per piece: pieces <= sink + source registrations - 1.
        prop_assert!((n as usize) < cuts_a.len() + b.len());
        if max_sge as usize >= b.len() + cuts_a.len() {
            prop_assert_eq!(n as usize, cuts_a.len());
        }
    }
}

#[test]
fn pieces_of_two_partitions() {
    let a = [100u64, 200];
    let b = [150u64, 150];
    let p: Vec<Piece> = pieces(&a, &b).collect();
    assert_eq!(
        p,
        vec![
            Piece {
                a: 0,
                a_off: 0,
                b: 0,
                b_off: 0,
                len: 100
            },
            Piece {
                a: 1,
                a_off: 0,
                b: 0,
                b_off: 100,
                len: 50
            },
            Piece {
                a: 1,
                a_off: 50,
                b: 1,
                b_off: 0,
                len: 150
            },
        ]
    );
    assert_eq!(pieces(&[], &b).count(), 0);
}

/// `total` bytes cut into pieces of the lengths `cuts` (the last one takes what is left):
/// another side's registrations of the same buffer.
pub(crate) fn cut(total: u64, cuts: &[u64]) -> Vec<u64> {
    let mut b = Vec::new();
    let mut left = total;
    for &c in cuts {
        if left == 0 {
            break;
        }
        let n = c.min(left);
        b.push(n);
        left -= n;
    }
    if left > 0 {
        b.push(left);
    }
    b
}

proptest! {
    #[test]
    fn pieces_cover_both_sides_in_order(
        a in prop::collection::vec(1u64..1000, 1..20),
        cuts in prop::collection::vec(1u64..1000, 1..20),
    ) {
        let total: u64 = a.iter().sum();
        let b = cut(total, &cuts);
        let ps: Vec<Piece> = pieces(&a, &b).collect();
        prop_assert_eq!(ps.iter().map(|p| p.len).sum::<u64>(), total);
        // Pieces never cross a registration boundary on either side.
        for p in &ps {
            prop_assert!(p.a_off + p.len <= a[p.a]);
            prop_assert!(p.b_off + p.len <= b[p.b]);
        }
        prop_assert_eq!(ps.len() as u32, rdma_wr_count(b.iter().copied(), a.iter().copied(), 1).unwrap());
    }
}
