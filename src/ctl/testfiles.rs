// SPDX-License-Identifier: GPL-2.0

//! The debugfs files that take commands, in the test build only (Kbuild's
//! `FASTREG_TEST=1`; Documentation/testing.rst, "The test build"):
//!
//! - `ctl`: write a control command (`iface add|del`, `ping`, `put`, `get`, `close`, and the
//!   test hooks `fault`, `corrupt`, `misbehave`, `fuzz`; see `Documentation/transport.rst`);
//!   the write fails with the command's error. Reading shows the result of the last command.
//! - `lst`: write a selftest command (`ping`, `brw read|write`); the write returns when the
//!   test is over and fails if any transfer failed or was corrupt. Reading shows the result
//!   lines of the last test.
//! - `console`: write a console command (`join`, `start`, `query`, ... to nodes); the write
//!   returns when every node answered or its timeout passed. Reading shows one line per node.
//!
//! What a user needs (configuration, runs, the console, statistics) is in configfs and the
//! control device; these files let the tests drive a node by hand.

use kernel::{
    debugfs::{
        Dir,
        File, //
    },
    new_mutex,
    prelude::*,
    str::CString,
    sync::{
        Arc,
        Mutex, //
    },
    uaccess::UserSliceReader,
};

use crate::{
    ctl::Node,
    device::Devices,
    rules::{
        command,
        params::Params, //
    },
    selftest::{
        ask,
        console::Console,
        console_cmd::ConsoleCmd, //
    },
    show::Show,
    transport::{
        Iface,
        Ifaces,
        Tunables, //
    },
    verbs, //
};

/// Reads a command written to a control file into `buf`, as UTF-8.
fn read_line<'a>(reader: &mut UserSliceReader, buf: &'a mut [u8]) -> Result<&'a str> {
    let n = reader.len();
    if n >= buf.len() {
        return Err(EINVAL);
    }
    reader.read_slice(&mut buf[..n])?;
    core::str::from_utf8(&buf[..n]).map_err(|_| EINVAL)
}

/// Reads a command written to control file `name` and parses it with `parse`; a command
/// refused is logged with the reason (`NAME: WHY: LINE`) and fails with `EINVAL`.
fn read_command<'a, T>(
    name: &str,
    reader: &mut UserSliceReader,
    buf: &'a mut [u8],
    parse: impl FnOnce(&'a str) -> Result<T, command::ParseError>,
) -> Result<T> {
    let line = read_line(reader, buf)?;
    parse(line).map_err(|why| {
        pr_err!("{}: {}: {}\n", name, why, command::shown(line));
        EINVAL
    })
}

/// State behind the `ctl` file.
#[pin_data]
pub(crate) struct CtlFile {
    devices: Arc<Devices>,
    ifaces: Arc<Ifaces>,
    console: Arc<Console>,
    params: Params,
    #[pin]
    last: Mutex<Option<CString>>,
}

impl CtlFile {
    fn run(&self, reader: &mut UserSliceReader) -> Result {
        let mut buf = [0u8; 160];
        let cmd = read_command("ctl", reader, &mut buf, command::Ctl::parse)?;
        // Commands run side by side (many peers' transfers at once, 19-scale.sh): the
        // file keeps the answer of the last one to end; each write's status is its own.
        let (r, text) = self.exec(&cmd);
        *self.last.lock() = Some(text?);
        r
    }

