// SPDX-License-Identifier: GPL-2.0

//! Tests of `src/rules/budget.rs`.

use crate::rules::{
    budget::{figures, per_transfer_with, sink, source, sq_depth, Figures, Refused, SqBudget, Wrs},
    frag::Geometry,
};
use proptest::prelude::*;

/// o2iblnd's send queue for the same queue depth: (1 + max_frags + 2) * queue_depth.
fn o2iblnd_sq(max_frags: u32, queue_depth: u32) -> u32 {
    (1 + max_frags + 2) * queue_depth
}

#[test]
fn one_mib_on_rxe_needs_four_wrs_at_the_source() {
    let geo = Geometry::new(4096, 512, false).unwrap();
    let mrs = geo.max_mrs_for(1 << 20);
    assert_eq!(mrs, 1);
    let src = source(mrs, 1);
    assert_eq!(
        src,
        Wrs {
            reg: 1,
            rdma: 1,
            inv: 1,
            send: 1
        }
    );
    assert_eq!(src.total(), 4);
    assert_eq!(sink(1, true).total(), 2);
    assert_eq!(sink(1, false).total(), 3);
    assert_eq!(per_transfer_with(1, 1).total(), 4);
}

#[test]
fn sq_depth_at_queue_depth_8_is_under_40_against_o2iblnd_2080() {
    let d = sq_depth(8, per_transfer_with(1, 1).total()).unwrap();
    assert_eq!(d, 8 * 4 + 2 + 1);
    assert!(d <= 40);
    assert_eq!(o2iblnd_sq(257, 8), 2080);
}

#[test]
fn figures_for_rxe_at_the_defaults_and_for_64k_pages() {
    let rxe = Geometry::new(4096, 257, false).unwrap();
    // One MR here, up to 16 registrations at the peer: REG, 16 RDMA WRITEs, LOCAL_INV,
    // SEND a transfer.
    assert_eq!(
        figures(&rxe, 1 << 20, 8, 16),
        Some(Figures {
            mrs: 1,
            wrs: 19,
            sq_depth: 8 * 19 + 3,
            o2iblnd_sq_depth: 2080
        })
    );
    // A peer that advertises one registration: 4 work requests, as a node to itself.
    assert_eq!(
        figures(&rxe, 1 << 20, 8, 1).map(|f| (f.wrs, f.sq_depth)),
        Some((4, 35))
    );
    // A 64 KiB-page node: the same bytes, the same figures, and o2iblnd's count shrinks
    // because its fragments are pages.
    let arm = Geometry::new(65536, 17, false).unwrap();
    let f = figures(&arm, 1 << 20, 8, 16).unwrap();
    assert_eq!((f.mrs, f.wrs, f.sq_depth), (1, 19, 155));
    assert_eq!(f.o2iblnd_sq_depth, (1 + 17 + 2) * 8);
    assert_eq!(figures(&rxe, u64::MAX / 2, u32::MAX, 16), None);
}

#[test]
fn bigger_payloads_grow_by_mrs_not_pages() {
    let geo = Geometry::new(4096, 512, false).unwrap();
    // 16 MiB at a bad offset: 4097 pages, 9 MRs of 512 pages.
    let mrs = geo.max_mrs_for(16 << 20);
    assert_eq!(mrs, 9);
    // REG 9 + at most 17 RDMA + INV 9 + SEND 1.
    assert_eq!(per_transfer_with(mrs, mrs).total(), 36);
}

#[test]
fn admission_never_exceeds_capacity() {
    let mut b = SqBudget::new(10);
    assert_eq!(b.capacity(), 9);
    assert_eq!(b.admit(4), Ok(()));
    assert_eq!(b.admit(4), Ok(()));
    assert_eq!(b.admit(4), Err(Refused::Busy));
    assert_eq!(b.admit(10), Err(Refused::TooLarge));
    assert!(b.release(4));
    assert_eq!(b.admit(4), Ok(()));
    assert_eq!(b.used(), 8);
    assert!(!b.release(9));
    assert_eq!(b.used(), 8);
}

#[test]
fn overflow_is_reported() {
    assert_eq!(sq_depth(u32::MAX, 2), None);
    assert_eq!(sq_depth(1, u32::MAX), None);
}

proptest! {
    #[test]
    fn random_admit_release_keeps_the_invariant(
        cap in 1u32..200,
        ops in prop::collection::vec((any::<bool>(), 0u32..50), 0..200),
    ) {
        let mut b = SqBudget::new(cap);
        let mut in_flight: Vec<u32> = Vec::new();
        for (admit, n) in ops {
            if admit {
                match b.admit(n) {
                    Ok(()) => in_flight.push(n),
                    Err(Refused::TooLarge) => prop_assert!(n > cap - 1),
                    Err(Refused::Busy) => prop_assert!(n + b.used() > b.capacity()),
                }
            } else if let Some(n) = in_flight.pop() {
                prop_assert!(b.release(n));
            }
            prop_assert!(b.used() <= b.capacity());
            prop_assert_eq!(b.used(), in_flight.iter().sum::<u32>());
        }
    }

    #[test]
    fn per_transfer_covers_source_and_sink(mrs in 1u32..64, remote in any::<bool>()) {
        let p = per_transfer_with(mrs, mrs);
        prop_assert!(p.total() >= sink(mrs, remote).total());
        prop_assert!(p.total() >= source(mrs, 2 * mrs - 1).total());
    }
}

proptest! {
    /// The budget of a transfer covers its chain however many registrations the peer
    /// advertised (up to the negotiated `max_regs`), not only this side's MRs: a sink that
    /// cuts the buffer into more pieces than the source makes the chain longer.
    #[test]
    fn per_transfer_with_covers_any_peer_split(
        a in prop::collection::vec(1u64..5000, 1..12),
        cuts in prop::collection::vec(1u64..5000, 1..32),
    ) {
        let b = crate::frag_tests::cut(a.iter().sum(), &cuts);
        let pieces = crate::rules::frag::pieces(&a, &b).count() as u32;
        let local = a.len() as u32;
        let wrs = per_transfer_with(local, b.len() as u32);
        // REG + RDMA + LOCAL_INV + SEND of the source.
        prop_assert!(wrs.total() > local + pieces + local);
        prop_assert!(wrs.rdma >= pieces);
        // A budget of this side's MRs only (as it once was) is short whenever the peer
        // splits finer.
        if pieces > 2 * local - 1 {
            prop_assert!(per_transfer_with(local, local).rdma < pieces);
        }
    }
}
