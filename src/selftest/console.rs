// SPDX-License-Identifier: GPL-2.0

//! The selftest console, a node's side: it answers consoles' control requests
//! ([`crate::selftest::control`]) under the trust model of [`crate::selftest::session`], and runs the test a
//! console started, from the interface the request came to, as `fastreg-lst` runs a local
//! one ([`crate::selftest::lst`]).
//!
//! The transport hands each request up through [`Control`], with a connection's lock
//! held: answering takes only this object's lock and a run's counters; a test is started
//! by a work item on the module's workqueue, which then waits for the run to end (it
//! restarts the slots whose transfer failed). A run ends by itself, or when a STOP, a
//! LEAVE, a console denied or a lease that ran out stops it, or when its interface goes.
//! Only what the run counted stays, for the next query.

use kernel::{
    new_mutex,
    prelude::*,
    sync::{
        Arc,
        Mutex, //
    },
    time::{
        Instant,
        Monotonic, //
    },
};

use crate::{
    rules::command::Lst,
    selftest::{
        auth::{
            self,
            Key, //
        },
        control::{
            self,
            Counters,
            Op,
            Payload,
            Reply,
            Request,
            RunState,
            Start, //
        },
        lst::{
            self,
            Run, //
        },
        session::{
            Admitted,
            Node,
            Session,
            Verdict, //
        },
    },
    show::{
        pr_limited,
        Ip, //
    },
    transport::{
        Control,
        Iface, //
    },
    verbs, //
};

/// What a node's console side holds.
struct State {
    /// The consoles allowed and the session.
    node: Node,
    /// The test since it was accepted, while it runs.
    run: Option<Arc<Run>>,
    /// Where the last test stands.
    state: RunState,
    /// A STOP came while the test was being set up.
    stop_asked: bool,
    /// What the last test counted, once it ended (or why it could not start).
    last: Counters,
    /// Tests accepted so far: a work item acts only on its own.
    generation: u64,
}

/// A node's console side, shared with the work items of its tests.
#[pin_data]
struct Inner {
    #[pin]
    st: Mutex<State>,
    /// The clock of leases.
    born: Instant<Monotonic>,
    /// The transfer timeout of tests.
    timeout_ms: u32,
}

/// A node's console side: the [`Control`] of its interfaces.
pub(crate) struct Console {
    inner: Arc<Inner>,
}

impl Console {
    /// No console allowed, no session.
    pub(crate) fn new(timeout_ms: u32) -> Result<Arc<Self>> {
        let inner = Arc::pin_init(
            pin_init!(Inner {
                st <- new_mutex!(
                    State {
                        node: Node::default(),
                        run: None,
                        state: RunState::None,
                        stop_asked: false,
                        last: Counters::default(),
                        generation: 0,
                    },
                    "fastreg::console::State"
                ),
                born: Instant::now(),
                timeout_ms,
            }),
            GFP_KERNEL,
        )?;
        Ok(Arc::new(Self { inner }, GFP_KERNEL)?)
    }

    /// Allows (`true`) or denies console `ip`; `Err` when the list is full. Denying the
    /// console of the session ends it, and its test stops.
    pub(crate) fn allow(&self, ip: [u8; 4], allow: bool) -> Result<bool> {
        let mut st = self.inner.st.lock();
        if allow {
            let new = st.node.allow(ip).map_err(|()| ENOSPC)?;
            pr_info!("console: {} allowed\n", Ip(ip));
            return Ok(new);
        }
        let (was, ended) = st.node.deny(ip);
        if let Some(s) = ended {
            pr_info!(
                "console: {} denied: its session {:#x} ends, the test stops\n",
                Ip(ip),
                s.id
            );
            Inner::stop_locked(&mut st);
        } else if was {
            pr_info!("console: {} denied\n", Ip(ip));
        }
        Ok(was)
    }

