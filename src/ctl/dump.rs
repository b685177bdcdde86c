// SPDX-License-Identifier: GPL-2.0

//! What fastreg shows about itself, as text: the parameters, the devices and their pools,
//! the interfaces and their connections. The debugfs files show it (`crate::ctl::report`),
//! and the control device's statistics snapshot (`crate::ctl::device`), which
//! `fastreg-lst stat` reads, carries it; `Documentation/device.rst` describes the lines.

use kernel::sync::atomic::Relaxed;

use crate::{
    device::Devices,
    rules::{
        conn_state::State,
        negotiate::Reason,
        params::Params, //
    },
    transport::{
        ConnSnap,
        IfaceSnap,
        Ifaces, //
    },
    verbs, //
};

/// The effective module parameters, one `name=value` per line.
pub(crate) fn write_params(p: &Params, f: &mut impl core::fmt::Write) -> core::fmt::Result {
    writeln!(f, "{}", p.listing("\n"))
}

/// One line per RDMA device in use: its name, then its fast-registration limits.
pub(crate) fn write_devices(d: &Devices, f: &mut impl core::fmt::Write) -> core::fmt::Result {
    d.for_each(|dev| {
        let b = &dev.figures;
        writeln!(
            f,
            "{}: pd_local_dma_lkey={:#x} {} mr_pages={} transfer_mrs={} \
             transfer_wrs={} sq_depth={} o2iblnd_sq_depth={}",
            dev.name(),
            dev.pd.local_dma_lkey(),
            dev.attrs,
            dev.geo.max_pages(),
            b.mrs,
            b.wrs,
            b.sq_depth,
            b.o2iblnd_sq_depth
        )
    })
}

/// One line per device: its pool's size and counters.
pub(crate) fn write_pools(d: &Devices, f: &mut impl core::fmt::Write) -> core::fmt::Result {
    d.for_each(|dev| {
        let c = dev.pool.counters();
        let (live, free) = dev.pool.occupancy();
        let cfg = dev.pool.config();
        writeln!(
            f,
            "{}: mr_pages={} size={} max={} live={} free={} allocated={} released={} \
             registrations={} local_invalidations={} remote_invalidations={} \
             errors={} waits={} timeouts={} alloc_failures={}",
            dev.name(),
            cfg.mr_pages,
            cfg.size,
            cfg.max,
            live,
            free,
            c.allocated.load(Relaxed),
            c.released.load(Relaxed),
            c.registrations.load(Relaxed),
            c.local_invalidations.load(Relaxed),
            c.remote_invalidations.load(Relaxed),
            c.errors.load(Relaxed),
            c.waits.load(Relaxed),
            c.timeouts.load(Relaxed),
            c.alloc_failures.load(Relaxed)
        )
    })
}

/// The `conns` file: every interface and its connections, then the connections by state
/// and the work requests posted, from snapshots taken with no lock held while formatting.
pub(crate) fn write_conns(ifaces: &Ifaces, f: &mut impl core::fmt::Write) -> core::fmt::Result {
    let Ok(snaps) = ifaces.snapshot() else {
        return writeln!(f, "error: out of memory");
    };
    let mut by_state = [0u32; State::ALL.len()];
    let (mut conns, mut mem) = (0usize, 0usize);
    for i in snaps.iter() {
        write_iface(i, f)?;
        for c in i.conns.iter() {
            write_conn(c, f)?;
            // Those with slots: not yet set up, or torn down, a connection has none.
            if c.mem > 0 {
                conns += 1;
                mem += c.mem;
            }
            if let Some(n) = State::ALL.iter().position(|x| *x == c.state) {
                by_state[n] += 1;
            }
        }
    }
    f.write_str("connections:")?;
    for (s, n) in State::ALL.iter().zip(by_state) {
        write!(f, " {}={}", s.name(), n)?;
    }
    writeln!(f)?;
    // What connections take beyond their QPs and CQs: their message slots, in all and
    // per connection that has them (Documentation/performance.rst, "Many peers").
    writeln!(
        f,
        "totals: wrs_posted={} conn_mem={} conn_mem_avg={}",
        verbs::posted_wrs(),
        mem,
        mem.checked_div(conns).unwrap_or(0)
    )
}

