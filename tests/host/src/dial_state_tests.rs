// SPDX-License-Identifier: GPL-2.0

//! Tests of `src/rules/dial_state.rs`: the transition table, and properties over random event
//! sequences (everyone waiting is released exactly once per run, rounds are bounded, a
//! run always ends).

use crate::rules::{
    conn_state::backoff_ms,
    dial_state::{Action, Dial, Down, Event, Phase, ECONNREFUSED, ETIMEDOUT, MAX_ROUNDS, ROUND_MS},
};
use proptest::prelude::*;

fn at(phase: Phase, failures: u32) -> Dial {
    Dial { phase, failures }
}

const EHOSTUNREACH: i32 = 113;

// One row per line reads as a table.
#[rustfmt::skip]
#[test]
fn transition_table() {
    let trying = |round| Phase::Trying { round, since: 1000 };
    // (phase, failures, event, now) -> (phase, failures, action)
    let rows: &[(Phase, u32, Event, u64, Phase, u32, Action)] = &[
        // A first want starts round 0.
        (Phase::Idle, 0, Event::Want, 5, Phase::Trying { round: 0, since: 5 }, 0, Action::Attempt { round: 0 }),
        // Wants join a run under way.
        (trying(2), 0, Event::Want, 1500, trying(2), 0, Action::None),
        (Phase::Pausing { round: 1, until: 2000 }, 0, Event::Want, 1500, Phase::Pausing { round: 1, until: 2000 }, 0, Action::None),
        // Up in any round, or during a pause (the peer's own connection): connected.
        (trying(3), 2, Event::Up, 1200, Phase::Idle, 0, Action::Connected),
        (Phase::Pausing { round: 1, until: 2000 }, 0, Event::Up, 1500, Phase::Idle, 0, Action::Connected),
        // A lower reject: the next round at once.
        (trying(0), 0, Event::Down(Down::Lower), 1100, Phase::Trying { round: 1, since: 1100 }, 0, Action::Attempt { round: 1 }),
        // A passing reject: a pause of the round's backoff.
        (trying(2), 0, Event::Down(Down::Again), 1100, Phase::Pausing { round: 3, until: 1100 + backoff_ms(2) as u64 }, 0, Action::WakeAt(1100 + backoff_ms(2) as u64)),
        // Out of rounds: refused.
        (trying(MAX_ROUNDS - 1), 0, Event::Down(Down::Lower), 1100, Phase::Failed { at: 1100, err: ECONNREFUSED }, 1, Action::Fail(ECONNREFUSED)),
        (trying(MAX_ROUNDS - 1), 0, Event::Down(Down::Again), 1100, Phase::Failed { at: 1100, err: ECONNREFUSED }, 1, Action::Fail(ECONNREFUSED)),
        // A final failure keeps its error.
        (trying(1), 3, Event::Down(Down::Fail(EHOSTUNREACH)), 1100, Phase::Failed { at: 1100, err: EHOSTUNREACH }, 4, Action::Fail(EHOSTUNREACH)),
        // The round's time: nothing before it, a give-up at it.
        (trying(1), 0, Event::Tick, 1000 + ROUND_MS - 1, trying(1), 0, Action::None),
        (trying(1), 0, Event::Tick, 1000 + ROUND_MS, Phase::Failed { at: 1000 + ROUND_MS, err: ETIMEDOUT }, 1, Action::GiveUp),
        // A pause: asleep until its time, then the round.
        (Phase::Pausing { round: 2, until: 2000 }, 0, Event::Tick, 1999, Phase::Pausing { round: 2, until: 2000 }, 0, Action::WakeAt(2000)),
        (Phase::Pausing { round: 2, until: 2000 }, 0, Event::Tick, 2000, Phase::Trying { round: 2, since: 2000 }, 0, Action::Attempt { round: 2 }),
        (Phase::Pausing { round: 2, until: 2000 }, 0, Event::Down(Down::Fail(1)), 1500, Phase::Pausing { round: 2, until: 2000 }, 0, Action::None),
        // Within the backoff after a failed run: the same error at once; after it: a run.
        (Phase::Failed { at: 1000, err: EHOSTUNREACH }, 1, Event::Want, 1000 + backoff_ms(0) as u64 - 1, Phase::Failed { at: 1000, err: EHOSTUNREACH }, 1, Action::Fail(EHOSTUNREACH)),
        (Phase::Failed { at: 1000, err: EHOSTUNREACH }, 3, Event::Want, 1000 + backoff_ms(2) as u64 - 1, Phase::Failed { at: 1000, err: EHOSTUNREACH }, 3, Action::Fail(EHOSTUNREACH)),
        (Phase::Failed { at: 1000, err: EHOSTUNREACH }, 3, Event::Want, 1000 + backoff_ms(2) as u64, Phase::Trying { round: 0, since: 1000 + backoff_ms(2) as u64 }, 3, Action::Attempt { round: 0 }),
    ];
    for &(p, f, ev, now, p2, f2, a) in rows {
        let mut d = at(p, f);
        assert_eq!(d.on(ev, now), a, "{p:?} failures {f} + {ev:?} at {now}");
        assert_eq!(d, at(p2, f2), "{p:?} failures {f} + {ev:?} at {now}");
    }
    // Late events with no round under way change nothing.
    for p in [Phase::Idle, Phase::Failed { at: 7, err: ETIMEDOUT }] {
        for ev in [Event::Up, Event::Down(Down::Lower), Event::Down(Down::Again), Event::Down(Down::Fail(5)), Event::Tick] {
            let mut d = at(p, 2);
            assert_eq!(d.on(ev, 100_000), Action::None, "{p:?} + {ev:?}");
            assert_eq!(d, at(p, 2));
        }
    }
}

