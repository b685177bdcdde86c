// SPDX-License-Identifier: GPL-2.0

//! Tests of `src/rules/xfer_state.rs`: the whole transition table, and properties over random
//! event sequences (the outcome is reported exactly once, never while a key is alive;
//! every failure with live keys invalidates or fails the connection).

use crate::rules::xfer_state::{
    Action, Event, Keys, Kind, State, Track, ECONNABORTED, EIO, ETIMEDOUT,
};
use proptest::prelude::*;

const EAGAIN: i32 = -11;
const EBADMSG: i32 = -74;

const KINDS: [Kind; 5] = [
    Kind::Ping,
    Kind::Put,
    Kind::Get,
    Kind::PutInline,
    Kind::GetInline,
];

const EVENTS: [Event; 13] = [
    Event::Posted,
    Event::Acked,
    Event::Refused(EAGAIN),
    Event::Answered { inv_all: false },
    Event::Answered { inv_all: true },
    Event::Verdict(0),
    Event::Verdict(EBADMSG),
    Event::ChainPosted,
    Event::ChainDone(true),
    Event::ChainDone(false),
    Event::NotPosted(-12),
    Event::Timeout,
    Event::ConnFailed,
];

/// A track of `kind` brought to `state` by the usual path (checked PUTs).
fn at(kind: Kind, state: State) -> Option<Track> {
    use Event as E;
    let mut t = Track::new(kind, true);
    let path: &[Event] = match (kind, state) {
        (_, State::Queued) => &[],
        (_, State::Requested) => &[E::Posted],
        (Kind::Put, State::Acked) => &[E::Posted, E::Acked],
        (Kind::Put, State::Writing) => &[E::Posted, E::Acked, E::ChainPosted],
        (Kind::Put, State::Verdict) => &[E::Posted, E::Acked, E::ChainPosted, E::ChainDone(true)],
        (Kind::Get, State::Unkeying) => &[E::Posted, E::Answered { inv_all: false }],
        (Kind::Get, State::Draining) => &[E::Posted, E::ConnFailed],
        (Kind::Put, State::Draining) => &[E::Posted, E::Acked, E::ChainPosted, E::ConnFailed],
        (Kind::Ping, State::Done) => &[E::Posted, E::Answered { inv_all: false }],
        _ => return None,
    };
    for e in path {
        t.on(*e);
    }
    assert_eq!(t.state(), state, "{kind:?} path to {state:?}");
    Some(t)
}

const STATES: [State; 8] = [
    State::Queued,
    State::Requested,
    State::Acked,
    State::Writing,
    State::Verdict,
    State::Unkeying,
    State::Draining,
    State::Done,
];

