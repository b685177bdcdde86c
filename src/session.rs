// SPDX-License-Identifier: GPL-2.0

//! A node's side of the console's trust model.
//!
//! A node accepts control requests (`crate::control`) only from the consoles its
//! administrator allowed ([`Allow`], `console allow ADDR`; none by default), is in one
//! session at a time, and holds it only while its console keeps speaking ([`Node`]: a lease
//! renewed by every request of the session and expired by the periodic work), so a dead
//! console never leaves a test running.
//!
//! Pure logic: no `kernel::`, compiled by the host tests too.

use crate::control::{
    Op,
    Request,
    Start,
    EBUSY,
    EINVAL,
    EPERM,
    ESRCH, //
};

/// Most consoles a node allows.
pub(crate) const MAX_ALLOWED: usize = 16;

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
}

impl Session {
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
    /// Requests refused because their console was not allowed.
    pub(crate) refusals: u64,
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
        self.refusals += 1;
        self.logged.add(ip) == Ok(true)
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

    /// Admits `req` of console `from` at `now_ms`, renewing the session's lease; or says
    /// why not (the reply's status). A lease that ran out ends first (the caller stops the
    /// test of a session [`Node::expire`] returns before it asks).
    pub(crate) fn admit(
        &mut self,
        now_ms: u64,
        from: [u8; 4],
        req: &Request,
    ) -> Result<Admitted, i32> {
        if !self.allow.contains(from) {
            return Err(EPERM);
        }
        // The caller expires first (and stops its test); one found expired here just ends.
        let _ = self.expire(now_ms);
        if req.op == Op::Query && req.session == 0 {
            return Ok(Admitted::Nothing);
        }
        match (&mut self.session, req.op) {
            (None, Op::Join) => {
                self.session = Some(Session {
                    console: from,
                    id: req.session,
                    lease_ms: req.lease_ms,
                    heard_ms: now_ms,
                });
                Ok(Admitted::Nothing)
            }
            (None, _) => Err(ESRCH),
            (Some(s), op) if s.console == from && s.id == req.session => {
                s.heard_ms = now_ms;
                match op {
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
                }
            }
            (Some(_), _) => Err(EBUSY),
        }
    }
}
