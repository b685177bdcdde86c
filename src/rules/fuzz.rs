// SPDX-License-Identifier: GPL-2.0

//! The fuzzing peer's mutator (test only, the `fuzz` control command): what a node that
//! lies does to the messages and connection parameters it sends.
//!
//! Pure logic: no `kernel::`, compiled by the host tests too (which run the receiver's
//! decoder on a corpus mutated by this same code). A run is reproducible from its seed: the
//! same seed, rate and messages give the same mutations.
//!
//! Mutations are random bit flips and field-aware changes of the wire format
//! (`Documentation/wire.rst`): type, length, credits, cookies, stamps, registration
//! counts, addresses, lengths and rkeys, sizes, statuses, check modes, truncation and
//! trailing bytes, and every field of the connection parameters. When the message carries a
//! checksum, most mutations recompute it, so that the receiver's checks behind the checksum
//! are reached; a bit flip keeps the old one a quarter of the time (the checksum must catch
//! it).

use crate::rules::wire::{self, Type, CONN_LEN, HDR_LEN, REG_LEN};

/// A seedable generator (splitmix64).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Rng(u64);

impl Rng {
    /// The generator of `seed`.
    pub(crate) const fn new(seed: u64) -> Self {
        Rng(seed)
    }

    /// The next 64 random bits.
    pub(crate) fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number below `n` (0 when `n` is 0).
    pub(crate) fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            0
        } else {
            self.next() % n
        }
    }

    /// True `n` times in `d`.
    fn chance(&mut self, n: u64, d: u64) -> bool {
        self.below(d) < n
    }

    /// A value a hostile peer would pick for a field of `bits` bits: 0, 1, the largest,
    /// the largest signed, around a power of two, or random.
    fn nasty(&mut self, bits: u32) -> u64 {
        let max = if bits >= 64 {
            u64::MAX
        } else {
            (1u64 << bits) - 1
        };
        let v = match self.below(7) {
            0 => 0,
            1 => 1,
            2 => max,
            3 => max >> 1,
            4 => (1u64 << self.below(u64::from(bits))).wrapping_sub(self.below(2)),
            5 => (1u64 << self.below(u64::from(bits))).wrapping_add(1),
            _ => self.next(),
        };
        v & max
    }
}

/// What a mutation changed (counted per kind by the fuzzing node).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum Mutation {
    /// One to four random bits anywhere.
    BitFlip,
    /// The message type (another valid type, or any byte).
    Type,
    /// The length field.
    Length,
    /// The credits returned.
    Credits,
    /// A cookie (another transfer's, or any value).
    Cookie,
    /// The source or destination stamp.
    Stamp,
    /// The registration count.
    Count,
    /// A registration's address.
    Address,
    /// A registration's length.
    RegLen,
    /// A registration's rkey.
    Rkey,
    /// A size (of a transfer, or of inline data).
    Size,
    /// A status.
    Status,
    /// The check mode or the reserved bytes after it.
    Check,
    /// Bytes cut off the end.
    Truncate,
    /// Bytes added at the end.
    Extend,
    /// A field of the connection parameters (private data).
    Params,
}

impl Mutation {
    /// Every kind, in counter order.
    pub(crate) const ALL: [Mutation; 16] = [
        Mutation::BitFlip,
        Mutation::Type,
        Mutation::Length,
        Mutation::Credits,
        Mutation::Cookie,
        Mutation::Stamp,
        Mutation::Count,
        Mutation::Address,
        Mutation::RegLen,
        Mutation::Rkey,
        Mutation::Size,
        Mutation::Status,
        Mutation::Check,
        Mutation::Truncate,
        Mutation::Extend,
        Mutation::Params,
    ];

    /// Its name (debugfs and the CLI).
    pub(crate) fn name(self) -> &'static str {
        match self {
            Mutation::BitFlip => "bitflip",
            Mutation::Type => "type",
            Mutation::Length => "length",
            Mutation::Credits => "credits",
            Mutation::Cookie => "cookie",
            Mutation::Stamp => "stamp",
            Mutation::Count => "count",
            Mutation::Address => "addr",
            Mutation::RegLen => "reg_len",
            Mutation::Rkey => "rkey",
            Mutation::Size => "size",
            Mutation::Status => "status",
            Mutation::Check => "check",
            Mutation::Truncate => "truncate",
            Mutation::Extend => "extend",
            Mutation::Params => "params",
        }
    }
}

