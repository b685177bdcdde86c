// SPDX-License-Identifier: GPL-2.0

//! Test hooks: corrupting or misbehaving on purpose, injected faults, stale writes.

use super::*;

impl Iface {
    /// A new seed for a transfer's pattern.
    pub(crate) fn seed(&self) -> u32 {
        let n = self.seeds.fetch_add(1, Relaxed);
        (self.stamp as u32) ^ n.wrapping_mul(0x9e37_79b9)
    }

    /// Test hook (`fault IFACE corrupt N`): the next `n` transfers this interface serves
    /// get one byte of their data inverted, at the sink before it checks (PUT) or at the
    /// source before it writes (GET).
    pub(crate) fn corrupt_served(&self, n: u32) {
        self.corrupt_next.store(n, Relaxed);
    }

    /// Test hook (`misbehave IFACE HOW N`): the next `n` times the interface is in the
    /// role of `how`, it misbehaves that way towards its peer.
    pub(crate) fn misbehave(&self, how: Misbehave, n: u32) {
        self.hook_left.store(0, Relaxed);
        self.hook.store(how as u32, Relaxed);
        self.hook_left.store(n, Relaxed);
    }

    /// Whether the interface is armed to misbehave `how` (without consuming it).
    pub(super) fn armed(&self, how: Misbehave) -> bool {
        self.hook.load(Relaxed) == how as u32 && self.hook_left.load(Relaxed) > 0
    }

    /// Whether the interface misbehaves `how` now (consumes one of the armed times).
    pub(super) fn hook(&self, how: Misbehave) -> bool {
        if self.hook.load(Relaxed) != how as u32 {
            return false;
        }
        let mut n = self.hook_left.load(Relaxed);
        while n > 0 {
            match self.hook_left.cmpxchg(n, n - 1, Relaxed) {
                Ok(_) => {
                    pr_info!("{}: test hook: misbehaving ({})\n", self.addr, how.name());
                    return true;
                }
                Err(now) => n = now,
            }
        }
        false
    }

    /// Applies the corruption hook to a served transfer's data, if armed.
    pub(super) fn corrupt_hook(&self, region: &Region) -> Result {
        match self.take_corrupt(region.buffer().len()) {
            Some(off) => region.with_cpu(|b| b.flip(off)),
            None => Ok(()),
        }
    }

    /// [`Iface::corrupt_hook`] for data carried inline, about to be sent.
    pub(super) fn corrupt_hook_bytes(&self, data: &mut [u8]) {
        if let Some(off) = self.take_corrupt(data.len()) {
            data[off] = !data[off];
        }
    }

    /// Consumes one armed corruption, if any: the offset to invert in `len` bytes.
    pub(super) fn take_corrupt(&self, len: usize) -> Option<usize> {
        let mut n = self.corrupt_next.load(Relaxed);
        while n > 0 && len > 0 {
            match self.corrupt_next.cmpxchg(n, n - 1, Relaxed) {
                Ok(_) => {
                    pr_info!(
                        "{}: corrupting byte {} of a served transfer\n",
                        self.addr,
                        len / 2
                    );
                    return Some(len / 2);
                }
                Err(now) => n = now,
            }
        }
        None
    }
}

