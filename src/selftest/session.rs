// SPDX-License-Identifier: GPL-2.0

//! A node's side of the console's trust model.
//!
//! A node accepts control requests (`crate::selftest::control`) only from the consoles its
//! administrator allowed ([`Allow`], `console allow ADDR`; none by default) that prove the
//! cluster key (`crate::selftest::auth`; without a key installed every console is refused), is in one
//! session at a time, and holds it only while its console keeps speaking ([`Node`]: a lease
//! renewed by every request of the session and expired by the periodic work), so a dead
//! console never leaves a test running. An address is only a first filter: a session is
//! the key derived at its JOIN, and each of its requests is tagged with it and numbered.
//!
//! Pure logic: no `kernel::`, compiled by the host tests too.

use crate::selftest::{
    auth::{
        self,
        Challenge,
        Challenges,
        Key,
        Mac,
        Nonce, //
    },
    control::{
        Op,
        Request,
        Start,
        EBUSY,
        EINVAL,
        EKEYREJECTED,
        ENOKEY,
        EPERM,
        ESRCH,
        ESTALE, //
    },
};

/// Most consoles a node allows.
pub(crate) const MAX_ALLOWED: usize = 16;
/// Most of a node's interfaces one session holds a key for.
pub(crate) const MAX_SESSION_KEYS: usize = 8;

/// The consoles a node's administrator allowed (`console allow ADDR`); none by default.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Allow {
    addrs: [[u8; 4]; MAX_ALLOWED],
    n: usize,
}

impl Allow {
    /// Allows `ip`; `Ok(false)` when it was already, `Err(())` when the list is full.
    pub(crate) fn add(&mut self, ip: [u8; 4]) -> Result<bool, ()> {
        if self.contains(ip) {
            return Ok(false);
        }
        if self.n == MAX_ALLOWED {
            return Err(());
        }
        self.addrs[self.n] = ip;
        self.n += 1;
        Ok(true)
    }

    /// Denies `ip` again; whether it was allowed.
    pub(crate) fn remove(&mut self, ip: [u8; 4]) -> bool {
        let Some(i) = self.list().iter().position(|a| *a == ip) else {
            return false;
        };
        self.addrs.copy_within(i + 1..self.n, i);
        self.n -= 1;
        true
    }

    /// Whether `ip` is allowed.
    pub(crate) fn contains(&self, ip: [u8; 4]) -> bool {
        self.list().contains(&ip)
    }

    /// The consoles allowed, in the order they were.
    pub(crate) fn list(&self) -> &[[u8; 4]] {
        &self.addrs[..self.n]
    }
}

/// The session a node is in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Session {
    /// The console holding it.
    pub(crate) console: [u8; 4],
    /// Its id (chosen by the console, never 0).
    pub(crate) id: u64,
    /// Its lease, in milliseconds.
    pub(crate) lease_ms: u32,
    /// When its console was last heard, on the node's clock (milliseconds).
    pub(crate) heard_ms: u64,
    /// Its keys, one per interface of this node the console joined through.
    pub(crate) keys: [Option<SessionKey>; MAX_SESSION_KEYS],
}

/// A session's key on one of the node's interfaces.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct SessionKey {
    /// The interface's address.
    pub(crate) me: [u8; 4],
    /// The key (derived at the JOIN through that interface: `auth::challenge_key`).
    pub(crate) key: Key,
    /// The last sequence number admitted on it.
    pub(crate) seq: u64,
}

impl Session {
    /// Its key on interface `me`.
    pub(crate) fn key_of(&mut self, me: [u8; 4]) -> Option<&mut SessionKey> {
        self.keys.iter_mut().flatten().find(|k| k.me == me)
    }

    /// Keeps `key` as its key on interface `me` (in place of the one it had there); false
    /// when it holds keys for as many interfaces as it may.
    fn set_key(&mut self, me: [u8; 4], key: Key) -> bool {
        let k = SessionKey { me, key, seq: 0 };
        if let Some(old) = self.key_of(me) {
            *old = k;
            return true;
        }
        match self.keys.iter_mut().find(|k| k.is_none()) {
            Some(slot) => {
                *slot = Some(k);
                true
            }
            None => false,
        }
    }

    /// Milliseconds left of its lease at `now_ms`.
    pub(crate) fn left_ms(&self, now_ms: u64) -> u64 {
        (self.heard_ms + u64::from(self.lease_ms)).saturating_sub(now_ms)
    }
}

