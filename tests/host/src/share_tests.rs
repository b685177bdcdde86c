// SPDX-License-Identifier: GPL-2.0

//! Tests of `src/rules/share.rs`: a peer's share, its charges, the serving side's reserve.

use crate::rules::share::*;
use proptest::prelude::*;

fn lim() -> Limits {
    limits(1024, 1024, 8, 1 << 20, 16)
}

#[test]
fn the_default_share() {
    // A quarter of the connections; a quarter of the 768 MRs the serving side may use;
    // four full queues of 1 MiB.
    assert_eq!(
        lim(),
        Limits {
            conns: 256,
            mrs: 192,
            bytes: 32 << 20
        }
    );
    // Small pools and few connections: room for one transfer and two connections still.
    let l = limits(4, 1, 8, 1 << 20, 16);
    assert_eq!((l.conns, l.mrs), (2, 16));
}

#[test]
fn the_serving_side_leaves_the_nodes_own_transfers_a_quarter() {
    assert_eq!(serve_reserve(1024, 16), 256);
    assert_eq!(serve_reserve(1024, 1000), 24);
    // A pool smaller than a transfer and the reserve: no reserve, as before.
    assert_eq!(serve_reserve(4, 4), 0);
    assert_eq!(serve_reserve(1, 1), 0);
    assert_eq!(serve_reserve(8, 16), 0);
}

#[test]
fn charges_within_the_share_all_or_nothing() {
    let u = Usage::new();
    let l = lim();
    for _ in 0..32 {
        u.charge(&l, 6, 1 << 20).unwrap();
    }
    // 192 MRs and 32 MiB held: the next is refused, and takes nothing.
    assert_eq!(u.charge(&l, 1, 0), Err(Over::Mrs));
    u.release(6, 1 << 20);
    assert_eq!(u.charge(&l, 1, 2 << 20), Err(Over::Bytes));
    assert_eq!(u.held(), (0, 186, 31 << 20));
    u.charge(&l, 6, 1 << 20).unwrap();
    for _ in 0..32 {
        u.release(6, 1 << 20);
    }
    assert!(u.idle());
}

#[test]
fn connections_within_the_share() {
    let u = Usage::new();
    let l = Limits {
        conns: 3,
        mrs: 1,
        bytes: 1,
    };
    for _ in 0..3 {
        u.connect(&l).unwrap();
    }
    assert_eq!(u.connect(&l), Err(Over::Conns));
    u.disconnect();
    u.connect(&l).unwrap();
    for _ in 0..5 {
        u.disconnect();
    }
    assert!(u.idle());
}

proptest! {
    /// Whatever the order of charges and releases, what is held never passes the share and
    /// is exactly what was charged and not given back.
    #[test]
    fn held_is_charged_minus_released(ops in proptest::collection::vec((any::<bool>(), 1u32..40, 1u64..(8 << 20)), 1..200)) {
        let u = Usage::new();
        let l = lim();
        let mut taken: Vec<(u32, u64)> = Vec::new();
        for (take, mrs, bytes) in ops {
            if take || taken.is_empty() {
                if u.charge(&l, mrs, bytes).is_ok() {
                    taken.push((mrs, bytes));
                }
            } else {
                let (m, b) = taken.remove(0);
                u.release(m, b);
            }
            let (_, mrs, bytes) = u.held();
            prop_assert!(mrs <= l.mrs && bytes <= l.bytes);
            prop_assert_eq!(mrs, taken.iter().map(|t| t.0).sum::<u32>());
            prop_assert_eq!(bytes, taken.iter().map(|t| t.1).sum::<u64>());
        }
    }
}
