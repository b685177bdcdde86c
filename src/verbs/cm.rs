// SPDX-License-Identifier: GPL-2.0

//! rdma_cm endpoints: a `rdma_cm_id` with its QP and CQs, and the events that drive it.
//!
//! C header: [`include/rdma/rdma_cm.h`](srctree/include/rdma/rdma_cm.h)
//!
//! An [`Endpoint<T>`] owns its `rdma_cm_id`, the QP created on it and the QP's CQs, and
//! frees them in that order: drain the QP, destroy it, destroy the id (which waits for
//! running event handlers), free the CQs. rdma_cm events are delivered to `T`, the
//! endpoint's context, through [`CmHandler`]. Owners call [`Endpoint::close`] before
//! dropping their reference, so the last reference is never dropped from a completion.

use core::ptr::NonNull;

use kernel::{
    bindings,
    error::to_result,
    prelude::*,
    sync::{
        atomic::{
            Atomic,
            Relaxed, //
        },
        Arc, ArcBorrow, CondVar, Mutex, SetOnce,
    },
    task::Task,
    time::Msecs,
};

use super::BhSpinLock;

use super::{
    ib,
    qp::PostError,
    Completion,
    Cq,
    Handler,
    MsgBuf,
    Pd,
    SendChain,
    SendQueue, //
};

/// Source ports below this one are privileged (`PROT_SOCK`): binding one takes
/// `CAP_NET_BIND_SERVICE`, which the kernel has and an unprivileged process does not.
pub(crate) const PRIVILEGED_PORTS: u16 = 1024;

/// An IPv4 address and port.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct SockAddr {
    /// Address, most significant byte first.
    pub(crate) ip: [u8; 4],
    /// Port.
    pub(crate) port: u16,
}

/// `struct sockaddr_in`.
#[repr(C)]
struct SockaddrIn {
    family: u16,
    port: [u8; 2],
    addr: [u8; 4],
    zero: [u8; 8],
}

impl SockAddr {
    /// Reads an IPv4 `sockaddr_storage`; `None` for other families.
    fn from_storage(ss: &bindings::__kernel_sockaddr_storage) -> Option<Self> {
        // CAST: A `sockaddr_storage` is large and aligned enough for a `sockaddr_in`.
        let sin = core::ptr::from_ref(ss).cast::<SockaddrIn>();
        // SAFETY: `sin` points into `ss`, which is valid for reads of its whole size.
        let sin = unsafe { &*sin };
        if u32::from(sin.family) != bindings::AF_INET {
            return None;
        }
        Some(Self {
            ip: sin.addr,
            port: u16::from_be_bytes(sin.port),
        })
    }

    fn raw(&self) -> SockaddrIn {
        SockaddrIn {
            family: bindings::AF_INET as u16,
            port: self.port.to_be_bytes(),
            addr: self.ip,
            zero: [0; 8],
        }
    }
}

impl core::fmt::Display for SockAddr {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let [a, b, c, d] = self.ip;
        write!(f, "{a}.{b}.{c}.{d}:{}", self.port)
    }
}

impl kernel::fmt::Display for SockAddr {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        core::fmt::Display::fmt(self, f)
    }
}

/// An rdma_cm event, as a handler sees it.
#[derive(Debug)]
pub(crate) enum CmEvent<'a> {
    /// `rdma_resolve_addr` succeeded: resolve the route next.
    AddrResolved,
    /// `rdma_resolve_route` succeeded: create the QP and connect.
    RouteResolved,
    /// The connection is up; the peer's private data.
    Established(&'a [u8]),
    /// The peer rejected the connection, with this status and its private data.
    Rejected(i32, &'a [u8]),
    /// The connection is gone.
    Disconnected,
    /// The device is going away.
    DeviceRemoval,
    /// Any failure: the event number and status.
    Failed(u32, i32),
    /// Another event (timewait exit, address change, ...): nothing to do.
    Other,
}

/// What an endpoint's context does on rdma_cm events.
pub(crate) trait CmHandler: Send + Sync + Sized + 'static {
    /// An event on `ep`, in the rdma_cm handler (process context, the id's handler lock
    /// held: `connect` and `accept` may be called, `close` may not).
    fn event(ep: ArcBorrow<'_, Endpoint<Self>>, ev: CmEvent<'_>);

    /// A connection request on the listening `ep`. Accept it with [`ConnRequest::accept`]
    /// and keep the new endpoint; an error rejects it.
    fn connect_request(ep: ArcBorrow<'_, Endpoint<Self>>, req: ConnRequest<'_, Self>) -> Result;
}

/// Queue sizes of a QP.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct QpCaps {
    /// Send queue depth (work requests), including one slot for draining.
    pub(crate) send_wr: u32,
    /// Receive queue depth, including one slot for draining.
    pub(crate) recv_wr: u32,
    /// Scatter/gather entries per send work request.
    pub(crate) send_sge: u32,
    /// Scatter/gather entries per receive work request.
    pub(crate) recv_sge: u32,
}