fn put_le(b: &mut [u8], at: usize, bytes: usize, v: u64) {
    if let Some(d) = b.get_mut(at..at + bytes) {
        d.copy_from_slice(&v.to_le_bytes()[..bytes]);
    }
}

fn get_le(b: &[u8], at: usize, bytes: usize) -> u64 {
    let mut x = [0u8; 8];
    if let Some(s) = b.get(at..at + bytes) {
        x[..bytes].copy_from_slice(s);
    }
    u64::from_le_bytes(x)
}

/// Changes the `bytes`-byte field at `at` to a nasty value, or nudges it by one.
fn field(rng: &mut Rng, b: &mut [u8], at: usize, bytes: usize) {
    let old = get_le(b, at, bytes);
    let bits = (bytes * 8) as u32;
    let v = match rng.below(4) {
        0 => old.wrapping_add(1),
        1 => old.wrapping_sub(1),
        _ => rng.nasty(bits),
    };
    put_le(b, at, bytes, v);
}

/// The registrations of the message in `b`: where the count is and where they start.
fn regs_at(t: Option<Type>) -> Option<(usize, usize)> {
    let fixed = match t? {
        Type::PutAck => 24,
        Type::GetReq => 32,
        _ => return None,
    };
    Some((HDR_LEN + fixed - 8, HDR_LEN + fixed))
}

/// Mutates the message of `len` bytes at the start of `buf` (which has room up to its own
/// length for [`Mutation::Extend`]); returns the message's new length and what was done.
/// `len` is clamped to `buf.len()`.
pub(crate) fn mutate_msg(rng: &mut Rng, buf: &mut [u8], len: usize) -> (usize, Mutation) {
    let len = len.min(buf.len());
    let checksummed = get_le(buf, 12, 4) != 0;
    let t = buf.get(6).and_then(|&t| Type::from_u8(t));
    let body = HDR_LEN;
    let regs = regs_at(t);
    let nregs = regs.map_or(0, |(c, start)| {
        (get_le(buf, c, 2) as usize).min(len.saturating_sub(start) / REG_LEN)
    });
    let mut new_len = len;
    // A field-aware kind; one that does not apply to this message's type, or to a message
    // shorter than a header, is a bit flip.
    let mut m = Mutation::ALL[rng.below(15) as usize];
    if len < HDR_LEN && !matches!(m, Mutation::Truncate | Mutation::Extend) {
        m = Mutation::BitFlip;
    }
    let b = &mut buf[..];
    match m {
        Mutation::Type => {
            b[6] = if rng.chance(3, 4) {
                0xd0 + rng.below(14) as u8
            } else {
                rng.next() as u8
            }
        }
        Mutation::Length => field(rng, b, 8, 4),
        Mutation::Credits => field(rng, b, 7, 1),
        Mutation::Stamp => {
            let at = 16 + 8 * rng.below(2) as usize;
            field(rng, b, at, 8)
        }
        Mutation::Cookie if len >= body + 8 => field(rng, b, body, 8),
        Mutation::Cookie if t == Some(Type::PutAck) && len >= body + 16 => {
            field(rng, b, body + 8, 8)
        }
        Mutation::Count if regs.is_some() => field(rng, b, regs.map_or(0, |r| r.0), 2),
        Mutation::Address | Mutation::RegLen | Mutation::Rkey if nregs > 0 => {
            let start = regs.map_or(0, |r| r.1) + REG_LEN * rng.below(nregs as u64) as usize;
            match m {
                Mutation::Address => field(rng, b, start, 8),
                Mutation::RegLen => field(rng, b, start + 8, 4),
                _ => field(rng, b, start + 12, 4),
            }
        }
        Mutation::Size
            if matches!(
                t,
                Some(Type::PutReq | Type::GetReq | Type::PutInline | Type::GetInline)
            ) =>
        {
            field(rng, b, body + 8, 8)
        }
        Mutation::Status
            if matches!(
                t,
                Some(
                    Type::PutNak | Type::PutResult | Type::PutDone | Type::GetDone | Type::GetData
                )
            ) =>
        {
            let n = 4 + 4 * rng.below(2) as usize;
            field(rng, b, body + 8, n)
        }
        Mutation::Check
            if matches!(
                t,
                Some(Type::PutReq | Type::GetReq | Type::PutInline | Type::GetInline)
            ) =>
        {
            let n = 1 + rng.below(4) as usize;
            field(rng, b, body + 20, n)
        }
        Mutation::Truncate if len > 0 => new_len = rng.below(len as u64) as usize,
        Mutation::Extend if b.len() > len => {
            new_len = len + 1 + rng.below((b.len() - len).min(64) as u64 - 1) as usize;
            for x in &mut b[len..new_len] {
                *x = rng.next() as u8;
            }
        }
        _ => {
            m = Mutation::BitFlip;
            for _ in 0..=rng.below(4) {
                if len > 0 {
                    let at = rng.below(len as u64) as usize;
                    b[at] ^= 1 << rng.below(8);
                }
            }
        }
    }
    // Behind the checksum: recompute it over what is sent, so that the checks after it
    // see the mutation (a bit flip keeps the old one a quarter of the time).
    let keep = m == Mutation::BitFlip && rng.chance(1, 4);
    if checksummed && !keep && new_len >= 16 {
        let c = wire::checksum(&b[..new_len]);
        put_le(b, 12, 4, u64::from(c));
    }
    (new_len, m)
}

