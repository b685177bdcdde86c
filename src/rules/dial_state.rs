// SPDX-License-Identifier: GPL-2.0

//! Connecting to one peer: per-peer state advanced by events, not a thread.
//!
//! An interface keeps one [`Dial`] per peer it connects to. Transfers (and callers) that
//! want the peer join it; it runs negotiation rounds (one connection each) until one is
//! established or the run fails, then everyone waiting is released with that outcome. No
//! interface-wide lock is held across an attempt or a pause, so a dead or rejecting peer
//! delays no other. Times are milliseconds of a monotonic clock, supplied by the caller.
//!
//! Pure logic: no `kernel::`, compiled by the host tests too (transition table and
//! property tests).

use crate::rules::conn_state::backoff_ms;

/// Negotiation rounds (connections) in one run before it gives up.
pub(crate) const MAX_ROUNDS: u32 = 6;
/// How long one round may take before it is given up.
pub(crate) const ROUND_MS: u64 = 10_000;

/// `ECONNREFUSED` and `ETIMEDOUT` (positive errno numbers; the caller negates them).
pub(crate) const ECONNREFUSED: i32 = 111;
pub(crate) const ETIMEDOUT: i32 = 110;

/// The longest backoff between runs (`conn_state::backoff_ms`), in milliseconds.
pub(crate) const REAP_AFTER_MS: u64 = 10_000;

/// Where the run to a peer is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Phase {
    /// Nothing under way: never tried, or the last run connected.
    Idle,
    /// Round `round` (0-based) is under way since `since`.
    Trying { round: u32, since: u64 },
    /// Round `round` starts at `until` (the peer asked for a pause: a race, a stale
    /// incarnation, no resources).
    Pausing { round: u32, until: u64 },
    /// The last run failed at `at` with errno `err`: runs wanted within the backoff fail
    /// at once with the same error, so a caller that retries in a loop does not hammer an
    /// unreachable peer.
    Failed { at: u64, err: i32 },
}

/// The state of connecting to one peer.
///
/// # Invariants
///
/// `failures` is 0 in [`Phase::Idle`] after a success, and at least 1 in
/// [`Phase::Failed`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Dial {
    pub(crate) phase: Phase,
    /// Consecutive failed runs (the backoff between runs grows with them).
    pub(crate) failures: u32,
}

/// How a round's connection ended before it was established.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Down {
    /// Rejected with limits: the next round asks for less, at once.
    Lower,
    /// Rejected for a reason that passes (race, stale incarnation, no resources): the
    /// next round asks the same after a pause.
    Again,
    /// Failed for good with errno `err` (unreachable, a final reject, a bad accept).
    Fail(i32),
}

/// What happens to a dial.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Event {
    /// Someone wants the peer.
    Want,
    /// The round's connection (or one the peer made to this side) is established.
    Up,
    /// The round's connection went down before it was established.
    Down(Down),
    /// Time passed (the tick, or the pause's timer).
    Tick,
}

/// What the caller does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Action {
    /// Nothing.
    None,
    /// Start round `round`: a new connection (with the parameters the last reject left).
    Attempt { round: u32 },
    /// Release everyone waiting: connected.
    Connected,
    /// Release everyone waiting with errno `err`.
    Fail(i32),
    /// The round took too long: fail its connection, then release everyone waiting with
    /// `ETIMEDOUT`.
    GiveUp,
    /// Run again (a [`Event::Tick`]) at `at`.
    WakeAt(u64),
}

impl Dial {
    /// Never tried.
    pub(crate) const fn new() -> Self {
        Self {
            phase: Phase::Idle,
            failures: 0,
        }
    }

    /// Whether its state may be forgotten at `now`: nothing under way, and a failed run's
    /// backoff over for longer than the longest backoff (`conn_state::backoff_ms`), so a
    /// peer that keeps failing is still paced.
    pub(crate) fn reapable(&self, now: u64) -> bool {
        match self.phase {
            Phase::Idle => true,
            Phase::Failed { at, .. } => now.saturating_sub(at) >= 2 * REAP_AFTER_MS,
            _ => false,
        }
    }

    /// Whether a run is under way (someone waits for its outcome).
    pub(crate) fn busy(&self) -> bool {
        matches!(self.phase, Phase::Trying { .. } | Phase::Pausing { .. })
    }

    /// The run failed with `err` at `now`.
    fn failed(&mut self, now: u64, err: i32) {
        self.failures = self.failures.saturating_add(1);
        self.phase = Phase::Failed { at: now, err };
    }

    /// Applies `ev` at `now`; returns what to do.
    pub(crate) fn on(&mut self, ev: Event, now: u64) -> Action {
        match (self.phase, ev) {
            (Phase::Idle, Event::Want) => {
                self.phase = Phase::Trying {
                    round: 0,
                    since: now,
                };
                Action::Attempt { round: 0 }
            }
            (Phase::Failed { at, err }, Event::Want) => {
                let wait = u64::from(backoff_ms(self.failures.saturating_sub(1)));
                if now.saturating_sub(at) < wait {
                    Action::Fail(err)
                } else {
                    self.phase = Phase::Trying {
                        round: 0,
                        since: now,
                    };
                    Action::Attempt { round: 0 }
                }
            }
            // Joins the run under way.
            (Phase::Trying { .. } | Phase::Pausing { .. }, Event::Want) => Action::None,
            // Whatever round is under way, the peer is connected: everyone goes.
            (Phase::Trying { .. } | Phase::Pausing { .. }, Event::Up) => {
                self.phase = Phase::Idle;
                self.failures = 0;
                Action::Connected
            }
            (Phase::Trying { round, .. }, Event::Down(d)) => {
                let next = round.saturating_add(1);
                match d {
                    Down::Fail(err) => {
                        self.failed(now, err);
                        Action::Fail(err)
                    }
                    _ if next >= MAX_ROUNDS => {
                        self.failed(now, ECONNREFUSED);
                        Action::Fail(ECONNREFUSED)
                    }
                    Down::Lower => {
                        self.phase = Phase::Trying {
                            round: next,
                            since: now,
                        };
                        Action::Attempt { round: next }
                    }
                    Down::Again => {
                        let until = now.saturating_add(u64::from(backoff_ms(round)));
                        self.phase = Phase::Pausing { round: next, until };
                        Action::WakeAt(until)
                    }
                }
            }
            (Phase::Trying { since, .. }, Event::Tick) => {
                if now.saturating_sub(since) >= ROUND_MS {
                    self.failed(now, ETIMEDOUT);
                    Action::GiveUp
                } else {
                    Action::None
                }
            }
            (Phase::Pausing { round, until }, Event::Tick) => {
                if now >= until {
                    self.phase = Phase::Trying { round, since: now };
                    Action::Attempt { round }
                } else {
                    Action::WakeAt(until)
                }
            }
            // No round under way: a late connection event, or time passing, changes
            // nothing. A connection that comes up is found by the next `Want`.
            (Phase::Idle | Phase::Failed { .. }, Event::Up | Event::Down(_) | Event::Tick) => {
                Action::None
            }
            // A pause has no connection of its own: a late event of the last round's.
            (Phase::Pausing { .. }, Event::Down(_)) => Action::None,
        }
    }
}