/// Rejects by reason: `name:count` for each one counted, or `none`.
fn write_rejects(counts: &[u64], f: &mut impl core::fmt::Write) -> core::fmt::Result {
    let mut any = false;
    for (i, n) in counts.iter().enumerate().filter(|(_, n)| **n > 0) {
        let name = u8::try_from(i)
            .ok()
            .and_then(Reason::from_u8)
            .map_or("other", |r| r.name());
        write!(f, "{}{}:{}", if any { "," } else { "" }, name, n)?;
        any = true;
    }
    if !any {
        f.write_str("none")?;
    }
    Ok(())
}

fn write_iface(i: &IfaceSnap, f: &mut impl core::fmt::Write) -> core::fmt::Result {
    write!(
        f,
        "iface {} {} queue_depth={} max_payload={} max_regs={} mr_pages={} max_inline={} \
         stamp={:#x} rejects_sent=",
        i.res.name(),
        i.addr,
        i.tun.queue_depth,
        i.tun.max_payload,
        i.tun.max_regs,
        i.mr_pages,
        i.tun.max_inline,
        i.stamp
    )?;
    write_rejects(&i.rejects_sent, f)?;
    f.write_str(" rejects_received=")?;
    write_rejects(&i.rejects_received, f)?;
    writeln!(
        f,
        " peer_share={}/{}/{} over_share={}",
        i.share.conns, i.share.mrs, i.share.bytes, i.over_share
    )?;
    // What each peer holding anything holds: connections, MRs, bytes.
    for (ip, (conns, mrs, bytes)) in i.held.iter() {
        writeln!(
            f,
            "  peer {} conns={} mrs={} bytes={}",
            crate::show::Ip(*ip),
            conns,
            mrs,
            bytes
        )?;
    }
    // Connections that went down, one line per reason (the reason is free text, last).
    for (why, n) in i.closed_by.iter() {
        writeln!(f, "  closed {} {}", n, why)?;
    }
    if i.closed_by.other > 0 {
        writeln!(f, "  closed {} other", i.closed_by.other)?;
    }
    #[cfg(fastreg_test)]
    if let Some(fz) = &i.fuzz {
        write_fuzz(fz, f)?;
    }
    Ok(())
}

/// A fuzzing run's line (test build only).
#[cfg(fastreg_test)]
fn write_fuzz(fz: &crate::rules::fuzz::Fuzzer, f: &mut impl core::fmt::Write) -> core::fmt::Result {
    write!(
        f,
        "  fuzz rate={} left={} seen={} made={} by_kind=",
        fz.rate,
        fz.left,
        fz.seen,
        fz.total()
    )?;
    let mut any = false;
    for (m, n) in crate::rules::fuzz::Mutation::ALL.iter().zip(fz.made) {
        if n > 0 {
            write!(f, "{}{}:{}", if any { "," } else { "" }, m.name(), n)?;
            any = true;
        }
    }
    writeln!(f, "{}", if any { "" } else { "none" })
}

fn write_conn(c: &ConnSnap, f: &mut impl core::fmt::Write) -> core::fmt::Result {
    let dir = if c.active { "->" } else { "<-" };
    write!(f, "  conn {} {} state={} ", dir, c.peer, c.state.name())?;
    match c.params {
        Some(p) => write!(
            f,
            "queue_depth={} max_payload={} max_regs={} max_msg={} max_inline={} \
             peer_page_size={} features={:#x} ",
            p.queue_depth,
            p.max_payload,
            p.max_regs,
            p.max_msg,
            p.max_inline,
            p.page_size,
            p.features
        )?,
        None => f.write_str("queue_depth=- ")?,
    }
    let s = &c.stats;
    writeln!(
        f,
        "mem={} credits={} outstanding={} tx={} rx={} noops_tx={} noops_rx={} wrs={} \
         served={} corrupt={} remote_inv={} busy={} retries={} inline={} attempts={} \
         peer_stamp={:#x} reason={}",
        c.mem,
        c.credits,
        c.outstanding,
        s.tx,
        s.rx,
        s.noops_tx,
        s.noops_rx,
        c.wrs,
        s.served,
        s.corrupt,
        s.remote_inv,
        s.busy,
        s.retries,
        s.inline,
        s.attempts,
        c.peer_stamp,
        c.reason.unwrap_or("-")
    )
}
