// SPDX-License-Identifier: GPL-2.0

//! The state machine of a transfer this side starts (ping, PUT, GET, inline or
//! registered): where it stands, which keys of it are alive, what to do on each event.
//!
//! A transfer is a record advanced by events (a request posted, an answer received, a
//! chain completed, the deadline, the connection failing or drained), as o2iblnd's
//! `kib_tx` and xprtrdma's `rpcrdma_req` are. The transport does what the returned
//! [`Action`] says; the record is finished (its callback fires) exactly once, and only
//! once no key of it is alive: neither this side's registrations ([`Keys`]) nor the
//! peer's for it (a PUT's sink, until it is told the PUT is over).
//!
//! Every (state, event) pair has an answer (the host tests walk the whole table): an
//! answer from the peer that does not fit the state is a protocol violation; a local event
//! that does not fit is ignored.
//!
//! Pure logic: no `kernel::`, compiled by the host tests too.

/// `ECONNABORTED`, `ETIMEDOUT`, `EIO`: the errors this machine gives a transfer; `EAGAIN`
/// (a busy peer) is the one it gives up for a connection's failure.
pub(crate) const EAGAIN: i32 = -11;
pub(crate) const ECONNABORTED: i32 = -103;
pub(crate) const ETIMEDOUT: i32 = -110;
pub(crate) const EIO: i32 = -5;

/// What a transfer is: the answers it may get depend on it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    /// An IMMEDIATE round trip.
    Ping,
    /// This side's data RDMA-written into the peer's registrations.
    Put,
    /// The peer's data RDMA-written into this side's registrations.
    Get,
    /// A PUT whose data is in the request.
    PutInline,
    /// A GET whose data is in the answer.
    GetInline,
}

impl Kind {
    /// Its name, as the tracepoints show it.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Kind::Ping => "ping",
            Kind::Put => "put",
            Kind::Get => "get",
            Kind::PutInline => "put_inline",
            Kind::GetInline => "get_inline",
        }
    }
}

/// Where a transfer stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum State {
    /// Waiting for its turn: a place among the transfers in flight, credits, send-queue
    /// room and, for a registered transfer, MRs.
    Queued,
    /// The request is out (a GET's with this side's registrations): the peer's answer is
    /// awaited.
    Requested,
    /// PUT: the sink's registrations arrived; the data chain waits for room.
    Acked,
    /// PUT: the data chain (registrations, RDMA WRITEs, their LOCAL_INVs, the DONE that
    /// tells the sink) is posted.
    Writing,
    /// PUT with a check: the data chain completed; the sink's verdict is awaited.
    Verdict,
    /// GET: the data is in (or the GET failed); this side's registrations must die:
    /// their LOCAL_INV chain waits for room, or is posted.
    Unkeying,
    /// The connection is failing while work requests may still name the transfer's
    /// buffer or keys: they die when the QP is drained (or their chain flushes).
    Draining,
    /// Over: no key is alive, the outcome is known.
    Done,
}

/// This side's registrations of a transfer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Keys {
    /// None alive.
    None,
    /// Registered (posted with the request, or in a chain being built).
    Live,
    /// Their LOCAL_INVs are posted: dead when that chain completes.
    Dying,
}

/// What happens to a transfer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Event {
    /// The request is being posted (a GET's with its registrations): from here the device
    /// may hold it, unless [`Event::NotPosted`] follows at once.
    Posted,
    /// PUT_ACK: the sink registered its buffer.
    Acked,
    /// The peer refused or failed the transfer (NAK, an error status), with that error.
    Refused(i32),
    /// The peer's answer that ends the transfer on its side: a GET's DONE (`inv_all`: it
    /// invalidated the transfer's only registration), GET_DATA, a pong.
    Answered {
        /// The peer killed this side's only registration (remote invalidation).
        inv_all: bool,
    },
    /// PUT_RESULT: the sink's verdict (0 or an error).
    Verdict(i32),
    /// The transfer's chain (a PUT's data, a GET's LOCAL_INVs) is being posted: from here
    /// the device may hold it, unless [`Event::NotPosted`] follows at once.
    ChainPosted,
    /// That chain completed (`true`) or failed or flushed (`false`).
    ChainDone(bool),
    /// Posting failed before the device took anything: the registrations built for it are
    /// destroyed (their keys die with them), with that error.
    NotPosted(i32),
    /// The transfer's deadline passed.
    Timeout,
    /// The connection is going down: everything posted flushes.
    ConnFailed,
    /// The connection is drained: no work request names anything of it any more.
    Drained,
}