#[test]
fn transition_table() {
    use Action as A;
    use Event as E;
    use Kind as K;
    use State as S;
    let viol = |a: A| matches!(a, A::Violation(_));
    for kind in KINDS {
        for state in STATES {
            let Some(t0) = at(kind, state) else { continue };
            for ev in EVENTS.iter().copied().chain([Event::Drained]) {
                let mut t = t0;
                let a = t.on(ev);
                let (s, ok) = match (state, ev) {
                    (S::Done, _) => (S::Done, a == A::None),
                    (_, E::Drained) => (S::Done, a == A::Finish),
                    (S::Draining, E::ChainDone(_)) => (S::Done, a == A::Finish),
                    (S::Draining, _) => (S::Draining, a == A::None),
                    (S::Requested, E::ConnFailed) if kind == K::Get => (S::Draining, a == A::None),
                    (S::Writing | S::Unkeying, E::ConnFailed) => (S::Draining, a == A::None),
                    (_, E::ConnFailed) => (S::Done, a == A::Finish),
                    (S::Queued, E::Posted) => (S::Requested, a == A::None),
                    (S::Queued, E::NotPosted(_) | E::Timeout) => (S::Done, a == A::Finish),
                    (S::Queued, E::ChainPosted | E::ChainDone(_)) => (S::Queued, a == A::None),
                    (S::Queued, _) => (S::Queued, viol(a)),
                    (S::Requested, E::Acked) if kind == K::Put => (S::Acked, a == A::PostData),
                    (S::Requested, E::Refused(_)) if kind == K::Get => {
                        (S::Unkeying, a == A::PostInvalidate)
                    }
                    (S::Requested, E::Refused(_)) => (S::Done, a == A::Finish),
                    (S::Requested, E::Answered { inv_all: true }) if kind == K::Get => {
                        (S::Done, a == A::Finish)
                    }
                    (S::Requested, E::Answered { .. }) if kind == K::Get => {
                        (S::Unkeying, a == A::PostInvalidate)
                    }
                    (S::Requested, E::Answered { .. })
                        if matches!(kind, K::Ping | K::GetInline) =>
                    {
                        (S::Done, a == A::Finish)
                    }
                    (S::Requested, E::Verdict(_)) if kind == K::PutInline => {
                        (S::Done, a == A::Finish)
                    }
                    (S::Requested, E::Timeout) => (S::Requested, a == A::FailConn),
                    (S::Requested, E::NotPosted(_)) => (S::Done, a == A::Finish),
                    (S::Requested, E::Posted | E::ChainPosted | E::ChainDone(_)) => {
                        (S::Requested, a == A::None)
                    }
                    (S::Requested, _) => (S::Requested, viol(a)),
                    (S::Acked, E::ChainPosted) => (S::Writing, a == A::None),
                    (S::Acked, E::NotPosted(_)) => (S::Done, a == A::AbortPut),
                    (S::Acked, E::Timeout) => (S::Acked, a == A::FailConn),
                    (S::Acked, E::Posted | E::ChainDone(_)) => (S::Acked, a == A::None),
                    (S::Acked, _) => (S::Acked, viol(a)),
                    (S::Writing, E::ChainDone(true)) => (S::Verdict, a == A::None),
                    (S::Writing, E::ChainDone(false)) => (S::Done, a == A::Finish),
                    (S::Writing, E::Verdict(_)) => (S::Writing, a == A::None),
                    (S::Writing, E::Timeout) => (S::Writing, a == A::FailConn),
                    (S::Writing, E::NotPosted(_)) => (S::Done, a == A::AbortPut),
                    (S::Writing, E::Posted | E::ChainPosted) => (S::Writing, a == A::None),
                    (S::Writing, _) => (S::Writing, viol(a)),
                    (S::Verdict, E::Verdict(_)) => (S::Done, a == A::Finish),
                    (S::Verdict, E::Timeout) => (S::Verdict, a == A::FailConn),
                    (
                        S::Verdict,
                        E::Posted | E::ChainPosted | E::ChainDone(_) | E::NotPosted(_),
                    ) => (S::Verdict, a == A::None),
                    (S::Verdict, _) => (S::Verdict, viol(a)),
                    (S::Unkeying, E::ChainPosted) => (S::Unkeying, a == A::None),
                    // Not posted yet: its completion cannot be this chain's.
                    (S::Unkeying, E::ChainDone(_) | E::Posted) => (S::Unkeying, a == A::None),
                    (S::Unkeying, E::NotPosted(_) | E::Timeout) => (S::Unkeying, a == A::FailConn),
                    (S::Unkeying, _) => (S::Unkeying, viol(a)),
                };
                assert_eq!(t.state(), s, "{kind:?} {state:?} {ev:?} -> {a:?}");
                assert!(ok, "{kind:?} {state:?} {ev:?}: action {a:?}");
                if t.state() == S::Done {
                    assert_eq!(t.keys(), Keys::None, "{kind:?} {state:?} {ev:?}");
                    assert!(!t.peer_keys(), "{kind:?} {state:?} {ev:?}");
                }
            }
        }
    }
}

