// SPDX-License-Identifier: GPL-2.0

//! Tests of `src/rules/ratelimit.rs`.

use crate::rules::ratelimit::{RateLimit, BURST, INTERVAL_MS};
use proptest::prelude::*;

#[test]
fn a_burst_then_held_back_then_told() {
    let l = RateLimit::new();
    for _ in 0..BURST {
        assert_eq!(l.check(100), Some(0));
    }
    for _ in 0..7 {
        assert_eq!(l.check(200), None);
    }
    assert_eq!(l.missed(), 7);
    // Still within the window.
    assert_eq!(l.check(100 + INTERVAL_MS - 1), None);
    // The next window: the first line says how many were held back, the next do not.
    assert_eq!(l.check(100 + INTERVAL_MS), Some(8));
    assert_eq!(l.check(100 + INTERVAL_MS), Some(0));
}

#[test]
fn time_zero_and_a_clock_that_goes_back_are_safe() {
    let l = RateLimit::new();
    assert_eq!(l.check(0), Some(0));
    for _ in 1..BURST {
        assert_eq!(l.check(0), Some(0));
    }
    assert_eq!(l.check(0), None);
    // An earlier time than the window's start never opens a window.
    assert_eq!(l.check(0), None);
    assert_eq!(l.check(u64::MAX), Some(2));
}

#[test]
fn threads_at_once_let_through_about_a_burst() {
    let l = std::sync::Arc::new(RateLimit::new());
    let let_through: u32 = std::thread::scope(|s| {
        let hs: Vec<_> = (0..8)
            .map(|_| {
                let l = l.clone();
                s.spawn(move || (0..1000).filter(|_| l.check(50).is_some()).count() as u32)
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).sum()
    });
    assert_eq!(let_through, BURST);
    assert_eq!(l.missed(), 8000 - BURST);
}

proptest! {
    /// Over any sequence of calls at non-decreasing times, each window lets through at
    /// most a burst, and every line is either let through or counted, once.
    #[test]
    fn at_most_a_burst_per_window_and_nothing_lost(steps in proptest::collection::vec(0u64..3000, 1..400)) {
        let l = RateLimit::new();
        let mut now = 0u64;
        let mut window_start = None::<u64>;
        let mut in_window = 0u32;
        let (mut through, mut told) = (0u64, 0u64);
        for (i, step) in steps.iter().enumerate() {
            now += step;
            let fresh = match window_start {
                None => true,
                Some(b) => now - b >= INTERVAL_MS,
            };
            if fresh {
                window_start = Some(now);
                in_window = 0;
            }
            match l.check(now) {
                Some(missed) => {
                    in_window += 1;
                    through += 1;
                    told += u64::from(missed);
                    prop_assert!(in_window <= BURST, "window of {} let {} through", now, in_window);
                }
                None => prop_assert!(in_window >= BURST, "held back at {} after {} lines", now, in_window),
            }
            prop_assert_eq!(through + told + u64::from(l.missed()), i as u64 + 1);
        }
    }
}

#[test]
fn a_burst_of_its_own() {
    let l = RateLimit::with_burst(crate::rules::ratelimit::CONN_BURST);
    for _ in 0..crate::rules::ratelimit::CONN_BURST {
        assert_eq!(l.check(5), Some(0));
    }
    assert_eq!(l.check(6), None);
    assert_eq!(l.check(5 + INTERVAL_MS), Some(1));
}
