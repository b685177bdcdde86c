// SPDX-License-Identifier: GPL-2.0

//! Tests of `src/rules/fuzz.rs` (the fuzzing peer's mutator) and `src/rules/tally.rs`, and the corpus
//! run of the receiver's decoder: a corpus of one valid message of every type (with and
//! without checksums) and the connection parameters, mutated 100,000 times by the same
//! mutator the fuzzing peer uses in the VM.

use crate::rules::{
    fuzz::{mutate_msg, mutate_params, Fuzzer, Mutation, Rng},
    tally::*,
    wire::*,
};
use proptest::prelude::*;

use crate::wire_tests::{regs, LOCAL, PEER};

/// The wire tests' limits, with checksums on or off.
fn lim(checksum: bool) -> Limits {
    Limits {
        checksum,
        ..crate::wire_tests::lim()
    }
}

/// One encoded message of every type.
fn corpus(checksum: bool) -> Vec<Vec<u8>> {
    let two = regs(&[(0x1000, 4096, 9), (0x9000, 4096, 10)]);
    let bodies = [
        Body::Noop,
        Body::Immediate {
            cookie: 1,
            payload: b"ping",
        },
        Body::PutReq {
            cookie: 1,
            size: 8192,
            seed: 9,
            check: Check::Full,
        },
        Body::PutNak {
            cookie: 1,
            status: -12,
        },
        Body::PutAck {
            cookie: 1,
            sink_cookie: 2,
            regs: two,
        },
        Body::Done {
            get: false,
            cookie: 2,
            status: 0,
        },
        Body::GetReq {
            cookie: 3,
            size: 8192,
            seed: 9,
            check: Check::Simple,
            regs: two,
        },
        Body::Done {
            get: true,
            cookie: 3,
            status: -5,
        },
        Body::PutResult {
            cookie: 1,
            status: -74,
        },
        Body::PutInline {
            cookie: 4,
            len: 100,
            seed: 7,
            check: Check::Full,
        },
        Body::GetInline {
            cookie: 5,
            size: 100,
            seed: 7,
            check: Check::Full,
        },
        Body::GetData {
            cookie: 5,
            status: 0,
            len: 100,
        },
    ];
    let mut out = [0u8; 4096];
    bodies
        .iter()
        .map(|&body| {
            let m = Msg {
                credits: 3,
                src_stamp: PEER,
                dst_stamp: LOCAL,
                body,
            };
            let n = encode_with(&m, &mut out, checksum, |d| d.fill(0x5a)).unwrap();
            out[..n].to_vec()
        })
        .collect()
}

fn params() -> ConnParams {
    ConnParams {
        version: VERSION,
        queue_depth: 8,
        max_regs: 16,
        max_payload: 1 << 20,
        max_msg: 4096,
        page_size: 4096,
        features: FEATURES,
        reason: 0,
        port: 7471,
        max_inline: 2048,
        stamp: PEER,
        dst_stamp: LOCAL,
    }
}

#[test]
fn corpus_is_valid() {
    for ck in [false, true] {
        for b in corpus(ck) {
            decode(&b, &lim(ck)).unwrap();
        }
    }
}

/// The corpus run: 100,000 mutated messages. The decoder never panics; what it accepts
/// re-encodes to exactly the bytes received (nothing misread); a message whose length
/// changed is never accepted; with checksums on, a bit flip that kept the old checksum is
/// refused. Every kind of mutation is made, and most mutated messages are refused.
#[test]
fn decoder_survives_100k_mutated_messages() {
    let mut rng = Rng::new(0x5eed);
    let mut made = [0u64; Mutation::ALL.len()];
    let (mut accepted, mut refused_params) = (0u64, 0u64);
    let mut out = [0u8; 8192];
    for ck in [false, true] {
        let corpus = corpus(ck);
        for i in 0..50_000u64 {
            let orig = &corpus[(i % corpus.len() as u64) as usize];
            let mut buf = orig.clone();
            buf.resize(orig.len() + 64, 0);
            let (n, m) = mutate_msg(&mut rng, &mut buf, orig.len());
            made[m as usize] += 1;
            let b = &buf[..n];
            if let Ok(msg) = decode(b, &lim(ck)) {
                accepted += 1;
                assert!(
                    !matches!(m, Mutation::Truncate | Mutation::Extend),
                    "{m:?} accepted"
                );
                let c = encode_with(&msg, &mut out, ck, |d| d.copy_from_slice(payload(b, &msg)))
                    .unwrap();
                let mut want = b.to_vec();
                if !ck {
                    want[12..16].fill(0);
                }
                assert_eq!(&out[..c], &want[..], "{m:?} accepted and misread");
                if ck && m == Mutation::BitFlip && b != &orig[..] {
                    // Only a flip that recomputed the checksum gets through.
                    assert_eq!(get_ck(b), checksum(b));
                }
            }
            // The same bytes as private data.
            let mut p = params().encode();
            if mutate_params(&mut rng, &mut p) == Mutation::Params {
                made[Mutation::Params as usize] += 1;
            }
            if ConnParams::decode(&p).is_err() {
                refused_params += 1;
            }
            let _ = ConnParams::decode(b);
        }
    }
    for k in Mutation::ALL {
        assert!(
            made[k as usize] > 100,
            "{k:?} made only {} times",
            made[k as usize]
        );
    }
    // Most mutations are caught; some keep a message valid (a cookie, a seed, a status).
    assert!(
        accepted > 0 && accepted < 30_000,
        "accepted {accepted} of 100000"
    );
    assert!(refused_params > 10_000, "refused params {refused_params}");
}

