// SPDX-License-Identifier: GPL-2.0

//! The selftest console, the console's side: one control request sent to many nodes at
//! once (a `console` debugfs command, [`crate::selftest::console_cmd`]), each a round trip on the
//! connection to the node, made on first use like any transfer's; the writer waits for
//! every answer, or for the command's timeout. A node that does not answer in time is
//! reported as such (`ETIMEDOUT`): a late answer is dropped.
//!
//! Every request proves the cluster key (`crate::selftest::auth`): a JOIN or a read-only QUERY is
//! preceded by a HELLO that fetches the node's challenge; a JOIN admitted leaves the
//! session's key and sequence numbers here ([`Held`]), and the session's later requests
//! are tagged with them. A reply that admits a request counts only with its tag.

use kernel::{
    new_condvar, new_mutex,
    prelude::*,
    sync::{
        Arc,
        CondVar,
        Mutex, //
    },
    time::msecs_to_jiffies,
};

use crate::{
    api::{
        self,
        Client,
        Outcome,
        Request, //
    },
    selftest::{
        auth::{
            self,
            Key,
            NONCE_LEN, //
        },
        console_cmd::ConsoleCmd,
        control::{
            self,
            Op,
            Payload,
            Reply,
            Request as CtlRequest, //
        },
    },
    show::{
        pr_limited,
        Ip, //
    },
    transport::Iface,
    transport::Ifaces,
    verbs::{
        self,
        SockAddr, //
    },
    wait, //
};

/// Most sessions a console holds at once (on as many nodes); the oldest gives way.
pub(crate) const MAX_HELD: usize = 256;

/// A session this node's console holds on a node: its key and next sequence number.
#[derive(Clone, Copy)]
pub(crate) struct Held {
    node: [u8; 4],
    session: u64,
    key: Key,
    next: u64,
}

/// What came back from one node.
#[derive(Clone, Copy)]
pub(crate) enum Answer {
    /// Its reply (whose status may refuse the request).
    Reply(Reply),
    /// No reply: the round trip failed (a negative errno: `ETIMEDOUT`, a connection's).
    Failed(i32),
    /// A reply that does not decode (logged).
    Bad,
}

struct FanState {
    /// One place per node, filled by its outcome.
    answers: KVec<Option<Answer>>,
    left: usize,
}

/// The requests of one command in flight; the [`Client`] of their round trips.
#[pin_data]
struct Fanout {
    op: Op,
    #[pin]
    st: Mutex<FanState>,
    #[pin]
    cv: CondVar,
}

impl Client for Fanout {
    fn done(&self, _me: &Arc<dyn Client>, token: usize, o: Outcome) {
        let a = match (o.result, o.reply) {
            (Ok(()), Some(p)) => match Reply::decode(p.as_slice(), self.op) {
                Ok(r) => Answer::Reply(r),
                Err(b) => {
                    pr_limited!(
                        pr_warn,
                        "console: node {} of the command: bad reply: {}\n",
                        token,
                        b.name()
                    );
                    Answer::Bad
                }
            },
            (Ok(()), None) => Answer::Bad,
            (Err(e), _) => Answer::Failed(e.to_errno()),
        };
        let mut st = self.st.lock();
        if let Some(slot @ None) = st.answers.get_mut(token) {
            *slot = Some(a);
            st.left -= 1;
        }
        self.cv.notify_all();
    }
}

/// The answers of a command, node by node.
pub(crate) struct Answers {
    /// What was asked.
    pub(crate) op: Op,
    /// Each node and its answer.
    pub(crate) nodes: KVec<([u8; 4], Answer)>,
}

/// Sends `payloads` (a node and its request each) from `iface` and waits for their
/// answers to `op` (at most `timeout_ms`, and a second for the connections' own).
fn fan(
    iface: &Arc<Iface>,
    op: Op,
    payloads: &[([u8; 4], Payload)],
    timeout_ms: u32,
) -> Result<KVec<Answer>> {
    let mut answers = KVec::with_capacity(payloads.len(), GFP_KERNEL)?;
    for _ in payloads {
        answers.push(None, GFP_KERNEL)?;
    }
    let fan = Arc::pin_init(
        pin_init!(Fanout {
            op,
            st <- new_mutex!(
                FanState { answers, left: payloads.len() },
                "fastreg::ask::Fanout"
            ),
            cv <- new_condvar!("fastreg::ask::Fanout::cv"),
        }),
        GFP_KERNEL,
    )?;
    let client: Arc<dyn Client> = fan.clone();
    let port = iface.addr().port;
    for (i, (ip, p)) in payloads.iter().enumerate() {
        let peer = SockAddr { ip: *ip, port };
        let r = Arc::new(*p, GFP_KERNEL).map_err(Error::from).and_then(|p| {
            api::submit(
                iface,
                peer,
                Request::Control(p),
                None,
                timeout_ms,
                client.clone(),
                i,
            )
        });
        if let Err(e) = r {
            client.done(
                &client,
                i,
                Outcome {
                    region: None,
                    result: Err(e),
                    usecs: 0,
                    reply: None,
                },
            );
        }
    }
    let mut left = msecs_to_jiffies(timeout_ms.saturating_add(1000));
    let mut st = fan.st.lock();
    while st.left > 0 && left > 0 {
        if !wait::step(&fan.cv, &mut st, &mut left) {
            return Err(EINTR);
        }
    }
    let mut out = KVec::with_capacity(payloads.len(), GFP_KERNEL)?;
    for a in st.answers.iter() {
        out.push(
            a.unwrap_or(Answer::Failed(-(kernel::bindings::ETIMEDOUT as i32))),
            GFP_KERNEL,
        )?;
    }
    Ok(out)
}

