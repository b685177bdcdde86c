// SPDX-License-Identifier: GPL-2.0

//! Tests of `src/rules/credits.rs`: two sides exchanging messages under the credit rules.

use crate::rules::credits::{limit, noop_now, noop_threshold};
use proptest::prelude::*;
use std::collections::VecDeque;

/// One side of a connection: its credits to send to the peer, the credits it owes the
/// peer, and whether it has messages of its own waiting to go.
#[derive(Clone, Copy, Debug)]
struct Side {
    credits: u32,
    outstanding: u32,
    owed: bool,
}

/// Messages in flight, each with the credits it gives back: `wire[0]` from side 0.
struct Link {
    qd: u16,
    side: [Side; 2],
    wire: [VecDeque<u32>; 2],
    noops: u64,
}

impl Link {
    fn new(qd: u16) -> Self {
        let s = Side {
            credits: limit(qd),
            outstanding: 0,
            owed: false,
        };
        Link {
            qd,
            side: [s, s],
            wire: [VecDeque::new(), VecDeque::new()],
            noops: 0,
        }
    }

    /// Side `i` sends a message (a NOOP may take the last credit, others need two).
    fn send(&mut self, i: usize, noop: bool) -> bool {
        let s = &mut self.side[i];
        if s.credits < if noop { 1 } else { 2 } {
            return false;
        }
        s.credits -= 1;
        let back = std::mem::take(&mut s.outstanding);
        self.wire[i].push_back(back);
        self.noops += u64::from(noop);
        true
    }

    /// Delivers the oldest message from side `i`; the receiver applies the NOOP rule.
    fn deliver(&mut self, i: usize) -> bool {
        let Some(back) = self.wire[i].pop_front() else {
            return false;
        };
        let j = 1 - i;
        self.side[j].outstanding += 1;
        self.side[j].credits += back;
        let s = self.side[j];
        if noop_now(self.qd, s.credits, s.outstanding, s.owed) {
            self.send(j, true);
        }
        true
    }

    /// Credits conserved in each direction i -> j: i's, the messages in flight from i
    /// (each holds a buffer of j), those j owes i, and those on their way back to i in
    /// j's messages.
    fn conserved(&self) -> bool {
        (0..2).all(|i| {
            let j = 1 - i;
            let coming_back: u32 = self.wire[j].iter().sum();
            self.side[i].credits
                + self.wire[i].len() as u32
                + self.side[j].outstanding
                + coming_back
                == limit(self.qd)
        })
    }

    fn idle(&self) -> bool {
        self.wire.iter().all(|w| w.is_empty())
    }
}

#[test]
fn limit_fits_every_queue_depth() {
    assert_eq!(limit(256), 258);
    assert_eq!(limit(u16::MAX), 65537);
}

#[test]
fn threshold_never_below_two() {
    for qd in 1..=256u16 {
        assert!(noop_threshold(qd) >= 2, "{qd}");
        assert!(noop_threshold(qd) < limit(qd), "{qd}");
    }
}

/// One NOOP between two idle sides dies out: every NOOP gives back at least two credits
/// and is owed one. (With a threshold of one, as before, queue depths 1 to 3 exchanged
/// NOOPs for ever and never had two credits to send a request with.)
#[test]
fn noops_between_idle_sides_die_out() {
    for qd in 1..=256u16 {
        let mut l = Link::new(qd);
        // Side 0 has been sent `limit` messages and owes them all back.
        l.side[0].outstanding = limit(qd);
        l.side[1].credits = 0;
        assert!(l.conserved());
        assert!(l.send(0, true));
        let mut steps = 0;
        while !l.idle() {
            let i = if l.wire[0].is_empty() { 1 } else { 0 };
            l.deliver(i);
            assert!(l.conserved(), "qd {qd}");
            steps += 1;
            assert!(
                steps < 1000,
                "qd {qd}: NOOPs exchanged for ever ({} so far)",
                l.noops
            );
        }
        // Once idle, either side can send a request.
        assert!(
            l.side[0].credits >= 2 && l.side[1].credits >= 2,
            "qd {qd}: {:?}",
            l.side
        );
    }
}

proptest! {
    /// Whatever the two sides send (requests needing two credits, delivered in any order),
    /// credits are conserved, and once the link is idle a side that wants to send has two
    /// credits: nobody waits for credits on an idle connection.
    #[test]
    fn idle_sides_can_always_send(
        qd in 1u16..=256,
        ops in prop::collection::vec((0usize..2, any::<bool>()), 1..400),
    ) {
        let mut l = Link::new(qd);
        for (i, deliver) in ops {
            if deliver {
                l.deliver(i);
            } else {
                l.send(i, false);
            }
            prop_assert!(l.conserved());
        }
        let mut steps = 0;
        while !l.idle() {
            let i = if l.wire[0].is_empty() { 1 } else { 0 };
            l.deliver(i);
            prop_assert!(l.conserved());
            steps += 1;
            prop_assert!(steps < 10_000);
        }
        prop_assert!(l.side[0].credits >= 2 && l.side[1].credits >= 2, "{:?}", l.side);
    }
}