/// Mutates connection parameters in `b` (private data of a request, accept or reject):
/// one field to a nasty value, or a few bit flips.
pub(crate) fn mutate_params(rng: &mut Rng, b: &mut [u8]) -> Mutation {
    // (offset, bytes) of every field (wire/conn.rs, ConnParams::encode).
    const FIELDS: [(usize, usize); 14] = [
        (0, 4),
        (4, 1),
        (5, 1),
        (6, 2),
        (8, 2),
        (10, 2),
        (12, 4),
        (16, 4),
        (20, 4),
        (24, 4),
        (28, 2),
        (30, 2),
        (32, 8),
        (40, 8),
    ];
    let len = b.len().min(CONN_LEN);
    if rng.chance(3, 4) {
        let (at, n) = FIELDS[rng.below(FIELDS.len() as u64) as usize];
        field(rng, &mut b[..len], at, n);
        Mutation::Params
    } else {
        for _ in 0..=rng.below(4) {
            if len > 0 {
                let at = rng.below(len as u64) as usize;
                b[at] ^= 1 << rng.below(8);
            }
        }
        Mutation::BitFlip
    }
}

/// A fuzzing run: mutates `rate` of every million messages (and connection parameters)
/// sent, until `left` mutations were made.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Fuzzer {
    rng: Rng,
    /// Mutations per million messages.
    pub(crate) rate: u32,
    /// Mutations still to make.
    pub(crate) left: u64,
    /// Messages seen while on.
    pub(crate) seen: u64,
    /// Mutations made, by [`Mutation`] (its discriminant).
    pub(crate) made: [u64; 16],
}

impl Fuzzer {
    /// A run from `seed`: `rate` per million messages (at most a million), `count`
    /// mutations in all.
    pub(crate) fn new(seed: u64, rate: u32, count: u64) -> Self {
        Fuzzer {
            rng: Rng::new(seed),
            rate: rate.min(1_000_000),
            left: count,
            seen: 0,
            made: [0; 16],
        }
    }

    /// Mutations made in all.
    pub(crate) fn total(&self) -> u64 {
        self.made.iter().sum()
    }

    /// Whether the next thing sent is mutated (consumes one of `left`).
    fn draw(&mut self) -> bool {
        self.seen = self.seen.saturating_add(1);
        if self.left == 0 || !self.rng.chance(u64::from(self.rate), 1_000_000) {
            return false;
        }
        self.left -= 1;
        true
    }

    /// A message of `len` bytes in `buf` is about to be sent: mutated or not; its length
    /// to send and the mutation, if any.
    pub(crate) fn message(&mut self, buf: &mut [u8], len: usize) -> (usize, Option<Mutation>) {
        if !self.draw() {
            return (len, None);
        }
        let (n, m) = mutate_msg(&mut self.rng, buf, len);
        self.made[m as usize] += 1;
        (n, Some(m))
    }

    /// Connection parameters in `b` are about to be sent: mutated or not.
    pub(crate) fn params(&mut self, b: &mut [u8]) -> Option<Mutation> {
        if !self.draw() {
            return None;
        }
        let m = mutate_params(&mut self.rng, b);
        self.made[m as usize] += 1;
        Some(m)
    }
}
