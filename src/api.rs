// SPDX-License-Identifier: GPL-2.0

//! The in-kernel API of the transport, for its clients (the selftest engine is the first).
//!
//! A client picks a local interface ([`crate::transport::Ifaces::find`]) and names peers by
//! address; the connection to a peer is opened (and negotiated) on first use and again
//! after a failure, with a backoff ([`Iface::connect`]). An operation is submitted with
//! [`submit`] and reported to its [`Client`] exactly once, when it completed, failed or
//! timed out and every key of it is dead; nothing sleeps meanwhile. The synchronous form
//! (a submission and a wait) is [`crate::transport::Conn::call`].
//!
//! A PUT moves a [`Region`] to the peer, which checks it against the pattern of `seed`
//! (`check`); a GET fills the region from the peer and checks it here. Per-connection
//! counters are in the `conns` debugfs file.

use kernel::{
    prelude::*,
    sync::Arc, //
};

pub(crate) use crate::transport::{
    Client,
    Outcome,
    Request, //
};
use crate::{
    reg::region::Region,
    transport::Iface,
    verbs::SockAddr, //
};

/// Starts `req` to `peer` through `iface` and returns at once; `client` is told of the
/// outcome with `token` ([`Client::done`]), after `timeout_ms` at most once connected.
///
/// On an established connection the operation is a record of the connection, advanced by
/// its completions: no thread waits for it. Otherwise it waits on the peer (not in a
/// thread) while the peer's run of connect attempts (which may take seconds, and a backoff
/// after failures), advanced by events, ends; it is submitted then.
///
/// Returns an error, and does not tell `client`, only when the operation could not be
/// queued (no memory, the module unloading); `region` is then freed.
pub(crate) fn submit(
    iface: &Arc<Iface>,
    peer: SockAddr,
    req: Request,
    region: Option<Region>,
    timeout_ms: u32,
    client: Arc<dyn Client>,
    token: usize,
) -> Result {
    iface.submit(peer, req, region, timeout_ms, client, token)
}