/// Connection parameters of `rdma_connect` / `rdma_accept`.
pub(crate) struct ConnParam<'a> {
    /// Private data for the peer (at most 56 bytes on IB/RoCE requests).
    pub(crate) private: &'a [u8],
    /// RDMA READs the peer may have outstanding against us, and we against it.
    pub(crate) rd_atomic: u8,
}

/// The QP's `event_handler`: called by the driver, in any context, for an event of the
/// QP. Logged (rate-limited: a peer can cause them) when a peer can be their cause. An
/// access error is the responder's record of a peer's RDMA operation with a key this side
/// does not grant (a dead or forged rkey, C9-222.1); the QP goes to the error state and the
/// connection closes on its flushed receives, which tell no cause.
///
/// # Safety
///
/// Called by ib_core, with an event about a live QP of fastreg's.
unsafe extern "C" fn qp_event(ev: *mut ib::ib_event, _ctx: *mut core::ffi::c_void) {
    // SAFETY: The driver passes an event valid for the call, about a QP of fastreg's
    // (this handler is given to QPs only), live during the call.
    let (kind, qpn, device) = unsafe {
        let ev = &*ev;
        (ev.event, (**ev.element.qp.as_ref()).qp_num, ev.device)
    };
    let what = match kind {
        ib::ib_event_type_IB_EVENT_QP_ACCESS_ERR => {
            "access error: a peer used a key this side does not grant"
        }
        ib::ib_event_type_IB_EVENT_QP_REQ_ERR => "invalid request from the peer",
        ib::ib_event_type_IB_EVENT_QP_FATAL => "fatal error",
        // Established, last WQE reached, path migration: nothing to report.
        _ => return,
    };
    // SAFETY: The event's device is registered while its QPs exist; its `name` is a
    // NUL-terminated array.
    let name = unsafe { CStr::from_char_ptr((*device).name.as_ptr()) };
    limited!(pr_warn, "{}: QP {:#x}: {}\n", name, qpn, what);
}

struct QpParts {
    qp: NonNull<ib::ib_qp>,
    caps: QpCaps,
    /// Signal RDMA WRITEs too (iWARP; see [`SendChain::link`]).
    signal_writes: bool,
    _send_cq: Cq,
    _recv_cq: Cq,
    _pd: Arc<Pd>,
}

/// A `rdma_cm_id`, its QP and CQs, and its event context `T`.
///
/// # Invariants
///
/// `id` is a live `rdma_cm_id` whose `context` points at this endpoint and whose event
/// handler is `Self::cm_handler`; it is destroyed in `Drop` if `owns_id`, else rdma_cm
/// destroys it (a refused connection request). `qp`, once set, is a QP created on `id`
/// with `sq` as its `qp_context`, destroyed in `Drop` before `id`.
#[pin_data(PinnedDrop)]
pub(crate) struct Endpoint<T: CmHandler> {
    id: NonNull<ib::rdma_cm_id>,
    /// Unique among the module's endpoints: what [`QpGone`] names.
    serial: u64,
    owns_id: Atomic<bool>,
    drained: Atomic<bool>,
    qp: SetOnce<QpParts>,
    #[pin]
    sq: SendQueue,
    /// Chains of which the device took only a part: kept (with the MRs they name) until
    /// the QP is drained.
    #[pin]
    orphans: BhSpinLock<KVec<SendChain>>,
    /// The task running this id's event handler, while one runs (0 otherwise).
    handler_task: Atomic<usize>,
    /// [`Endpoint::connect`] in progress, and what waits for it.
    #[pin]
    connecting: Mutex<Connecting>,
    #[pin]
    connect_over: CondVar,
    ctx: T,
}

/// What [`Endpoint::connect`] keeps from a disconnect or close: on iWARP rdma_cm frees the
/// connect's `iw_cm_id` when the connect fails, without a lock `rdma_disconnect` takes.
#[derive(Default)]
struct Connecting {
    /// `rdma_connect` runs (the lock is not held meanwhile).
    running: bool,
    /// A disconnect was asked meanwhile: done when the connect returns.
    disconnect: bool,
    /// Closed: no connect any more.
    closed: bool,
}

// SAFETY: rdma_cm ids and QPs are used from any thread; the mutable state is atomics or
// locked (`sq`), `QpParts` is set once, and `T` is `Send + Sync`.
unsafe impl<T: CmHandler> Send for Endpoint<T> {}
// SAFETY: As above.
unsafe impl<T: CmHandler> Sync for Endpoint<T> {}

