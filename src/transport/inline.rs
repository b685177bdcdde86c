// SPDX-License-Identifier: GPL-2.0

//! Small transfers carried in the messages themselves, as o2iblnd's IMMEDIATE and
//! xprtrdma's inline threshold: no registration, no rkey on the wire, no invalidation.
//!
//! A transfer of at most the connection's negotiated `max_inline` bytes goes inline. A PUT
//! is one `PUT_INLINE` with the data, answered by a `PUT_RESULT` (always: it is also the
//! acknowledgement); a GET is a `GET_INLINE`, answered by a `GET_DATA` with the data. The
//! data is checked end to end as for registered transfers: the sink of a PUT checks it in
//! its receive buffer, the sink of a GET once it is copied into the caller's region.

use super::*;

impl Conn {
    /// Whether a transfer of `region` goes inline on this connection.
    pub(super) fn goes_inline(&self, region: &Region) -> bool {
        let len = region.buffer().len();
        let max = self
            .st
            .lock()
            .params
            .map_or(0, |p| usize::from(p.max_inline));
        len > 0 && len <= max
    }

    /// An inline PUT of `region` (already filled): one message out, the verdict back.
    pub(super) fn put_inline(&self, region: &Region, seed: u32, check: Check, ms: u32) -> Result {
        let len = u32::try_from(region.buffer().len()).map_err(|_| EMSGSIZE)?;
        let mut st = self.st.lock();
        let cookie = Self::new_xfer(&mut st, Kind::PutInline)?;
        let r = self.wait_room(&mut st, Room::Request).and_then(|()| {
            let body = Body::PutInline {
                cookie,
                len,
                seed,
                check,
            };
            self.send_inline_locked(&mut st, body, |d| region.with_cpu(|b| b.copy_out(d)))?;
            Self::sent(&mut st, cookie, len.into());
            st.stats.inline += 1;
            let mut left = msecs_to_jiffies(ms);
            match self.wait_xfer(&mut st, cookie, &mut left, |x| {
                !matches!(x.step, Step::Waiting)
            })? {
                (_, Some(0)) => Ok(()),
                (_, Some(e)) | (Step::Failed(e), None) => Err(Error::from_errno(e)),
                _ => Err(EINVAL),
            }
        });
        self.forget_xfer(&mut st, cookie);
        r
    }

    /// An inline GET into `region`: the data arrives in the answer and is copied there by
    /// the receive handler ([`Conn::inline_data`]); the caller checks it.
    pub(super) fn get_inline(&self, region: &Region, seed: u32, check: Check, ms: u32) -> Result {
        let size = region.buffer().len() as u64;
        let mut st = self.st.lock();
        let cookie = Self::new_xfer(&mut st, Kind::GetInline)?;
        if let Some(x) = st.xfers.iter_mut().find(|x| x.cookie == cookie) {
            x.into = Some(region.mapped());
        }
        let r = self.wait_room(&mut st, Room::Request).and_then(|()| {
            let req = Body::GetInline {
                cookie,
                size,
                seed,
                check,
            };
            self.send_locked(&mut st, req, false)?;
            Self::sent(&mut st, cookie, size);
            st.stats.inline += 1;
            match self.wait_answer(&mut st, cookie, ms)? {
                Step::Done(_) => Ok(()),
                _ => Err(EINVAL),
            }
        });
        // Drops `into`: no answer can reach the region after this.
        self.forget_xfer(&mut st, cookie);
        r
    }

    /// The data of a `GET_DATA` for transfer `cookie`: copied into its region. Anything
    /// but the answer to an inline GET of exactly that size, still waiting, is a protocol
    /// violation.
    pub(super) fn inline_data(
        st: &mut ConnState,
        cookie: u64,
        data: &[u8],
    ) -> core::result::Result<(), &'static str> {
        let x = st
            .xfers
            .iter()
            .find(|x| x.cookie == cookie && x.sent.is_some())
            .ok_or("GET_DATA for an unknown transfer")?;
        if x.kind != Kind::GetInline || !matches!(x.step, Step::Waiting) {
            return Err("GET_DATA for a transfer not waiting for it");
        }
        if data.len() as u64 != x.size {
            return Err("GET_DATA of another size than asked");
        }
        let into = x.into.as_ref().ok_or("GET_DATA without a buffer")?;
        let copied = into.with_cpu(|b| b.copy_in(data));
        let step = match copied {
            Ok(()) => Step::Done(None),
            Err(e) => Step::Failed(e.to_errno()),
        };
        Self::step(st, cookie, Kind::GetInline, step)
    }

    /// The sink side of an inline PUT: its data, in the receive buffer, is checked there;
    /// the verdict goes back (it is also the acknowledgement).
    pub(super) fn serve_put_inline(
        &self,
        st: &mut ConnState,
        cookie: u64,
        mismatch: Option<usize>,
    ) -> core::result::Result<(), &'static str> {
        let status = self.put_verdict(st, mismatch);
        self.peer_request(st, Owed::Result(cookie, status))?;
        st.stats.served += 1;
        st.stats.inline += 1;
        Ok(())
    }

    /// The source side of an inline GET: the pattern of `seed` (zeros without a check)
    /// goes back in a `GET_DATA`.
    pub(super) fn serve_get_inline(
        &self,
        st: &mut ConnState,
        cookie: u64,
        size: u64,
        seed: u32,
        check: Check,
    ) -> Result {
        let len = u32::try_from(size).map_err(|_| EMSGSIZE)?;
        let body = Body::GetData {
            cookie,
            status: 0,
            len,
        };
        let iface = &self.iface;
        self.send_inline_locked(st, body, |d| {
            region::fill_bytes(d, seed, check);
            iface.corrupt_hook_bytes(d);
            Ok(())
        })?;
        st.stats.served += 1;
        st.stats.inline += 1;
        Ok(())
    }
}
