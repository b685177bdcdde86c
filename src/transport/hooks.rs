// SPDX-License-Identifier: GPL-2.0

//! Test hooks (the test build only: Kbuild's `FASTREG_TEST=1`): corrupting or misbehaving
//! on purpose, injected faults, stale writes. A production build compiles `hooks_off.rs`
//! in their place: the same calls at the transport's hook points, doing nothing.

use super::*;
use crate::rules::{
    command::Fault,
    fuzz::Fuzzer,
    wire::Misbehave, //
};

/// An interface's test-hook state.
#[pin_data]
pub(super) struct Hooks {
    /// How the interface misbehaves next ([`Misbehave`] as u32), and how many times.
    hook: Atomic<u32>,
    hook_left: Atomic<u32>,
    /// Transfers this interface serves next whose data it corrupts.
    corrupt_next: Atomic<u32>,
    /// [`Misbehave::RecordGet`]: the registrations of a GET it served.
    #[pin]
    served_get: BhSpinLock<Option<Regs>>,
    /// [`Fault::StaleRkey`]: the registrations of the sink of a PUT it did.
    #[pin]
    recorded_put: BhSpinLock<Option<Regs>>,
    /// The `fuzz` command ([`super::fuzzing`]): whether a fuzzing run is on, and the run,
    /// which mutates what the interface sends. A leaf lock, taken under a connection's.
    pub(super) fuzzing: Atomic<bool>,
    #[pin]
    pub(super) fuzz: BhSpinLock<Option<Fuzzer>>,
}

impl Hooks {
    /// Nothing armed.
    pub(super) fn new() -> impl PinInit<Self> {
        pin_init!(Self {
            hook: Atomic::new(0),
            hook_left: Atomic::new(0),
            corrupt_next: Atomic::new(0),
            served_get <- new_bh_spinlock!(None, "fastreg::Hooks::served_get"),
            recorded_put <- new_bh_spinlock!(None, "fastreg::Hooks::recorded_put"),
            fuzzing: Atomic::new(false),
            fuzz <- new_bh_spinlock!(None, "fastreg::Hooks::fuzz"),
        })
    }
}

impl Iface {
    /// Test hook (`fault IFACE corrupt N`): the next `n` transfers this interface serves
    /// get one byte of their data inverted, at the sink before it checks (PUT) or at the
    /// source before it writes (GET).
    pub(crate) fn corrupt_served(&self, n: u32) {
        self.hooks.corrupt_next.store(n, Relaxed);
    }

    /// Test hook (`misbehave IFACE HOW N`): the next `n` times the interface is in the
    /// role of `how`, it misbehaves that way towards its peer.
    pub(crate) fn misbehave(&self, how: Misbehave, n: u32) {
        self.hooks.hook_left.store(0, Relaxed);
        self.hooks.hook.store(how as u32, Relaxed);
        self.hooks.hook_left.store(n, Relaxed);
    }

    /// Whether the interface is armed to misbehave `how` (without consuming it).
    pub(super) fn armed(&self, how: Misbehave) -> bool {
        self.hooks.hook.load(Relaxed) == how as u32 && self.hooks.hook_left.load(Relaxed) > 0
    }