impl<T: CmHandler> Endpoint<T> {
    /// A new RC endpoint in the TCP port space, with context `ctx`.
    pub(crate) fn new(ctx: T) -> Result<Arc<Self>> {
        Arc::pin_init(
            try_pin_init!(&this in Self {
                id: {
                    // SAFETY: `init_net` is the initial network namespace, always valid. The
                    // context pointer is this endpoint, which outlives the id (`Drop`).
                    let id = kernel::error::from_err_ptr(unsafe {
                        ib::__rdma_create_kernel_id(
                            &raw mut bindings::init_net,
                            Some(Self::cm_handler),
                            this.as_ptr().cast(),
                            ib::rdma_ucm_port_space_RDMA_PS_TCP,
                            ib::ib_qp_type_IB_QPT_RC,
                            c"fastreg".as_char_ptr(),
                        )
                    })?;
                    NonNull::new(id).ok_or(ENOMEM)?
                },
                serial: SERIAL.fetch_add(1, Relaxed),
                owns_id: Atomic::new(true),
                drained: Atomic::new(false),
                qp: SetOnce::new(),
                sq <- SendQueue::new(0),
                orphans <- crate::verbs::new_bh_spinlock!(KVec::new(), "fastreg::Endpoint::orphans"),
                handler_task: Atomic::new(0),
                connecting <- kernel::new_mutex!(
                    Connecting::default(),
                    "fastreg::Endpoint::connecting"
                ),
                connect_over <- kernel::new_condvar!("fastreg::Endpoint::connect_over"),
                ctx,
            }),
            GFP_KERNEL,
        )
    }

    /// The context.
    pub(crate) fn ctx(&self) -> &T {
        &self.ctx
    }

    /// The device the id is bound to, once its address is resolved or it was bound.
    pub(crate) fn device(&self) -> Option<&super::Device> {
        // SAFETY: The id is valid; `device` is set by rdma_cm before the events that lead to
        // a call of this and does not change while the id lives.
        let dev = unsafe { (*self.id.as_ptr()).device };
        if dev.is_null() {
            None
        } else {
            // SAFETY: The device stays registered while the id is bound to it: rdma_cm
            // removes its ids (through our own `remove` first) before the device goes.
            Some(unsafe { super::Device::from_raw(dev) })
        }
    }

    /// Binds to `addr` and listens for connection requests.
    pub(crate) fn listen(&self, addr: SockAddr, backlog: i32) -> Result {
        let mut sa = addr.raw();
        // SAFETY: The id is valid; `sa` is a valid `sockaddr_in` for the call.
        to_result(unsafe { ib::rdma_bind_addr(self.id.as_ptr(), (&raw mut sa).cast()) })?;
        // SAFETY: The id is valid and bound.
        to_result(unsafe { ib::rdma_listen(self.id.as_ptr(), backlog) })
    }

    /// Starts resolving `dst` from the address the id is bound to
    /// ([`Endpoint::bind_privileged`]); [`CmEvent::AddrResolved`] or [`CmEvent::Failed`]
    /// follows.
    pub(crate) fn resolve_addr(&self, dst: SockAddr, timeout_ms: u16) -> Result {
        let sa = dst.raw();
        // SAFETY: The id is valid; `sa` is a valid `sockaddr_in` for the call, and a null
        // source makes rdma_cm use the bound one.
        to_result(unsafe {
            ib::rdma_resolve_addr(
                self.id.as_ptr(),
                core::ptr::null_mut(),
                (&raw const sa).cast(),
                timeout_ms.into(),
            )
        })
    }

    /// Binds the id to `src`'s address on the highest free privileged port (1023 down to 1,
    /// skipping those in use, as o2iblnd's `kiblnd_resolve_addr` does), before
    /// [`Endpoint::resolve_addr`]: its requests then come from a port that
    /// only the kernel or a process with `CAP_NET_BIND_SERVICE` can bind (rdma_cm checks it
    /// in `cma_get_port`), which is what a peer requiring privileged ports checks. Returns
    /// the port; `EADDRINUSE` when every privileged port is taken on that address.
    pub(crate) fn bind_privileged(&self, src: SockAddr) -> Result<u16> {
        let in_use = |e: Error| {
            let n = e.to_errno();
            n == -(bindings::EADDRINUSE as i32) || n == -(bindings::EADDRNOTAVAIL as i32)
        };
        for port in (1..PRIVILEGED_PORTS).rev() {
            let mut sa = SockAddr { port, ..src }.raw();
            // SAFETY: The id is valid and not yet bound (a failed bind leaves it unbound);
            // `sa` is a valid `sockaddr_in` for the call.
            let r =
                to_result(unsafe { ib::rdma_bind_addr(self.id.as_ptr(), (&raw mut sa).cast()) });
            match r {
                Ok(()) => return Ok(port),
                Err(e) if in_use(e) => continue,
                Err(e) => return Err(e),
            }
        }
        Err(Error::from_errno(-(bindings::EADDRINUSE as i32)))
    }