    fn exec(&self, cmd: &command::Ctl<'_>) -> (Result, Result<CString>) {
        let p = &self.params;
        // Connections that failed or were closed by their peer are torn down here, in
        // process context, before anything else happens.
        self.ifaces.reap();
        match *cmd {
            command::Ctl::IfaceAdd { dev, ip, tun } => {
                let Some(res) = self.devices.find_name(dev) else {
                    pr_err!("ctl: no RDMA device {} in use\n", dev);
                    return (
                        Err(ENODEV),
                        CString::try_from_fmt(fmt!("error no device {}", dev)),
                    );
                };
                let t = Tunables::with(p, &tun);
                let addr = verbs::SockAddr { ip, port: t.port };
                // An interface already there is retuned: replaced with the new values (not
                // one made through configfs: its directory's).
                match self.ifaces.del(ip, Some(t.port)) {
                    Ok(()) => pr_info!("{}: retuning interface {}\n", dev, addr),
                    Err(e) if e == EBUSY => {
                        return (Err(EBUSY), CString::try_from_fmt(fmt!("{}", CONFIGURED)))
                    }
                    Err(_) => {}
                }
                let control = self.ifaces.control();
                let r = Iface::new(res, addr, t, p.timeout.saturating_mul(1000), control)
                    .and_then(|i| self.ifaces.add(i));
                let text = match &r {
                    Ok(()) => CString::try_from_fmt(fmt!("ok")),
                    Err(e) => CString::try_from_fmt(fmt!("error {:?}", e)),
                };
                (r, text)
            }
            command::Ctl::IfaceDel { ip, port } => {
                let r = self.ifaces.del(ip, port);
                let text = CString::try_from_fmt(fmt!(
                    "{}",
                    match r {
                        Ok(()) => "ok",
                        Err(e) if e == EBUSY => CONFIGURED,
                        Err(_) => "error no such interface",
                    }
                ));
                (r, text)
            }
            command::Ctl::Ping {
                local,
                peer,
                count,
                ports,
            } => {
                let Some((iface, to)) = self.route_at(local, peer, ports) else {
                    return no_interface();
                };
                let timeout_ms = p.timeout.saturating_mul(1000);
                let r = iface.connect(to).and_then(|c| c.ping(count, timeout_ms));
                match r {
                    Ok((n, min, avg, max)) => (
                        Ok(()),
                        CString::try_from_fmt(fmt!(
                            "ok pings={} min_us={} avg_us={} max_us={}",
                            n,
                            min,
                            avg,
                            max
                        )),
                    ),
                    Err(e) => (Err(e), CString::try_from_fmt(fmt!("error {:?}", e))),
                }
            }
            command::Ctl::Bulk {
                get,
                local,
                peer,
                offset,
                len,
                count,
                ports,
            } => {
                let Some((iface, to)) = self.route_at(local, peer, ports) else {
                    return no_interface();
                };
                let timeout_ms = p.timeout.saturating_mul(1000);
                let start = kernel::time::Instant::<kernel::time::Monotonic>::now();
                let mut done = 0u32;
                let mut r = Ok(());
                while done < count && r.is_ok() {
                    r = iface.connect(to).and_then(|c| {
                        if get {
                            c.get(offset as usize, len as usize, timeout_ms)
                        } else {
                            c.put(offset as usize, len as usize, timeout_ms)
                        }
                    });
                    if r.is_ok() {
                        done += 1;
                    }
                }
                let ms = start.elapsed().as_millis();
                match r {
                    Ok(()) => (
                        Ok(()),
                        CString::try_from_fmt(fmt!(
                            "ok transfers={} bytes={} ms={}",
                            done,
                            u64::from(done) * len,
                            ms
                        )),
                    ),
                    Err(e) => (
                        Err(e),
                        CString::try_from_fmt(fmt!("error {:?} after {} transfers", e, done)),
                    ),
                }
            }
            command::Ctl::Fault { local, peer, what } => {
                let Some((iface, to)) = self.route(local, peer) else {
                    return no_interface();
                };
                let timeout_ms = p.timeout.saturating_mul(1000);
                let r = iface.connect(to).and_then(|c| c.fault(what, timeout_ms));
                let text = match &r {
                    Ok(()) => CString::try_from_fmt(fmt!("ok refused")),
                    Err(e) => CString::try_from_fmt(fmt!("error {:?}", e)),
                };
                (r, text)
            }
            command::Ctl::Corrupt { local, n } => {
                let r = self
                    .ifaces
                    .find(local)
                    .ok_or(ENOENT)
                    .map(|i| i.corrupt_served(n));
                let text =
                    CString::try_from_fmt(fmt!("{}", if r.is_ok() { "ok" } else { "error" }));
                (r, text)
            }
            command::Ctl::Misbehave { local, how, n } => {
                let r = self
                    .ifaces
                    .find(local)
                    .ok_or(ENOENT)
                    .map(|i| i.misbehave(how, n));
                let text =
                    CString::try_from_fmt(fmt!("{}", if r.is_ok() { "ok" } else { "error" }));
                (r, text)
            }
            command::Ctl::Fuzz {
                local,
                seed,
                rate,
                count,
            } => {
                let r = self
                    .ifaces
                    .find(local)
                    .ok_or(ENOENT)
                    .map(|i| i.fuzz(seed, rate, count));
                let text =
                    CString::try_from_fmt(fmt!("{}", if r.is_ok() { "ok" } else { "error" }));
                (r, text)
            }
            command::Ctl::Console { allow: None, .. } => (
                Ok(()),
                CString::try_from_fmt(fmt!("{}", Show(self.console.listing()))),
            ),
            command::Ctl::Console {
                allow: Some(allow),
                ip,
            } => {
                let r = self.console.allow(ip, allow);
                let text = match &r {
                    Ok(_) => CString::try_from_fmt(fmt!("{}", Show(self.console.listing()))),
                    Err(_) => CString::try_from_fmt(fmt!("error too many consoles allowed")),
                };
                (r.map(|_| ()), text)
            }
            command::Ctl::ConsoleKey { key } => {
                self.console.set_key(key);
                (
                    Ok(()),
                    CString::try_from_fmt(fmt!("{}", Show(self.console.listing()))),
                )
            }
            command::Ctl::Dial { local, peer, ports } => {
                let Some((iface, to)) = self.route_at(local, peer, ports) else {
                    return no_interface();
                };
                let r = iface.dial(to).map(|_| ());
                let text = match &r {
                    Ok(()) => CString::try_from_fmt(fmt!("ok")),
                    Err(e) => CString::try_from_fmt(fmt!("error {:?}", e)),
                };
                (r, text)
            }
            command::Ctl::Close { local, peer, ports } => {
                let r = self
                    .route_at(local, peer, ports)
                    .ok_or(ENOENT)
                    .and_then(|(i, to)| i.close(to));
                let text =
                    CString::try_from_fmt(fmt!("{}", if r.is_ok() { "ok" } else { "error" }));
                (r, text)
            }
        }
    }
}