    /// Installs the cluster key (`None`: removes it); the session, if any, ends and its test
    /// stops (it was proved with the key replaced).
    pub(crate) fn set_key(&self, key: Option<Key>) {
        let mut st = self.inner.st.lock();
        if let Some(s) = st.node.set_key(key) {
            pr_info!(
                "console: the key changed: session {:#x} of {} ends, the test stops\n",
                s.id,
                Ip(s.console)
            );
            Inner::stop_locked(&mut st);
        }
        match key {
            Some(k) => pr_info!(
                "console: key {:08x} installed\n",
                auth::fingerprint(verbs::hmac_sha256, &k)
            ),
            None => pr_info!("console: key removed: every console is refused\n"),
        }
    }

    /// The cluster key, for this node's own console requests (`crate::selftest::ask`).
    pub(crate) fn key(&self) -> Option<Key> {
        self.inner.st.lock().node.key
    }

    /// The listing of `console list`: the consoles allowed, the session, the test.
    pub(crate) fn listing(&self) -> Listing<'_> {
        Listing(self)
    }

    fn write_listing(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let now = self.inner.now_ms();
        let st = self.inner.st.lock();
        f.write_str("allowed")?;
        if st.node.allow.list().is_empty() {
            f.write_str(" none")?;
        }
        for a in st.node.allow.list() {
            write!(f, " {}", Ip(*a))?;
        }
        match st.node.session.filter(|s| s.left_ms(now) > 0) {
            Some(s) => write!(
                f,
                "; session {:#x} of {} lease_left_ms={}",
                s.id,
                Ip(s.console),
                s.left_ms(now)
            )?,
            None => f.write_str("; session none")?,
        }
        let r = &st.node.refused;
        write!(
            f,
            "; test {}; refused {}; key ",
            st.state.name(),
            r.not_allowed
        )?;
        match &st.node.key {
            Some(k) => write!(f, "{:08x}", auth::fingerprint(verbs::hmac_sha256, k))?,
            None => f.write_str("none")?,
        }
        write!(
            f,
            "; rejected no_key={} bad_proof={} stale={} not_holder={}",
            r.no_key, r.bad_proof, r.stale, r.not_holder
        )
    }
}

/// What a run counted, as a reply carries it (the node's clock and data moved apart).
fn counted(p: &lst::Progress) -> Counters {
    Counters {
        ops: p.ops,
        bytes: p.bytes,
        errors: p.errors.map(|e| u32::try_from(e).unwrap_or(u32::MAX)),
        corrupt: p.corrupt,
        usecs: p.usecs,
        first_error: p.first_error,
        ..Counters::default()
    }
}

/// A console side's listing (`console list`), for formatting.
pub(crate) struct Listing<'a>(&'a Console);

impl core::fmt::Display for Listing<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        self.0.write_listing(f)
    }
}

impl Inner {
    /// Milliseconds since the module was loaded.
    fn now_ms(&self) -> u64 {
        self.born.elapsed().as_millis().max(0) as u64
    }

    /// Stops the test, if one runs or is being set up.
    fn stop_locked(st: &mut State) {
        match &st.run {
            Some(run) => run.stop(),
            None if st.state == RunState::Starting => st.stop_asked = true,
            None => {}
        }
    }

    /// Ends a session whose lease ran out; its test stops.
    fn expire_locked(&self, st: &mut State, now: u64) {
        if let Some(s) = st.node.expire(now) {
            pr_warn!(
                "console: session {:#x} of {} expired (silent for {} ms): the test stops\n",
                s.id,
                Ip(s.console),
                now.saturating_sub(s.heard_ms)
            );
            Self::stop_locked(st);
        }
    }

    /// The counters a reply carries: the running test's, or the last one's; and what
    /// `iface` moved.
    fn counters(st: &State, iface: &Iface, now_us: u64) -> Counters {
        let mut c = match &st.run {
            Some(run) => counted(&run.progress()),
            None => st.last,
        };
        let [rx_ops, rx_bytes, tx_ops, tx_bytes] = iface.moved();
        c.now_us = now_us;
        c.rx_ops = rx_ops;
        c.rx_bytes = rx_bytes;
        c.tx_ops = tx_ops;
        c.tx_bytes = tx_bytes;
        c
    }

