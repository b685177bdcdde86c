// SPDX-License-Identifier: GPL-2.0

//! The pool's line: the connections whose transfers wait for MRs, oldest first, the first
//! told when MRs come back ([`Waiter`]). A taker that may not allocate (a completion
//! handler) keeps its place and is told to grow first ([`GROW`]).

use super::*;

/// Whether `a` and `b` are the same waiter.
fn same(a: &Arc<dyn Waiter>, b: &Arc<dyn Waiter>) -> bool {
    core::ptr::eq(Arc::as_ptr(a).cast::<()>(), Arc::as_ptr(b).cast::<()>())
}

impl Pool {
    /// Makes room in the line for one more connection, with the lock released (where it
    /// may allocate). Returns whether it did (there was none).
    pub(super) fn line_room(&self) -> Result<bool> {
        let want = {
            let inner = self.inner.lock();
            if inner.line.len() < inner.line.capacity() {
                return Ok(false);
            }
            inner.line.len() * 2 + 4
        };
        let mut line = KVec::with_capacity(want, GFP_KERNEL)?;
        swap_bigger(&mut self.inner.lock().line, &mut line);
        Ok(true)
    }

    /// [`Pool::get_leaving`] for a transfer advanced by events: when the MRs cannot be had
    /// now, or others wait for them first, `me` joins the line (once) and this returns
    /// `EAGAIN`; `me` is told when MRs come back and it is first. Its place is kept until
    /// it takes MRs or [`Pool::leave`]s. Without `grow` (a completion handler) it
    /// allocates nothing: when its turn needs MRs allocated, or the line needs room, it
    /// returns [`GROW`], keeping its place, for the caller to try again where it may
    /// allocate.
    pub(crate) fn try_get(
        &self,
        n: u32,
        reserve: u32,
        out: &mut KVec<FrMr<Free>>,
        me: &Arc<dyn Waiter>,
        grow: bool,
    ) -> Result {
        self.can_ever(n, reserve)?;
        if grow {
            let _ = self.line_room()?;
        }
        {
            let mut inner = self.inner.lock();
            self.shrink(&mut inner);
            let pos = inner.line.iter().position(|w| same(w, me));
            let turn = pos.is_none_or(|p| p == 0) && (pos.is_some() || inner.line.is_empty());
            let room = inner.free.len() as u32 + self.cfg.max.saturating_sub(inner.live);
            if !turn || room < n.saturating_add(reserve) {
                if pos.is_none() {
                    if inner.line.push_within_capacity(me.clone()).is_err() {
                        return Err(GROW);
                    }
                    inc(&self.counters.waits, 1);
                    self.trace("wait", n, inner.live);
                }
                return Err(EAGAIN);
            }
            if !grow && (inner.free.len() as u32) < n {
                return Err(GROW);
            }
            if !grow && out.capacity() - out.len() < n as usize {
                return Err(GROW);
            }
            if let Some(p) = pos {
                let _ = inner.line.remove(p);
            }
        }
        let r = if grow {
            self.get_leaving(n, reserve, out)
        } else {
            // Room in `out` was checked above.
            self.take_leaving(n, reserve, out, false)
        };
        if r == Err(EAGAIN) || r == Err(GROW) {
            // A taker that does not wait (serving) came first: first in line again.
            let mut inner = self.inner.lock();
            if inner.line.insert_within_capacity(0, me.clone()).is_err() {
                return Err(GROW);
            }
            return r;
        }
        self.wake_line();
        r
    }

    /// `me` no longer waits for MRs: out of the line (the next one is told).
    // Not inlined: its call through `dyn Waiter` stays in a frame of the pool's, which
    // `scripts/stack-depth.py` resolves to the waiters' methods.
    #[inline(never)]
    pub(crate) fn leave(&self, me: &Arc<dyn Waiter>) {
        let mut inner = self.inner.lock();
        let Some(p) = inner.line.iter().position(|w| same(w, me)) else {
            return;
        };
        let _ = inner.line.remove(p);
        drop(inner);
        if p == 0 {
            self.wake_line();
        }
    }

    /// Tells the first connection in line that MRs came back.
    pub(super) fn wake_line(&self) {
        let first = self.inner.lock().line.first().cloned();
        if let Some(w) = first {
            w.mrs_back();
        }
    }
}