/// What a request admitted does to the node's test.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Admitted {
    /// Nothing (a JOIN, a QUERY).
    Nothing,
    /// Start this test (the caller refuses with `control::EALREADY` while one runs).
    Start(Start),
    /// Stop the test (STOP, LEAVE).
    Stop,
    /// A HELLO answered: the reply carries this nonce.
    Challenge(Nonce),
}

/// Requests refused, by why.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Refused {
    /// From a console not allowed.
    pub(crate) not_allowed: u64,
    /// While the node had no key.
    pub(crate) no_key: u64,
    /// Whose proof of the key failed (a wrong key, a forged or altered request).
    pub(crate) bad_proof: u64,
    /// Replayed, or for a challenge unknown, used or expired.
    pub(crate) stale: u64,
    /// For a session the console does not hold (another's, or none).
    pub(crate) not_holder: u64,
}

/// What a node does with a request: its status, and how its reply is sealed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Verdict {
    /// What the request does, or why it is refused (the reply's status).
    pub(crate) status: Result<Admitted, i32>,
    /// The key the reply is tagged with: the request's, once its proof held.
    pub(crate) key: Option<Key>,
    /// Whether the reply may name the session (only to its holder, in it).
    pub(crate) holder: bool,
}

impl Verdict {
    fn refused(e: i32) -> Self {
        Self {
            status: Err(e),
            key: None,
            holder: false,
        }
    }
}

/// A node's console state: who may drive it, and the session it is in.
///
/// # Invariants
///
/// A session is held only by an allowed console (denying a console ends its session).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Node {
    /// The consoles allowed.
    pub(crate) allow: Allow,
    /// Refused consoles already logged (each once, until it is allowed), and refusals.
    logged: Allow,
    /// Requests refused, by why.
    pub(crate) refused: Refused,
    /// The cluster key; none: every console is refused.
    pub(crate) key: Option<Key>,
    /// The challenges answered and not yet used.
    challenges: Challenges,
    /// The session, if any (possibly expired: see [`Node::expire`]).
    pub(crate) session: Option<Session>,
}

impl Node {
    /// Ends the session if its lease ran out at `now_ms`; returns it then.
    pub(crate) fn expire(&mut self, now_ms: u64) -> Option<Session> {
        match self.session {
            Some(s) if s.left_ms(now_ms) == 0 => self.session.take(),
            _ => None,
        }
    }

    /// Counts a request of `ip` refused as not allowed; whether to log it (the first time
    /// for this address, for the first [`MAX_ALLOWED`] addresses).
    pub(crate) fn refuse(&mut self, ip: [u8; 4]) -> bool {
        self.refused.not_allowed += 1;
        self.logged.add(ip) == Ok(true)
    }

    /// Installs the cluster key (`None`: removes it). The session, if any, ends: it was
    /// proved with the key replaced. Returns it.
    pub(crate) fn set_key(&mut self, key: Option<Key>) -> Option<Session> {
        self.key = key;
        self.challenges = Challenges::default();
        self.session.take()
    }

    /// Allows `ip`: `Ok(false)` when it was already, `Err(())` when the list is full.
    pub(crate) fn allow(&mut self, ip: [u8; 4]) -> Result<bool, ()> {
        let r = self.allow.add(ip);
        if r.is_ok() {
            self.logged.remove(ip);
        }
        r
    }

    /// Denies `ip`; returns whether it was allowed, and its session, which ends.
    pub(crate) fn deny(&mut self, ip: [u8; 4]) -> (bool, Option<Session>) {
        let was = self.allow.remove(ip);
        let ended = match self.session {
            Some(s) if s.console == ip => self.session.take(),
            _ => None,
        };
        (was, ended)
    }