    /// Starts resolving the route; [`CmEvent::RouteResolved`] or [`CmEvent::Failed`] follows.
    pub(crate) fn resolve_route(&self, timeout_ms: u16) -> Result {
        // SAFETY: The id is valid.
        to_result(unsafe { ib::rdma_resolve_route(self.id.as_ptr(), timeout_ms.into()) })
    }

    /// Creates the QP (RC, signalled on request) and its CQs, once.
    pub(crate) fn create_qp(&self, pd: &Arc<Pd>, caps: QpCaps) -> Result {
        let device = self.device().ok_or(ENODEV)?;
        if self.qp.as_ref().is_some() {
            return Err(EEXIST);
        }
        self.sq.reset(caps.send_wr);
        // SAFETY: `sq` is a field of this endpoint declared after `qp`, which holds the CQs:
        // it is dropped after them.
        let send_cq = unsafe { Cq::new(device, caps.send_wr, &self.sq) }?;
        // SAFETY: As above.
        let recv_cq = unsafe { Cq::new(device, caps.recv_wr, &self.sq) }?;
        let mut attr = ib::ib_qp_init_attr {
            qp_context: core::ptr::from_ref(&self.sq).cast_mut().cast(),
            send_cq: send_cq.as_raw(),
            recv_cq: recv_cq.as_raw(),
            cap: ib::ib_qp_cap {
                max_send_wr: caps.send_wr,
                max_recv_wr: caps.recv_wr,
                max_send_sge: caps.send_sge,
                max_recv_sge: caps.recv_sge,
                ..Default::default()
            },
            sq_sig_type: ib::ib_sig_type_IB_SIGNAL_REQ_WR,
            qp_type: ib::ib_qp_type_IB_QPT_RC,
            event_handler: Some(qp_event),
            ..Default::default()
        };
        // SAFETY: The id is valid and bound to the PD's device; `attr` is valid for the
        // call; the CQs outlive the QP (`QpParts` drops them after `Drop` destroys it).
        to_result(unsafe { ib::fastreg_rdma_create_qp(self.id.as_ptr(), pd.as_raw(), &mut attr) })
            .inspect_err(|e| {
                limited!(
                    pr_err,
                    "{}: rdma_create_qp of {} send and {} receive work requests failed ({:?})\n",
                    device.name(),
                    caps.send_wr,
                    caps.recv_wr,
                    e
                )
            })?;
        // SAFETY: `rdma_create_qp` succeeded, so `id->qp` is the new QP.
        let qp = NonNull::new(unsafe { (*self.id.as_ptr()).qp }).ok_or(EINVAL)?;
        // INVARIANT: the QP was created on `id` with `sq` as its context.
        let parts = QpParts {
            qp,
            caps,
            signal_writes: device.is_iwarp(),
            _send_cq: send_cq,
            _recv_cq: recv_cq,
            _pd: pd.clone(),
        };
        if !self.qp.populate(parts) {
            // Raced with another `create_qp`; cannot happen under the handler lock.
            return Err(EEXIST);
        }
        Ok(())
    }

    /// The queue sizes, once the QP exists.
    pub(crate) fn caps(&self) -> Option<QpCaps> {
        self.qp.as_ref().map(|p| p.caps)
    }

    /// Connects from outside the id's handler (after [`CmEvent::RouteResolved`]):
    /// `rdma_connect` takes the handler's lock itself, so events for this id wait for it,
    /// and rdma_cm's workqueue, where handlers run, is not held while a device connects
    /// (siw's connect is a blocking TCP connect).
    ///
    /// Fails with `EDEADLK` from this id's handler, `EBUSY` while another connect runs,
    /// and `ENOTCONN` once the endpoint is closed. A [`Endpoint::disconnect`] meanwhile is
    /// done when `rdma_connect` returns, and [`Endpoint::close`] waits for it.
    pub(crate) fn connect(&self, param: &ConnParam<'_>) -> Result {
        if self.handler_task.load(Relaxed) == Task::current_raw() as usize {
            return Err(Error::from_errno(-(bindings::EDEADLK as i32)));
        }
        let mut p = raw_param(param)?;
        {
            let mut c = self.connecting.lock();
            if c.closed {
                return Err(Error::from_errno(-(bindings::ENOTCONN as i32)));
            }
            if c.running {
                return Err(EBUSY);
            }
            c.running = true;
        }
        // SAFETY: The id is valid (the endpoint is alive for `&self`); `p` with its private
        // data is valid for the call; not in this id's handler (checked above: its task is
        // recorded while it runs), and no disconnect or close runs meanwhile (`running`).
        let r = to_result(unsafe { ib::fastreg_rdma_connect(self.id.as_ptr(), &mut p) })
            .inspect_err(|e| limited!(pr_err, "rdma_connect failed ({:?})\n", e));
        let mut c = self.connecting.lock();
        c.running = false;
        if core::mem::take(&mut c.disconnect) {
            // SAFETY: The id is valid; disconnecting an unconnected id only returns an
            // error; no connect runs (`running` is clear, under the lock).
            unsafe { ib::rdma_disconnect(self.id.as_ptr()) };
        }
        drop(c);
        self.connect_over.notify_all();
        r
    }

