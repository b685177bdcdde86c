// SPDX-License-Identifier: GPL-2.0

//! The control device, `/dev/fastreg`: what `fastreg-lst` and the console use to run tests
//! and read statistics (`Documentation/device.rst`).
//!
//! A write carries one request, a read then returns its reply ([`crate::rules::ctldev`]).
//! A request that is malformed fails its write, with the errno of its refusal and one log
//! line, and nothing is done; a well-formed one always gets a reply, whose status says how
//! it went and whose body is text (the reason of a refusal, a report, a snapshot). A reply
//! is read whole or in pieces; the next request of the same open file drops what is left of
//! it (a refused one too). Each open file is a channel of its own, one request at a time: a
//! write while another of the same file is being answered fails with `EBUSY`. The file is
//! a stream (no position: `pread`, `pwrite` and `lseek` are refused).
//!
//! The test is the node's, not a file's: whoever may open the device may poll, wait for or
//! stop it (as `lst stop` on any console), and `wait` and `result` answer for the last
//! test, whoever started it. `fastreg-lst` holds the device's `flock` from its start to its
//! result, so its runs never interleave; a client that does not take the lock may see
//! another's test. Closing the file that started a test stops it.
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
    sync::{
        atomic::{
            Atomic,
            Relaxed, //
        },
        Mutex,
    },
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
    bytes: KVVec<u8>,
    at: usize,
}

/// Numbers of the files opened since load (0 is no file's: the test build's debugfs `lst`).
static OPENED: Atomic<u64> = Atomic::new(0);

/// An open file of the device.
#[pin_data]
pub(crate) struct OpenFile {
    node: Node,
    /// Its number: the test it starts is its own.
    id: u64,
    /// A request of it is being answered.
    busy: Atomic<bool>,
    #[pin]
    reply: Mutex<Pending>,
}

/// A reply's body, as it is written (after room for its head). Allocated with
/// `kvmalloc`: a snapshot of a thousand connections is some 300 KB, which kmalloc alone
/// would need contiguous pages for.
struct Text(KVVec<u8>);

impl core::fmt::Write for Text {
    fn write_str(&mut self, s: &str) -> core::fmt::Result {
        self.0
            .extend_from_slice(s.as_bytes(), GFP_KERNEL_ACCOUNT)
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
                id: OPENED.fetch_add(1, Relaxed) + 1,
                busy: Atomic::new(false),
                reply <- new_mutex!(Pending { bytes: KVVec::new(), at: 0 }, "fastreg::ctl::reply"),
            }),
            GFP_KERNEL_ACCOUNT,
        )
    }

    fn release(me: Self::Ptr, _file: &File) {
        me.node.local.stop_owned(me.id);
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
        if me.busy.xchg(true, Relaxed) {
            return Err(EBUSY);
        }
        let r = serve(&me, iov, n);
        me.busy.store(false, Relaxed);
        r
    }
}

/// A write of `n` bytes on file `me`, no other being answered: the request read, checked and
/// answered; its reply replaces the last one.
fn serve(me: &OpenFile, iov: &mut IovIterSource<'_>, n: usize) -> Result<usize> {
    *me.reply.lock() = Pending {
        bytes: KVVec::new(),
        at: 0,
    };
    if n > MAX_REQUEST {
        return Err(refused(ctldev::Refusal::Oversized));
    }
    let mut buf = KVec::with_capacity(n, GFP_KERNEL_ACCOUNT)?;
    iov.copy_from_iter_vec(&mut buf, GFP_KERNEL_ACCOUNT)?;
    if buf.len() != n {
        return Err(EFAULT);
    }
    let req = ctldev::parse(&buf).map_err(refused)?;
    // Interfaces found dead are torn down first, apart from the request's frame: their
    // transfers' outcomes can start new ones (design.rst, "Stack").
    if matches!(req.op, Op::Start | Op::Console) {
        me.node.ifaces.reap();
    }
    let reply = answer(me, &req)?;
    *me.reply.lock() = Pending {
        bytes: reply,
        at: 0,
    };
    Ok(n)
}

/// Logs a refused request and returns its errno.
fn refused(why: ctldev::Refusal) -> Error {
    pr_limited!(pr_err, "/dev/fastreg: refused a request: {}\n", Show(why));
    Error::from_errno(-why.errno())
}

/// Answers request `req` of file `me`: the reply's bytes, head and body. Fails only when
/// no reply can be made (no memory) or a wait is interrupted (`EINTR`).
#[inline(never)]
fn answer(me: &OpenFile, req: &ctldev::Request<'_>) -> Result<KVVec<u8>> {
    let mut out = Text(KVVec::with_capacity(
        REPLY_HEAD_LEN + 256,
        GFP_KERNEL_ACCOUNT,
    )?);
    out.0
        .extend_from_slice(&[0; REPLY_HEAD_LEN], GFP_KERNEL_ACCOUNT)?;
    let (status, state) = match req.op {
        Op::Start => start(me, req.body, &mut out),
        Op::Wait => match me.node.local.wait() {
            Err(e) if e == EINTR => return Err(EINTR),
            Err(e) => (Err(e), me.node.local.state()),
            Ok(()) => result(&me.node, me.node.local.write_result(&mut out)),
        },
        Op::Poll => result(&me.node, me.node.local.write_state(&mut out)),
        Op::Stop => {
            if !me.node.local.stop() {
                write(&mut out, format_args!("no test running\n"))?;
            }
            (Ok(()), me.node.local.state())
        }
        Op::Result => result(&me.node, me.node.local.write_result(&mut out)),
        Op::Stat => {
            stat(&me.node, &mut out)?;
            (Ok(()), me.node.local.state())
        }
        Op::Console => match console(me, req.body, &mut out) {
            Err(e) if e == EINTR => return Err(EINTR),
            r => (r, me.node.local.state()),
        },
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

/// A report's outcome: what it wrote, or its error (with where the test stands).
fn result(node: &Node, r: Result<TestState>) -> Outcome {
    match r {
        Ok(s) => (Ok(()), s),
        Err(e) => (Err(e), node.local.state()),
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
    let r = local.start(&me.node.ifaces, &t, timeout_ms, me.id);
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

/// CONSOLE: a request to other nodes, one at a time on the node: a request waits for the
/// one under way, interruptibly (`EINTR`: its answers can take minutes).
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
    let mut held = me.node.held.take()?;
    let answers = ask::ask(&me.node.ifaces, &cmd, me.node.console.key(), &mut held)?;
    answers.write(out).map_err(|_| ENOMEM)
}