impl CtlFile {
    /// Interface `local`, and the address of `peer` on its port.
    fn route(&self, local: [u8; 4], peer: [u8; 4]) -> Option<(Arc<Iface>, verbs::SockAddr)> {
        self.route_at(local, peer, command::Ports::default())
    }

    /// [`Self::route`] with the ports given: the interface at `local` and that port, the
    /// peer at that port (by default the interface's).
    fn route_at(
        &self,
        local: [u8; 4],
        peer: [u8; 4],
        ports: command::Ports,
    ) -> Option<(Arc<Iface>, verbs::SockAddr)> {
        let iface = match ports.local {
            None => self.ifaces.find(local)?,
            Some(port) => self.ifaces.find_at(verbs::SockAddr { ip: local, port })?,
        };
        let to = verbs::SockAddr {
            ip: peer,
            port: ports.peer.unwrap_or(iface.addr().port),
        };
        Some((iface, to))
    }
}

/// What a command naming no interface of this node answers.
fn no_interface() -> (Result, Result<CString>) {
    (
        Err(ENOENT),
        CString::try_from_fmt(fmt!("error no interface")),
    )
}

/// What `iface add` and `iface del` answer for an interface made through configfs.
const CONFIGURED: &str =
    "error busy: the interface belongs to its configfs directory (echo 0 > enable, or rmdir)";

/// State behind the `lst` file: the node's own test ([`crate::selftest::local::Local`]),
/// shared with the control device (one test at a time on the node).
pub(crate) struct LstFile {
    node: Node,
}

impl LstFile {
    /// Interfaces found dead are torn down first, apart from the command's frame: their
    /// transfers' outcomes can start new ones (design.rst, "Stack").
    fn run(&self, reader: &mut UserSliceReader) -> Result {
        self.node.ifaces.reap();
        self.run_command(reader)
    }

