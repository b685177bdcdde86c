// SPDX-License-Identifier: GPL-2.0

//! Tests of `src/rules/negotiate.rs`.

use crate::rules::{
    negotiate::*,
    wire::{ConnParams, FEATURE_CHECKSUM, FEATURE_REMOTE_INV},
};
use proptest::prelude::*;

fn local(qd: u16, regs: u16, payload: u32, stamp: u64) -> Local {
    Local {
        queue_depth: qd,
        max_regs: regs,
        max_payload: payload,
        max_msg: 4096,
        max_inline: 0,
        page_size: 4096,
        features: FEATURE_REMOTE_INV | FEATURE_CHECKSUM,
        stamp,
        port: 18515,
    }
}

/// Runs a whole negotiation: requests, rejects, lowered requests, until accept or failure.
fn negotiate(active: &Local, passive: &Local) -> Option<ConnParams> {
    let mut asked = active.params(0, 0);
    for _ in 0..10 {
        match answer(&asked, passive) {
            Answer::Accept(granted) => {
                assert!(check_accept(&asked, &granted));
                return Some(granted);
            }
            Answer::Reject(_, limits) => match on_reject(&asked, &limits) {
                Retry::With(lower) => {
                    // Values only ever go down.
                    assert!(lower.queue_depth <= asked.queue_depth);
                    assert!(lower.max_payload <= asked.max_payload);
                    assert!(lower.max_regs <= asked.max_regs);
                    assert!(lower.max_msg <= asked.max_msg);
                    assert!(lower.max_inline <= asked.max_inline);
                    assert_ne!(lower, asked);
                    // And the retry is a valid request on the wire (its inline fits its
                    // lowered messages and payload).
                    assert_eq!(ConnParams::decode(&lower.encode()), Ok(lower));
                    asked = lower;
                }
                Retry::Again(p) => asked = p,
                Retry::Fail => return None,
            },
        }
    }
    panic!("negotiation did not end");
}