    /// The QP's number (0 before it exists), for the tracepoints.
    pub(crate) fn qp_num(&self) -> u32 {
        let Some(p) = self.qp.as_ref() else {
            return 0;
        };
        // SAFETY: The QP is valid while `self` lives.
        unsafe { (*p.qp.as_ptr()).qp_num }
    }

    /// Work requests posted on the send queue since the QP was created.
    pub(crate) fn posted_wrs(&self) -> u64 {
        self.sq.posted()
    }

    /// Room in the send queue for work requests now.
    pub(crate) fn sq_room(&self) -> u32 {
        self.sq.room()
    }

    /// Posts `chain`; `done` receives its completion, with the chain, once.
    ///
    /// Waits up to `wait_ms` for room in the send queue. On failure the chain is
    /// handed back (except when the device took part of it: then it is kept until the QP
    /// is drained, and the connection fails).
    // The chain is handed back by value on failure so its storage is reused: no allocation.
    #[expect(clippy::result_large_err)]
    pub(crate) fn post<H: Handler>(
        &self,
        mut chain: SendChain,
        done: &Arc<Completion<H>>,
        wait_ms: Msecs,
    ) -> Result<(), (PostError, Option<SendChain>)> {
        let parts = match self.qp.as_ref() {
            Some(p) => p,
            None => return Err((PostError::Closed, Some(chain))),
        };
        let n = chain.len() as u32;
        if n == 0 {
            return Err((PostError::Device(EINVAL.to_errno()), Some(chain)));
        }
        if let Err(e) = self.sq.admit(n, wait_ms) {
            return Err((e, Some(chain)));
        }
        chain.draw_fault();
        chain.trace(self.qp_num());
        let first = chain.link(done.cqe_ptr(), self.sq.err_cqe(), parts.signal_writes);
        let cqe = match Completion::arm(done, chain, self.serial) {
            Ok(cqe) => cqe,
            Err(chain) => {
                self.sq.refused(n);
                return Err((PostError::Device(EBUSY.to_errno()), Some(chain)));
            }
        };
        let mut bad: *const ib::ib_send_wr = core::ptr::null();
        // SAFETY: The QP is valid while `self` lives; the chain's work requests were just
        // linked and live in the armed chain until its completion.
        let ret = unsafe { ib::fastreg_ib_post_send(parts.qp.as_ptr(), first, &mut bad) };
        if ret == 0 {
            return Ok(());
        }
        // SAFETY: `cqe` came from `arm` above and its work request was not posted (the
        // signalled one is last, and posting stops at the first failure).
        let chain = unsafe { Completion::<H>::disarm(cqe) };
        if bad.cast_mut() == first {
            limited!(
                pr_err,
                "ib_post_send refused a chain of {} work requests whole ({}): nothing posted\n",
                n,
                ret
            );
            self.sq.refused(n);
            Err((PostError::Device(ret), Some(chain)))
        } else {
            // Part of the chain may be on the send queue: keep it until the QP is drained.
            if bad.is_null() {
                // Out of the verbs' contract, but what `fail_function` does (the helper is
                // not run at all): assumed partly posted, which is always safe.
                pr_err!(
                    "ib_post_send failed ({}) without naming where it stopped; failing the \
                     connection\n",
                    ret
                );
            } else {
                pr_err!(
                    "ib_post_send accepted part of a chain ({}); failing the connection\n",
                    ret
                );
            }
            // No completion comes for the part posted (its signaled last request was
            // not): its room is not waited for after the drain. Closed first, so that no
            // waiter for room gets in between.
            self.sq.close();
            self.sq.release(n);
            self.orphan(chain);
            Err((PostError::Device(ret), None))
        }
    }

    /// Refuses further posts (a failed connection, until it is disconnected); never sleeps.
    pub(crate) fn refuse_posts(&self) {
        self.sq.close();
    }

    /// Disconnects: the QP moves to the error state and posted work requests flush.
    ///
    /// Process context. It may sleep: on iWARP, `iw_cm_disconnect` first waits for a
    /// connect or accept downcall in progress, which ends only after this id's handler
    /// has run for its answer. So before the connection is established, call it only
    /// with no lock held that the handler takes.
    pub(crate) fn disconnect(&self) {
        self.sq.close();
        let mut c = self.connecting.lock();
        if c.running {
            // Done by `connect` when it returns.
            c.disconnect = true;
            return;
        }
        // SAFETY: The id is valid; disconnecting twice only returns an error; no connect
        // runs (`running` is clear, and the lock keeps one from starting).
        unsafe { ib::rdma_disconnect(self.id.as_ptr()) };
    }