/// How a node is asked.
#[derive(Clone, Copy)]
enum Plan {
    /// In the session held there (its entry in the holdings).
    Keyed,
    /// After a challenge (a JOIN or a read-only QUERY).
    Challenge,
    /// Answered.
    Done(Answer),
}

/// The answer `a` to a request sealed with `key`: a reply that admits it counts only with
/// its tag.
fn authentic(node: [u8; 4], key: &Key, a: Answer) -> Answer {
    match a {
        Answer::Reply(r) if r.status == 0 && !r.tag_ok(verbs::hmac_sha256, key) => {
            pr_limited!(
                pr_warn,
                "console: node {}: a reply without the key's proof (dropped)\n",
                Ip(node)
            );
            Answer::Bad
        }
        a => a,
    }
}

/// Sends `cmd` to its nodes from one of `ifaces`, proving `key`, with the sessions `held`,
/// and waits for their answers (at most its timeout per round trip, and a second for the
/// connections' own).
pub(crate) fn ask(
    ifaces: &Ifaces,
    cmd: &ConsoleCmd,
    key: Option<Key>,
    held: &mut KVec<Held>,
) -> Result<Answers> {
    let iface = super::lst::iface_from(ifaces, cmd.from, "console")?;
    let key = key.ok_or_else(|| {
        pr_limited!(
            pr_err,
            "console: this node has no console key: install the cluster's with \
             fastreg-lst console key FILE\n"
        );
        Error::from_errno(control::ENOKEY)
    })?;
    let me = iface.addr().ip;
    let req = cmd.req;
    let nodes = cmd.nodes();
    let find = |held: &KVec<Held>, node: [u8; 4]| {
        held.iter()
            .position(|h| h.node == node && h.session == req.session)
    };
    let mut plan = KVec::with_capacity(nodes.len(), GFP_KERNEL)?;
    for n in nodes {
        let p = match (req.op, find(held, *n)) {
            (_, Some(_)) if req.session != 0 => Plan::Keyed,
            (Op::Join, _) => Plan::Challenge,
            (Op::Query, _) if req.session == 0 => Plan::Challenge,
            _ => Plan::Done(Answer::Failed(control::ESRCH)),
        };
        plan.push(p, GFP_KERNEL)?;
    }

    // In the sessions held: a sequence number each, tagged with the session's key.
    let mut out = KVec::with_capacity(nodes.len(), GFP_KERNEL)?;
    let mut keys = KVec::with_capacity(nodes.len(), GFP_KERNEL)?;
    for (n, p) in nodes.iter().zip(plan.iter()) {
        if let (Plan::Keyed, Some(i)) = (p, find(held, *n)) {
            let h = &mut held[i];
            let r = CtlRequest { seq: h.next, ..req };
            h.next += 1;
            out.push((*n, r.sealed(verbs::hmac_sha256, &h.key)), GFP_KERNEL)?;
            keys.push(h.key, GFP_KERNEL)?;
        }
    }
    if !out.is_empty() {
        let got = fan(&iface, req.op, &out, cmd.timeout_ms)?;
        let mut j = 0;
        for (n, p) in nodes.iter().zip(plan.iter_mut()) {
            if !matches!(p, Plan::Keyed) {
                continue;
            }
            let a = authentic(*n, &keys[j], got[j]);
            j += 1;
            let status = match a {
                Answer::Reply(r) => r.status,
                _ => 0,
            };
            // The node no longer knows the session, or its key: forget it; a JOIN asks
            // for a new one at once.
            let lost = matches!(
                status,
                control::ESRCH | control::EKEYREJECTED | control::EBUSY
            );
            if lost || (req.op == Op::Leave && status == 0) {
                if let Some(i) = find(held, *n) {
                    held.remove(i)?;
                }
            }
            *p = if lost && req.op == Op::Join {
                Plan::Challenge
            } else {
                Plan::Done(a)
            };
        }
    }

    // Challenged: a HELLO for the node's nonce, then the request tagged with the key of
    // both nonces.
    let mut hellos = KVec::new();
    let mut ncs = KVec::new();
    for (n, p) in nodes.iter().zip(plan.iter()) {
        if matches!(p, Plan::Challenge) {
            let nc: [u8; NONCE_LEN] = verbs::random_bytes();
            let h = CtlRequest {
                op: Op::Hello,
                lease_ms: 0,
                start: None,
                nonce: Some(nc),
                seq: 0,
                ..req
            };
            hellos.push((*n, Payload::request(&h)), GFP_KERNEL)?;
            ncs.push(nc, GFP_KERNEL)?;
        }
    }
    if !hellos.is_empty() {
        let got = fan(&iface, Op::Hello, &hellos, cmd.timeout_ms)?;
        let mut asks = KVec::with_capacity(hellos.len(), GFP_KERNEL)?;
        let mut ckeys = KVec::with_capacity(hellos.len(), GFP_KERNEL)?;
        let mut j = 0;
        for (n, p) in nodes.iter().zip(plan.iter_mut()) {
            if !matches!(p, Plan::Challenge) {
                continue;
            }
            let (a, nc) = (got[j], ncs[j]);
            j += 1;
            match a {
                Answer::Reply(r) if r.status == 0 => {
                    let nn = r.tag;
                    let k = auth::challenge_key(verbs::hmac_sha256, &key, me, *n, &nc, &nn);
                    let c = CtlRequest {
                        nonce: Some(nn),
                        seq: 0,
                        ..req
                    };
                    asks.push((*n, c.sealed(verbs::hmac_sha256, &k)), GFP_KERNEL)?;
                    ckeys.push(k, GFP_KERNEL)?;
                }
                // Refused at the HELLO (not allowed, no key): that is the answer.
                Answer::Reply(r) => *p = Plan::Done(Answer::Reply(Reply { op: req.op, ..r })),
                a => *p = Plan::Done(a),
            }
        }
        let got = fan(&iface, req.op, &asks, cmd.timeout_ms)?;
        let mut j = 0;
        for (n, p) in nodes.iter().zip(plan.iter_mut()) {
            if !matches!(p, Plan::Challenge) {
                continue;
            }
            let a = authentic(*n, &ckeys[j], got[j]);
            if let (Op::Join, Answer::Reply(r)) = (req.op, a) {
                if r.status == 0 {
                    if let Some(i) = held.iter().position(|h| h.node == *n) {
                        held.remove(i)?;
                    }
                    if held.len() >= MAX_HELD {
                        held.remove(0)?;
                    }
                    held.push(
                        Held {
                            node: *n,
                            session: req.session,
                            key: ckeys[j],
                            next: 1,
                        },
                        GFP_KERNEL,
                    )?;
                }
            }
            j += 1;
            *p = Plan::Done(a);
        }
    }

    let mut answers = KVec::with_capacity(nodes.len(), GFP_KERNEL)?;
    for (n, p) in nodes.iter().zip(plan.iter()) {
        let a = match p {
            Plan::Done(a) => *a,
            _ => Answer::Failed(-(kernel::bindings::ETIMEDOUT as i32)),
        };
        answers.push((*n, a), GFP_KERNEL)?;
    }
    Ok(Answers {
        op: req.op,
        nodes: answers,
    })
}

