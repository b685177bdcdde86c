// SPDX-License-Identifier: GPL-2.0

//! The connection state machine: states, events, and what to do on each event in each
//! state. Every (state, event) pair has an answer: unexpected events are handled (mostly
//! ignored, or they fail the connection), never `unreachable!`.
//!
//! Pure logic: no `kernel::`, compiled by the host tests too (transition table test).

/// Connection states.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum State {
    /// Created, nothing started.
    Idle,
    /// Active: `rdma_resolve_addr` in progress.
    ResolvingAddr,
    /// Active: `rdma_resolve_route` in progress.
    ResolvingRoute,
    /// Active: `rdma_connect` sent, waiting for the answer.
    Connecting,
    /// Passive: accepted, waiting for the connection to be established.
    PassiveWait,
    /// Up: messages and transfers flow.
    Established,
    /// Going down: in-flight work fails, the QP drains.
    Closing,
    /// Down; may be retried (a new connection) by its owner.
    Closed,
}

/// What happens to a connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Event {
    /// The owner starts an active connection.
    Connect,
    /// A connection request was accepted (passive side).
    Accepted,
    /// `RDMA_CM_EVENT_ADDR_RESOLVED`.
    AddrResolved,
    /// `RDMA_CM_EVENT_ROUTE_RESOLVED`.
    RouteResolved,
    /// `RDMA_CM_EVENT_ESTABLISHED`, parameters checked.
    Established,
    /// The peer rejected: retry with lower values (or the same, after a race).
    RejectedRetry,
    /// The peer rejected for good, or the accept's parameters were wrong.
    RejectedFinal,
    /// Address, route or connect error, unreachable, connect timeout.
    Failed,
    /// `RDMA_CM_EVENT_DISCONNECTED`.
    Disconnected,
    /// `RDMA_CM_EVENT_DEVICE_REMOVAL`.
    DeviceRemoval,
    /// A transfer timed out, or a message broke the protocol.
    Error,
    /// The owner closes the connection (unload, interface removal).
    Close,
    /// Teardown finished: the QP is drained and everything in flight has failed.
    Drained,
}

/// What to do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Action {
    /// Nothing.
    None,
    /// Call `rdma_resolve_addr`.
    ResolveAddr,
    /// Call `rdma_resolve_route`.
    ResolveRoute,
    /// Create the QP, post receives, `rdma_connect` with the parameters.
    Connect,
    /// Start sending what waited for the connection.
    Start,
    /// Fail everything in flight, disconnect and drain (teardown).
    Teardown,
    /// Tear down, then connect again (after a backoff) with the parameters the reject
    /// gave.
    TeardownAndRetry,
    /// Free the connection's resources.
    Release,
}

/// The next state and the action for `event` in `state`.
pub(crate) fn next(state: State, event: Event) -> (State, Action) {
    use Action as A;
    use Event as E;
    use State as S;
    match (state, event) {
        (S::Idle, E::Connect) => (S::ResolvingAddr, A::ResolveAddr),
        (S::Idle, E::Accepted) => (S::PassiveWait, A::None),
        (S::ResolvingAddr, E::AddrResolved) => (S::ResolvingRoute, A::ResolveRoute),
        (S::ResolvingRoute, E::RouteResolved) => (S::Connecting, A::Connect),
        (S::Connecting | S::PassiveWait, E::Established) => (S::Established, A::Start),
        (S::Connecting, E::RejectedRetry) => (S::Closing, A::TeardownAndRetry),
        // Failures before and after the connection is up: tear down.
        (
            S::ResolvingAddr | S::ResolvingRoute | S::Connecting | S::PassiveWait | S::Established,
            E::RejectedFinal
            | E::RejectedRetry
            | E::Failed
            | E::Disconnected
            | E::DeviceRemoval
            | E::Error
            | E::Close,
        ) => (S::Closing, A::Teardown),
        (S::Idle, E::Close | E::DeviceRemoval | E::Failed | E::Error) => (S::Closed, A::Release),
        (S::Closing, E::Drained) => (S::Closed, A::Release),
        // Late or repeated events while going down or down: nothing more to do.
        (S::Closing | S::Closed, _) => (state, A::None),
        // Anything else is out of order (an event for another state): ignore it.
        _ => (state, A::None),
    }
}

impl State {
    /// A short name for logs and statistics.
    pub(crate) fn name(self) -> &'static str {
        match self {
            State::Idle => "idle",
            State::ResolvingAddr => "resolving_addr",
            State::ResolvingRoute => "resolving_route",
            State::Connecting => "connecting",
            State::PassiveWait => "passive_wait",
            State::Established => "established",
            State::Closing => "closing",
            State::Closed => "closed",
        }
    }

    /// Every state, for statistics.
    pub(crate) const ALL: [State; 8] = [
        State::Idle,
        State::ResolvingAddr,
        State::ResolvingRoute,
        State::Connecting,
        State::PassiveWait,
        State::Established,
        State::Closing,
        State::Closed,
    ];
}

/// Backoff before reconnect attempt `n` (0-based), in milliseconds: 100 ms doubling, at
/// most 10 s.
pub(crate) fn backoff_ms(n: u32) -> u32 {
    100u32.saturating_mul(1u32 << n.min(7)).min(10_000)
}
