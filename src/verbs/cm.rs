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
//!
//! This file holds the endpoint, its creation, its QP, its event handler and its
//! teardown; [`connect`] has the active side, [`accept`] the passive side (listening,
//! connection requests) and [`post`] the work requests posted on the QP.

mod accept;
mod connect;
mod post;

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

    /// The QP's number (0 before it exists), for the tracepoints.
    pub(crate) fn qp_num(&self) -> u32 {
        let Some(p) = self.qp.as_ref() else {
            return 0;
        };
        // SAFETY: The QP is valid while `self` lives.
        unsafe { (*p.qp.as_ptr()).qp_num }
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