    /// Admits `req` (decoded from `bytes`) of console `from` to this node's address `me`
    /// at `now_ms`, renewing the session's lease; or says why not. `fresh` is a new random
    /// nonce, given out if the request is a HELLO. A lease that ran out ends first (the
    /// caller stops the test of a session [`Node::expire`] returns before it asks).
    ///
    /// A request changes the session only once its proof of the key held: a forged,
    /// replayed or altered one is counted and changes nothing.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn admit(
        &mut self,
        mac: Mac,
        now_ms: u64,
        from: [u8; 4],
        me: [u8; 4],
        req: &Request,
        bytes: &[u8],
        fresh: Nonce,
    ) -> Verdict {
        // The caller refuses (and counts, see [`Node::refuse`]) consoles not allowed first.
        if !self.allow.contains(from) {
            return Verdict::refused(EPERM);
        }
        let Some(cluster) = self.key else {
            self.refused.no_key += 1;
            return Verdict::refused(ENOKEY);
        };
        // The caller expires first (and stops its test); one found expired here just ends.
        let _ = self.expire(now_ms);
        if req.op == Op::Hello {
            let nc = req.nonce.unwrap_or_default();
            self.challenges.give(Challenge {
                console: from,
                nc,
                nn: fresh,
                at_ms: now_ms,
            });
            return Verdict {
                status: Ok(Admitted::Challenge(fresh)),
                key: None,
                holder: false,
            };
        }
        if let (true, Some(nn)) = (req.challenged(), req.nonce) {
            return self.challenged(mac, now_ms, from, me, cluster, req, bytes, &nn);
        }
        // In a session: its holder's address and id, its key, a new sequence number.
        let Some(s) = self.session.as_mut() else {
            self.refused.not_holder += 1;
            return Verdict::refused(ESRCH);
        };
        if s.console != from || s.id != req.session {
            self.refused.not_holder += 1;
            return Verdict::refused(EBUSY);
        }
        // Joined through another of this node's interfaces only: not here.
        let Some(k) = s.key_of(me) else {
            self.refused.not_holder += 1;
            return Verdict::refused(ESRCH);
        };
        if !Request::tag_ok(bytes, mac, &k.key) {
            self.refused.bad_proof += 1;
            return Verdict::refused(EKEYREJECTED);
        }
        let key = Some(k.key);
        if req.seq <= k.seq {
            self.refused.stale += 1;
            return Verdict {
                status: Err(ESTALE),
                key,
                holder: true,
            };
        }
        k.seq = req.seq;
        s.heard_ms = now_ms;
        let status = match req.op {
            Op::Join => {
                s.lease_ms = req.lease_ms;
                Ok(Admitted::Nothing)
            }
            Op::Query => Ok(Admitted::Nothing),
            Op::Stop => Ok(Admitted::Stop),
            Op::Leave => {
                self.session = None;
                Ok(Admitted::Stop)
            }
            // Decoded requests of START carry their test.
            Op::Start => req.start.map(Admitted::Start).ok_or(EINVAL),
            Op::Hello => Err(EINVAL),
        };
        Verdict {
            status,
            key,
            holder: true,
        }
    }

    /// A challenged JOIN or read-only QUERY: its challenge used, its proof checked.
    #[allow(clippy::too_many_arguments)]
    fn challenged(
        &mut self,
        mac: Mac,
        now_ms: u64,
        from: [u8; 4],
        me: [u8; 4],
        cluster: Key,
        req: &Request,
        bytes: &[u8],
        nn: &Nonce,
    ) -> Verdict {
        let Some(c) = self.challenges.take(now_ms, from, nn) else {
            self.refused.stale += 1;
            return Verdict::refused(ESTALE);
        };
        let key = auth::challenge_key(mac, &cluster, from, me, &c.nc, &c.nn);
        if !Request::tag_ok(bytes, mac, &key) {
            self.refused.bad_proof += 1;
            return Verdict::refused(EKEYREJECTED);
        }
        let (status, holder) = match (req.op, &mut self.session) {
            (Op::Query, _) => (Ok(Admitted::Nothing), false),
            (Op::Join, None) => {
                let mut s = Session {
                    console: from,
                    id: req.session,
                    lease_ms: req.lease_ms,
                    heard_ms: now_ms,
                    keys: [None; MAX_SESSION_KEYS],
                };
                s.set_key(me, key);
                self.session = Some(s);
                (Ok(Admitted::Nothing), true)
            }
            // Its holder joining through another interface of this node, or again (it
            // lost its key: a restart): the key of that interface is the new one.
            (Op::Join, Some(s)) if s.console == from && s.id == req.session => {
                if s.set_key(me, key) {
                    s.lease_ms = req.lease_ms;
                    s.heard_ms = now_ms;
                    (Ok(Admitted::Nothing), true)
                } else {
                    (Err(EBUSY), false)
                }
            }
            (Op::Join, Some(_)) => {
                self.refused.not_holder += 1;
                (Err(EBUSY), false)
            }
            _ => (Err(EINVAL), false),
        };
        Verdict {
            status,
            key: Some(key),
            holder,
        }
    }
}
