// SPDX-License-Identifier: GPL-2.0

//! debugfs output of interfaces and connections.

use super::*;

impl Iface {
    /// Writes the interface and its connections, for debugfs.
    pub(crate) fn write(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let st = self.st.lock();
        write!(
            f,
            "iface {} {} queue_depth={} max_payload={} max_regs={} mr_pages={} max_inline={} \
             stamp={:#x} rejects_sent=",
            self.res.name(),
            self.addr,
            self.tun.queue_depth,
            self.tun.max_payload,
            self.tun.max_regs,
            self.geo.max_pages(),
            self.tun.max_inline,
            self.stamp
        )?;
        self.rejects_sent.write(f)?;
        f.write_str(" rejects_received=")?;
        self.rejects_received.write(f)?;
        writeln!(f)?;
        for c in st.conns.iter() {
            c.write(f)?;
        }
        Ok(())
    }
}

impl Conn {
    pub(super) fn write(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let st = self.st.lock();
        write!(
            f,
            "  conn {} {} state={} ",
            self.dir(),
            self.peer,
            st.state.name()
        )?;
        match st.params {
            Some(p) => write!(
                f,
                "queue_depth={} max_payload={} max_regs={} max_msg={} max_inline={} peer_page_size={} features={:#x} ",
                p.queue_depth, p.max_payload, p.max_regs, p.max_msg, p.max_inline, p.page_size, p.features
            )?,
            None => f.write_str("queue_depth=- ")?,
        }
        writeln!(
            f,
            "credits={} outstanding={} tx={} rx={} noops_tx={} noops_rx={} wrs={} served={} \
             corrupt={} remote_inv={} busy={} retries={} inline={} attempts={} peer_stamp={:#x} reason={}",
            st.credits,
            st.outstanding,
            st.stats.tx,
            st.stats.rx,
            st.stats.noops_tx,
            st.stats.noops_rx,
            st.ep.as_ref().map(|e| e.posted_wrs()).unwrap_or(0),
            st.stats.served,
            st.stats.corrupt,
            st.stats.remote_inv,
            st.stats.busy,
            st.stats.retries,
            st.stats.inline,
            st.stats.attempts,
            st.peer_stamp,
            st.reason.unwrap_or("-")
        )
    }
}
