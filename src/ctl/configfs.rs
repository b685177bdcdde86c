// SPDX-License-Identifier: GPL-2.0

//! fastreg's configuration in configfs, `/sys/kernel/config/fastreg/`, in the manner of
//! nvmet's ports and rnull's devices: a directory per interface (`mkdir`), its attributes
//! set, then `enable`; the console's allowlist and key as attributes of the top directory.
//! See `Documentation/configfs.rst`.
//!
//! Every value written is read by the pure rules of [`crate::rules::config`]; a refusal is
//! `EINVAL` (`ENODEV` for a device not in use, `EBUSY` for a change to a live interface)
//! with one log line naming the attribute, the value and what it takes, and changes
//! nothing. An enabled interface is owned by its directory: disabling it, or removing the
//! directory (configfs drops the group), shuts it down ([`Enabled`]'s `Drop`).

use kernel::{
    configfs::{
        self,
        AttributeOperations, //
    },
    configfs_attrs,
    fmt::{
        self,
        Write as _, //
    },
    new_mutex,
    page::PAGE_SIZE,
    prelude::*,
    str::CString,
    sync::{
        Arc,
        Mutex, //
    },
};

use crate::{
    ctl::Node,
    rules::{
        command::IfaceTunables,
        config::{
            self,
            Knob,
            Refusal, //
        },
    },
    show::{
        Ip,
        Show, //
    },
    transport::{
        Iface,
        Ifaces,
        Tunables, //
    },
    verbs::SockAddr,
    THIS_MODULE,
};

/// `/sys/kernel/config/fastreg/`. What it acts on is published apart
/// ([`crate::verbs::Published`]): `kernel::configfs` gives the root directory's callbacks no data
/// of their own.
pub(crate) fn subsystem() -> impl PinInit<configfs::Subsystem<Root>, Error> {
    let item_type = configfs_attrs! {
        container: configfs::Subsystem<Root>,
        data: Root,
        child: IfaceDir,
        attributes: [
            console_allow: 0,
            console_deny: 1,
            console_key: 2,
        ],
    };
    configfs::Subsystem::new(c"fastreg", item_type, try_pin_init!(Root {}))
}

/// The top directory: the console's attributes; `mkdir NAME` makes an interface. It holds
/// nothing (see [`subsystem`]): [`node`] is what it acts on.
#[pin_data]
pub(crate) struct Root {}

// `kernel::configfs` (7.2) computes the top directory's data as a child directory's: only
// data of no size is read correctly from there (see [`subsystem`]).
const _: () = assert!(core::mem::size_of::<Root>() == 0);

/// What the top directory acts on, as published by the module (`ENODEV` while it is not).
fn node() -> Result<Node> {
    Node::published()
}

/// Logs a refused value of `attr` in directory `dir` and returns `err`. Not rate-limited:
/// only root writes here, and each refusal is one line, as nvmet's configfs has it.
fn refuse(dir: &CStr, attr: &str, page: &[u8], why: &dyn fmt::Display, err: Error) -> Error {
    pr_err!(
        "configfs fastreg/{}/{}: refused \"{}\": {}\n",
        shown_dir(dir),
        attr,
        Show(config::shown(page)),
        why
    );
    err
}

/// A directory's name as the log shows it (escaped, as values are).
fn shown_dir(dir: &CStr) -> Show<impl core::fmt::Display + '_> {
    Show(config::shown(dir.to_bytes()))
}

/// A value read by the rules, or its refusal logged: `EINVAL`.
fn read<T>(dir: &CStr, attr: &str, page: &[u8], r: Result<T, Refusal>) -> Result<T> {
    r.map_err(|why| refuse(dir, attr, page, &why.name(), EINVAL))
}

