// SPDX-License-Identifier: GPL-2.0

//! The control device, `/dev/fastreg`: what `fastreg-lst` and the console use to run tests
//! and read statistics (`Documentation/device.rst`).
//!
//! A write carries one request, a read then returns its reply ([`crate::rules::ctldev`]).
//! A request that is malformed fails its write, with the errno of its refusal and one log
//! line, and nothing is done; a well-formed one always gets a reply, whose status says how
//! it went and whose body is text (the reason of a refusal, a report, a snapshot). A reply
//! is read whole or in pieces; the next request of the same open file replaces what is left
//! of it. Each open file is a channel of its own: requests on one file are answered in turn.
//!
//! The device is root's (mode 0600) unless the site gives it to a group: whoever may open it
//! may run tests from this node and read its counters, as root may through debugfs.

use kernel::{
    fs::{
        File,
        Kiocb, //
    },
    iov::{
        IovIterDest,
        IovIterSource, //
    },
    new_mutex,
    prelude::*,
    sync::Mutex,
};

use crate::{
    ctl::{
        dump,
        Node, //
    },
    rules::{
        command::{
            self,
            Lst, //
        },
        ctldev::{
            self,
            Op,
            ReplyHead,
            TestState,
            MAX_REQUEST,
            REPLY_HEAD_LEN, //
        },
    },
    selftest::{
        ask,
        console_cmd::ConsoleCmd, //
    },
    show::{
        pr_limited,
        Show, //
    },
    verbs::{
        self,
        DevFile, //
    },
};

/// The device's registration (dropped: the device goes; no file is open by then, each holds
/// the module).
pub(crate) type Registration = verbs::MiscDev<CtlDev>;

/// Registers `/dev/fastreg`.
pub(crate) fn register() -> Result<impl PinInit<Registration, Error>> {
    Registration::register(c"fastreg")
}

/// The device's file operations.
pub(crate) struct CtlDev;

/// A reply not yet read, and how much of it was.
struct Pending {
    bytes: KVec<u8>,
    at: usize,
}

/// An open file of the device.
#[pin_data]
pub(crate) struct OpenFile {
    node: Node,
    #[pin]
    reply: Mutex<Pending>,
}

impl OpenFile {
    /// The file's identity while it is open: the test it starts is its own.
    fn id(&self) -> usize {
        core::ptr::from_ref(self) as usize
    }
}

/// A reply's body, as it is written (after room for its head).
struct Text(KVec<u8>);

impl core::fmt::Write for Text {
    fn write_str(&mut self, s: &str) -> core::fmt::Result {
        self.0
            .extend_from_slice(s.as_bytes(), GFP_KERNEL)
            .map_err(|_| core::fmt::Error)
    }
}

/// What a request came to: its status (0 or an error) and the test's state.
type Outcome = (Result, TestState);

impl DevFile for CtlDev {
    type Ptr = Pin<KBox<OpenFile>>;

    fn open(_file: &File) -> Result<Self::Ptr> {
        let node = Node::published()?;
        KBox::pin_init(
            pin_init!(OpenFile {
                node,
                reply <- new_mutex!(Pending { bytes: KVec::new(), at: 0 }, "fastreg::ctl::reply"),
            }),
            GFP_KERNEL,
        )
    }

    fn release(me: Self::Ptr, _file: &File) {
        me.node.local.stop_owned(me.id());
    }

    fn read_iter(kiocb: Kiocb<'_, Self::Ptr>, iov: &mut IovIterDest<'_>) -> Result<usize> {
        let me = kiocb.file();
        let mut p = me.reply.lock();
        let at = p.at;
        let n = iov.copy_to_iter(&p.bytes[at..]);
        p.at += n;
        if p.at == p.bytes.len() {
            p.bytes.clear();
            p.at = 0;
        }
        Ok(n)
    }

    fn write_iter(kiocb: Kiocb<'_, Self::Ptr>, iov: &mut IovIterSource<'_>) -> Result<usize> {
        let me = kiocb.file();
        let n = iov.len();
        if n > MAX_REQUEST {
            return Err(refused(ctldev::Refusal::Oversized));
        }
        let mut buf = KVec::with_capacity(n, GFP_KERNEL)?;
        iov.copy_from_iter_vec(&mut buf, GFP_KERNEL)?;
        if buf.len() != n {
            return Err(EFAULT);
        }
        let req = ctldev::parse(&buf).map_err(refused)?;
        // Interfaces found dead are torn down first, apart from the request's frame: their
        // transfers' outcomes can start new ones (design.rst, "Stack").
        if matches!(req.op, Op::Start | Op::Console) {
            me.node.ifaces.reap();
        }
        let reply = answer(&me, &req)?;
        *me.reply.lock() = Pending {
            bytes: reply,
            at: 0,
        };
        Ok(n)
    }
}