    /// Posts a receive of up to `buf.len()` bytes into `buf`; `done` receives its
    /// completion once.
    pub(crate) fn post_recv<H: Handler>(
        &self,
        buf: &Arc<MsgBuf>,
        done: &Arc<Completion<H>>,
    ) -> Result {
        let parts = self.qp.as_ref().ok_or(EINVAL)?;
        let mut chain = SendChain::empty();
        chain.hold_recv(buf);
        chain.draw_fault();
        let mut sge = buf.sge(buf.len() as u32);
        let cqe = Completion::arm(done, chain, self.serial).map_err(|_| EBUSY)?;
        let mut wr = ib::ib_recv_wr {
            sg_list: &mut sge,
            num_sge: 1,
            ..Default::default()
        };
        // SAFETY: The union member for kernel ULPs is `wr_cqe`.
        unsafe { *wr.__bindgen_anon_1.wr_cqe.as_mut() = cqe };
        let mut bad: *const ib::ib_recv_wr = core::ptr::null();
        // Counted before the post: its completion may run before this returns.
        self.sq.recv_posted();
        // SAFETY: The QP is valid; the work request and its entry are valid for the call
        // (providers copy them); `buf` is held by the armed completion until it completes.
        let ret = unsafe { ib::fastreg_ib_post_recv(parts.qp.as_ptr(), &wr, &mut bad) };
        if ret != 0 {
            self.sq.recv_done();
            // SAFETY: `cqe` came from `arm` and was not posted.
            drop(unsafe { Completion::<H>::disarm(cqe) });
            return Err(Error::from_errno(ret));
        }
        Ok(())
    }

    fn orphan(&self, chain: SendChain) {
        // The work requests were posted: the MRs they name must outlive them, so the chain
        // is kept until the drain. Without memory to keep it, its references are leaked
        // rather than risk a use after free (the MRs then stay allocated). Called with the
        // connection's lock held: no sleeping allocation.
        if let Err(e) = self.orphans.lock().push(chain, GFP_ATOMIC) {
            pr_err!(
                "cannot keep a partly posted chain ({:?}): leaking its MRs\n",
                e
            );
        }
    }

    /// Disconnects, refuses further posts, and drains the QP: when this returns, every
    /// posted chain has completed (flushed if needed) and its handler has run.
    ///
    /// Must not be called from a CQ completion handler, nor from this id's rdma_cm handler.
    pub(crate) fn close(&self) {
        self.sq.close();
        let mut c = self.connecting.lock();
        while c.running {
            self.connect_over.wait(&mut c);
        }
        c.closed = true;
        // SAFETY: The id is valid; disconnecting an unconnected id only returns an error;
        // no connect runs, nor will (`closed`, under the lock).
        unsafe { ib::rdma_disconnect(self.id.as_ptr()) };
        drop(c);
        if let Some(p) = self.qp.as_ref() {
            if !self.drained.xchg(true, Relaxed) {
                // SAFETY: The QP is valid; no more posts (closed above); its CQs have room
                // for the drain work requests (one slot of each queue is kept for it).
                unsafe { ib::ib_drain_qp(p.qp.as_ptr()) };
                self.wait_flushed();
            }
        }
        // Drained: no work request of a partly posted chain can run any more.
        let orphans = core::mem::take(&mut *self.orphans.lock());
        drop(orphans);
    }

    /// After the drain: waits (up to 1 s, woken by their completions) until every work
    /// request posted has completed.
    ///
    /// The drain's own requests can complete before earlier ones, and some never do: siw
    /// flushes a request posted in the error state at once, also while the close of its
    /// TCP stream (which sets that state first) is still flushing the others, and after
    /// a send that failed on a closing stream the completion of the chain's last request
    /// was never seen at all. Destroying the CQs lost them, and with them the chains,
    /// buffers and MRs they hold: a PD and MRs outlived `rmmod` in `06-transport.sh` on
    /// siw, and `rdma resource show` faulted on their names. What is still missing here
    /// is reported; the owner of the completions takes them back once the QP is
    /// destroyed ([`Endpoint::destroy`], [`super::Completion::reclaim_lost`]).
    fn wait_flushed(&self) {
        let (sends, recvs) = self.sq.wait_idle(1000);
        if sends != 0 || recvs != 0 {
            pr_warn!(
                "drained QP: {} send and {} receive work requests did not complete\n",
                sends,
                recvs
            );
        }
    }

