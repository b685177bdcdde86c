// SPDX-License-Identifier: GPL-2.0

//! Tests of `src/selftest/auth.rs` with `src/selftest/session.rs` and `src/selftest/control/`: a node's admission
//! of consoles' requests under the cluster key (challenges, session keys, sequence
//! numbers, tags), against consoles holding the key, a wrong one, or none; and the
//! challenges a node keeps.

use crate::{
    control_tests::req, //
    selftest::{auth::*, control::*, session::*},
};
use hmac::{
    Hmac,
    Mac as _, //
};
use proptest::prelude::*;

/// HMAC-SHA256 (the `hmac` and `sha2` crates), as the module's lib/crypto computes it.
fn mac(key: &[u8], msg: &[u8]) -> [u8; 32] {
    let mut m = Hmac::<sha2::Sha256>::new_from_slice(key).unwrap();
    m.update(msg);
    m.finalize().into_bytes().into()
}

const A: [u8; 4] = [10, 0, 0, 1];
const B: [u8; 4] = [10, 0, 0, 2];
const NODE: [u8; 4] = [10, 0, 0, 9];
const KEY: Key = [7; KEY_LEN];
const WRONG: Key = [8; KEY_LEN];

/// A console: its address, the key it holds, and the session it holds on the node (through
/// the node's interface `node`).
#[derive(Clone, Copy)]
struct Console {
    at: [u8; 4],
    node: [u8; 4],
    cluster: Key,
    session: Option<(u64, Key, u64)>,
    nonces: u8,
}

impl Console {
    fn new(at: [u8; 4], cluster: Key) -> Self {
        Self {
            at,
            node: NODE,
            cluster,
            session: None,
            nonces: 0,
        }
    }

    /// Sends `r` sealed under `key`; returns the verdict and the reply as the node seals it.
    fn send(&self, n: &mut Node, now: u64, r: &Request, key: &Key) -> (Verdict, Reply) {
        let p = r.sealed(mac, key);
        let v = n.admit(
            mac,
            now,
            self.at,
            self.node,
            r,
            p.as_slice(),
            [0x33; NONCE_LEN],
        );
        let reply = Reply {
            op: r.op,
            status: v.status.err().unwrap_or(0),
            session: 0,
            holder: [0; 4],
            lease_left_ms: 0,
            run: RunState::None,
            counters: Counters::default(),
            seq: r.seq,
            tag: [0; TAG_LEN],
        };
        let sealed = reply.sealed(mac, v.key.as_ref());
        (v, Reply::decode(sealed.as_slice(), r.op).unwrap())
    }

    /// HELLO then `op` (JOIN or a read-only QUERY) challenged; on a JOIN admitted, the
    /// session is held with the challenge's key. Returns the verdict of `op`.
    fn challenged(&mut self, n: &mut Node, now: u64, op: Op, session: u64) -> Verdict {
        self.nonces += 1;
        let nc = [self.nonces; NONCE_LEN];
        let hello = Request {
            op: Op::Hello,
            session,
            lease_ms: 0,
            start: None,
            nonce: Some(nc),
            seq: 0,
            tag: [0; TAG_LEN],
        };
        let v = n.admit(
            mac,
            now,
            self.at,
            self.node,
            &hello,
            &[],
            fresh(self.nonces),
        );
        let Ok(Admitted::Challenge(nn)) = v.status else {
            return v;
        };
        assert_eq!(v.key, None);
        let k = challenge_key(mac, &self.cluster, self.at, self.node, &nc, &nn);
        let r = Request {
            nonce: Some(nn),
            seq: 0,
            ..req(op, session)
        };
        let (v, reply) = self.send(n, now, &r, &k);
        if v.status.is_ok() {
            // The node proves the key back: its reply carries the challenge key's tag.
            assert!(reply.tag_ok(mac, &k));
            if op == Op::Join {
                self.session = Some((session, k, 0));
            }
        }
        v
    }