    /// The work item of a test.
    fn run(&self, iface: Arc<Iface>, s: Start, generation: u64) {
        let t = Lst::of_start(&s);
        // Its interface may have gone (removed, its device with it) since the request.
        let started = if iface.is_closed() {
            Err(ENODEV)
        } else {
            lst::start(iface, s.peers(), &t, self.timeout_ms)
        };
        let run = match started {
            Ok(run) => run,
            Err(e) => {
                pr_limited!(pr_err, "console: the test could not start: {:?}\n", e);
                let mut st = self.st.lock();
                if st.generation == generation {
                    st.state = RunState::Failed;
                    st.last = Counters {
                        first_error: e.to_errno(),
                        ..Counters::default()
                    };
                }
                return;
            }
        };
        {
            let mut st = self.st.lock();
            if st.generation != generation || st.stop_asked {
                run.stop();
            }
            if st.generation == generation {
                st.run = Some(run.clone());
                st.state = RunState::Running;
            }
        }
        let _ = run.wait();
        let p = run.progress();
        // Asked before the lock: whether the interface closed takes the interface's lock,
        // which is taken before this one on the request path.
        let stopped = run.stopped();
        let mut st = self.st.lock();
        if st.run.as_ref().is_some_and(|r| Arc::ptr_eq(r, &run)) {
            st.run = None;
        }
        if st.generation != generation {
            return;
        }
        st.last = counted(&p);
        st.state = if stopped {
            RunState::Stopped
        } else {
            RunState::Done
        };
        pr_info!(
            "console: test over ({}): {} transfers, {} failed, {} corrupt\n",
            st.state.name(),
            p.ops,
            p.errors.iter().sum::<u64>(),
            p.corrupt
        );
    }
}

impl Console {
    /// Starts test `s` from `iface` (a work item): the run is set up, then waited for.
    fn start(&self, iface: Arc<Iface>, s: Start, generation: u64) -> Result {
        let me = self.inner.clone();
        let q = verbs::module_wq().ok_or(ENODEV)?;
        // Called on the connection's work item, with its lock released; it may serve
        // reclaim: no allocation that waits for memory.
        q.try_spawn(GFP_NOWAIT, move || me.run(iface, s, generation))
            .map_err(|_| ENOMEM)
    }

    /// Answers request `req` (decoded from `bytes`) of console `from` to `iface`.
    fn answer(&self, iface: &Arc<Iface>, from: [u8; 4], req: &Request, bytes: &[u8]) -> Payload {
        let now = self.inner.now_ms();
        let fresh = if req.op == Op::Hello {
            verbs::random_bytes()
        } else {
            [0; auth::NONCE_LEN]
        };
        let me = iface.addr().ip;
        let mut st = self.inner.st.lock();
        self.inner.expire_locked(&mut st, now);
        let v: Verdict = st
            .node
            .admit(verbs::hmac_sha256, now, from, me, req, bytes, fresh);
        let mut nonce = None;
        let status = match v.status {
            Err(e) => {
                Self::log_refusal(from, req, e);
                e
            }
            Ok(Admitted::Nothing) => 0,
            Ok(Admitted::Challenge(n)) => {
                nonce = Some(n);
                0
            }
            Ok(Admitted::Stop) => {
                Inner::stop_locked(&mut st);
                if req.op == Op::Leave {
                    pr_info!("console: {} left session {:#x}\n", Ip(from), req.session);
                }
                0
            }
            Ok(Admitted::Start(s)) => {
                if st.run.is_some() || st.state == RunState::Starting {
                    control::EALREADY
                } else if !lst::within_limits(s.buffers(), Ip(from)) {
                    control::ENOMEM
                } else {
                    st.generation += 1;
                    let g = st.generation;
                    match self.start(iface.clone(), s, g) {
                        Ok(()) => {
                            st.state = RunState::Starting;
                            st.stop_asked = false;
                            st.last = Counters::default();
                            0
                        }
                        Err(_) => control::ENOMEM,
                    }
                }
            }
        };
        if req.op == Op::Join && status == 0 && req.challenged() {
            pr_info!(
                "console: {} holds this node (session {:#x}, lease {} ms)\n",
                Ip(from),
                req.session,
                req.lease_ms
            );
        }
        verbs::trace::console(u32::from_be_bytes(from), req.op.name(), status);
        // The session is named to its holder only; a refused console learns who holds it.
        let held: Option<Session> = st.node.session;
        let shown = held.filter(|_| v.holder);
        let reply = Reply {
            op: req.op,
            status,
            session: shown.map_or(0, |s| s.id),
            holder: held.map_or([0; 4], |s| s.console),
            lease_left_ms: shown.map_or(0, |s| u32::try_from(s.left_ms(now)).unwrap_or(u32::MAX)),
            run: st.state,
            counters: Inner::counters(&st, iface, now.saturating_mul(1000)),
            seq: req.seq,
            tag: nonce.unwrap_or_default(),
        };
        reply.sealed(verbs::hmac_sha256, v.key.as_ref())
    }