/// What the transport does after an event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Action {
    /// Nothing more.
    None,
    /// Post the PUT's data chain (when there is room).
    PostData,
    /// Post the LOCAL_INVs of this side's registrations (when there is room).
    PostInvalidate,
    /// Tell the sink that the PUT failed (DONE with the error), so it kills its keys; if
    /// that cannot be sent, fail the connection. Then finish.
    AbortPut,
    /// Fail the connection: the peer still counts the transfer, or its keys cannot be
    /// killed otherwise.
    FailConn,
    /// The peer broke the protocol: fail the connection naming the reason.
    Violation(&'static str),
    /// The transfer is over: report it ([`Track::result`]).
    Finish,
}

/// A transfer's state.
///
/// # Invariants
///
/// In [`State::Done`], `keys` is [`Keys::None`] and `peer_keys` is false; [`Track::fire`]
/// returns an outcome at most once per try.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Track {
    kind: Kind,
    state: State,
    keys: Keys,
    /// The peer holds registrations for this transfer that only a DONE (or the connection
    /// failing) kills: a PUT's sink, from PUT_ACK until the DONE is posted.
    peer_keys: bool,
    /// A PUT's sink sends a verdict that must be awaited (the data is checked).
    check: bool,
    verdict: Option<i32>,
    /// The first error.
    err: Option<i32>,
    fired: bool,
}

impl Track {
    /// A new transfer, queued. `check`: a PUT's verdict is awaited.
    pub(crate) fn new(kind: Kind, check: bool) -> Self {
        Self {
            kind,
            state: State::Queued,
            keys: Keys::None,
            peer_keys: false,
            check,
            verdict: None,
            err: None,
            fired: false,
        }
    }

    pub(crate) fn kind(&self) -> Kind {
        self.kind
    }

    pub(crate) fn state(&self) -> State {
        self.state
    }

    pub(crate) fn keys(&self) -> Keys {
        self.keys
    }

    /// Whether the peer may hold keys for this transfer.
    // The module relies on the invariant; the host tests check it.
    #[allow(dead_code)]
    pub(crate) fn peer_keys(&self) -> bool {
        self.peer_keys
    }

    /// Whether the request is out and not finished (it counts against the queue depth).
    pub(crate) fn in_flight(&self) -> bool {
        !matches!(self.state, State::Queued | State::Done)
    }

    /// Whether the peer's answers still move the transfer (its deadline runs).
    pub(crate) fn awaits_peer(&self) -> bool {
        matches!(
            self.state,
            State::Requested | State::Acked | State::Writing | State::Verdict
        )
    }

    /// The outcome: `Ok` or the first error (the peer's verdict included).
    pub(crate) fn result(&self) -> Result<(), i32> {
        match (self.err, self.verdict) {
            (Some(e), _) => Err(e),
            (None, Some(v)) if v != 0 => Err(v),
            _ => Ok(()),
        }
    }

    fn fail(&mut self, e: i32) {
        if self.err.is_none() {
            self.err = Some(e);
        }
    }

    /// The connection failed: a busy peer's refusal, which would have been retried, is no
    /// longer the reason.
    fn aborted(&mut self) {
        if self.err == Some(EAGAIN) {
            self.err = None;
        }
        self.fail(ECONNABORTED);
    }

    /// The deadline passed while the peer (or this side's LOCAL_INVs) did not answer: the
    /// connection must go, and the transfer reports the timeout.
    fn late(&mut self) -> Action {
        self.fail(ETIMEDOUT);
        Action::FailConn
    }

    fn done(&mut self) -> Action {
        self.state = State::Done;
        Action::Finish
    }