    /// `r` in the session held, with the next sequence number.
    fn in_session(&mut self, n: &mut Node, now: u64, r: Request) -> Verdict {
        let (id, k, seq) = self.session.expect("a session");
        self.session = Some((id, k, seq + 1));
        let r = Request {
            session: id,
            seq: seq + 1,
            ..r
        };
        let (v, reply) = self.send(n, now, &r, &k);
        if v.status.is_ok() {
            assert!(reply.tag_ok(mac, &k));
        }
        v
    }
}

fn fresh(i: u8) -> Nonce {
    [0x40 | i; NONCE_LEN]
}

fn start_req() -> Request {
    let mut peers = [[0u8; 4]; MAX_PEERS];
    peers[0] = B;
    Request {
        start: Some(Start {
            test: Test::Write,
            check: 0,
            concurrency: 1,
            offset: 0,
            size: 4096,
            span: Span::Count(10),
            peers,
            npeers: 1,
        }),
        ..req(Op::Start, 1)
    }
}

fn node() -> Node {
    let mut n = Node::default();
    n.allow(A).unwrap();
    n.allow(B).unwrap();
    n.set_key(Some(KEY));
    n
}

#[test]
fn no_key_refuses_every_console() {
    let mut n = Node::default();
    n.allow(A).unwrap();
    let mut c = Console::new(A, KEY);
    assert_eq!(c.challenged(&mut n, 0, Op::Join, 1).status, Err(ENOKEY));
    assert_eq!(c.challenged(&mut n, 0, Op::Query, 0).status, Err(ENOKEY));
    assert_eq!(n.refused.no_key, 2);
    assert_eq!(n.session, None);
    // Not allowed comes first, key or no key.
    let mut b = Console::new([10, 0, 0, 3], KEY);
    n.set_key(Some(KEY));
    assert_eq!(b.challenged(&mut n, 0, Op::Join, 1).status, Err(EPERM));
}

#[test]
fn a_session_proves_every_request() {
    let mut n = node();
    let mut a = Console::new(A, KEY);
    assert_eq!(
        a.challenged(&mut n, 0, Op::Join, 1).status,
        Ok(Admitted::Nothing)
    );
    let v = a.in_session(&mut n, 10, req(Op::Query, 1));
    assert_eq!((v.status, v.holder), (Ok(Admitted::Nothing), true));
    let s = start_req();
    assert_eq!(
        a.in_session(&mut n, 20, s).status,
        Ok(Admitted::Start(s.start.unwrap()))
    );
    // Replayed: the same bytes again, and an older sequence number.
    let (id, k, seq) = a.session.unwrap();
    let again = Request { seq, ..s };
    assert_eq!(a.send(&mut n, 30, &again, &k).0.status, Err(ESTALE));
    let older = Request {
        seq: 1,
        ..req(Op::Stop, id)
    };
    assert_eq!(a.send(&mut n, 30, &older, &k).0.status, Err(ESTALE));
    assert_eq!(n.refused.stale, 2);
    // Untouched by the replays: the lease was last renewed at 20.
    assert_eq!(n.session.unwrap().heard_ms, 20);
    // A lost request (a sequence number skipped) does not stop the session.
    a.session = Some((id, k, seq + 5));
    assert_eq!(
        a.in_session(&mut n, 40, req(Op::Stop, 1)).status,
        Ok(Admitted::Stop)
    );
    assert_eq!(
        a.in_session(&mut n, 50, req(Op::Leave, 1)).status,
        Ok(Admitted::Stop)
    );
    assert_eq!(n.session, None);
}

#[test]
fn a_wrong_key_joins_nothing() {
    let mut n = node();
    let mut w = Console::new(A, WRONG);
    assert_eq!(
        w.challenged(&mut n, 0, Op::Join, 1).status,
        Err(EKEYREJECTED)
    );
    assert_eq!(
        w.challenged(&mut n, 0, Op::Query, 0).status,
        Err(EKEYREJECTED)
    );
    assert_eq!((n.session, n.refused.bad_proof), (None, 2));
}

