// SPDX-License-Identifier: GPL-2.0

//! The loopback exercise: fastreg connects to itself over one device and moves data with
//! fast registration for real.
//!
//! For each transfer, three buffers of the requested offset and length are registered
//! through the device's pool: a source, a sink and a check buffer. One chain of work
//! requests registers them all (REG_MR with fresh keys), RDMA WRITEs the source into the
//! sink, RDMA READs the sink back into the check buffer, and invalidates every
//! registration (LOCAL_INV, fenced behind the READs). When the chain completes, the MRs go
//! back to the pool and every byte of the sink and of the check buffer is compared with the
//! source's pattern. The full protocol between nodes (negotiation, PUT/GET, remote
//! invalidation) builds on the same pieces.

use kernel::{
    new_condvar,
    new_mutex, //
    prelude::*,
    sync::{
        atomic::Relaxed,
        Arc,
        ArcBorrow,
        CondVar,
        Mutex,
        SetOnce, //
    },
    time::{
        msecs_to_jiffies,
        Instant,
        Monotonic, //
    },
};

use crate::{
    budget, command,
    device::{
        DevRes,
        Devices, //
    },
    frag,
    mr_state::state::{
        Free,
        Invalidating, //
    },
    params::Params,
    region::{
        self,
        Region, //
    },
    verbs::{
        self,
        Access,
        CmEvent,
        CmHandler,
        Completion,
        ConnParam,
        ConnRequest,
        Endpoint,
        FrMr,
        Handler,
        QpCaps,
        RdmaOp,
        SendChain,
        SockAddr,
        Wc, //
    },
    wait,
};

/// How long connecting may take.
const CONNECT_MS: u32 = 10_000;
/// rdma_cm address and route resolution timeout.
const RESOLVE_MS: u16 = 2000;

/// What a loopback command did.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Outcome {
    /// Transfers completed and verified.
    pub(crate) transfers: u32,
    /// Bytes moved by the RDMA WRITEs (each is also read back).
    pub(crate) bytes: u64,
    /// Registrations per buffer.
    pub(crate) mrs_per_buffer: u32,
    /// Work requests per transfer.
    pub(crate) wrs_per_transfer: u32,
    /// Send queue depth of the connection.
    pub(crate) sq_depth: u32,
    /// Milliseconds from first post to last completion.
    pub(crate) elapsed_ms: u64,
}

// ---------------------------------------------------------------------------------------
// Connection.

#[derive(Default)]
struct LinkState {
    client_up: bool,
    server_up: bool,
    down: bool,
    error: Option<(u32, i32)>,
    accepted: Option<Arc<Endpoint<LbCtx>>>,
}

#[pin_data]
struct Shared {
    #[pin]
    st: Mutex<LinkState>,
    #[pin]
    cv: CondVar,
    res: SetOnce<Arc<DevRes>>,
    caps: SetOnce<QpCaps>,
    rd_atomic: u8,
}

impl Shared {
    fn update(&self, f: impl FnOnce(&mut LinkState)) {
        f(&mut self.st.lock());
        self.cv.notify_all();
    }