    /// Applies `ev`; returns what to do.
    pub(crate) fn on(&mut self, ev: Event) -> Action {
        use Event as E;
        use State as S;
        let get = self.kind == Kind::Get;
        match (self.state, ev) {
            (S::Done, _) => Action::None,
            // The connection's end reaches every state.
            (_, E::Drained) => {
                self.keys = Keys::None;
                self.peer_keys = false;
                self.aborted();
                self.done()
            }
            (S::Draining, E::ChainDone(_)) => {
                self.keys = Keys::None;
                self.done()
            }
            (S::Draining, _) => Action::None,
            (_, E::ConnFailed) => {
                self.aborted();
                // The sink's keys die with the connection on its side.
                self.peer_keys = false;
                if self.keys == Keys::None {
                    self.done()
                } else {
                    self.state = S::Draining;
                    Action::None
                }
            }

            (S::Queued, E::Posted) => {
                self.state = S::Requested;
                self.keys = if get { Keys::Live } else { Keys::None };
                Action::None
            }
            (S::Queued, E::NotPosted(e)) => {
                self.fail(e);
                self.done()
            }
            (S::Queued, E::Timeout) => {
                self.fail(ETIMEDOUT);
                self.done()
            }
            (S::Queued, E::ChainPosted | E::ChainDone(_)) => Action::None,
            (S::Queued, _) => Action::Violation("answer for a transfer not requested"),

            (S::Requested, E::Acked) if self.kind == Kind::Put => {
                self.state = S::Acked;
                self.peer_keys = true;
                Action::PostData
            }
            (S::Requested, E::Refused(e)) => {
                self.fail(e);
                if self.keys == Keys::Live {
                    self.state = S::Unkeying;
                    Action::PostInvalidate
                } else {
                    self.done()
                }
            }
            (S::Requested, E::Answered { inv_all }) if get => {
                if inv_all {
                    self.keys = Keys::None;
                    self.done()
                } else {
                    self.state = S::Unkeying;
                    Action::PostInvalidate
                }
            }
            (S::Requested, E::Answered { .. })
                if matches!(self.kind, Kind::Ping | Kind::GetInline) =>
            {
                self.done()
            }
            (S::Requested, E::Verdict(v)) if self.kind == Kind::PutInline => {
                self.verdict = Some(v);
                self.done()
            }
            (S::Requested, E::Timeout) => self.late(),
            // The request (a GET's with its registrations) could not be posted after all.
            (S::Requested, E::NotPosted(e)) => {
                self.keys = Keys::None;
                self.fail(e);
                self.done()
            }
            (S::Requested, E::Posted | E::ChainPosted | E::ChainDone(_)) => Action::None,
            (S::Requested, _) => Action::Violation("answer of another kind of transfer"),

            (S::Acked, E::ChainPosted) => {
                // The chain ends with the DONE that tells the sink (its keys die when the
                // chain completes, or with the connection); its own MRs are invalidated in
                // it.
                self.state = S::Writing;
                self.keys = Keys::Dying;
                Action::None
            }
            (S::Acked, E::NotPosted(e)) => {
                self.fail(e);
                self.peer_keys = false;
                self.state = S::Done;
                Action::AbortPut
            }
            (S::Acked, E::Timeout) => self.late(),
            (S::Acked, E::Posted | E::ChainDone(_)) => Action::None,
            (S::Acked, _) => Action::Violation("second answer for a transfer"),

            (S::Writing, E::ChainDone(ok)) => {
                // Completed: the DONE went; failed: the connection fails.
                self.keys = Keys::None;
                self.peer_keys = false;
                if !ok {
                    self.fail(EIO);
                    self.done()
                } else if self.check && self.verdict.is_none() {
                    self.state = S::Verdict;
                    Action::None
                } else {
                    self.done()
                }
            }
            (S::Writing, E::Verdict(v)) if self.verdict.is_none() => {
                // The verdict may overtake the chain's completion.
                self.verdict = Some(v);
                Action::None
            }
            (S::Writing, E::Timeout) => self.late(),
            // The chain could not be posted after all (nothing reached the device).
            (S::Writing, E::NotPosted(e)) => {
                self.fail(e);
                self.keys = Keys::None;
                self.peer_keys = false;
                self.state = S::Done;
                Action::AbortPut
            }
            (S::Writing, E::Posted | E::ChainPosted) => Action::None,
            (S::Writing, _) => Action::Violation("second answer for a transfer"),

            (S::Verdict, E::Verdict(v)) => {
                self.verdict = Some(v);
                self.done()
            }
            (S::Verdict, E::Timeout) => self.late(),
            (S::Verdict, E::Posted | E::ChainPosted | E::ChainDone(_) | E::NotPosted(_)) => {
                Action::None
            }
            (S::Verdict, _) => Action::Violation("second answer for a transfer"),

            (S::Unkeying, E::ChainPosted) => {
                self.keys = Keys::Dying;
                Action::None
            }
            (S::Unkeying, E::ChainDone(ok)) if self.keys == Keys::Dying => {
                self.keys = Keys::None;
                if !ok {
                    self.fail(EIO);
                }
                self.done()
            }
            (S::Unkeying, E::NotPosted(e)) => {
                // The keys cannot be killed here: they die with the QP.
                self.fail(e);
                Action::FailConn
            }
            // The LOCAL_INVs not confirmed in time: the keys die with the QP.
            (S::Unkeying, E::Timeout) => self.late(),
            (S::Unkeying, E::Posted | E::ChainDone(_)) => Action::None,
            (S::Unkeying, _) => Action::Violation("an answer for a transfer being unkeyed"),
        }
    }

    /// Starts the transfer again (the peer was busy): only from [`State::Done`] with no
    /// key alive and before it was reported. Returns whether it did.
    pub(crate) fn retry(&mut self) -> bool {
        if self.state != State::Done || self.fired || self.keys != Keys::None || self.peer_keys {
            return false;
        }
        *self = Self::new(self.kind, self.check);
        true
    }

    /// Reports the transfer: its outcome, once, when it is done.
    pub(crate) fn fire(&mut self) -> Option<Result<(), i32>> {
        if self.state != State::Done || self.fired {
            return None;
        }
        self.fired = true;
        Some(self.result())
    }
}
