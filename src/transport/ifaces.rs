// SPDX-License-Identifier: GPL-2.0

//! The node's interfaces, and the transport's periodic work.

use super::*;

/// The periodic work of the transport: the interfaces and the module's timing parameters.
pub(crate) struct NetTick {
    /// The interfaces.
    pub(crate) ifaces: Arc<Ifaces>,
    /// Idle seconds before a keepalive (0: none).
    pub(crate) keepalive: u32,
    /// Transfer timeout.
    pub(crate) timeout_ms: u32,
}

impl verbs::Tick for NetTick {
    fn tick(&self) {
        self.ifaces.tick(self.keepalive, self.timeout_ms);
    }
}

/// A copy of a list of references, to work on its items without holding its lock. Under
/// memory pressure the copy may be short: the periodic work catches up at the next tick.
pub(super) fn snapshot<T>(list: &[Arc<T>]) -> KVec<Arc<T>> {
    let mut v = KVec::with_capacity(list.len(), GFP_KERNEL).unwrap_or_default();
    for x in list {
        if v.push(x.clone(), GFP_KERNEL).is_err() {
            break;
        }
    }
    v
}

/// The interfaces of the module.
#[pin_data]
pub(crate) struct Ifaces {
    #[pin]
    pub(super) list: Mutex<KVec<Arc<Iface>>>,
    /// Who answers consoles' requests to any of them.
    control: Arc<dyn Control>,
}

impl Ifaces {
    /// No interface; consoles' requests will go to `control`.
    pub(crate) fn new(control: Arc<dyn Control>) -> impl PinInit<Self> {
        pin_init!(Self {
            list <- new_mutex!(KVec::new(), "fastreg::Ifaces::list"),
            control,
        })
    }

    /// Who answers consoles' requests (for the interfaces made).
    pub(crate) fn control(&self) -> Arc<dyn Control> {
        self.control.clone()
    }

    /// Adds an interface; refuses a second one on the same address and port (`EEXIST`),
    /// and one whose device is being removed (`ENODEV`: its removal swept the list already,
    /// or will find it). A refused interface is shut down.
    pub(crate) fn add(&self, iface: Arc<Iface>) -> Result {
        let mut list = self.list.lock();
        // `removed` is set before the removal takes this lock to sweep the list.
        let refused = if iface.res.removed.load(Relaxed) {
            Err(ENODEV)
        } else if list.iter().any(|i| i.addr == iface.addr) {
            Err(EEXIST)
        } else {
            list.push(iface.clone(), GFP_KERNEL).map_err(Error::from)
        };
        drop(list);
        if refused.is_err() {
            iface.shutdown();
        }
        refused
    }

    /// Periodic work: tears down closed connections and runs every connection's checks.
    pub(crate) fn tick(&self, keepalive: u32, timeout_ms: u32) {
        self.reap();
        self.control.tick();
        // The copies are taken in `let` statements so no lock is held while working.
        let ifaces = snapshot(&self.list.lock());
        for i in ifaces.iter() {
            // A round's timeout, a pause missed by its timer.
            i.kick_dials(None);
            let conns = snapshot(&i.st.lock().conns);
            for c in conns.iter() {
                c.tick(keepalive, timeout_ms);
            }
            // Idle MRs beyond `pool_size` that went, and any left by a teardown.
            i.res.pool.reap();
        }
    }

    /// Tears down the connections of every interface that are closing or closed.
    pub(crate) fn reap(&self) {
        let ifaces = snapshot(&self.list.lock());
        for i in ifaces.iter() {
            i.reap();
        }
    }

    /// The first interface (the default one of the first device, unless removed).
    pub(crate) fn first(&self) -> Option<Arc<Iface>> {
        self.list.lock().first().cloned()
    }

    /// The interface at `ip` (any port).
    pub(crate) fn find(&self, ip: [u8; 4]) -> Option<Arc<Iface>> {
        self.list.lock().iter().find(|i| i.addr.ip == ip).cloned()
    }

    /// The interface at `addr` (its address and port).
    #[cfg(fastreg_test)]
    pub(crate) fn find_at(&self, addr: SockAddr) -> Option<Arc<Iface>> {
        self.list.lock().iter().find(|i| i.addr == addr).cloned()
    }

    /// Removes the interface at `ip` (and `port`, if given); `EBUSY` for one made through
    /// configfs.
    #[cfg(fastreg_test)]
    pub(crate) fn del(&self, ip: [u8; 4], port: Option<u16>) -> Result {
        let gone = {
            let mut list = self.list.lock();
            let pos = list
                .iter()
                .position(|i| i.addr.ip == ip && port.is_none_or(|p| p == i.addr.port))
                .ok_or(ENOENT)?;
            // One made through configfs is its directory's to remove.
            if list[pos].configured.load(Relaxed) {
                return Err(EBUSY);
            }
            list.remove(pos).map_err(|_| ENOENT)?
        };
        gone.shutdown();
        Ok(())
    }

    /// Removes the interface at `addr` of incarnation `stamp`, if it is still listed, and
    /// shuts it down; returns whether it was. Named, not held: whoever made an interface
    /// must not keep its device's resources (and with them the device) alive once the list
    /// let it go.
    pub(crate) fn remove(&self, addr: SockAddr, stamp: u64) -> bool {
        let gone = {
            let mut list = self.list.lock();
            let Some(pos) = list.iter().position(|i| i.addr == addr && i.stamp == stamp) else {
                return false;
            };
            list.remove(pos).ok()
        };
        if let Some(i) = gone {
            i.shutdown();
        }
        true
    }

    /// Whether the interface at `addr` of incarnation `stamp` is listed (not removed, nor
    /// gone with its device).
    pub(crate) fn contains(&self, addr: SockAddr, stamp: u64) -> bool {
        self.list
            .lock()
            .iter()
            .any(|i| i.addr == addr && i.stamp == stamp)
    }

    /// Removes every interface on the device `res` (it is going away).
    pub(crate) fn remove_device(&self, res: &DevRes) {
        let mut gone = KVec::new();
        {
            let mut list = self.list.lock();
            let mut i = 0;
            while i < list.len() {
                if core::ptr::eq(&*list[i].res, res) {
                    if let Ok(x) = list.remove(i) {
                        let _ = gone.push(x, GFP_KERNEL);
                    }
                } else {
                    i += 1;
                }
            }
        }
        for i in gone.iter() {
            i.shutdown();
        }
    }
}
