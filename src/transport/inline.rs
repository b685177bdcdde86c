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
    /// Sends inline PUT record `i`: the request carries the data (already filled).
    pub(super) fn send_put_inline(&self, st: &mut ConnState, i: usize) -> Result {
        let x = &mut st.xfers[i];
        let len = u32::try_from(x.size).map_err(|_| EMSGSIZE)?;
        let body = Body::PutInline {
            cookie: x.cookie,
            len,
            seed: x.seed,
            check: x.check,
        };
        let region = x.region.take();
        let r = match &region {
            Some(r) => self.send_inline_locked(st, body, |d| r.with_cpu(|b| b.copy_out(d))),
            None => Err(EINVAL),
        };
        st.xfers[i].region = region;
        r
    }

    /// Sends the request of inline GET record `i`.
    pub(super) fn send_get_inline(&self, st: &mut ConnState, i: usize) -> Result {
        let x = &st.xfers[i];
        let req = Body::GetInline {
            cookie: x.cookie,
            size: x.size,
            seed: x.seed,
            check: x.check,
        };
        self.send_locked(st, req, false)
    }

    /// The `GET_DATA` of record `cookie` (`Err`: the peer's error status): its data is
    /// copied into the record's region, which is the record's until it is reported.
    /// Anything but the answer to an inline GET of exactly that size, still waiting, is a
    /// protocol violation.
    pub(super) fn inline_data(
        &self,
        st: &mut ConnState,
        cookie: u64,
        data: core::result::Result<&[u8], i32>,
    ) -> core::result::Result<(), &'static str> {
        let i = Self::find(st, cookie).ok_or("GET_DATA for an unknown transfer")?;
        let x = &mut st.xfers[i];
        if x.t.kind() != Kind::GetInline || x.t.state() != xfer_state::State::Requested {
            return Err("GET_DATA for a transfer not waiting for it");
        }
        let ev = match data {
            Err(status) => XEvent::Refused(status),
            Ok(data) => {
                if data.len() as u64 != x.size {
                    return Err("GET_DATA of another size than asked");
                }
                let into = x.region.as_ref().ok_or("GET_DATA without a buffer")?;
                match into.with_cpu(|b| b.copy_in(data)) {
                    Ok(()) => XEvent::Answered { inv_all: false },
                    Err(e) => XEvent::Refused(e.to_errno()),
                }
            }
        };
        self.apply(st, i, ev);
        Ok(())
    }

    /// The sink side of an inline PUT: its data, in the receive buffer, is checked there;
    /// the verdict goes back (it is also the acknowledgement).
    pub(super) fn serve_put_inline(
        &self,
        st: &mut ConnState,
        cookie: u64,
        mismatch: Option<usize>,
        len: u64,
    ) -> core::result::Result<(), &'static str> {
        let status = self.put_verdict(st, mismatch);
        self.peer_request(st, Owed::Result(cookie, status))?;
        st.stats.served += 1;
        self.iface.count_moved(true, len);
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
        self.iface.mangle_get_data(st);
        let iface = &self.iface;
        self.send_inline_locked(st, body, |d| {
            region::fill_bytes(d, seed, check);
            iface.corrupt_hook_bytes(d);
            Ok(())
        })?;
        st.stats.served += 1;
        self.iface.count_moved(false, size);
        st.stats.inline += 1;
        Ok(())
    }
}