    /// # Safety
    ///
    /// Called by rdma_cm with an id whose context is a live `Endpoint<T>` (all ids of this
    /// type are created with this handler and such a context), or a connection request on
    /// a listening one.
    unsafe extern "C" fn cm_handler(
        id: *mut ib::rdma_cm_id,
        event: *mut ib::rdma_cm_event,
    ) -> c_int {
        // SAFETY: rdma_cm passes valid pointers for the duration of the call.
        let (ev, ctx) = unsafe { (&*event, (*id).context) };
        // SAFETY: The context of every id with this handler is an `Endpoint<T>` in an `Arc`
        // (type invariant), alive until the id is destroyed, which waits for this handler.
        let ep = unsafe { ArcBorrow::from_raw(ctx.cast::<Self>()) };
        // SAFETY: `conn` is the member rdma_cm fills for connection events.
        let conn = unsafe { ev.param.conn.as_ref() };
        let private = if conn.private_data.is_null() {
            &[][..]
        } else {
            // SAFETY: rdma_cm provides `private_data_len` readable bytes at `private_data`.
            unsafe {
                core::slice::from_raw_parts(
                    conn.private_data.cast::<u8>(),
                    conn.private_data_len.into(),
                )
            }
        };
        let e = match ev.event {
            ib::rdma_cm_event_type_RDMA_CM_EVENT_CONNECT_REQUEST => {
                let req = ConnRequest {
                    id,
                    private,
                    _t: core::marker::PhantomData,
                };
                return match T::connect_request(ep, req) {
                    Ok(()) => 0,
                    // rdma_cm destroys the new id when the handler fails.
                    Err(_) => -1,
                };
            }
            ib::rdma_cm_event_type_RDMA_CM_EVENT_ADDR_RESOLVED => CmEvent::AddrResolved,
            ib::rdma_cm_event_type_RDMA_CM_EVENT_ROUTE_RESOLVED => CmEvent::RouteResolved,
            ib::rdma_cm_event_type_RDMA_CM_EVENT_ESTABLISHED => CmEvent::Established(private),
            ib::rdma_cm_event_type_RDMA_CM_EVENT_REJECTED => CmEvent::Rejected(ev.status, private),
            ib::rdma_cm_event_type_RDMA_CM_EVENT_DISCONNECTED => CmEvent::Disconnected,
            ib::rdma_cm_event_type_RDMA_CM_EVENT_DEVICE_REMOVAL => CmEvent::DeviceRemoval,
            ib::rdma_cm_event_type_RDMA_CM_EVENT_ADDR_ERROR
            | ib::rdma_cm_event_type_RDMA_CM_EVENT_ROUTE_ERROR
            | ib::rdma_cm_event_type_RDMA_CM_EVENT_CONNECT_ERROR
            | ib::rdma_cm_event_type_RDMA_CM_EVENT_UNREACHABLE => {
                CmEvent::Failed(ev.event, ev.status)
            }
            _ => CmEvent::Other,
        };
        ep.handler_task.store(Task::current_raw() as usize, Relaxed);
        T::event(ep, e);
        ep.handler_task.store(0, Relaxed);
        // The id is owned by its endpoint: never ask rdma_cm to destroy it.
        0
    }
}

/// Whether `event` is `RDMA_CM_EVENT_CONNECT_ERROR`: the active side got the passive side's
/// reply but could not act on it (or, on iWARP, the connection failed).
pub(crate) fn is_connect_error(event: u32) -> bool {
    event == ib::rdma_cm_event_type_RDMA_CM_EVENT_CONNECT_ERROR
}

/// The name of an rdma_cm event (`rdma_event_msg`).
pub(crate) fn event_name(event: u32) -> &'static CStr {
    // SAFETY: `rdma_event_msg` returns a static string for any value.
    unsafe { CStr::from_char_ptr(ib::rdma_event_msg(event)) }
}

fn raw_param(param: &ConnParam<'_>) -> Result<ib::rdma_conn_param> {
    Ok(ib::rdma_conn_param {
        private_data: param.private.as_ptr().cast(),
        private_data_len: u8::try_from(param.private.len()).map_err(|_| EMSGSIZE)?,
        responder_resources: param.rd_atomic,
        initiator_depth: param.rd_atomic,
        retry_count: 7,
        // Credits guarantee a posted receive for every message: an RNR NAK is a peer that
        // lies about its buffers. Retried a bounded number of times (7 would be for ever,
        // and such a peer would wedge the send queue), then the QP fails.
        rnr_retry_count: 6,
        ..Default::default()
    })
}

#[pinned_drop]
impl<T: CmHandler> PinnedDrop for Endpoint<T> {
    fn drop(self: Pin<&mut Self>) {
        self.close();
        if let Some(p) = self.qp.as_ref() {
            let _ = p;
            // SAFETY: The QP was created on this id and is drained; nothing uses it now.
            unsafe { ib::rdma_destroy_qp(self.id.as_ptr()) };
        }
        if self.owns_id.load(Relaxed) {
            // SAFETY: The id is valid and owned; this waits for running event handlers and
            // no event is delivered after it returns.
            unsafe { ib::rdma_destroy_id(self.id.as_ptr()) };
        }
    }
}