#[test]
fn equal_limits_accept_at_once() {
    let a = local(8, 16, 1 << 20, 1);
    let p = local(8, 16, 1 << 20, 2);
    let req = a.params(0, 0);
    match answer(&req, &p) {
        Answer::Accept(g) => {
            assert_eq!((g.queue_depth, g.max_payload, g.max_regs), (8, 1 << 20, 16));
            assert_eq!((g.stamp, g.dst_stamp), (2, 1));
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn over_the_limit_is_rejected_with_the_reason_and_limits_then_retried_lower() {
    let a = local(32, 16, 4 << 20, 1);
    let p = local(8, 16, 1 << 20, 2);
    match answer(&a.params(0, 0), &p) {
        Answer::Reject(Reason::QueueDepth, limits) => {
            assert_eq!(limits.queue_depth, 8);
            assert_eq!(limits.max_payload, 1 << 20);
            assert_eq!(Reason::from_u8(limits.reason), Some(Reason::QueueDepth));
        }
        other => panic!("{other:?}"),
    }
    let g = negotiate(&a, &p).unwrap();
    assert_eq!((g.queue_depth, g.max_payload), (8, 1 << 20));
}

#[test]
fn accepts_granting_more_than_asked_are_refused() {
    let asked = local(8, 16, 1 << 20, 1).params(0, 0);
    let ok = match answer(&asked, &local(64, 64, 16 << 20, 2)) {
        Answer::Accept(g) => g,
        other => panic!("{other:?}"),
    };
    assert!(check_accept(&asked, &ok));
    for bad in [
        ConnParams {
            queue_depth: 9,
            ..ok
        },
        ConnParams {
            max_payload: (1 << 20) + 1,
            ..ok
        },
        ConnParams { max_regs: 17, ..ok },
        ConnParams { dst_stamp: 7, ..ok },
        ConnParams {
            queue_depth: 0,
            ..ok
        },
        ConnParams { version: 1, ..ok },
    ] {
        assert!(!check_accept(&asked, &bad), "{bad:?}");
    }
}

#[test]
fn stale_requests_are_rejected_and_retried_with_the_new_stamp() {
    let p = local(8, 16, 1 << 20, 42);
    let req = local(8, 16, 1 << 20, 1).params(41, 0);
    let limits = match answer(&req, &p) {
        Answer::Reject(Reason::Stale, l) => l,
        other => panic!("{other:?}"),
    };
    match on_reject(&req, &limits) {
        Retry::Again(r) => assert_eq!(r.dst_stamp, 42),
        other => panic!("{other:?}"),
    }
}

#[test]
fn version_mismatch_and_unknown_reasons_fail() {
    let p = local(8, 16, 1 << 20, 2);
    let req = ConnParams {
        version: 9,
        ..local(8, 16, 1 << 20, 1).params(0, 0)
    };
    let limits = match answer(&req, &p) {
        Answer::Reject(Reason::Version, l) => l,
        other => panic!("{other:?}"),
    };
    assert_eq!(on_reject(&req, &limits), Retry::Fail);
    assert_eq!(
        on_reject(
            &req,
            &ConnParams {
                reason: 200,
                ..limits
            }
        ),
        Retry::Fail
    );
}

#[test]
fn requests_and_accepts_name_the_senders_listening_port() {
    let a = Local {
        port: 7471,
        ..local(8, 16, 1 << 20, 1)
    };
    let b = Local {
        port: 7472,
        ..local(8, 16, 1 << 20, 2)
    };
    let req = a.params(0, 0);
    assert_eq!(req.port, 7471);
    match answer(&req, &b) {
        Answer::Accept(g) => assert_eq!((g.port, g.stamp, g.dst_stamp), (7472, 2, 1)),
        other => panic!("{other:?}"),
    }
    match answer(
        &Local {
            queue_depth: 4,
            ..b
        }
        .params(0, 0),
        &Local {
            queue_depth: 2,
            ..a
        },
    ) {
        Answer::Reject(Reason::QueueDepth, limits) => assert_eq!(limits.port, 7471),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_new_incarnation_makes_the_old_one_stale() {
    // Known as 5, seen again as 6: the peer restarted.
    assert!(stale(5, 6));
    // Same incarnation (a second connection, or a race between the two sides): not stale.
    assert!(!stale(5, 5));
    // Not known yet (connecting), or not said: nothing to compare.
    assert!(!stale(0, 6));
    assert!(!stale(5, 0));
}

#[test]
fn races_resolve_the_same_way_on_both_sides() {
    let a = (0x0a00_020f, 7471);
    let b = (0x0a00_0210, 7471);
    assert!(wins_race(b, a) && !wins_race(a, b));
}

proptest! {
    #[test]
    fn negotiation_ends_with_the_minimum(
        qa in 1u16..300, qp in 1u16..300,
        ra in 1u16..64, rp in 1u16..64,
        pa in 4096u32..(64 << 20), pp in 4096u32..(64 << 20),
    ) {
        let g = negotiate(&local(qa, ra, pa, 1), &local(qp, rp, pp, 2)).unwrap();
        prop_assert_eq!(g.queue_depth, qa.min(qp));
        prop_assert_eq!(g.max_regs, ra.min(rp));
        prop_assert_eq!(g.max_payload, pa.min(pp));
    }
}

#[test]
fn inline_is_the_smaller_of_both_and_fits_the_messages() {
    use crate::rules::wire::{inline_fits, msg_size};
    let with = |inline: u16| Local {
        max_msg: msg_size(u32::from(inline)),
        max_inline: inline,
        ..local(8, 16, 1 << 20, 1)
    };
    // Both offer: the smaller wins (after one reject: the smaller side's messages are
    // smaller too).
    let g = negotiate(&with(4096), &with(1024)).unwrap();
    assert_eq!(g.max_inline, 1024);
    // A peer without inline (4 KiB messages) rejects the larger messages once; the
    // retry asks for its message size, and only the inline that fits there.
    let g = negotiate(&with(4096), &with(0)).unwrap();
    assert_eq!(g.max_msg, 4096);
    assert_eq!(g.max_inline, 0);
    let g = negotiate(&with(0), &with(4096)).unwrap();
    assert_eq!(g.max_inline, 0);
    // A small-message peer with some inline: what fits its messages.
    let mut small = with(1024);
    small.max_msg = 4096;
    let g = negotiate(&with(8192), &small).unwrap();
    assert_eq!(u32::from(g.max_inline), 1024.min(inline_fits(4096)));
}

#[test]
fn an_accept_granting_more_inline_is_refused() {
    let me = Local {
        max_inline: 512,
        ..local(8, 16, 1 << 20, 1)
    };
    let asked = me.params(0, 0);
    let Answer::Accept(mut granted) = answer(&asked, &me) else {
        panic!("rejected");
    };
    assert!(check_accept(&asked, &granted));
    granted.max_inline = 513;
    assert!(!check_accept(&asked, &granted));
}

proptest! {
    #[test]
    fn negotiated_inline_never_exceeds_either_side_or_the_messages(
        a in 0u16..=16384,
        b in 0u16..=16384,
        small in any::<bool>(),
        pa in prop::sample::select(vec![4096u32, 8192, 1 << 20]),
        pb in prop::sample::select(vec![4096u32, 8192, 1 << 20]),
    ) {
        use crate::rules::wire::{inline_fits, msg_size};
        // As an interface states its limits: inline within its messages and its payload.
        let mk = |inline: u16, payload: u32, stamp| {
            let mut l = Local { max_inline: inline, ..local(8, 16, payload, stamp) };
            l.max_msg = if small { 4096 } else { msg_size(u32::from(inline)) };
            l.max_inline = l.max_inline.min(inline_fits(l.max_msg).min(payload) as u16);
            l
        };
        let (x, y) = (mk(a, pa, 1), mk(b, pb, 2));
        let g = negotiate(&x, &y).unwrap();
        // Exactly the smaller of both: each side's own fits its own messages and payload,
        // so the smaller fits the smaller ones.
        prop_assert_eq!(g.max_inline, x.max_inline.min(y.max_inline));
        prop_assert!(u32::from(g.max_inline) <= inline_fits(g.max_msg));
        prop_assert!(u32::from(g.max_inline) <= g.max_payload);
    }
}

#[test]
fn a_connect_error_the_network_did_not_cause_is_retried() {
    let asked = local(8, 16, 1 << 20, 7).params(0, 0);
    // rxe's silent -EINVAL acting on the reply (two sides connecting to each other).
    assert_eq!(on_connect_error(&asked, -22), Retry::Again(asked));
    assert_eq!(on_connect_error(&asked, -12), Retry::Again(asked));
    // No answer, refused, reset, unreachable: the run ends.
    for e in [-110, -111, -104, -113, -101] {
        assert_eq!(on_connect_error(&asked, e), Retry::Fail, "{e}");
    }
    // Not an errno.
    for s in [0, 1, 28, -4096, i32::MIN] {
        assert_eq!(on_connect_error(&asked, s), Retry::Fail, "{s}");
    }
}