#[test]
fn the_holders_address_and_id_grant_nothing() {
    let mut n = node();
    let mut a = Console::new(A, KEY);
    a.challenged(&mut n, 0, Op::Join, 1).status.unwrap();
    let held = n.session;
    // A process on A's address that knows the session id, without the session's key:
    // with the cluster key's... no: a guessed key, and a tag of zeros.
    for k in [WRONG, KEY, [0; KEY_LEN]] {
        let mut forger = Console::new(A, k);
        forger.session = Some((1, k, 100));
        for r in [
            req(Op::Stop, 1),
            req(Op::Leave, 1),
            start_req(),
            req(Op::Join, 1),
        ] {
            let v = forger.in_session(&mut n, 5, r);
            assert_eq!(
                (v.status, v.key, v.holder),
                (Err(EKEYREJECTED), None, false)
            );
        }
    }
    assert_eq!(n.session, held);
    assert_eq!(n.refused.bad_proof, 12);
    // Its own session goes on.
    assert_eq!(
        a.in_session(&mut n, 6, req(Op::Query, 1)).status,
        Ok(Admitted::Nothing)
    );
}

#[test]
fn an_altered_request_is_refused() {
    let mut n = node();
    let mut a = Console::new(A, KEY);
    a.challenged(&mut n, 0, Op::Join, 1).status.unwrap();
    let (id, k, _) = a.session.unwrap();
    let r = Request {
        session: id,
        seq: 1,
        ..start_req()
    };
    let p = r.sealed(mac, &k);
    // Every byte of the sealed START, flipped in turn.
    for at in 0..p.as_slice().len() {
        let mut b = p.as_slice().to_vec();
        b[at] ^= 0x04;
        if let Ok(d) = Request::decode(&b) {
            let v = n.admit(mac, 1, A, NODE, &d, &b, [0; NONCE_LEN]);
            assert!(v.status.is_err(), "byte {at} altered, admitted");
        }
    }
    assert_eq!(n.session.unwrap().keys[0].unwrap().seq, 0);
}

#[test]
fn challenges_are_used_once_by_their_console_in_time() {
    let mut n = node();
    let nc = [1; NONCE_LEN];
    let hello = Request {
        op: Op::Hello,
        nonce: Some(nc),
        seq: 0,
        ..req(Op::Hello, 1)
    };
    let v = n.admit(mac, 0, A, NODE, &hello, &[], fresh(1));
    let Ok(Admitted::Challenge(nn)) = v.status else {
        panic!("{v:?}")
    };
    let k = challenge_key(mac, &KEY, A, NODE, &nc, &nn);
    let join = Request {
        nonce: Some(nn),
        seq: 0,
        ..req(Op::Join, 1)
    };
    let p = join.sealed(mac, &k);
    // Another address cannot use it (nor, with B's address, derive its key).
    let v = n.admit(mac, 1, B, NODE, &join, p.as_slice(), [0; NONCE_LEN]);
    assert_eq!(v.status, Err(ESTALE));
    assert_eq!(
        n.admit(mac, 2, A, NODE, &join, p.as_slice(), [0; NONCE_LEN])
            .status,
        Ok(Admitted::Nothing)
    );
    // The same JOIN again: its challenge is used.
    n.session = None;
    assert_eq!(
        n.admit(mac, 3, A, NODE, &join, p.as_slice(), [0; NONCE_LEN])
            .status,
        Err(ESTALE)
    );
    // Expired.
    let v = n.admit(mac, 10, A, NODE, &hello, &[], fresh(2));
    let Ok(Admitted::Challenge(nn)) = v.status else {
        panic!()
    };
    let k = challenge_key(mac, &KEY, A, NODE, &nc, &nn);
    let join = Request {
        nonce: Some(nn),
        seq: 0,
        ..req(Op::Join, 1)
    };
    let p = join.sealed(mac, &k);
    assert_eq!(
        n.admit(
            mac,
            10 + CHALLENGE_MS,
            A,
            NODE,
            &join,
            p.as_slice(),
            [0; NONCE_LEN]
        )
        .status,
        Err(ESTALE)
    );
    assert_eq!((n.session, n.refused.stale), (None, 3));
}

