// SPDX-License-Identifier: GPL-2.0

//! The lifecycle of a fast-registration MR, enforced by types.
//!
//! Pure logic: no `kernel::`, compiled by the host tests too (which also check that misuse
//! does not compile). The verbs layer's MR implements [`Handle`]; the pool stores
//! `Mr<_, Free>` only and takes back `Mr<_, Invalidated>` only.
//!
//! ```text
//!        map()            register()              invalidate()              invalidated()
//! Free --------> Mapped ------------> Registered --------------> Invalidating ------------> Invalidated
//!  ^                                      |   remotely_invalidated(rkey)                        |
//!  |                                      +-----------------------------------------------------+
//!  +---------------------------------------------- recycle() (the pool) ------------------------+
//! ```
//!
//! This is what software RoCE, siw and the IBTA require: a REG_MR only on a free MR (never
//! re-registering a valid one), a fresh key for every registration, and an invalidation
//! (local, or remote through `SEND_WITH_INV`) before the MR is mapped again. Any state can be
//! given up with [`Mr::into_handle`], which is how an MR whose REG or LOCAL_INV failed is
//! destroyed rather than reused.

use core::marker::PhantomData;

/// The operations of a real MR the lifecycle needs.
pub(crate) trait Handle {
    /// What `map` can fail with.
    type Error;
    /// A DMA-mapped scatter list.
    type Sgl: ?Sized;

    /// Maps the whole scatter list into the MR's page list (`ib_map_mr_sg`).
    fn map(&mut self, sgl: &Self::Sgl) -> Result<(), Self::Error>;

    /// The MR no longer maps what it mapped (it was never registered, or its key is dead):
    /// the mapping may be released.
    fn release(&mut self);

    /// Moves to a fresh key (`ib_update_fast_reg_key(mr, ib_inc_rkey(rkey))`); returns it.
    fn bump_key(&mut self) -> u32;

    /// The current rkey.
    fn rkey(&self) -> u32;
}

/// Lifecycle states.
pub(crate) mod state {
    /// Invalidated (or new) and not mapped: may be mapped.
    pub(crate) struct Free;
    /// Page list written, nothing posted: may be registered, or given back as free.
    pub(crate) struct Mapped;
    /// REG_MR posted with a fresh key: the key is (or will be) valid.
    pub(crate) struct Registered;
    /// LOCAL_INV posted: the key dies when it completes.
    pub(crate) struct Invalidating;
    /// The key is dead: may go back to the pool.
    pub(crate) struct Invalidated;
}

use state::*;

/// An MR in lifecycle state `S`.
pub(crate) struct Mr<H, S> {
    handle: H,
    _state: PhantomData<S>,
}

impl<H, S> Mr<H, S> {
    const fn with(handle: H) -> Self {
        Self {
            handle,
            _state: PhantomData,
        }
    }

    /// The underlying MR, to build work requests on it.
    pub(crate) fn handle(&self) -> &H {
        &self.handle
    }

    /// Leaves the lifecycle: the caller destroys the MR (after an error, or to shrink).
    pub(crate) fn into_handle(self) -> H {
        self.handle
    }
}

impl<H: Handle> Mr<H, Free> {
    /// A new MR, fresh from allocation (`ib_alloc_mr` returns a free MR).
    pub(crate) const fn new(handle: H) -> Self {
        Self::with(handle)
    }

    /// Maps `sgl`; on failure the MR is handed back, still free.
    pub(crate) fn map(mut self, sgl: &H::Sgl) -> Result<Mr<H, Mapped>, (Self, H::Error)> {
        match self.handle.map(sgl) {
            Ok(()) => Ok(Mr::with(self.handle)),
            Err(e) => Err((self, e)),
        }
    }
}

impl<H: Handle> Mr<H, Mapped> {
    /// Bumps the key; the caller posts a REG_MR with the returned key, before any use.
    pub(crate) fn register(mut self) -> (Mr<H, Registered>, u32) {
        let key = self.handle.bump_key();
        (Mr::with(self.handle), key)
    }
}

impl<H: Handle> Mr<H, Registered> {
    /// The rkey a peer uses to reach the MR.
    pub(crate) fn rkey(&self) -> u32 {
        self.handle.rkey()
    }

    /// The caller posts a LOCAL_INV of the returned rkey.
    pub(crate) fn invalidate(self) -> (Mr<H, Invalidating>, u32) {
        let rkey = self.handle.rkey();
        (Mr::with(self.handle), rkey)
    }

    /// A receive completion reported the remote invalidation of `rkey`
    /// (`IB_WC_WITH_INVALIDATE`): the MR is invalidated if it is this MR's key.
    // Used once the transport receives SEND_WITH_INV; the host tests exercise it now.
    #[allow(dead_code)]
    pub(crate) fn remotely_invalidated(self, rkey: u32) -> Result<Mr<H, Invalidated>, Self> {
        if rkey == self.handle.rkey() {
            Ok(Mr::with(self.handle))
        } else {
            Err(self)
        }
    }
}

impl<H: Handle> Mr<H, Invalidating> {
    /// The LOCAL_INV, or a later work request of the same chain, completed successfully.
    pub(crate) fn invalidated(self) -> Mr<H, Invalidated> {
        Mr::with(self.handle)
    }
}

impl<H: Handle> Mr<H, Invalidated> {
    /// Ready to be mapped again.
    pub(crate) fn recycle(mut self) -> Mr<H, Free> {
        self.handle.release();
        Mr::with(self.handle)
    }
}