/// Writes `args` and a newline into `page`; returns the bytes written.
fn show(page: &mut [u8; PAGE_SIZE], args: fmt::Arguments<'_>) -> Result<usize> {
    let mut w = kernel::str::Formatter::new(page);
    w.write_fmt(args)?;
    w.write_str("\n")?;
    Ok(w.bytes_written())
}

#[vtable]
impl configfs::GroupOperations for Root {
    type Child = IfaceDir;

    fn make_group(&self, name: &CStr) -> Result<impl PinInit<configfs::Group<IfaceDir>, Error>> {
        let node = node()?;
        let item_type = configfs_attrs! {
            container: configfs::Group<IfaceDir>,
            data: IfaceDir,
            attributes: [
                device: 0,
                address: 1,
                port: 2,
                queue_depth: 3,
                max_payload: 4,
                max_regs: 5,
                mr_pages: 6,
                max_inline: 7,
                enable: 8,
            ],
        };
        let dir: CString = name.try_into()?;
        Ok(configfs::Group::new(
            name.try_into()?,
            item_type,
            try_pin_init!(IfaceDir {
                node,
                name: dir,
                st <- new_mutex!(IfaceCfg::default()),
            }),
        ))
    }
}

/// `console_allow`: reading lists the consoles allowed (and the key's fingerprint);
/// writing an address allows that console.
#[vtable]
impl AttributeOperations<0> for Root {
    type Data = Root;

    fn show(_this: &Root, page: &mut [u8; PAGE_SIZE]) -> Result<usize> {
        show(page, fmt!("{}", Show(node()?.console.listing())))
    }

    fn store(_this: &Root, page: &[u8]) -> Result {
        let ip = read(c".", "console_allow", page, config::address(page))?;
        node()?.console.allow(ip, true).map_err(|e| {
            refuse(
                c".",
                "console_allow",
                page,
                &"no room for another console",
                e,
            )
        })?;
        Ok(())
    }
}

/// `console_deny`: writing an address takes that console off the list (reading shows
/// nothing).
#[vtable]
impl AttributeOperations<1> for Root {
    type Data = Root;

    fn show(_this: &Root, _page: &mut [u8; PAGE_SIZE]) -> Result<usize> {
        Ok(0)
    }

    fn store(_this: &Root, page: &[u8]) -> Result {
        let ip = read(c".", "console_deny", page, config::address(page))?;
        node()?.console.allow(ip, false)?;
        Ok(())
    }
}

/// `console_key`: write-only; the cluster key (64 hex digits, as in the site's key file),
/// or `none`. Reading it is refused: the key is never shown back (its fingerprint is in
/// `console_allow`).
#[vtable]
impl AttributeOperations<2> for Root {
    type Data = Root;

    fn show(_this: &Root, _page: &mut [u8; PAGE_SIZE]) -> Result<usize> {
        Err(EACCES)
    }

    fn store(_this: &Root, page: &[u8]) -> Result {
        // Never logged: a refusal names the attribute, not the value.
        let key = config::key(page).map_err(|why| {
            pr_err!("configfs fastreg/console_key: refused: {}\n", why.name());
            EINVAL
        })?;
        node()?.console.set_key(key);
        Ok(())
    }
}

/// An interface's directory.
#[pin_data]
pub(crate) struct IfaceDir {
    node: Node,
    /// The directory's name, for the log.
    name: CString,
    #[pin]
    st: Mutex<IfaceCfg>,
}

/// An interface's configuration, and the interface while it is enabled.
#[derive(Default)]
struct IfaceCfg {
    dev: Option<CString>,
    ip: Option<[u8; 4]>,
    tun: IfaceTunables,
    on: Option<Enabled>,
}

/// An enabled interface, owned by its directory: dropped (disabled, or the directory
/// removed), it is shut down. Named (address and incarnation), not held: the node's list
/// is the interface's only owner, so a device that goes away takes it (and its resources)
/// at once, whatever the directory holds.
struct Enabled {
    ifaces: Arc<Ifaces>,
    addr: SockAddr,
    stamp: u64,
}