#[test]
fn happy_paths() {
    use Event as E;
    let run = |kind, check, evs: &[Event]| {
        let mut t = Track::new(kind, check);
        let mut finished = 0;
        for e in evs {
            if t.on(*e) == Action::Finish {
                finished += 1;
            }
        }
        assert_eq!(finished, 1, "{kind:?} {evs:?}");
        t.fire().unwrap()
    };
    // A checked PUT: the verdict, before or after the chain's completion.
    let put = [
        E::Posted,
        E::Acked,
        E::ChainPosted,
        E::ChainDone(true),
        E::Verdict(0),
    ];
    assert_eq!(run(Kind::Put, true, &put), Ok(()));
    let early = [
        E::Posted,
        E::Acked,
        E::ChainPosted,
        E::Verdict(EBADMSG),
        E::ChainDone(true),
    ];
    assert_eq!(run(Kind::Put, true, &early), Err(EBADMSG));
    // Unchecked: done with the chain.
    assert_eq!(run(Kind::Put, false, &put[..4]), Ok(()));
    // A GET whose only key the peer invalidated needs no LOCAL_INV.
    let get = [E::Posted, E::Answered { inv_all: true }];
    assert_eq!(run(Kind::Get, true, &get), Ok(()));
    let get = [
        E::Posted,
        E::Answered { inv_all: false },
        E::ChainPosted,
        E::ChainDone(true),
    ];
    assert_eq!(run(Kind::Get, true, &get), Ok(()));
    // A failed LOCAL_INV fails the transfer.
    let get = [
        E::Posted,
        E::Answered { inv_all: false },
        E::ChainPosted,
        E::ChainDone(false),
    ];
    assert_eq!(run(Kind::Get, true, &get), Err(EIO));
    // A refused GET still kills its keys first, and keeps the peer's error.
    let get = [
        E::Posted,
        E::Refused(EAGAIN),
        E::ChainPosted,
        E::ChainDone(true),
    ];
    assert_eq!(run(Kind::Get, true, &get), Err(EAGAIN));
    assert_eq!(
        run(
            Kind::Ping,
            false,
            &[E::Posted, E::Answered { inv_all: false }]
        ),
        Ok(())
    );
    assert_eq!(
        run(Kind::PutInline, true, &[E::Posted, E::Verdict(0)]),
        Ok(())
    );
    assert_eq!(run(Kind::GetInline, true, &[E::Timeout]), Err(ETIMEDOUT));
}

#[test]
fn failures() {
    use Event as E;
    // A transfer in flight times out: the connection goes, and the transfer ends with the
    // drain, never before (the peer still counts it).
    let mut t = Track::new(Kind::Get, true);
    t.on(E::Posted);
    assert_eq!(t.on(E::Timeout), Action::FailConn);
    assert_eq!(t.on(E::ConnFailed), Action::None);
    assert_eq!(t.keys(), Keys::Live);
    assert_eq!(t.fire(), None);
    assert_eq!(t.on(E::Drained), Action::Finish);
    assert_eq!(t.fire(), Some(Err(ETIMEDOUT)));
    assert_eq!(t.fire(), None);
    // A connection failing under a transfer: ECONNABORTED, even after a busy refusal
    // (which would have been retried).
    let mut t = Track::new(Kind::Get, true);
    t.on(E::Posted);
    t.on(E::Refused(EAGAIN));
    assert_eq!(t.on(E::ConnFailed), Action::None);
    assert_eq!(t.on(E::Drained), Action::Finish);
    assert_eq!(t.fire(), Some(Err(ECONNABORTED)));
    // A PUT whose data chain cannot be posted tells the sink.
    let mut t = Track::new(Kind::Put, true);
    t.on(E::Posted);
    t.on(E::Acked);
    assert!(t.peer_keys());
    assert_eq!(t.on(E::NotPosted(-12)), Action::AbortPut);
    assert_eq!(t.fire(), Some(Err(-12)));
    // A busy peer: retried from scratch, reported once.
    let mut t = Track::new(Kind::Put, true);
    t.on(E::Posted);
    assert_eq!(t.on(E::Refused(EAGAIN)), Action::Finish);
    assert!(t.retry());
    assert_eq!(t.state(), State::Queued);
    assert_eq!(t.result(), Ok(()));
    // Not while keys are alive, nor once reported.
    let mut t = Track::new(Kind::Get, true);
    t.on(E::Posted);
    t.on(E::Refused(EAGAIN));
    assert!(!t.retry());
    t.on(E::ChainPosted);
    t.on(E::ChainDone(true));
    assert_eq!(t.fire(), Some(Err(EAGAIN)));
    assert!(!t.retry());
}

