// SPDX-License-Identifier: GPL-2.0

//! Control messages: a console's requests to this node's interfaces and their answers
//! (CONTROL / CONTROL_REPLY, `crate::selftest::control`'s payloads), and the data an interface moved.
//!
//! The transport carries them and knows nothing of what they mean: a request goes up to
//! the [`Control`] the interfaces were made with (the selftest console), whose answer goes
//! back as a message owed to the peer; a console's request is a round-trip record like a
//! ping's, whose answer is given to its client with the outcome ([`Outcome::reply`]).

use super::*;
use crate::selftest::control::{
    Payload, //
};

/// Who answers consoles' requests: implemented above the transport (`crate::selftest::console`).
pub(crate) trait Control: Send + Sync {
    /// The console at `from` asks `req` (a payload, not yet decoded) of `iface`; the answer
    /// goes into `reply`. Called from a receive completion with the connection's lock held:
    /// it must neither sleep for long nor call into the transport (it queues work for
    /// that).
    fn request(&self, iface: &Arc<Iface>, from: [u8; 4], req: &[u8], reply: &mut Payload);

    /// The periodic work, once a second.
    fn tick(&self);
}

/// Counters of the data an interface moved, both as initiator and as server.
pub(crate) struct Moved {
    /// Transfers that brought data in, and their bytes.
    rx_ops: Atomic<u64>,
    rx_bytes: Atomic<u64>,
    /// Transfers that took data out, and their bytes.
    tx_ops: Atomic<u64>,
    tx_bytes: Atomic<u64>,
}

impl Moved {
    /// Nothing moved.
    pub(super) fn new() -> Self {
        Self {
            rx_ops: Atomic::new(0),
            rx_bytes: Atomic::new(0),
            tx_ops: Atomic::new(0),
            tx_bytes: Atomic::new(0),
        }
    }

    /// A transfer of `bytes` in (`rx`) or out ended well.
    pub(super) fn count(&self, rx: bool, bytes: u64) {
        let (ops, b) = if rx {
            (&self.rx_ops, &self.rx_bytes)
        } else {
            (&self.tx_ops, &self.tx_bytes)
        };
        ops.fetch_add(1, Relaxed);
        b.fetch_add(bytes, Relaxed);
    }

    /// `[rx_ops, rx_bytes, tx_ops, tx_bytes]`.
    pub(crate) fn get(&self) -> [u64; 4] {
        [
            self.rx_ops.load(Relaxed),
            self.rx_bytes.load(Relaxed),
            self.tx_ops.load(Relaxed),
            self.tx_bytes.load(Relaxed),
        ]
    }
}

impl Iface {
    /// What the interface moved.
    pub(crate) fn moved(&self) -> [u64; 4] {
        self.moved.get()
    }

    /// Counts a transfer of `bytes` in (`rx`) or out that ended well.
    pub(super) fn count_moved(&self, rx: bool, bytes: u64) {
        self.moved.count(rx, bytes);
    }
}

impl Conn {
    /// A console's request: owed to the peer like a ping, answered in order by the
    /// connection's work item ([`Conn::control_reply`]).
    pub(super) fn control_request(
        &self,
        st: &mut ConnState,
        cookie: u64,
        req: Payload,
    ) -> core::result::Result<(), &'static str> {
        self.peer_request(st, Owed::Control(cookie, req))
    }

    /// The interfaces' [`Control`]'s answer to a console's request, `None` if it gave
    /// none. On the connection's work item.
    pub(super) fn control_reply(&self, req: &Payload) -> Option<Payload> {
        let mut reply = Payload::new();
        self.iface
            .control
            .request(&self.iface, self.peer.ip, req.as_slice(), &mut reply);
        (!reply.as_slice().is_empty()).then_some(reply)
    }

    /// The answer to this side's control request `cookie`.
    pub(super) fn control_answered(
        &self,
        st: &mut ConnState,
        cookie: u64,
        reply: &Payload,
    ) -> core::result::Result<(), &'static str> {
        let i = Self::find(st, cookie).ok_or("answer for an unknown transfer")?;
        let x = &mut st.xfers[i];
        if x.t.kind() != Kind::Ping || x.ctl.is_none() {
            return Err("answer of another kind of transfer");
        }
        match x.ctl.as_mut() {
            Some(p) => **p = *reply,
            None => return Err("answer of another kind of transfer"),
        }
        self.apply(st, i, XEvent::Answered { inv_all: false });
        Ok(())
    }
}