impl Conn {
    /// Test hook (`fault` command). [`Fault::Mangle`] sends a GET whose request is
    /// corrupted that way: the peer must refuse it and close the connection, so the GET
    /// must fail. [`Fault::StaleRkey`] does a PUT and then RDMA-writes with the sink's old
    /// rkey; [`Fault::StaleGet`] RDMA-writes with the registrations of the last GET this
    /// interface served (recorded): the write must fail (the keys died with their
    /// transfers). `Ok` means the peer behaved.
    pub(crate) fn fault(&self, what: Fault, timeout_ms: u32) -> Result {
        if let Fault::Mangle(m) = what {
            self.st.lock().mangle = Some(m);
            // A registered GET (never inline): its GET_REQ carries registrations to mangle.
            let region = Region::new(&self.iface.res, 0, 4096)?;
            return match self.get_once(&region, self.iface.seed(), Check::Full, timeout_ms) {
                Ok(()) => {
                    pr_err!(
                        "{} -> {}: a corrupted GET_REQ was served\n",
                        self.iface.addr,
                        self.peer
                    );
                    Err(EIO)
                }
                Err(_) => Ok(()),
            };
        }
        let res = self.iface.res.clone();
        let old = match what {
            Fault::StaleGet => (*self.iface.served_get.lock()).ok_or(ENOENT)?,
            _ => {
                let region = Region::new(&res, 0, 4096)?;
                let seed = self.iface.seed();
                region::write_pattern(&region, seed, Check::Full)?;
                self.put_once(&region, seed, Check::Full, timeout_ms)?
            }
        };
        let size = usize::try_from(old.bytes()).map_err(|_| EINVAL)?;
        let region = Region::new(&res, 0, size)?;
        let mut left = msecs_to_jiffies(timeout_ms);
        let mut st = self.st.lock();
        let cookie = Self::new_xfer(&mut st, Kind::Put)?;
        let r = self.stale_write(&mut st, &res, &region, &old, cookie, &mut left);
        self.forget_xfer(&mut st, cookie);
        drop(st);
        let rkey = old.as_slice().first().map_or(0, |r| r.rkey);
        match r? {
            // The chain failed: the peer's answer to the WRITE was an access error (RoCE
            // acknowledges every RDMA WRITE).
            false => {}
            // On iWARP an RDMA WRITE completes once the transport has it; a peer that
            // refuses the key terminates the connection. A round trip after it tells.
            true if self.ping_once(timeout_ms).is_err() => {}
            true => {
                pr_err!(
                    "{} -> {}: an RDMA WRITE with a dead rkey {:#x} succeeded\n",
                    self.iface.addr,
                    self.peer,
                    rkey
                );
                return Err(EIO);
            }
        }
        pr_info!(
            "{} -> {}: the sink's old rkey {:#x} was refused\n",
            self.iface.addr,
            self.peer,
            rkey
        );
        Ok(())
    }

    /// The write of [`Conn::fault`] with the sink's old registrations `old`: whether its
    /// chain completed without error.
    fn stale_write(
        &self,
        st: &mut MutexGuard<'_, ConnState>,
        res: &Arc<DevRes>,
        region: &Region,
        old: &Regs,
        cookie: u64,
        left: &mut Jiffies,
    ) -> Result<bool> {
        self.wait_room(st, Room::Message)?;
        st.tagged.reserve(1, GFP_KERNEL)?;
        let mut local = KVec::new();
        let mut inv = KVec::new();
        let r = self.post_locked(
            st,
            Post::Noop,
            |chain| {
                let (remote, none) = (old.as_slice(), KVec::new());
                region::source_chain(res, region, remote, none, chain, &mut local, &mut inv)?;
                Ok(None)
            },
            |_| Body::Noop,
            None,
        );
        let slot = match r {
            Ok(slot) => slot,
            Err(e) => {
                give_up(res, &mut local, &mut inv);
                return Err(e);
            }
        };
        // Within the capacity reserved above.
        let _ = st.tagged.push(
            Tagged {
                slot,
                what: Finishing::Mine(cookie, inv),
            },
            GFP_NOWAIT,
        );
        Ok(self.settle_chain(st, cookie, left))
    }

    /// PUT of `len` bytes at `offset` into the first page of a new buffer, fully checked.
    pub(crate) fn put(&self, offset: usize, len: usize, timeout_ms: u32) -> Result {
        let region = Region::new(&self.iface.res, offset, len)?;
        self.put_region(&region, self.iface.seed(), Check::Full, timeout_ms)
    }

    /// GET of `len` bytes into a new buffer at `offset` into its first page, fully checked.
    pub(crate) fn get(&self, offset: usize, len: usize, timeout_ms: u32) -> Result {
        let region = Region::new(&self.iface.res, offset, len)?;
        self.get_region(&region, self.iface.seed(), Check::Full, timeout_ms)
    }
}
