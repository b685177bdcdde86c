// SPDX-License-Identifier: GPL-2.0

//! The synchronous API: a submission and a wait for its outcome, for the control commands
//! (the data path never waits: see [`super::xfer`]).

use super::*;

/// Where a synchronous caller waits for the outcome of its transfer.
#[pin_data]
struct Waiting {
    #[pin]
    out: Mutex<Option<Outcome>>,
    #[pin]
    cv: CondVar,
}

impl Client for Waiting {
    fn done(&self, _me: &Arc<dyn Client>, _token: usize, o: Outcome) {
        *self.out.lock() = Some(o);
        self.cv.notify_all();
    }
}

impl Conn {
    /// Runs `req` with `region` and waits for its outcome (`record`: see
    /// [`Conn::submit`]). A signal ends the wait with `ERESTARTSYS`; the transfer goes on
    /// and its buffer is freed when it ends, once no key of it is alive.
    pub(crate) fn call(
        self: &Arc<Self>,
        req: Request,
        region: Option<Region>,
        timeout_ms: u32,
        record: bool,
    ) -> Outcome {
        let fail = |region, e| Outcome {
            region,
            result: Err(e),
            usecs: 0,
            reply: None,
        };
        let w = match Arc::pin_init(
            pin_init!(Waiting {
                out <- new_mutex!(None, "fastreg::Waiting::out"),
                cv <- new_condvar!("fastreg::Waiting::cv"),
            }),
            GFP_KERNEL,
        ) {
            Ok(w) => w,
            Err(e) => return fail(region, e),
        };
        let client: Arc<dyn Client> = w.clone();
        if let Err((e, region)) = self.submit(req, region, timeout_ms, client, 0, record) {
            return fail(region, e);
        }
        let mut out = w.out.lock();
        loop {
            if let Some(o) = out.take() {
                return o;
            }
            if w.cv.wait_interruptible(&mut out) {
                return fail(None, ERESTARTSYS);
            }
        }
    }

    /// One IMMEDIATE round trip; returns its microseconds.
    pub(crate) fn ping_once(self: &Arc<Self>, timeout_ms: u32) -> Result<u64> {
        let o = self.call(Request::Ping, None, timeout_ms, false);
        o.result.map(|()| o.usecs)
    }

    /// IMMEDIATE round trips: returns (round trips, min, avg, max microseconds).
    pub(crate) fn ping(
        self: &Arc<Self>,
        count: u32,
        timeout_ms: u32,
    ) -> Result<(u32, u64, u64, u64)> {
        let (mut min, mut max, mut sum) = (u64::MAX, 0u64, 0u64);
        for _ in 0..count {
            let us = self.ping_once(timeout_ms)?;
            min = min.min(us);
            max = max.max(us);
            sum += us;
        }
        Ok((count, min, sum / u64::from(count.max(1)), max))
    }

    /// PUT of `len` bytes at `offset` into the first page of a new buffer, fully checked.
    pub(crate) fn put(self: &Arc<Self>, offset: usize, len: usize, timeout_ms: u32) -> Result {
        let region = self.iface.res.region(offset, len)?;
        let req = Request::Put {
            seed: self.iface.seed(),
            check: Check::Full,
        };
        self.call(req, Some(region), timeout_ms, false).result
    }

    /// GET of `len` bytes into a new buffer at `offset` into its first page, fully checked.
    pub(crate) fn get(self: &Arc<Self>, offset: usize, len: usize, timeout_ms: u32) -> Result {
        let region = self.iface.res.region(offset, len)?;
        let req = Request::Get {
            seed: self.iface.seed(),
            check: Check::Full,
        };
        self.call(req, Some(region), timeout_ms, false).result
    }
}