#[test]
fn challenges_kept_give_way_oldest_first() {
    let mut c = Challenges::default();
    for i in 0..MAX_CHALLENGES as u8 + 2 {
        c.give(Challenge {
            console: A,
            nc: [i; 16],
            nn: [i; 16],
            at_ms: u64::from(i),
        });
    }
    assert_eq!(c.len(), MAX_CHALLENGES);
    assert_eq!(c.take(20, A, &[0; 16]), None);
    assert_eq!(c.take(20, A, &[1; 16]), None);
    assert!(c.take(20, A, &[2; 16]).is_some());
    assert_eq!(c.take(20, A, &[2; 16]), None);
    assert_eq!(c.len(), MAX_CHALLENGES - 1);
}

#[test]
fn one_session_and_its_id_named_to_its_holder_only() {
    let mut n = node();
    let (mut a, mut b) = (Console::new(A, KEY), Console::new(B, KEY));
    a.challenged(&mut n, 0, Op::Join, 1).status.unwrap();
    let v = b.challenged(&mut n, 1, Op::Join, 2);
    assert_eq!((v.status, v.holder), (Err(EBUSY), false));
    // A read-only QUERY proves the key, and learns no session.
    let v = b.challenged(&mut n, 2, Op::Query, 0);
    assert_eq!((v.status, v.holder), (Ok(Admitted::Nothing), false));
    // The holder joining again (it lost its key) takes a new key: the old one is dead.
    let old = a.session.unwrap();
    a.challenged(&mut n, 3, Op::Join, 1).status.unwrap();
    let mut stale = a;
    stale.session = Some(old);
    assert_eq!(
        stale.in_session(&mut n, 4, req(Op::Stop, 1)).status,
        Err(EKEYREJECTED)
    );
    // Lease: renewed at 3 (10 s), expired at 10,003; then B may join.
    assert_eq!(n.expire(10_002), None);
    assert_eq!(n.expire(10_003).map(|s| s.id), Some(1));
    assert_eq!(
        a.in_session(&mut n, 10_004, req(Op::Query, 1)).status,
        Err(ESRCH)
    );
    assert_eq!(
        b.challenged(&mut n, 10_005, Op::Join, 2).status,
        Ok(Admitted::Nothing)
    );
    // A new key ends the session; denying the console ends it too.
    assert_eq!(n.set_key(Some(WRONG)).map(|s| s.id), Some(2));
    n.set_key(Some(KEY));
    b.challenged(&mut n, 10_006, Op::Join, 2).status.unwrap();
    assert_eq!(n.deny(B).1.map(|s| s.id), Some(2));
}

#[test]
fn one_session_through_two_interfaces_has_a_key_on_each() {
    let mut n = node();
    let mut a = Console::new(A, KEY);
    let mut a2 = Console {
        node: [10, 0, 0, 10],
        ..a
    };
    a.challenged(&mut n, 0, Op::Join, 1).status.unwrap();
    a2.challenged(&mut n, 1, Op::Join, 1).status.unwrap();
    let (k, k2) = (a.session.unwrap().1, a2.session.unwrap().1);
    assert_ne!(k, k2);
    // Each interface's requests under its own key and numbers, in one session.
    for t in 2..6 {
        assert_eq!(
            a.in_session(&mut n, t, req(Op::Query, 1)).status,
            Ok(Admitted::Nothing)
        );
        assert_eq!(
            a2.in_session(&mut n, t, req(Op::Query, 1)).status,
            Ok(Admitted::Nothing)
        );
    }
    // One interface's key is nothing on the other.
    let mut crossed = a2;
    crossed.session = a.session;
    assert_eq!(
        crossed.in_session(&mut n, 7, req(Op::Stop, 1)).status,
        Err(EKEYREJECTED)
    );
    // Not joined through a third interface: not in the session there.
    let mut a3 = Console {
        node: [10, 0, 0, 11],
        ..a
    };
    assert_eq!(
        a3.in_session(&mut n, 8, req(Op::Stop, 1)).status,
        Err(ESRCH)
    );
    // As many interfaces as a session keeps keys for, then busy.
    for i in 2..MAX_SESSION_KEYS as u8 {
        let mut c = Console {
            node: [10, 0, 1, i],
            session: None,
            ..a
        };
        assert_eq!(
            c.challenged(&mut n, 9, Op::Join, 1).status,
            Ok(Admitted::Nothing)
        );
    }
    a3.session = None;
    assert_eq!(a3.challenged(&mut n, 10, Op::Join, 1).status, Err(EBUSY));
    assert_eq!(
        a.in_session(&mut n, 11, req(Op::Leave, 1)).status,
        Ok(Admitted::Stop)
    );
    assert_eq!(n.session, None);
}

