// SPDX-License-Identifier: GPL-2.0

//! The fuzzing peer (the test build only: `fuzz LOCAL seed=S rate=PPM count=N` on the `ctl`
//! file): an interface that mutates what it sends, messages and connection parameters, with
//! [`crate::rules::fuzz`]. What a fuzzing peer cost the node it talks to shows in the count,
//! on every interface, of connections closed by reason ([`Iface::count_closed`]).

use super::*;
use crate::rules::fuzz::Fuzzer;

impl Iface {
    /// Starts a fuzzing run of `count` mutations at `rate` per million things sent, from
    /// `seed` (`count` 0 stops the run).
    pub(crate) fn fuzz(&self, seed: u64, rate: u32, count: u64) {
        let mut f = self.hooks.fuzz.lock();
        *f = (count > 0).then(|| Fuzzer::new(seed, rate, count));
        self.hooks.fuzzing.store(count > 0, Relaxed);
        if count > 0 {
            pr_info!(
                "{}: test hook: fuzzing on (seed {}, {} per million, {} mutations)\n",
                self.addr,
                seed,
                rate,
                count
            );
        } else {
            pr_info!("{}: test hook: fuzzing off\n", self.addr);
        }
    }

    /// A message of `len` bytes in `buf` is about to be sent: mutated or not, its length
    /// to send (at most `buf.len()`).
    pub(super) fn fuzz_msg(&self, buf: &mut [u8], len: usize) -> usize {
        let mut n = len;
        self.fuzzing_run(|fz| {
            let (sent, m) = fz.message(buf, len);
            n = sent;
            m.is_some()
        });
        n
    }

    /// Connection parameters `p` about to be sent (request, accept or reject): encoded,
    /// and mutated if a fuzzing run says so.
    pub(super) fn outgoing(&self, p: &ConnParams) -> [u8; wire::CONN_LEN] {
        let mut b = p.encode();
        self.fuzzing_run(|fz| fz.params(&mut b).is_some());
        b
    }

    /// Runs `act` on the fuzzing run, if one is on (it returns whether it mutated); the
    /// run ends with its last mutation.
    fn fuzzing_run(&self, act: impl FnOnce(&mut Fuzzer) -> bool) {
        if !self.hooks.fuzzing.load(Relaxed) {
            return;
        }
        let mut f = self.hooks.fuzz.lock();
        if let Some(fz) = (*f).as_mut() {
            if act(fz) && fz.left == 0 {
                self.fuzz_done(fz);
            }
        }
    }

    fn fuzz_done(&self, fz: &Fuzzer) {
        self.hooks.fuzzing.store(false, Relaxed);
        pr_info!(
            "{}: test hook: fuzzing done: {} mutations in {} things sent\n",
            self.addr,
            fz.total(),
            fz.seen
        );
    }

    /// A copy of the fuzzing run, for debugfs.
    pub(super) fn fuzz_snapshot(&self) -> Option<Fuzzer> {
        *self.hooks.fuzz.lock()
    }
}