impl Enabled {
    /// Whether the interface still runs (not gone with its device).
    fn alive(&self) -> bool {
        self.ifaces.contains(self.addr, self.stamp)
    }
}

impl Drop for Enabled {
    fn drop(&mut self) {
        self.ifaces.remove(self.addr, self.stamp);
    }
}

impl IfaceDir {
    /// Forgets an enabled interface that is gone (with its device): the directory is
    /// disabled then.
    fn forget_gone(st: &mut IfaceCfg) {
        if st.on.as_ref().is_some_and(|e| !e.alive()) {
            st.on = None;
        }
    }

    /// Applies `f` to the configuration, unless the interface is enabled (`EBUSY`, logged).
    fn change(&self, attr: &str, page: &[u8], f: impl FnOnce(&mut IfaceCfg)) -> Result {
        let mut st = self.st.lock();
        Self::forget_gone(&mut st);
        if st.on.is_some() {
            return Err(refuse(
                &self.name,
                attr,
                page,
                &"the interface is enabled",
                EBUSY,
            ));
        }
        f(&mut st);
        Ok(())
    }

    /// A numeric attribute written: read within `knob`'s range, then stored by `set`.
    fn store_knob(
        &self,
        knob: &Knob,
        page: &[u8],
        set: impl FnOnce(&mut IfaceTunables, u64),
    ) -> Result {
        let v = config::number(knob, page).map_err(|why| {
            let range = RangeOf(knob, why);
            refuse(&self.name, knob.name, page, &range, EINVAL)
        })?;
        self.change(knob.name, page, |st| set(&mut st.tun, v))
    }

    /// The values the interface has (or will have once enabled): those written, else the
    /// module parameters'.
    fn tunables(&self, st: &IfaceCfg) -> Tunables {
        Tunables::with(&self.node.params, &st.tun)
    }

    /// Enables the interface as configured.
    fn enable(&self, st: &mut IfaceCfg, page: &[u8]) -> Result {
        let (Some(dev), Some(ip)) = (st.dev.as_ref(), st.ip) else {
            return Err(refuse(
                &self.name,
                "enable",
                page,
                &"set device and address first",
                EINVAL,
            ));
        };
        let name = dev.to_str().unwrap_or("?");
        let Some(res) = self.node.devices.find_name(name) else {
            return Err(refuse(
                &self.name,
                "enable",
                page,
                &"the device is gone",
                ENODEV,
            ));
        };
        let t = self.tunables(st);
        let addr = SockAddr { ip, port: t.port };
        let control = self.node.ifaces.control();
        let timeout_ms = self.node.params.timeout.saturating_mul(1000);
        let iface = Iface::new(res, addr, t, timeout_ms, control).inspect_err(|e| {
            pr_err!(
                "configfs fastreg/{}: {} on {} could not be enabled ({:?})\n",
                shown_dir(&self.name),
                addr,
                name,
                e
            );
        })?;
        iface.configured();
        self.node.ifaces.add(iface.clone()).map_err(|e| {
            let why = if e == ENODEV {
                "the device is going away"
            } else {
                "an interface has that address and port"
            };
            refuse(&self.name, "enable", page, &why, e)
        })?;
        pr_info!(
            "configfs fastreg/{}: {} on {} enabled\n",
            shown_dir(&self.name),
            addr,
            name
        );
        st.on = Some(Enabled {
            ifaces: self.node.ifaces.clone(),
            addr,
            stamp: iface.stamp(),
        });
        Ok(())
    }
}

/// A refusal of a number, with the range it takes.
struct RangeOf<'a>(&'a Knob, Refusal);

impl fmt::Display for RangeOf<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} (takes {}..{})",
            self.1.name(),
            self.0.min,
            self.0.max
        )
    }
}

/// `device`: the RDMA device's name; a device fastreg does not use is refused (`ENODEV`).
#[vtable]
impl AttributeOperations<0> for IfaceDir {
    type Data = IfaceDir;