    fn fail(&self, event: u32, status: i32) {
        self.update(|s| {
            if s.error.is_none() {
                s.error = Some((event, status));
            }
        });
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Role {
    Listener,
    Client,
    Accepted,
}

struct LbCtx {
    shared: Arc<Shared>,
    role: Role,
}

/// What the client says when it connects, and the server answers: each side checks the
/// other's, which exercises the private data path of rdma_cm.
const HELLO: &[u8] = b"fastreg loopback";
const WELCOME: &[u8] = b"fastreg welcome";

impl LbCtx {
    fn param(&self, private: &'static [u8]) -> ConnParam<'static> {
        ConnParam {
            private,
            rd_atomic: self.shared.rd_atomic,
        }
    }
}

impl CmHandler for LbCtx {
    fn event(ep: ArcBorrow<'_, Endpoint<Self>>, ev: CmEvent<'_>) {
        let ctx = ep.ctx();
        let sh = &ctx.shared;
        match (ctx.role, ev) {
            (Role::Client, CmEvent::AddrResolved) => {
                if let Err(e) = ep.resolve_route(RESOLVE_MS) {
                    sh.fail(2, e.to_errno());
                }
            }
            (Role::Client, CmEvent::RouteResolved) => {
                let (Some(res), Some(caps)) = (sh.res.as_ref(), sh.caps.copy()) else {
                    return sh.fail(2, ENODEV.to_errno());
                };
                let r = ep
                    .create_qp(&res.pd, caps)
                    .and_then(|()| ep.connect(&ctx.param(HELLO)));
                if let Err(e) = r {
                    sh.fail(2, e.to_errno());
                }
            }
            (Role::Client, CmEvent::Established(private)) => {
                // rdma_cm passes the whole private data slot: the answer is a prefix.
                if private.starts_with(WELCOME) {
                    sh.update(|s| s.client_up = true)
                } else {
                    pr_err!("loopback: unexpected private data from the server\n");
                    sh.fail(9, EPROTO_().to_errno());
                }
            }
            (Role::Accepted, CmEvent::Established(_)) => sh.update(|s| s.server_up = true),
            (_, CmEvent::Rejected(status, _)) => sh.fail(8, status),
            (_, CmEvent::Other(event)) => {
                pr_info!(
                    "loopback: {}\n",
                    verbs::event_name(event).to_str().unwrap_or("?")
                );
            }
            (_, CmEvent::Failed(event, status)) => sh.fail(event, status),
            (_, CmEvent::Disconnected | CmEvent::DeviceRemoval) => sh.update(|s| s.down = true),
            _ => {}
        }
    }

    fn connect_request(ep: ArcBorrow<'_, Endpoint<Self>>, req: ConnRequest<'_, Self>) -> Result {
        let sh = ep.ctx().shared.clone();
        if !req.private().starts_with(HELLO) {
            pr_err!("loopback: connection request without the loopback greeting\n");
            return Err(EPROTO_());
        }
        let res = sh.res.as_ref().ok_or(ENODEV)?.clone();
        let caps = sh.caps.copy().ok_or(ENODEV)?;
        let param = ep.ctx().param(WELCOME);
        let child = req
            .accept(
                LbCtx {
                    shared: sh.clone(),
                    role: Role::Accepted,
                },
                &res.pd,
                caps,
                &param,
                |_| Ok(()),
            )
            .inspect_err(|e| sh.fail(4, e.to_errno()))?;
        sh.update(|s| s.accepted = Some(child));
        Ok(())
    }
}

/// Both ends of a connection of the module to itself.
struct Link {
    shared: Arc<Shared>,
    client: Arc<Endpoint<LbCtx>>,
    accepted: Arc<Endpoint<LbCtx>>,
    _listener: Arc<Endpoint<LbCtx>>,
}

impl Link {
    /// Connects to `addr`, a local address of a device in `devices`, with queues of
    /// `caps(device)`.
    fn connect(
        devices: &Devices,
        addr: SockAddr,
        caps: impl FnOnce(&DevRes) -> Result<QpCaps>,
    ) -> Result<(Self, Arc<DevRes>)> {
        let shared = Arc::pin_init(
            pin_init!(Shared {
                st <- new_mutex!(LinkState::default(), "fastreg::loopback::Shared::st"),
                cv <- new_condvar!("fastreg::loopback::Shared::cv"),
                res: SetOnce::new(),
                caps: SetOnce::new(),
                rd_atomic: 16,
            }),
            GFP_KERNEL,
        )?;
        let listener = Endpoint::new(LbCtx {
            shared: shared.clone(),
            role: Role::Listener,
        })?;
        listener.listen(addr, 8).inspect_err(|e| {
            pr_err!("loopback: cannot listen on {}: {:?}\n", addr, e);
        })?;
        let res = listener
            .device()
            .and_then(|d| devices.find(d))
            .ok_or_else(|| {
                pr_err!(
                    "loopback: {} is not the address of an RDMA device fastreg uses\n",
                    addr
                );
                ENODEV
            })?;
        let caps = caps(&res)?;
        if caps.send_wr > res.attrs.max_qp_wr {
            pr_err!(
                "loopback: {} needs a send queue of {} WRs, {} allows {}\n",
                addr,
                caps.send_wr,
                res.name(),
                res.attrs.max_qp_wr
            );
            return Err(EINVAL);
        }
        shared.caps.populate(caps);
        shared.res.populate(res.clone());
        let client = Endpoint::new(LbCtx {
            shared: shared.clone(),
            role: Role::Client,
        })?;
        client.resolve_addr(None, addr, RESOLVE_MS)?;
        // Wait for both ends, or a failure.
        let mut left = msecs_to_jiffies(CONNECT_MS);
        let mut st = shared.st.lock();
        let outcome = loop {
            if let Some((event, status)) = st.error {
                pr_err!(
                    "loopback: connecting to {} failed: {} (status {})\n",
                    addr,
                    verbs::event_name(event).to_str().unwrap_or("?"),
                    status
                );
                break Err(econnrefused());
            }
            if st.client_up && st.server_up && st.accepted.is_some() {
                break Ok(());
            }
            if left == 0 {
                pr_err!("loopback: connecting to {} timed out\n", addr);
                break Err(ETIMEDOUT);
            }
            if !wait::step(&shared.cv, &mut st, &mut left) {
                break Err(ERESTARTSYS);
            }
        };
        let accepted = st.accepted.take();
        drop(st);
        let teardown = |accepted: Option<Arc<Endpoint<LbCtx>>>| {
            client.close();
            if let Some(a) = &accepted {
                a.close();
            }
        };
        match (outcome, accepted) {
            (Ok(()), Some(accepted)) => Ok((
                Self {
                    shared,
                    client,
                    accepted,
                    _listener: listener,
                },
                res,
            )),
            (Ok(()), None) => {
                teardown(None);
                Err(EINVAL)
            }
            (Err(e), accepted) => {
                teardown(accepted);
                Err(e)
            }
        }
    }

    fn close(&self) {
        self.client.close();
        self.accepted.close();
        // The accepted endpoint refers to `shared`; nothing refers back any more.
        self.shared.update(|s| s.down = true);
    }
}

#[allow(non_snake_case)]
fn EPROTO_() -> Error {
    Error::from_errno(-(kernel::bindings::EPROTO as i32))
}

fn econnrefused() -> Error {
    Error::from_errno(-(kernel::bindings::ECONNREFUSED as i32))
}

// ---------------------------------------------------------------------------------------
// Transfers.

/// Completion of one slot's chain, reported to the driving thread.
struct SlotDone {
    index: usize,
    board: Arc<Board>,
}

struct Finished {
    index: usize,
    ok: bool,
    status: u32,
    status_msg: &'static CStr,
    vendor_err: u32,
    chain: SendChain,
}

#[pin_data]
struct Board {
    #[pin]
    done: Mutex<KVec<Finished>>,
    #[pin]
    cv: CondVar,
}

impl Handler for SlotDone {
    fn done(this: Arc<Completion<Self>>, wc: &Wc<'_>, mut chain: SendChain) {
        // The chain's MR references go now; the MRs themselves are in the slot.
        chain.clear();
        let me = this.value();
        let f = Finished {
            index: me.index,
            ok: wc.ok(),
            status: wc.status(),
            status_msg: wc.status_msg(),
            vendor_err: wc.vendor_err(),
            chain,
        };
        let mut done = me.board.done.lock();
        // Capacity for every slot was reserved: this does not allocate.
        if done.push(f, GFP_NOWAIT).is_err() {
            pr_err!("loopback: completion lost\n");
        }
        drop(done);
        me.board.cv.notify_all();
    }
}

struct Slot {
    src: Region,
    sink: Region,
    check: Region,
    done: Arc<Completion<SlotDone>>,
    chain: Option<SendChain>,
    /// MRs of the chain in flight: source, sink, check.
    inflight: KVec<FrMr<Invalidating>>,
    seed: u32,
}

impl Slot {
    fn wrs(&self) -> u32 {
        let n =
            (self.src.spans().len() + self.sink.spans().len() + self.check.spans().len()) as u32;
        let writes = frag::rdma_wr_count(
            self.sink.lens().iter().copied(),
            self.src.lens().iter().copied(),
            1,
        );
        let reads = frag::rdma_wr_count(
            self.sink.lens().iter().copied(),
            self.check.lens().iter().copied(),
            1,
        );
        // REG and LOCAL_INV of every MR, the WRITEs and the READs.
        budget::Wrs {
            reg: n,
            rdma: writes.unwrap_or(0) + reads.unwrap_or(0),
            inv: n,
            send: 0,
        }
        .total()
    }

    /// Registers the three buffers, builds the chain and posts it.
    /// `wait_ms` bounds the wait for MRs; `None` does not wait (`EAGAIN`).
    fn start(&mut self, res: &DevRes, link: &Link, seed: u32, wait_ms: Option<u32>) -> Result {
        self.seed = seed;
        self.src
            .with_cpu(|b| b.fill(|o| region::pattern(seed, o)))?;
        self.sink
            .with_cpu(|b| b.fill(|o| !region::pattern(seed, o)))?;
        self.check
            .with_cpu(|b| b.fill(|o| region::pattern(seed, o) ^ 0x5a))?;
        let n =
            (self.src.spans().len() + self.sink.spans().len() + self.check.spans().len()) as u32;
        let mut free: KVec<FrMr<Free>> = KVec::new();
        res.pool.get(n, &mut free, wait_ms)?;
        let mut chain = self.chain.take().unwrap_or_else(SendChain::empty);
        chain.clear();
        // Map everything first, in the order source, sink, check: if a mapping fails,
        // nothing was registered and every MR goes back to the pool as it was.
        let mut mapped = KVec::with_capacity(n as usize, GFP_KERNEL)?;
        let mut err = None;
        'map: for (side, access) in [
            (&self.src, Access::LOCAL_READ),
            (
                &self.sink,
                Access::REMOTE_WRITE
                    .with(Access::REMOTE_READ)
                    .with(Access::LOCAL_WRITE),
            ),
            (&self.check, Access::LOCAL_WRITE),
        ] {
            for s in side.spans().iter() {
                let Some(mr) = free.pop() else {
                    err = Some(EINVAL);
                    break 'map;
                };
                match mr.map(&side.sgl_span(s)) {
                    Ok(m) => mapped.push((m, access), GFP_KERNEL)?,
                    Err((mr, e)) => {
                        pr_err!("loopback: ib_map_mr_sg failed: {:?}\n", e);
                        res.pool.put_free(mr);
                        err = Some(e);
                        break 'map;
                    }
                }
            }
        }
        for mr in free.drain_all() {
            res.pool.put_free(mr);
        }
        if let Some(e) = err {
            for (m, _) in mapped.drain_all() {
                res.pool.put_free(m.unmap());
            }
            self.chain = Some(chain);
            return Err(e);
        }
        // Register: fresh keys, REG_MR first in the chain.
        let mut regs = KVec::with_capacity(n as usize, GFP_KERNEL)?;
        let mut r = Ok(());
        for (m, access) in mapped.drain_all() {
            let (reg, key) = res.pool.register(m);
            r = r.and_then(|()| chain.reg(&reg, key, access));
            regs.push(reg, GFP_KERNEL)?;
        }
        let (ns, nk) = (self.src.spans().len(), self.sink.spans().len());
        let (src, rest) = regs.split_at(ns);
        let (sink, check) = rest.split_at(nk);
        // WRITE the source into the sink, then READ the sink back into the check buffer:
        // one work request per piece where a local registration meets a sink one.
        for (op, local, lens) in [
            (RdmaOp::Write, src, self.src.lens()),
            (RdmaOp::Read, check, self.check.lens()),
        ] {
            for p in frag::pieces(lens, self.sink.lens()) {
                let remote = &sink[p.b];
                r = r.and_then(|()| {
                    chain.rdma(
                        op,
                        remote.handle().iova() + p.b_off,
                        remote.rkey(),
                        [(&local[p.a], p.a_off, p.len as u32)],
                    )
                });
            }
        }
        // The invalidations wait for the READs.
        chain.fence();
        self.inflight.clear();
        for reg in regs.drain_all() {
            let (inv, rkey) = res.pool.invalidate(reg);
            r = r.and_then(|()| chain.local_inv(&inv, rkey));
            self.inflight.push(inv, GFP_KERNEL)?;
        }
        if let Err(e) = r {
            self.give_up(res);
            self.chain = Some(chain);
            return Err(e);
        }
        match link
            .client
            .post(chain, &self.done, crate::verbs::POST_WAIT_MS)
        {
            Ok(()) => Ok(()),
            Err((e, chain)) => {
                pr_err!("loopback: posting a chain failed: {:?}\n", e);
                self.give_up(res);
                self.chain = chain;
                Err(e.to_error())
            }
        }
    }

    /// Destroys the MRs of a chain that failed or was never posted.
    fn give_up(&mut self, res: &DevRes) {
        for mr in self.inflight.drain_all() {
            res.pool.destroy(mr.into_handle());
        }
    }

    /// Handles the completion of the chain: MRs back to the pool, bytes checked.
    fn finish(&mut self, res: &DevRes, f: Finished, len: usize) -> Result {
        self.chain = Some(f.chain);
        if !f.ok {
            pr_err!(
                "loopback: transfer failed on {}: {} (status {}, vendor error {:#x})\n",
                res.name(),
                f.status_msg.to_str().unwrap_or("?"),
                f.status,
                f.vendor_err
            );
            self.give_up(res);
            return Err(EIO);
        }
        for mr in self.inflight.drain_all() {
            res.pool.put(mr.invalidated());
        }
        let seed = self.seed;
        for (what, side) in [("sink", &self.sink), ("read-back", &self.check)] {
            let first = side.with_cpu(|b| b.first_mismatch(|o| region::pattern(seed, o)))?;
            if let Some(off) = first {
                pr_err!(
                    "loopback: {} buffer differs from the source at byte {} of {}\n",
                    what,
                    off,
                    len
                );
                return Err(EIO);
            }
        }
        Ok(())
    }
}

/// Runs a loopback command; reports errors in the kernel log.
pub(crate) fn run(devices: &Devices, params: &Params, cmd: &command::Loopback) -> Result<Outcome> {
    if cmd.len > u64::from(params.max_payload) {
        pr_err!(
            "loopback: length {} exceeds max_payload={}\n",
            cmd.len,
            params.max_payload
        );
        return Err(EMSGSIZE);
    }
    // Next to the service port, where the interface on this address listens.
    let addr = SockAddr {
        ip: cmd.ip,
        port: params.port.checked_add(1).unwrap_or(params.port - 1),
    };
    let (offset, len) = (cmd.offset as usize, cmd.len as usize);
    let slots_n = cmd.concurrency.min(cmd.count) as usize;

    let caps = |res: &DevRes| -> Result<QpCaps> {
        // A page-list buffer: the same plan on all three sides, so one WRITE and one READ
        // per registration, and a REG and a LOCAL_INV per MR.
        let n = res.geo.mrs_for_pages(cmd.offset, cmd.len);
        let per_transfer = budget::Wrs {
            reg: 3 * n,
            rdma: 2 * n,
            inv: 3 * n,
            send: 0,
        }
        .total();
        Ok(QpCaps {
            send_wr: budget::sq_depth(slots_n as u32, per_transfer).ok_or(EINVAL)?,
            recv_wr: 2,
            send_sge: 1,
            recv_sge: 1,
        })
    };
    let (link, res) = Link::connect(devices, addr, caps)?;
    let r = match link.client.caps() {
        Some(caps) => transfer_all(&link, &res, params, cmd, slots_n, offset, len, caps),
        None => Err(EINVAL),
    };
    link.close();
    r
}

#[allow(clippy::too_many_arguments)]
fn transfer_all(
    link: &Link,
    res: &Arc<DevRes>,
    params: &Params,
    cmd: &command::Loopback,
    slots_n: usize,
    offset: usize,
    len: usize,
    caps: QpCaps,
) -> Result<Outcome> {
    let board = Arc::pin_init(
        pin_init!(Board {
            done <- new_mutex!(KVec::new(), "fastreg::loopback::Board::done"),
            cv <- new_condvar!("fastreg::loopback::Board::cv"),
        }),
        GFP_KERNEL,
    )?;
    board.done.lock().reserve(slots_n, GFP_KERNEL)?;
    let mut slots = KVec::with_capacity(slots_n, GFP_KERNEL)?;
    for index in 0..slots_n {
        let src = res.region(offset, len)?;
        let sink = res.region(offset, len)?;
        let check = res.region(offset, len)?;
        let wrs = src.spans().len() * 8;
        slots.push(
            Slot {
                src,
                sink,
                check,
                done: Completion::new(SlotDone {
                    index,
                    board: board.clone(),
                })?,
                chain: Some(SendChain::with_capacity(wrs, wrs)?),
                inflight: KVec::new(),
                seed: 0,
            },
            GFP_KERNEL,
        )?;
    }
    let mut out = Outcome {
        mrs_per_buffer: slots[0].src.spans().len() as u32,
        wrs_per_transfer: slots[0].wrs(),
        sq_depth: caps.send_wr,
        ..Outcome::default()
    };
    let timeout_ms = params.timeout.saturating_mul(1000);
    let started_at = Instant::<Monotonic>::now();
    let mut started = 0u32;
    let mut in_flight = 0usize;
    let mut first_err: Option<Error> = None;
    // Slots ready to start. Only this thread gives MRs back to the pool (when it handles a
    // completion), so it never waits for MRs while transfers are in flight: a slot that
    // cannot get its MRs now waits here for a completion instead.
    let mut idle: KVec<usize> = KVec::with_capacity(slots_n, GFP_KERNEL)?;
    for i in (0..slots_n).rev() {
        idle.push(i, GFP_KERNEL)?;
    }
    let mut closed = false;
    loop {
        if first_err.is_none() && res.removed.load(Relaxed) {
            pr_err!("loopback: {} is being removed; stopping\n", res.name());
            first_err = Some(ENODEV);
        }
        while first_err.is_none() && started < cmd.count {
            let Some(&i) = idle.last() else { break };
            let wait = if in_flight == 0 {
                Some(timeout_ms)
            } else {
                None
            };
            match slots[i].start(res, link, started, wait) {
                Ok(()) => {
                    idle.pop();
                    started += 1;
                    in_flight += 1;
                }
                Err(e) if e == EAGAIN => break,
                Err(e) => {
                    first_err.get_or_insert(e);
                }
            }
        }
        if in_flight == 0 {
            break;
        }
        let mut left = msecs_to_jiffies(timeout_ms);
        let mut done = board.done.lock();
        while done.is_empty() && left > 0 {
            wait::step(&board.cv, &mut done, &mut left);
        }
        let next = done.pop();
        drop(done);
        let Some(f) = next else {
            // Nothing completed in time: fail the connection; draining flushes every
            // chain, whose completions then arrive.
            pr_err!("loopback: no completion within {} s\n", params.timeout);
            first_err.get_or_insert(ETIMEDOUT);
            if !closed {
                link.close();
                closed = true;
                continue;
            }
            break;
        };
        in_flight -= 1;
        let index = f.index;
        match slots[index].finish(res, f, len) {
            Ok(()) => {
                out.transfers += 1;
                out.bytes += len as u64;
            }
            Err(e) => {
                first_err.get_or_insert(e);
            }
        }
        idle.push(index, GFP_KERNEL)?;
    }
    out.elapsed_ms = started_at.elapsed().as_millis() as u64;
    match first_err {
        None => Ok(out),
        Some(e) => Err(e),
    }
}