    /// Whether the interface misbehaves `how` now (consumes one of the armed times).
    pub(super) fn hook(&self, how: Misbehave) -> bool {
        if self.hooks.hook.load(Relaxed) != how as u32 {
            return false;
        }
        let mut n = self.hooks.hook_left.load(Relaxed);
        while n > 0 {
            match self.hooks.hook_left.cmpxchg(n, n - 1, Relaxed) {
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
        let mut n = self.hooks.corrupt_next.load(Relaxed);
        while n > 0 && len > 0 {
            match self.hooks.corrupt_next.cmpxchg(n, n - 1, Relaxed) {
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

impl Iface {
    /// Test hook ([`Misbehave::UnknownDone`]): the cookie a PUT's DONE names, `cookie`
    /// unless the interface is armed to name one the sink does not know.
    pub(super) fn done_cookie(&self, cookie: u64) -> u64 {
        match self.hook(Misbehave::UnknownDone) {
            true => cookie ^ (1 << 62),
            false => cookie,
        }
    }

    /// Test hooks of a GET served with the peer's `regs`, about to invalidate `remote_inv`
    /// remotely: [`Misbehave::BogusInv`] names another of its registrations instead;
    /// [`Misbehave::RecordGet`] keeps them (for [`Fault::StaleGet`]).
    pub(super) fn serving_get(&self, regs: &Regs, remote_inv: Option<u32>) -> Option<u32> {
        let mut remote_inv = remote_inv;
        if regs.as_slice().len() > 1 && self.hook(Misbehave::BogusInv) {
            remote_inv = regs.as_slice().last().map(|r| r.rkey);
        }
        if self.hook(Misbehave::RecordGet) {
            *self.hooks.served_get.lock() = Some(*regs);
        }
        remote_inv
    }

    /// Test hook ([`Misbehave::Credits`]): the GET_DATA about to go claims more credits
    /// than any queue depth allows.
    pub(super) fn mangle_get_data(&self, st: &mut ConnState) {
        if self.hook(Misbehave::Credits) {
            st.mangle = Some(wire::Mangle::Credits);
        }
    }

    /// Test hook ([`Fault::StaleRkey`]): the registrations of the sink of the PUT just done.
    pub(super) fn record_put(&self, regs: Regs) {
        *self.hooks.recorded_put.lock() = Some(regs);
    }
}

impl Iface {
    /// Test hook ([`Misbehave::Short`]): the sink of a PUT advertises one byte less than
    /// asked.
    pub(super) fn advertise_short(&self) -> bool {
        self.hook(Misbehave::Short)
    }

    /// A message of `n` bytes in `buf`, encoded, about to be sent: corrupted as `mangle`
    /// says ([`Conn::take_mangle`]), then mutated if a fuzzing run says so; the length to
    /// send.
    pub(super) fn sending(&self, mangle: Mangling, buf: &mut [u8], n: usize) -> usize {
        if let Some(m) = mangle {
            wire::mangle(m, &mut buf[..n]);
        }
        self.fuzz_msg(buf, n)
    }
}

/// How the next message sent is to be corrupted (the `fault` command), if at all.
pub(super) type Mangling = Option<wire::Mangle>;

impl Conn {
    /// The corruption armed for the next message sent to the peer (not for a post of this
    /// side's own, `local`): taken.
    pub(super) fn take_mangle(st: &mut ConnState, local: bool) -> Mangling {
        if local {
            None
        } else {
            st.mangle.take()
        }
    }

    /// Test hook ([`Misbehave::DupDone`]): a second DONE for the GET served as `cookie`.
    pub(super) fn dup_done(&self, st: &mut ConnState, cookie: u64) {
        if self.iface.hook(Misbehave::DupDone) {
            let done = Body::Done {
                get: true,
                cookie,
                status: 0,
            };
            let _ = self.send_locked(st, done, false);
        }
    }

    /// Test hook ([`Misbehave::Flood`]): a request goes out beyond the queue depth.
    pub(super) fn flood(&self) -> bool {
        self.iface.armed(Misbehave::Flood) && self.iface.hook(Misbehave::Flood)
    }

    /// Test hook (`fault` command). [`Fault::Mangle`] sends a GET whose request is
    /// corrupted that way: the peer must refuse it and close the connection, so the GET
    /// must fail. [`Fault::StaleRkey`] does a PUT and then RDMA-writes with the sink's old
    /// rkey; [`Fault::StaleGet`] RDMA-writes with the registrations of the last GET this
    /// interface served (recorded): the write must fail (the keys died with their
    /// transfers). `Ok` means the peer behaved.
    pub(crate) fn fault(self: &Arc<Self>, what: Fault, timeout_ms: u32) -> Result {
        let res = self.iface.res.clone();
        if let Fault::Mangle(m) = what {
            // A registered GET (never inline): its GET_REQ carries registrations to mangle.
            let region = self.registered_region()?;
            self.st.lock().mangle = Some(m);
            let req = Request::Get {
                seed: self.iface.seed(),
                check: Check::Full,
            };
            return match self.call(req, Some(region), timeout_ms, false).result {
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
        let old = match what {
            Fault::StaleGet => (*self.iface.hooks.served_get.lock()).ok_or(ENOENT)?,
            _ => {
                // A registered PUT (never inline): the sink advertises registrations.
                let region = self.registered_region()?;
                *self.iface.hooks.recorded_put.lock() = None;
                let req = Request::Put {
                    seed: self.iface.seed(),
                    check: Check::Full,
                };
                self.call(req, Some(region), timeout_ms, true).result?;
                (*self.iface.hooks.recorded_put.lock()).ok_or(ENOENT)?
            }
        };
        let size = usize::try_from(old.bytes()).map_err(|_| EINVAL)?;
        let region = res.region(0, size)?;
        let r = self.stale_write(&res, &region, &old, timeout_ms);
        let rkey = old.as_slice().first().map_or(0, |r| r.rkey);
        let how = match r? {
            // The peer's answer to the WRITE was an access error (RoCE acknowledges every
            // RDMA WRITE).
            ChainEnd::Refused => "remote access error",
            // The connection went down before the answer was processed (the peer's QP,
            // which refused the key, closed it first): the peer's log names the refusal.
            ChainEnd::Failed => {
                pr_info!(
                    "{} -> {}: the write with the sink's old rkey {:#x} was flushed before \
                     the peer's answer\n",
                    self.iface.addr,
                    self.peer,
                    rkey
                );
                return Ok(());
            }
            // On iWARP an RDMA WRITE completes once the transport has it; a peer that
            // refuses the key terminates the connection. A round trip after it tells.
            ChainEnd::Done if self.ping_once(timeout_ms).is_err() => {
                "the peer ended the connection"
            }
            ChainEnd::Done => {
                pr_err!(
                    "{} -> {}: an RDMA WRITE with a dead rkey {:#x} succeeded\n",
                    self.iface.addr,
                    self.peer,
                    rkey
                );
                return Err(EIO);
            }
        };
        pr_info!(
            "{} -> {}: the sink's old rkey {:#x} was refused ({})\n",
            self.iface.addr,
            self.peer,
            rkey,
            how
        );
        Ok(())
    }

    /// A buffer too large to go inline on this connection (at least 4 KiB).
    fn registered_region(&self) -> Result<Region> {
        let inline = self.st.lock().params.map_or(0, |p| p.max_inline);
        self.iface
            .res
            .region(0, (usize::from(inline) + 1).max(4096))
    }

    /// The write of [`Conn::fault`] with the sink's old registrations `old`: how its
    /// chain ended. Waits (this is a test command's thread) for room,
    /// then for the chain; when the chain does not complete in time, the connection fails
    /// and the wait goes on until it is flushed. When the post fails with the connection
    /// down (the device may hold part of the chain), it returns once the QP is drained:
    /// `region` is the device's until then.
    fn stale_write(
        &self,
        res: &Arc<DevRes>,
        region: &Region,
        old: &Regs,
        timeout_ms: u32,
    ) -> Result<ChainEnd> {
        let mut left = msecs_to_jiffies(timeout_ms);
        // The MRs and the room for their lists, taken with no lock held.
        let mut taken = Some(region.take(&res.pool, 0)?);
        let n = region.nmrs() as usize;
        let mut local = KVec::with_capacity(n, GFP_KERNEL)?;
        let mut inv = KVec::with_capacity(n, GFP_KERNEL)?;
        let mut st = self.st.lock();
        while !self.has_room(&st, Room::Message) {
            if st.state != State::Established {
                drop(st);
                Self::put_back(res, taken.take().unwrap_or_default());
                return Err(not_connected());
            }
            if left == 0 || !wait::step(&self.cv, &mut st, &mut left) {
                drop(st);
                Self::put_back(res, taken.take().unwrap_or_default());
                return Err(ETIMEDOUT);
            }
        }
        // A chain in flight per send slot: within the room reserved at setup.
        if st.tagged.reserve(1, GFP_NOWAIT).is_err() {
            drop(st);
            Self::put_back(res, taken.take().unwrap_or_default());
            return Err(ENOMEM);
        }
        let r = self.post_locked(
            &mut st,
            Post::Noop,
            |chain| {
                let remote = old.as_slice();
                let t = taken.take().ok_or(EINVAL)?;
                region::source_chain(&res.pool, region, remote, t, chain, &mut local, &mut inv)?;
                Ok(None)
            },
            |_| Body::Noop,
            None,
        );
        if let Some(t) = taken.take() {
            Self::put_back(res, t);
        }
        let slot = match r {
            Ok(slot) => slot,
            Err(e) => {
                // A connection no longer established (failed by this post, which the
                // device may have taken in part) names the MRs and `region`'s pages until
                // its QP is drained: the caller frees the region only after that. One
                // still established posted nothing.
                while !matches!(st.state, State::Established | State::Closed) {
                    self.cv.wait(&mut st);
                }
                give_up(res, &mut local, &mut inv);
                return Err(e);
            }
        };
        st.probe = None;
        // Within the capacity reserved above.
        let _ = st.tagged.push(
            Tagged {
                slot,
                what: Finishing::Probe(inv),
            },
            GFP_NOWAIT,
        );
        let mut left = msecs_to_jiffies(timeout_ms);
        loop {
            if let Some(end) = st.probe {
                return Ok(end);
            }
            if left == 0 || !wait::step(&self.cv, &mut st, &mut left) {
                break;
            }
        }
        self.on(
            &mut st,
            Event::Error,
            "a test write did not complete in time",
        );
        // Not interruptible: the flush (or the teardown) always comes, and the buffer is
        // the device's until then.
        loop {
            if let Some(end) = st.probe {
                return Ok(end);
            }
            self.cv.wait(&mut st);
        }
    }
}
