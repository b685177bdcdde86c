// SPDX-License-Identifier: GPL-2.0

//! The selftest console, the console's side: one control request sent to many nodes at
//! once (a `console` debugfs command, [`crate::console_cmd`]), each a round trip on the
//! connection to the node, made on first use like any transfer's; the writer waits for
//! every answer, or for the command's timeout. A node that does not answer in time is
//! reported as such (`ETIMEDOUT`): a late answer is dropped.

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
    console_cmd::ConsoleCmd,
    control::{
        Op,
        Payload,
        Reply, //
    },
    show::Ip,
    transport::Ifaces,
    verbs::SockAddr,
    wait,
};

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
                    pr_warn!(
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

/// Sends `cmd` to its nodes from one of `ifaces` and waits for their answers (at most its
/// timeout, and a second for the connections' own).
pub(crate) fn ask(ifaces: &Ifaces, cmd: &ConsoleCmd) -> Result<Answers> {
    let iface = match cmd.from {
        Some(ip) => ifaces.find(ip),
        None => ifaces.first(),
    }
    .ok_or_else(|| {
        pr_err!("console: no such local interface\n");
        ENOENT
    })?;
    let nodes = cmd.nodes();
    let mut answers = KVec::with_capacity(nodes.len(), GFP_KERNEL)?;
    for _ in nodes {
        answers.push(None, GFP_KERNEL)?;
    }
    let fan = Arc::pin_init(
        pin_init!(Fanout {
            op: cmd.req.op,
            st <- new_mutex!(FanState { answers, left: nodes.len() }, "fastreg::ask::Fanout"),
            cv <- new_condvar!("fastreg::ask::Fanout::cv"),
        }),
        GFP_KERNEL,
    )?;
    let client: Arc<dyn Client> = fan.clone();
    let payload = Arc::new(Payload::request(&cmd.req), GFP_KERNEL)?;
    let port = iface.addr().port;
    for (i, ip) in nodes.iter().enumerate() {
        let peer = SockAddr { ip: *ip, port };
        let r = api::submit(
            &iface,
            peer,
            Request::Control(payload.clone()),
            None,
            cmd.timeout_ms,
            client.clone(),
            i,
        );
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
    let mut left = msecs_to_jiffies(cmd.timeout_ms.saturating_add(1000));
    let mut st = fan.st.lock();
    while st.left > 0 && left > 0 {
        if !wait::step(&fan.cv, &mut st, &mut left) {
            return Err(EINTR);
        }
    }
    let mut out = KVec::with_capacity(nodes.len(), GFP_KERNEL)?;
    for (ip, a) in nodes.iter().zip(st.answers.iter()) {
        let a = a.unwrap_or(Answer::Failed(-(kernel::bindings::ETIMEDOUT as i32)));
        out.push((*ip, a), GFP_KERNEL)?;
    }
    Ok(Answers {
        op: cmd.req.op,
        nodes: out,
    })
}

impl Answers {
    /// One line per node: `node=IP op=OP status=N` and the reply's fields, or
    /// `error=N` without a reply.
    pub(crate) fn write(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
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