impl Answers {
    /// One line per node: `node=IP op=OP status=N` and the reply's fields, or
    /// `error=N` without a reply.
    pub(crate) fn write(&self, f: &mut impl core::fmt::Write) -> core::fmt::Result {
        for (ip, a) in self.nodes.iter() {
            write!(f, "node={} op={} ", Ip(*ip), self.op.name())?;
            match a {
                Answer::Failed(e) => writeln!(f, "error={}", e)?,
                Answer::Bad => writeln!(f, "error=-71")?,
                Answer::Reply(r) => {
                    let c = &r.counters;
                    writeln!(
                        f,
                        "status={} session={} holder={} lease_left_ms={} state={} \
                         now_us={} ops={} bytes={} err_timeout={} err_connection={} \
                         err_refused={} err_other={} corrupt={} usecs={} first_error={} \
                         rx_ops={} rx_bytes={} tx_ops={} tx_bytes={}",
                        r.status,
                        r.session,
                        Ip(r.holder),
                        r.lease_left_ms,
                        r.run.name(),
                        c.now_us,
                        c.ops,
                        c.bytes,
                        c.errors[0],
                        c.errors[1],
                        c.errors[2],
                        c.errors[3],
                        c.corrupt,
                        c.usecs,
                        c.first_error,
                        c.rx_ops,
                        c.rx_bytes,
                        c.tx_ops,
                        c.tx_bytes
                    )?
                }
            }
        }
        Ok(())
    }
}