fn event() -> impl Strategy<Value = Event> {
    prop_oneof![
        Just(Event::Posted),
        Just(Event::Acked),
        prop_oneof![Just(EAGAIN), Just(-12), Just(EBADMSG)].prop_map(Event::Refused),
        any::<bool>().prop_map(|inv_all| Event::Answered { inv_all }),
        prop_oneof![Just(0), Just(EBADMSG)].prop_map(Event::Verdict),
        Just(Event::ChainPosted),
        any::<bool>().prop_map(Event::ChainDone),
        Just(Event::NotPosted(-12)),
        Just(Event::Timeout),
        Just(Event::ConnFailed),
    ]
}

fn kind() -> impl Strategy<Value = Kind> {
    (0..KINDS.len()).prop_map(|i| KINDS[i])
}

proptest! {
    /// Whatever happens, the outcome is reported at most once, only when no key is
    /// alive; every failure with this side's keys alive invalidates them or fails the
    /// connection; and the connection's drain always ends the transfer.
    #[test]
    fn once_and_never_with_live_keys(
        kind in kind(),
        check in any::<bool>(),
        evs in proptest::collection::vec(event(), 0..24),
        retries in proptest::collection::vec(any::<bool>(), 24),
    ) {
        let mut t = Track::new(kind, check);
        let mut reported = 0;
        let mut conn_failed = false;
        for (i, e) in evs.iter().enumerate() {
            let keys_before = t.keys();
            let a = t.on(*e);
            if matches!(a, Action::FailConn | Action::Violation(_)) {
                conn_failed = true;
            }
            if *e == Event::ConnFailed {
                conn_failed = true;
            }
            if t.state() == State::Done {
                prop_assert_eq!(t.keys(), Keys::None);
                prop_assert!(!t.peer_keys());
            }
            // Keys alive when it failed: they are invalidated, or die with the QP.
            if keys_before == Keys::Live && t.result().is_err() && t.state() != State::Done {
                prop_assert!(
                    matches!(t.state(), State::Unkeying | State::Draining)
                        || conn_failed
                        || t.keys() == Keys::Live && t.state() == State::Requested,
                    "{:?} after {:?}", t, e
                );
            }
            // AbortPut finishes too, once the sink is told.
            if matches!(a, Action::Finish | Action::AbortPut) {
                prop_assert_eq!(t.state(), State::Done);
                if retries[i] && t.retry() {
                    continue;
                }
                prop_assert!(t.fire().is_some());
                reported += 1;
            }
            prop_assert!(t.fire().is_none());
        }
        prop_assert!(reported <= 1);
        // The drain ends everything: reported now if not yet.
        let a = t.on(Event::Drained);
        prop_assert_eq!(t.state(), State::Done);
        prop_assert_eq!(t.keys(), Keys::None);
        if reported == 0 {
            prop_assert_eq!(a, Action::Finish);
            prop_assert!(t.fire().is_some());
        } else {
            prop_assert_eq!(a, Action::None);
        }
        prop_assert!(t.fire().is_none());
    }

    /// The only way to success: every step of the kind's protocol, in order.
    #[test]
    fn success_needs_the_whole_protocol(
        kind in kind(),
        evs in proptest::collection::vec(event(), 0..16),
    ) {
        let mut t = Track::new(kind, true);
        for e in &evs {
            t.on(*e);
        }
        if t.state() == State::Done && t.result().is_ok() {
            let saw = |p: fn(&Event) -> bool| evs.iter().any(p);
            let answered = saw(|e| matches!(e, Event::Answered { .. }));
            prop_assert!(saw(|e| *e == Event::Posted));
            match kind {
                Kind::Put => {
                    prop_assert!(saw(|e| *e == Event::Acked));
                    prop_assert!(saw(|e| *e == Event::ChainDone(true)));
                    prop_assert!(saw(|e| *e == Event::Verdict(0)));
                }
                Kind::Get => prop_assert!(answered),
                Kind::PutInline => prop_assert!(saw(|e| *e == Event::Verdict(0))),
                Kind::Ping | Kind::GetInline => prop_assert!(answered),
            }
        }
    }
}
