// SPDX-License-Identifier: GPL-2.0

//! The in-kernel API of the transport, for its clients (the selftest engine is the first).
//!
//! A client picks a local interface ([`crate::transport::Ifaces::find`]) and names peers by
//! address; the connection to a peer is opened (and negotiated) on first use and again
//! after a failure, with a backoff ([`Iface::connect`]). Each operation exists in two forms:
//!
//! - synchronous, on a connection: [`Conn::ping_once`], [`Conn::put_region`] and
//!   [`Conn::get_region`] return when the operation completed, failed or timed out; many
//!   threads may use one connection at once;
//! - with a completion callback: [`submit`] returns at once and calls the callback exactly
//!   once with the outcome (and the buffer back), in process context.
//!
//! A PUT moves a [`Region`] to the peer, which checks it against the pattern of `seed`
//! (`check`); a GET fills the region from the peer and checks it here. In both, every
//! registration of the transfer is dead before its outcome is reported. Per-connection
//! counters are in the `conns` debugfs file.

use kernel::{
    prelude::*,
    sync::Arc,
    time::{
        Instant,
        Monotonic, //
    },
};

use crate::{
    region::Region,
    transport::{
        Conn,
        Iface, //
    },
    verbs::SockAddr,
    wire::Check,
};

/// An operation on a peer.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Request {
    /// An IMMEDIATE round trip.
    Ping,
    /// Moves the region to the peer, filled with the pattern of `seed`; the peer checks it.
    Put {
        /// Seed of the data pattern.
        seed: u32,
        /// What the peer checks.
        check: Check,
    },
    /// Fills the region from the peer with the pattern of `seed`, checked here.
    Get {
        /// Seed of the data pattern.
        seed: u32,
        /// What is checked.
        check: Check,
    },
}

/// The outcome of an operation, given to its completion callback.
pub(crate) struct Outcome {
    /// The region the operation was submitted with.
    pub(crate) region: Option<Region>,
    /// `Ok`, or why it failed: `EBADMSG` when the data was checked and differs,
    /// `ETIMEDOUT`, `ECONNABORTED` when the connection failed under it, `EMSGSIZE` beyond
    /// the negotiated limits, or the connection's error.
    pub(crate) result: Result,
    /// Microseconds from the start of the operation (connecting included) to its end.
    pub(crate) usecs: u64,
}

/// Runs `req` on `conn` and waits for it.
fn run(conn: &Conn, req: Request, region: Option<&Region>, timeout_ms: u32) -> Result {
    match (req, region) {
        (Request::Ping, _) => conn.ping_once(timeout_ms).map(|_| ()),
        (Request::Put { seed, check }, Some(r)) => conn.put_region(r, seed, check, timeout_ms),
        (Request::Get { seed, check }, Some(r)) => conn.get_region(r, seed, check, timeout_ms),
        (_, None) => Err(EINVAL),
    }
}

/// Runs `req` to `peer` through `iface`, connecting if needed, and waits for it.
pub(crate) fn call(
    iface: &Arc<Iface>,
    peer: SockAddr,
    req: Request,
    region: Option<&Region>,
    timeout_ms: u32,
) -> Result {
    let conn = iface.connect(peer)?;
    run(&conn, req, region, timeout_ms)
}

/// Starts `req` to `peer` through `iface` (connecting if needed) and returns at once.
///
/// `done` is called exactly once with the [`Outcome`] when the operation has completed,
/// failed or timed out (`timeout_ms`, plus connecting). It runs in process context, on the
/// module's own unbound workqueue: it may sleep and may submit again (which is how
/// a client keeps a number of operations in flight). Each operation in flight occupies one
/// worker of that queue while it waits: the transport's data path is synchronous per
/// operation, and the callback form is built on it.
///
/// Returns an error, and does not call `done`, only when the operation could not be
/// queued (no memory); `region` is then freed.
pub(crate) fn submit(
    iface: &Arc<Iface>,
    peer: SockAddr,
    req: Request,
    region: Option<Region>,
    timeout_ms: u32,
    done: impl FnOnce(Outcome) + Send + 'static,
) -> Result {
    let iface = iface.clone();
    let start = Instant::<Monotonic>::now();
    // The module's own queue: unloading waits for every operation (and its callback).
    let wq = crate::verbs::module_wq().ok_or(ENODEV)?;
    wq.try_spawn(GFP_KERNEL, move || {
        let result = call(&iface, peer, req, region.as_ref(), timeout_ms);
        done(Outcome {
            region,
            result,
            usecs: start.elapsed().as_micros_ceil() as u64,
        });
    })?;
    Ok(())
}