    fn show(this: &IfaceDir, page: &mut [u8; PAGE_SIZE]) -> Result<usize> {
        let st = this.st.lock();
        let dev = st.dev.as_ref().and_then(|d| d.to_str().ok()).unwrap_or("");
        show(page, fmt!("{}", dev))
    }

    fn store(this: &IfaceDir, page: &[u8]) -> Result {
        let name = read(&this.name, "device", page, config::device(page))?;
        if this.node.devices.find_name(name).is_none() {
            return Err(refuse(
                &this.name,
                "device",
                page,
                &"no such RDMA device in use",
                ENODEV,
            ));
        }
        let dev = CString::try_from_fmt(fmt!("{}", name))?;
        this.change("device", page, |st| st.dev = Some(dev))
    }
}

/// `address`: the interface's IPv4 address (on the device: checked when it is enabled).
#[vtable]
impl AttributeOperations<1> for IfaceDir {
    type Data = IfaceDir;

    fn show(this: &IfaceDir, page: &mut [u8; PAGE_SIZE]) -> Result<usize> {
        match this.st.lock().ip {
            Some(ip) => show(page, fmt!("{}", Ip(ip))),
            None => show(page, fmt!("")),
        }
    }

    fn store(this: &IfaceDir, page: &[u8]) -> Result {
        let ip = read(&this.name, "address", page, config::address(page))?;
        this.change("address", page, |st| st.ip = Some(ip))
    }
}

/// The numeric attributes: each shows the value the interface has (written, else the
/// module parameter's) and takes one within its range.
macro_rules! knob_attr {
    ($id:literal, $knob:path, $field:ident, $ty:ty) => {
        #[vtable]
        impl AttributeOperations<$id> for IfaceDir {
            type Data = IfaceDir;

            fn show(this: &IfaceDir, page: &mut [u8; PAGE_SIZE]) -> Result<usize> {
                let v = this.tunables(&this.st.lock()).$field;
                show(page, fmt!("{}", v))
            }

            fn store(this: &IfaceDir, page: &[u8]) -> Result {
                // Within the knob's range, which fits the field.
                this.store_knob(&$knob, page, |t, v| t.$field = Some(v as $ty))
            }
        }
    };
}

knob_attr!(2, config::PORT, port, u16);
knob_attr!(3, config::QUEUE_DEPTH, queue_depth, u16);
knob_attr!(4, config::MAX_PAYLOAD, max_payload, u32);
knob_attr!(5, config::MAX_REGS, max_regs, u16);
knob_attr!(6, config::MR_PAGES, mr_pages, u32);
knob_attr!(7, config::MAX_INLINE, max_inline, u32);

/// `enable`: 1 starts the interface as configured (listening, connecting), 0 shuts it
/// down. Reads 1 while it runs (a device removed takes its interfaces with it).
#[vtable]
impl AttributeOperations<8> for IfaceDir {
    type Data = IfaceDir;

    fn show(this: &IfaceDir, page: &mut [u8; PAGE_SIZE]) -> Result<usize> {
        let on = this.st.lock().on.as_ref().is_some_and(Enabled::alive);
        show(page, fmt!("{}", u8::from(on)))
    }

    fn store(this: &IfaceDir, page: &[u8]) -> Result {
        let on = read(&this.name, "enable", page, config::boolean(page))?;
        let mut st = this.st.lock();
        // One whose device went is enabled again as if it had been disabled.
        IfaceDir::forget_gone(&mut st);
        match (on, st.on.is_some()) {
            (true, false) => this.enable(&mut st, page),
            (false, true) => {
                let gone = st.on.take();
                drop(st);
                drop(gone);
                pr_info!("configfs fastreg/{}: disabled\n", shown_dir(&this.name));
                Ok(())
            }
            _ => Ok(()),
        }
    }
}