#[test]
fn tags_cover_direction_and_every_byte() {
    let body = [3u8; 40];
    let t = tag(mac, &KEY, Dir::Request, &body).unwrap();
    assert!(check(mac, &KEY, Dir::Request, &body, &t));
    assert!(!check(mac, &KEY, Dir::Reply, &body, &t));
    assert!(!check(mac, &WRONG, Dir::Request, &body, &t));
    for i in 0..body.len() {
        let mut b = body;
        b[i] ^= 1;
        assert!(!check(mac, &KEY, Dir::Request, &b, &t));
    }
    // Beyond any payload: no tag, never checks.
    assert_eq!(tag(mac, &KEY, Dir::Request, &[0; 300]), None);
    assert_ne!(fingerprint(mac, &KEY), fingerprint(mac, &WRONG));
}

proptest! {
    /// However a console with the key, one with a wrong key, and a forger on the holder's
    /// address (knowing the session id, not its key) interleave, the session is held by one
    /// console at a time, changes only by requests that prove the key, and its sequence
    /// numbers only grow.
    #[test]
    fn only_the_key_moves_the_session(
        steps in proptest::collection::vec((0u8..3, 1u8..=5, 0u64..3000), 1..60),
    ) {
        let mut n = node();
        let mut cs = [Console::new(A, KEY), Console::new(B, WRONG), Console::new(A, WRONG)];
        let mut now = 0;
        for (who, op, dt) in steps {
            now += dt;
            let _ = n.expire(now);
            let before = n.session;
            let c = &mut cs[usize::from(who)];
            let op = Op::from_u8(op).unwrap();
            let v = match (op, c.session) {
                (Op::Join, None) => c.challenged(&mut n, now, Op::Join, 1 + u64::from(who)),
                (Op::Query, None) => c.challenged(&mut n, now, Op::Query, 0),
                (_, None) => {
                    // The forger uses the holder's id with a key of its own.
                    c.session = Some((before.map_or(1, |s| s.id), c.cluster, 50));
                    let r = if op == Op::Start { start_req() } else { req(op, 1) };
                    c.in_session(&mut n, now, r)
                }
                (_, Some(_)) => {
                    let r = if op == Op::Start { start_req() } else { req(op, 1) };
                    c.in_session(&mut n, now, r)
                }
            };
            if who != 0 {
                // Without the key: refused, and nothing changed.
                prop_assert!(v.status.is_err());
                prop_assert_eq!(n.session, before);
            }
            if let (Some(b), Some(a)) = (before, n.session) {
                if let (Some(ka), Some(kb)) = (a.keys[0], b.keys[0]) {
                    if a.id == b.id && ka.key == kb.key {
                        prop_assert!(ka.seq >= kb.seq);
                    }
                }
            }
            if v.status == Err(ESRCH) || v.status == Err(EBUSY) {
                c.session = None;
            }
            if let Some(s) = n.session {
                prop_assert_eq!(s.console, A);
            }
        }
    }
}