    /// Starts the test and waits for it: `EIO` if a transfer failed or was corrupt. A
    /// signal stops it.
    #[inline(never)]
    fn run_command(&self, reader: &mut UserSliceReader) -> Result {
        let mut buf = [0u8; 256];
        let t = read_command("lst", reader, &mut buf, command::Lst::parse)?;
        let local = &self.node.local;
        let timeout_ms = self.node.params.timeout.saturating_mul(1000);
        local.start(&self.node.ifaces, &t, timeout_ms, NO_FILE)?;
        if let Err(e) = local.wait() {
            local.stop();
            return Err(e);
        }
        local.last_status()
    }

    fn show(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self.node.local.write_result(f) {
            Ok(_) => Ok(()),
            Err(e) if e == ENOENT => writeln!(f, "none"),
            Err(e) => writeln!(f, "error={}", e.to_errno()),
        }
    }
}

/// The owner of a test started through debugfs: no file of the control device (whose
/// numbers start at 1), so closing one never stops it.
const NO_FILE: u64 = 0;

/// State behind the `console` file.
#[pin_data]
pub(crate) struct ConsoleFile {
    /// The node: its interfaces, its console side (the cluster key), and the sessions its
    /// console holds on nodes (shared with the control device).
    node: Node,
    /// The answers of the last command.
    #[pin]
    last: Mutex<Option<Result<ask::Answers, Error>>>,
}

impl ConsoleFile {
    /// As [`LstFile::run`]: dead interfaces first, apart from the command's frame.
    fn run(&self, reader: &mut UserSliceReader) -> Result {
        self.node.ifaces.reap();
        self.run_command(reader)
    }

    #[inline(never)]
    fn run_command(&self, reader: &mut UserSliceReader) -> Result {
        let mut buf = [0u8; 640];
        let cmd = read_command("console", reader, &mut buf, ConsoleCmd::parse)?;
        // Not under `last`: a reader does not wait for the nodes.
        let mut held = self.node.held.take()?;
        let r = ask::ask(&self.node.ifaces, &cmd, self.node.console.key(), &mut held);
        drop(held);
        let status = r.as_ref().map(|_| ()).map_err(|e| *e);
        *self.last.lock() = Some(r);
        status
    }

    fn show(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match &*self.last.lock() {
            Some(Ok(a)) => a.write(f),
            Some(Err(e)) => writeln!(f, "error={}", e.to_errno()),
            None => writeln!(f, "none"),
        }
    }
}

/// The command files; removed when dropped (before their directory).
pub(crate) struct Files {
    _ctl: Pin<KBox<File<CtlFile>>>,
    _lst: Pin<KBox<File<LstFile>>>,
    _console: Pin<KBox<File<ConsoleFile>>>,
}

impl Files {
    /// Creates `ctl`, `lst` and `console` in `dir`, acting on `node`.
    pub(crate) fn new(dir: &Dir, node: &Node) -> Result<Self> {
        let ctl = KBox::pin_init(
            dir.read_write_callback_file(
                c"ctl",
                pin_init!(CtlFile {
                    devices: node.devices.clone(),
                    ifaces: node.ifaces.clone(),
                    console: node.console.clone(),
                    params: node.params,
                    last <- new_mutex!(None, "fastreg::CtlFile::last"),
                }),
                &|c: &CtlFile, f| match &*c.last.lock() {
                    Some(s) => writeln!(f, "{}", s.to_str().unwrap_or("?")),
                    None => writeln!(f, "none"),
                },
                &|c: &CtlFile, r: &mut UserSliceReader| c.run(r),
            ),
            GFP_KERNEL,
        )?;
        let lst = KBox::pin_init(
            dir.read_write_callback_file(
                c"lst",
                LstFile { node: node.clone() },
                &|l: &LstFile, f| l.show(f),
                &|l: &LstFile, r: &mut UserSliceReader| l.run(r),
            ),
            GFP_KERNEL,
        )?;
        let console = KBox::pin_init(
            dir.read_write_callback_file(
                c"console",
                pin_init!(ConsoleFile {
                    node: node.clone(),
                    last <- new_mutex!(None, "fastreg::ConsoleFile::last"),
                }),
                &|c: &ConsoleFile, f| c.show(f),
                &|c: &ConsoleFile, r: &mut UserSliceReader| c.run(r),
            ),
            GFP_KERNEL,
        )?;
        Ok(Self {
            _ctl: ctl,
            _lst: lst,
            _console: console,
        })
    }
}