/// Logs a refused request and returns its errno.
fn refused(why: ctldev::Refusal) -> Error {
    pr_limited!(pr_err, "/dev/fastreg: refused a request: {}\n", Show(why));
    Error::from_errno(-why.errno())
}

/// Answers request `req` of file `me`: the reply's bytes, head and body. Fails only when
/// no reply can be made (no memory) or a wait is interrupted (`EINTR`).
#[inline(never)]
fn answer(me: &OpenFile, req: &ctldev::Request<'_>) -> Result<KVec<u8>> {
    let mut out = Text(KVec::with_capacity(REPLY_HEAD_LEN + 256, GFP_KERNEL)?);
    out.0.extend_from_slice(&[0; REPLY_HEAD_LEN], GFP_KERNEL)?;
    let (status, state) = match req.op {
        Op::Start => start(me, req.body, &mut out),
        Op::Wait => match me.node.local.wait() {
            Err(e) if e == EINTR => return Err(EINTR),
            Err(e) => (Err(e), me.node.local.state()),
            Ok(()) => result(me.node.local.write_result(&mut out)),
        },
        Op::Poll => result(me.node.local.write_state(&mut out)),
        Op::Stop => {
            if !me.node.local.stop() {
                write(&mut out, format_args!("no test running\n"))?;
            }
            (Ok(()), me.node.local.state())
        }
        Op::Result => result(me.node.local.write_result(&mut out)),
        Op::Stat => {
            stat(&me.node, &mut out)?;
            (Ok(()), me.node.local.state())
        }
        Op::Console => (console(me, req.body, &mut out), me.node.local.state()),
    };
    let Text(mut bytes) = out;
    let len = u32::try_from(bytes.len() - REPLY_HEAD_LEN).map_err(|_| ENOMEM)?;
    let head = ReplyHead {
        op: req.op,
        status: status.err().map_or(0, |e| e.to_errno()),
        state,
        len,
    };
    bytes[..REPLY_HEAD_LEN].copy_from_slice(&head.bytes());
    Ok(bytes)
}

/// A report's outcome: what it wrote, or its error (with the state it leaves).
fn result(r: Result<TestState>) -> Outcome {
    match r {
        Ok(s) => (Ok(()), s),
        Err(e) => (Err(e), TestState::Idle),
    }
}

fn write(out: &mut Text, args: core::fmt::Arguments<'_>) -> Result {
    core::fmt::Write::write_fmt(out, args).map_err(|_| ENOMEM)
}

/// START: the test's words, checked as the debugfs `lst` file checks them.
fn start(me: &OpenFile, body: &str, out: &mut Text) -> Outcome {
    let local = &me.node.local;
    let t = match Lst::parse(body) {
        Ok(t) => t,
        Err(why) => {
            pr_limited!(
                pr_err,
                "lst: {}: {}\n",
                Show(why),
                Show(command::shown(body))
            );
            let _ = write(out, format_args!("refused: {}\n", why));
            return (Err(EINVAL), local.state());
        }
    };
    let timeout_ms = me.node.params.timeout.saturating_mul(1000);
    let r = local.start(&me.node.ifaces, &t, timeout_ms, me.id());
    if let Err(e) = r {
        let why = if e == EBUSY {
            "a test is running already"
        } else if e == ENOENT {
            "no such local interface"
        } else if e == ENOMEM {
            "its buffers pass what the node allows tests (test_mem, tests_mem), or no memory"
        } else {
            "it could not start"
        };
        let _ = write(out, format_args!("{}\n", why));
    }
    (r, local.state())
}

/// STAT: the parameters, the devices, their pools, the interfaces and connections, each
/// under a `[name]` line.
fn stat(node: &Node, out: &mut Text) -> Result {
    let f = &mut *out;
    let r = (|| -> core::fmt::Result {
        core::fmt::Write::write_str(f, "[params]\n")?;
        dump::write_params(&node.params, f)?;
        core::fmt::Write::write_str(f, "[devices]\n")?;
        dump::write_devices(&node.devices, f)?;
        core::fmt::Write::write_str(f, "[pools]\n")?;
        dump::write_pools(&node.devices, f)?;
        core::fmt::Write::write_str(f, "[conns]\n")?;
        dump::write_conns(&node.ifaces, f)
    })();
    r.map_err(|_| ENOMEM)
}

/// CONSOLE: a request to other nodes, as the debugfs `console` file takes it.
fn console(me: &OpenFile, body: &str, out: &mut Text) -> Result {
    let cmd = match ConsoleCmd::parse(body) {
        Ok(c) => c,
        Err(why) => {
            pr_limited!(
                pr_err,
                "console: {}: {}\n",
                Show(why),
                Show(command::shown(body))
            );
            let _ = write(out, format_args!("refused: {}\n", why));
            return Err(EINVAL);
        }
    };
    let answers = ask::ask(
        &me.node.ifaces,
        &cmd,
        me.node.console.key(),
        &mut me.node.held.lock(),
    )?;
    answers.write(out).map_err(|_| ENOMEM)
}