fn get_ck(b: &[u8]) -> u32 {
    u32::from_le_bytes([b[12], b[13], b[14], b[15]])
}

#[test]
fn a_run_is_reproducible_from_its_seed() {
    let corpus = corpus(true);
    let run = |seed| {
        let mut f = Fuzzer::new(seed, 500_000, 1000);
        let mut sent = Vec::new();
        for i in 0..2000 {
            let mut b = corpus[i % corpus.len()].clone();
            b.resize(b.len() + 64, 0);
            let n = b.len() - 64;
            let (n, _) = f.message(&mut b, n);
            sent.push(b[..n].to_vec());
        }
        (sent, f.made)
    };
    assert_eq!(run(7), run(7));
    assert_ne!(run(7).0, run(8).0);
}

#[test]
fn a_run_makes_its_count_at_its_rate_then_stops() {
    let corpus = corpus(false);
    let mut f = Fuzzer::new(1, 100_000, 300);
    let mut mutated = 0;
    for i in 0..10_000 {
        let orig = corpus[i % corpus.len()].clone();
        let mut b = orig.clone();
        b.resize(b.len() + 64, 0);
        let (n, m) = f.message(&mut b, orig.len());
        match m {
            Some(_) => mutated += 1,
            None => assert_eq!(&b[..n], &orig[..], "changed without a mutation"),
        }
        if i == 999 {
            // About 10 % of the first thousand.
            assert!((50..=150).contains(&mutated), "{mutated} of 1000 at 10 %");
        }
    }
    assert_eq!(mutated, 300);
    assert_eq!(f.left, 0);
    assert_eq!(f.made.iter().sum::<u64>(), 300);
    let mut p = params().encode();
    assert_eq!(f.params(&mut p), None);
    assert_eq!(p, params().encode());
}

/// Found by `mutate_stays_in_bounds` (a 5-byte buffer: a type mutation wrote byte 6):
/// buffers shorter than a header, with every seed's first mutations.
#[test]
fn mutate_short_buffers() {
    for n in 0..=HDR_LEN {
        for seed in 0..2000 {
            let mut b = vec![0xd4u8; n];
            let mut rng = Rng::new(seed);
            let (len, _) = mutate_msg(&mut rng, &mut b, n);
            assert!(len <= n);
        }
    }
}

proptest! {
    /// Any buffer, any length: the mutator stays within the buffer and never panics.
    #[test]
    fn mutate_stays_in_bounds(
        mut b in prop::collection::vec(any::<u8>(), 0..300usize),
        len in 0usize..400,
        seed in any::<u64>(),
    ) {
        let mut rng = Rng::new(seed);
        let (n, _) = mutate_msg(&mut rng, &mut b, len);
        prop_assert!(n <= b.len());
        let _ = mutate_params(&mut rng, &mut b);
    }
}

#[test]
fn tally_counts_by_name_and_overflows_to_other() {
    let mut t = Tally::new();
    t.count("a");
    t.count("b");
    t.count("a");
    assert_eq!(t.iter().collect::<Vec<_>>(), vec![("a", 2), ("b", 1)]);
    const NAMES: [&str; 40] = [
        "n0", "n1", "n2", "n3", "n4", "n5", "n6", "n7", "n8", "n9", "n10", "n11", "n12", "n13",
        "n14", "n15", "n16", "n17", "n18", "n19", "n20", "n21", "n22", "n23", "n24", "n25", "n26",
        "n27", "n28", "n29", "n30", "n31", "n32", "n33", "n34", "n35", "n36", "n37", "n38", "n39",
    ];
    for n in NAMES {
        t.count(n);
    }
    assert_eq!(t.iter().count(), TALLY_NAMES);
    assert_eq!(t.other, 40 + 2 - TALLY_NAMES as u64);
    assert_eq!(t.iter().map(|(_, n)| n).sum::<u64>() + t.other, 43);
}