/// Proof that an endpoint's QP and CQs are destroyed: no completion of a work request
/// posted on it runs any more ([`super::Completion::reclaim_lost`]).
///
/// # Invariants
///
/// The endpoint numbered `serial` is destroyed (made only by [`Endpoint::destroy`]).
pub(crate) struct QpGone {
    serial: u64,
}

impl QpGone {
    /// The serial number of the destroyed endpoint.
    pub(super) fn serial(&self) -> u64 {
        self.serial
    }
}

/// The next endpoint's serial number (64 bits: never wraps).
static SERIAL: Atomic<u64> = Atomic::new(0);

impl<T: CmHandler> Endpoint<T> {
    /// Destroys the endpoint if `this` is its last reference: its QP and CQs (and its id,
    /// if it owns it) are gone when this returns `Some`. Otherwise it goes with its last
    /// reference, later. (A QP that ib_core failed to destroy keeps its CQs too; ib_core
    /// warns, and nothing here can undo that.)
    pub(crate) fn destroy(this: Arc<Self>) -> Option<QpGone> {
        let last = Arc::into_unique_or_drop(this)?;
        let serial = last.serial;
        // Runs `PinnedDrop` (drain, QP and id destroyed), then the fields' drops (CQs).
        drop(last);
        // INVARIANT: destroyed just above.
        Some(QpGone { serial })
    }
}

/// A connection request on a listening endpoint, valid during the handler.
pub(crate) struct ConnRequest<'a, T: CmHandler> {
    id: *mut ib::rdma_cm_id,
    private: &'a [u8],
    _t: core::marker::PhantomData<T>,
}

impl<T: CmHandler> ConnRequest<'_, T> {
    /// The requester's address.
    pub(crate) fn peer(&self) -> Option<SockAddr> {
        // SAFETY: The id is valid during the handler; rdma_cm filled its route addresses.
        SockAddr::from_storage(unsafe { &(*self.id).route.addr.dst_addr })
    }

    /// The requester's private data.
    pub(crate) fn private(&self) -> &[u8] {
        self.private
    }

    /// Rejects with `private` data (for example the reason and local limits); the caller
    /// then returns an error from its handler, and rdma_cm destroys the new id.
    pub(crate) fn reject(self, private: &[u8]) -> Result {
        let len = u8::try_from(private.len()).map_err(|_| EMSGSIZE)?;
        // SAFETY: The id is the request's, valid during the handler; the data is valid for
        // the call.
        to_result(unsafe {
            ib::rdma_reject(
                self.id,
                private.as_ptr().cast(),
                len,
                ib::ib_cm_rej_reason_IB_CM_REJ_CONSUMER_DEFINED as u8,
            )
        })
    }

    /// Accepts: a new endpoint with context `ctx` and a QP of `caps` on `pd`; `setup` runs
    /// once the QP exists (to post receives), then the accept is sent with `param`. On
    /// error nothing is left and the request is refused.
    pub(crate) fn accept(
        self,
        ctx: T,
        pd: &Arc<Pd>,
        caps: QpCaps,
        param: &ConnParam<'_>,
        setup: impl FnOnce(&Arc<Endpoint<T>>) -> Result,
    ) -> Result<Arc<Endpoint<T>>> {
        let id = NonNull::new(self.id).ok_or(EINVAL)?;
        // INVARIANT: the new id's context is set to the new endpoint below, before any event
        // can reach it (events for it are serialised behind this handler). Until the accept
        // succeeds the endpoint does not own the id: on failure rdma_cm destroys it.
        let ep = Arc::pin_init(
            try_pin_init!(Endpoint {
                id,
                serial: SERIAL.fetch_add(1, Relaxed),
                owns_id: Atomic::new(false),
                drained: Atomic::new(false),
                qp: SetOnce::new(),
                sq <- SendQueue::new(0),
                orphans <- crate::verbs::new_bh_spinlock!(KVec::new(), "fastreg::Endpoint::orphans"),
                handler_task: Atomic::new(0),
                connecting <- kernel::new_mutex!(
                    Connecting::default(),
                    "fastreg::Endpoint::connecting"
                ),
                connect_over <- kernel::new_condvar!("fastreg::Endpoint::connect_over"),
                ctx,
            }),
            GFP_KERNEL,
        )?;
        // SAFETY: `id` is the new id of the request, owned by this handler invocation.
        unsafe {
            (*id.as_ptr()).context = core::ptr::from_ref::<Endpoint<T>>(&ep).cast_mut().cast()
        };
        ep.create_qp(pd, caps)?;
        setup(&ep)?;
        let mut p = raw_param(param)?;
        // SAFETY: The id is valid and its handler lock is held (we are in its handler).
        to_result(unsafe { ib::fastreg_rdma_accept(id.as_ptr(), &mut p) })
            .inspect_err(|e| limited!(pr_err, "rdma_accept failed ({:?})\n", e))?;
        ep.owns_id.store(true, Relaxed);
        Ok(ep)
    }
}