    /// One rate-limited line for a refused request of an allowed console.
    fn log_refusal(from: [u8; 4], req: &Request, e: i32) {
        let op = req.op.name();
        match e {
            control::ENOKEY => pr_limited!(
                pr_warn,
                "console: refused {} from {}: this node has no console key (install the \
                 cluster's: fastreg-lst console key FILE)\n",
                op,
                Ip(from)
            ),
            control::EKEYREJECTED => pr_limited!(
                pr_warn,
                "console: refused {} from {}: its proof of the key failed (a wrong key, or \
                 forged)\n",
                op,
                Ip(from)
            ),
            control::ESTALE => pr_limited!(
                pr_warn,
                "console: refused {} from {}: replayed, or its challenge is unknown, used or \
                 expired\n",
                op,
                Ip(from)
            ),
            _ => {}
        }
    }
}

impl Console {
    /// The answer to a console that is not allowed: only that (nothing of the node's state),
    /// whatever it sent; logged the first time for its address.
    fn refuse(&self, from: [u8; 4], req: &[u8]) -> Payload {
        if self.inner.st.lock().node.refuse(from) {
            pr_warn!(
                "console: refused {}: not an allowed console (console allow {} would allow \
                 it; further refusals of it are counted in console list)\n",
                Ip(from),
                Ip(from)
            );
        }
        let op = req
            .first()
            .copied()
            .and_then(Op::from_u8)
            .unwrap_or(Op::Query);
        verbs::trace::console(u32::from_be_bytes(from), op.name(), control::EPERM);
        Payload::reply(&Reply {
            op,
            status: control::EPERM,
            session: 0,
            holder: [0; 4],
            lease_left_ms: 0,
            run: RunState::None,
            counters: Counters::default(),
            seq: 0,
            tag: [0; auth::TAG_LEN],
        })
    }
}

impl Control for Console {
    fn request(&self, iface: &Arc<Iface>, from: [u8; 4], req: &[u8], reply: &mut Payload) {
        // Who asks before what: a console not allowed learns nothing and costs one line.
        if !self.inner.st.lock().node.allow.contains(from) {
            *reply = self.refuse(from, req);
            return;
        }
        let r = match Request::decode(req) {
            Ok(r) => r,
            Err(why) => {
                pr_limited!(
                    pr_err,
                    "console: bad request from {}: {}\n",
                    Ip(from),
                    why.name()
                );
                // No answer: the connection fails as for any malformed message.
                return;
            }
        };
        *reply = self.answer(iface, from, &r, req);
    }

    fn tick(&self) {
        let now = self.inner.now_ms();
        self.inner.expire_locked(&mut self.inner.st.lock(), now);
    }
}