fn event() -> impl Strategy<Value = Event> {
    prop_oneof![
        Just(Event::Want),
        Just(Event::Up),
        Just(Event::Down(Down::Lower)),
        Just(Event::Down(Down::Again)),
        (1i32..200).prop_map(|e| Event::Down(Down::Fail(e))),
        Just(Event::Tick),
    ]
}

fn releases(a: Action) -> bool {
    matches!(a, Action::Connected | Action::Fail(_) | Action::GiveUp)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    /// Whoever waits is released exactly once per run: a run starts only when nobody
    /// waits, ends only with a release, and `busy` says whether one is under way. Rounds
    /// never exceed `MAX_ROUNDS`, and a round starts only while a run is under way.
    #[test]
    fn one_release_per_run(steps in proptest::collection::vec((event(), 0u64..4000), 1..200)) {
        let mut d = Dial::new();
        let mut now = 0u64;
        let mut busy = false;
        for (ev, dt) in steps {
            now += dt;
            let before = d;
            let a = d.on(ev, now);
            match a {
                Action::Attempt { round } => {
                    prop_assert!(round < MAX_ROUNDS);
                    if round == 0 && !busy {
                        prop_assert_eq!(ev, Event::Want);
                    } else {
                        // A later round only continues a run.
                        prop_assert!(busy, "{:?} + {:?}", before, ev);
                    }
                    busy = true;
                }
                a if releases(a) => {
                    // A release ends the run under way, or answers a want at once in a
                    // failed backoff (with nobody else waiting).
                    prop_assert!(busy || ev == Event::Want, "{:?} + {:?} -> {:?}", before, ev, a);
                    busy = false;
                }
                Action::WakeAt(t) => prop_assert!(t >= now),
                _ => {}
            }
            prop_assert_eq!(d.busy(), busy, "{:?} + {:?} -> {:?}", before, ev, a);
            if let Phase::Failed { .. } = d.phase {
                prop_assert!(d.failures >= 1);
            }
        }
    }

    /// A run always ends: with nothing but time passing, it gives up within
    /// `ROUND_MS` of the round's start, whatever happened before.
    #[test]
    fn a_run_always_ends(steps in proptest::collection::vec((event(), 0u64..4000), 0..100)) {
        let mut d = Dial::new();
        let mut now = 0u64;
        for (ev, dt) in steps {
            now += dt;
            d.on(ev, now);
        }
        d.on(Event::Want, now);
        let mut ended = !d.busy();
        let limit = now + u64::from(MAX_ROUNDS) * (ROUND_MS + 10_000);
        while !ended && now <= limit {
            now += 100;
            ended = releases(d.on(Event::Tick, now));
        }
        prop_assert!(ended, "{:?}", d);
    }
}

#[test]
fn forgotten_only_when_nothing_is_under_way_and_a_failure_is_long_past() {
    use crate::rules::dial_state::REAP_AFTER_MS;
    assert_eq!(u64::from(backoff_ms(u32::MAX)), REAP_AFTER_MS);
    let mut d = Dial::new();
    assert!(d.reapable(0));
    assert!(matches!(d.on(Event::Want, 0), Action::Attempt { round: 0 }));
    assert!(!d.reapable(1_000_000));
    d.on(Event::Down(Down::Fail(-111)), 5);
    assert!(matches!(d.phase, Phase::Failed { .. }));
    assert!(!d.reapable(5 + 2 * REAP_AFTER_MS - 1));
    assert!(d.reapable(5 + 2 * REAP_AFTER_MS));
    // Connected: nothing under way.
    let mut d = Dial::new();
    d.on(Event::Want, 0);
    d.on(Event::Up, 1);
    assert!(d.reapable(1));
}
