// SPDX-License-Identifier: GPL-2.0

//! Tests of `src/rules/conn_state.rs`: the whole transition table.

use crate::rules::conn_state::{backoff_ms, next, Action, Event, State};

const EVENTS: [Event; 13] = [
    Event::Connect,
    Event::Accepted,
    Event::AddrResolved,
    Event::RouteResolved,
    Event::Established,
    Event::RejectedRetry,
    Event::RejectedFinal,
    Event::Failed,
    Event::Disconnected,
    Event::DeviceRemoval,
    Event::Error,
    Event::Close,
    Event::Drained,
];

#[test]
fn transition_table() {
    use Action as A;
    use Event as E;
    use State as S;
    // Every pair that does something; all others must leave the state alone.
    let expected = |s: S, e: E| -> (S, A) {
        match (s, e) {
            (S::Idle, E::Connect) => (S::ResolvingAddr, A::ResolveAddr),
            (S::Idle, E::Accepted) => (S::PassiveWait, A::None),
            (S::Idle, E::Close | E::DeviceRemoval | E::Failed | E::Error) => {
                (S::Closed, A::Release)
            }
            (S::ResolvingAddr, E::AddrResolved) => (S::ResolvingRoute, A::ResolveRoute),
            (S::ResolvingRoute, E::RouteResolved) => (S::Connecting, A::Connect),
            (S::Connecting, E::Established) | (S::PassiveWait, E::Established) => {
                (S::Established, A::Start)
            }
            (S::Connecting, E::RejectedRetry) => (S::Closing, A::TeardownAndRetry),
            (
                S::ResolvingAddr
                | S::ResolvingRoute
                | S::Connecting
                | S::PassiveWait
                | S::Established,
                E::RejectedFinal
                | E::RejectedRetry
                | E::Failed
                | E::Disconnected
                | E::DeviceRemoval
                | E::Error
                | E::Close,
            ) => (S::Closing, A::Teardown),
            (S::Closing, E::Drained) => (S::Closed, A::Release),
            _ => (s, A::None),
        }
    };
    for s in State::ALL {
        for e in EVENTS {
            assert_eq!(next(s, e), expected(s, e), "{s:?} on {e:?}");
        }
    }
}

#[test]
fn every_live_state_can_be_closed_and_released() {
    for s in State::ALL {
        let (mut st, mut act) = next(s, Event::Close);
        if act == Action::Teardown {
            assert_eq!(st, State::Closing);
            (st, act) = next(st, Event::Drained);
        }
        assert!(
            matches!(st, State::Closed | State::Closing),
            "{s:?} -> {st:?}"
        );
        assert!(matches!(act, Action::Release | Action::None));
    }
}

#[test]
fn established_only_through_a_connection() {
    for s in State::ALL {
        for e in EVENTS {
            let (n, _) = next(s, e);
            if n == State::Established && s != State::Established {
                assert!(matches!(s, State::Connecting | State::PassiveWait));
                assert_eq!(e, Event::Established);
            }
        }
    }
    assert_eq!(
        State::ALL
            .iter()
            .map(|s| s.name())
            .collect::<std::collections::HashSet<_>>()
            .len(),
        8
    );
}

#[test]
fn backoff_doubles_and_is_capped() {
    assert_eq!(backoff_ms(0), 100);
    assert_eq!(backoff_ms(1), 200);
    assert_eq!(backoff_ms(6), 6400);
    assert_eq!(backoff_ms(7), 10_000);
    assert_eq!(backoff_ms(1000), 10_000);
}
