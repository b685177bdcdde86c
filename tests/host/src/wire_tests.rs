// SPDX-License-Identifier: GPL-2.0

//! Tests of `src/rules/wire/`: golden byte vectors for every message, round trips, and a
//! decoder fuzzed with random and mutated input.

use crate::rules::wire::*;
use proptest::prelude::*;

pub(crate) const LOCAL: u64 = 0x1111_2222_3333_4444;
pub(crate) const PEER: u64 = 0x5555_6666_7777_8888;

pub(crate) fn lim() -> Limits {
    Limits {
        max_msg: 4096,
        max_payload: 1 << 20,
        max_regs: 16,
        max_inline: 2048,
        max_credits: 8,
        checksum: false,
        local_stamp: LOCAL,
        peer_stamp: PEER,
    }
}

fn msg(body: Body<'_>) -> Msg<'_> {
    Msg {
        credits: 3,
        src_stamp: PEER,
        dst_stamp: LOCAL,
        body,
    }
}

pub(crate) fn regs(v: &[(u64, u32, u32)]) -> Regs {
    let mut r = Regs::new();
    for &(addr, len, rkey) in v {
        assert!(r.push(Reg { addr, len, rkey }));
    }
    r
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

const HDR: &str = "4652474d0200"; // magic "FRGM", version 2

fn header(kind: &str, len: u32) -> String {
    format!(
        "{HDR}{kind}03{}00000000{}{}",
        hex(&len.to_le_bytes()),
        hex(&PEER.to_le_bytes()),
        hex(&LOCAL.to_le_bytes())
    )
}

fn golden(m: &Msg<'_>, body_hex: &str, kind: &str) {
    let mut out = [0u8; 4096];
    let n = encode(m, &mut out, false).unwrap();
    let want = header(kind, n as u32) + body_hex;
    assert_eq!(hex(&out[..n]), want, "{:?}", m.kind());
    assert_eq!(decode(&out[..n], &lim()).unwrap(), *m);
}

#[test]
fn golden_vectors() {
    golden(&msg(Body::Noop), "", "d0");
    golden(
        &msg(Body::Immediate {
            cookie: 0x0102_0304_0506_0708,
            payload: b"hi",
        }),
        "08070605040302016869",
        "d1",
    );
    golden(
        &msg(Body::Control {
            reply: false,
            cookie: 5,
            payload: &[5, 0, 0, 0],
        }),
        "050000000000000005000000",
        "dc",
    );
    golden(
        &msg(Body::Control {
            reply: true,
            cookie: 5,
            payload: &[1; 3],
        }),
        "0500000000000000010101",
        "dd",
    );
    golden(
        &msg(Body::PutReq {
            cookie: 7,
            size: 0x10_0000,
            seed: 0xa1b2_c3d4,
            check: Check::Full,
        }),
        "07000000000000000000100000000000\
         d4c3b2a102000000",
        "d2",
    );
    golden(
        &msg(Body::PutNak {
            cookie: 7,
            status: -12,
        }),
        "0700000000000000f4ffffff00000000",
        "d3",
    );
    golden(
        &msg(Body::PutAck {
            cookie: 7,
            sink_cookie: 9,
            regs: regs(&[(0xffff_8880_0000_0001, 0x10_0000, 0xabcd_ef01)]),
        }),
        "07000000000000000900000000000000\
         0100000000000000\
         010000008088ffff0000100001efcdab",
        "d4",
    );
    golden(
        &msg(Body::Done {
            get: false,
            cookie: 9,
            status: 0,
        }),
        "09000000000000000000000000000000",
        "d5",
    );
    golden(
        &msg(Body::GetReq {
            cookie: 5,
            size: 8192,
            seed: 3,
            check: Check::Simple,
            regs: regs(&[(0x1000, 4096, 1), (0x9000, 4096, 2)]),
        }),
        "05000000000000000020000000000000\
         0300000001000000\
         0200000000000000\
         00100000000000000010000001000000\
         00900000000000000010000002000000",
        "d6",
    );
    golden(
        &msg(Body::Done {
            get: true,
            cookie: 5,
            status: -110,
        }),
        "050000000000000092ffffff00000000",
        "d7",
    );
    golden(
        &msg(Body::PutResult {
            cookie: 7,
            status: -74,
        }),
        "0700000000000000b6ffffff00000000",
        "d8",
    );
}

#[test]
fn check_values_and_coverage() {
    for c in [Check::None, Check::Simple, Check::Full] {
        assert_eq!(Check::from_u8(c as u8), Some(c));
    }
    assert_eq!(Check::from_u8(3), None);
    // A PUT_REQ with an unknown check, or a reserved byte set, is refused.
    let mut out = [0u8; 4096];
    let n = encode(
        &msg(Body::PutReq {
            cookie: 1,
            size: 10,
            seed: 1,
            check: Check::Full,
        }),
        &mut out,
        false,
    )
    .unwrap();
    let mut b = out[..n].to_vec();
    b[HDR_LEN + 20] = 3;
    assert_eq!(decode(&b, &lim()), Err(WireError::Limit));
    let mut b = out[..n].to_vec();
    b[HDR_LEN + 23] = 1;
    assert_eq!(decode(&b, &lim()), Err(WireError::Reserved));
    // Coverage: none covers nothing, full everything; simple the edges of every 4 KiB
    // block and the last 8 bytes.
    let len = 3 * 4096 + 100;
    let count = |c: Check| (0..len).filter(|&o| c.covers(o, len)).count();
    assert_eq!(count(Check::None), 0);
    assert_eq!(count(Check::Full), len);
    assert_eq!(count(Check::Simple), 4 * 16);
    for o in [0, 7, 4088, 4095, 4096, 8191, 12288, len - 1] {
        assert!(Check::Simple.covers(o, len), "{o}");
    }
    for o in [8, 4087, 4104, 12296, len - 9] {
        assert!(!Check::Simple.covers(o, len), "{o}");
    }
}

#[test]
fn conn_params_golden_and_round_trip() {
    let p = ConnParams {
        version: 2,
        queue_depth: 8,
        max_regs: 16,
        max_payload: 1 << 20,
        max_msg: 4096,
        page_size: 65536,
        features: FEATURE_REMOTE_INV,
        reason: 0,
        port: 18515,
        max_inline: 0,
        stamp: LOCAL,
        dst_stamp: 0,
    };
    let b = p.encode();
    assert_eq!(b.len(), 48);
    assert!(b.len() <= 56, "must fit an IB/RoCE REQ's private data");
    assert_eq!(
        hex(&b),
        format!(
            "46524743300002000800100000001000001000000000010001000000534800004444333322221111{}",
            "0000000000000000"
        )
    );
    // rdma_cm pads private data to its slot: trailing bytes are ignored.
    let mut padded = b.to_vec();
    padded.extend_from_slice(&[0xee; 8]);
    assert_eq!(ConnParams::decode(&padded).unwrap(), p);
    for (at, v) in [
        (0usize, 0u8),
        (4, 47),
        (6, 0),
        (8, 0),
        (10, 0),
        (16, 0),
        (20, 3),
        // max_inline 4096: more than 4096-byte messages leave, and 0x5000 beyond
        // MAX_INLINE.
        (31, 0x10),
        (31, 0x50),
    ] {
        let mut bad = b;
        bad[at] = v;
        if at == 8 || at == 10 {
            bad[at + 1] = 0;
        }
        if at == 16 {
            bad[17] = 0;
        }
        assert!(
            ConnParams::decode(&bad).is_err(),
            "byte {at} = {v} accepted"
        );
    }
    assert_eq!(ConnParams::decode(&b[..47]), Err(WireError::Short));
}

#[test]
fn every_field_is_validated() {
    let mut out = [0u8; 4096];
    let m = msg(Body::PutAck {
        cookie: 1,
        sink_cookie: 2,
        regs: regs(&[(0x1000, 100, 3)]),
    });
    let n = encode(&m, &mut out, false).unwrap();
    let good = out[..n].to_vec();
    let check = |f: &dyn Fn(&mut Vec<u8>), want: WireError| {
        let mut b = good.clone();
        f(&mut b);
        assert_eq!(decode(&b, &lim()), Err(want));
    };
    check(&|b| b[0] ^= 1, WireError::Magic);
    check(&|b| b[4] = 1, WireError::Version);
    check(&|b| b[6] = 0xc0, WireError::Type);
    check(&|b| b[7] = 9, WireError::Credits);
    check(&|b| b[8] = b[8].wrapping_add(1), WireError::Length);
    check(&|b| b.truncate(b.len() - 1), WireError::Length);
    check(&|b| b[12] = 1, WireError::Checksum);
    check(&|b| b[16] ^= 1, WireError::Stale);
    check(&|b| b[24] ^= 1, WireError::Stale);
    // Registration count beyond the negotiated limit (and inconsistent with the length).
    check(&|b| b[HDR_LEN + 16] = 17, WireError::Limit);
    check(&|b| b[6] = Type::PutResult as u8, WireError::Length);
    check(&|b| b[HDR_LEN + 18] = 1, WireError::Reserved);
    // A zero-length registration.
    check(
        &|b| {
            let at = HDR_LEN + 24 + 8;
            b[at..at + 4].fill(0)
        },
        WireError::Regs,
    );
    // Too many bytes for the negotiated payload.
    check(
        &|b| {
            let at = HDR_LEN + 24 + 8;
            b[at..at + 4].copy_from_slice(&(2u32 << 20).to_le_bytes())
        },
        WireError::Limit,
    );
    assert_eq!(decode(&good[..HDR_LEN - 1], &lim()), Err(WireError::Short));
    // A GET whose registrations do not add up to its size.
    let g = msg(Body::GetReq {
        cookie: 1,
        size: 200,
        seed: 0,
        check: Check::None,
        regs: regs(&[(0x1000, 100, 3)]),
    });
    let n = encode(&g, &mut out, false).unwrap();
    assert_eq!(decode(&out[..n], &lim()), Err(WireError::Regs));
    // Sizes beyond the limit.
    let p = msg(Body::PutReq {
        cookie: 1,
        size: (1 << 20) + 1,
        seed: 0,
        check: Check::None,
    });
    let n = encode(&p, &mut out, false).unwrap();
    assert_eq!(decode(&out[..n], &lim()), Err(WireError::Limit));
    // A positive status is not an errno.
    let d = msg(Body::Done {
        get: false,
        cookie: 1,
        status: 5,
    });
    let n = encode(&d, &mut out, false).unwrap();
    assert_eq!(decode(&out[..n], &lim()), Err(WireError::Limit));
}

#[test]
fn test_corruptions_are_refused_for_the_right_reason() {
    let mut out = [0u8; 4096];
    let m = msg(Body::GetReq {
        cookie: 1,
        size: 100,
        seed: 0,
        check: Check::None,
        regs: regs(&[(0x1000, 100, 3)]),
    });
    for (k, want) in [
        (Mangle::Magic, WireError::Magic),
        (Mangle::Regs, WireError::Limit),
        (Mangle::Length, WireError::Length),
        (Mangle::Credits, WireError::Credits),
    ] {
        let n = encode(&m, &mut out, false).unwrap();
        mangle(k, &mut out[..n]);
        assert_eq!(decode(&out[..n], &lim()), Err(want), "{k:?}");
    }
}

#[test]
fn checksums_catch_corruption() {
    let mut out = [0u8; 4096];
    let m = msg(Body::Immediate {
        cookie: 1,
        payload: &[0x55; 200],
    });
    let n = encode(&m, &mut out, true).unwrap();
    let on = Limits {
        checksum: true,
        ..lim()
    };
    assert_eq!(decode(&out[..n], &on).unwrap(), m);
    for i in [0usize, 7, 20, 40, n - 1] {
        let mut b = out[..n].to_vec();
        b[i] ^= 0x10;
        assert!(decode(&b, &on).is_err(), "flip at {i} accepted");
    }
    // A checksum is required once negotiated.
    let n = encode(&m, &mut out, false).unwrap();
    assert_eq!(decode(&out[..n], &on), Err(WireError::Checksum));
}

#[test]
fn encode_refuses_what_does_not_fit() {
    let mut small = [0u8; 40];
    assert_eq!(
        encode(
            &msg(Body::PutReq {
                cookie: 1,
                size: 1,
                seed: 0,
                check: Check::None
            }),
            &mut small,
            false
        ),
        None
    );
    let big = vec![0u8; MAX_MSG as usize];
    let mut out = vec![0u8; 2 * MAX_MSG as usize];
    assert_eq!(
        encode(
            &msg(Body::Immediate {
                cookie: 1,
                payload: &big
            }),
            &mut out,
            false
        ),
        None
    );
    let mut r = Regs::new();
    for _ in 0..MAX_REGS {
        assert!(r.push(Reg {
            addr: 1,
            len: 1,
            rkey: 1
        }));
    }
    assert!(!r.push(Reg {
        addr: 1,
        len: 1,
        rkey: 1
    }));
    assert!(encode(
        &msg(Body::PutAck {
            cookie: 1,
            sink_cookie: 1,
            regs: r
        }),
        &mut out,
        false
    )
    .is_some());
}

/// A deterministic generator (xorshift) for the 100k-input fuzz run.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

#[test]
fn decoder_survives_100k_random_and_mutated_inputs() {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut out = [0u8; 4096];
    let seeds: Vec<Vec<u8>> = [
        msg(Body::Noop),
        msg(Body::Immediate {
            cookie: 1,
            payload: b"payload",
        }),
        msg(Body::PutReq {
            cookie: 1,
            size: 4096,
            seed: 9,
            check: Check::Full,
        }),
        msg(Body::PutResult {
            cookie: 1,
            status: -74,
        }),
        msg(Body::PutAck {
            cookie: 1,
            sink_cookie: 2,
            regs: regs(&[(0x1000, 4096, 9)]),
        }),
        msg(Body::GetReq {
            cookie: 1,
            size: 4096,
            seed: 9,
            check: Check::Simple,
            regs: regs(&[(0x1000, 4096, 9)]),
        }),
        msg(Body::Done {
            get: true,
            cookie: 1,
            status: 0,
        }),
    ]
    .iter()
    .map(|m| {
        let n = encode(m, &mut out, false).unwrap();
        out[..n].to_vec()
    })
    .collect();
    let mut accepted = 0;
    for i in 0..100_000u32 {
        let buf: Vec<u8> = if i % 2 == 0 {
            // Pure noise, sometimes with a valid magic and version to get past them.
            let len = (rng.next() % 600) as usize;
            let mut b: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
            if i % 4 == 0 && len >= 8 {
                b[..6].copy_from_slice(&[0x46, 0x52, 0x47, 0x4d, 1, 0]);
            }
            b
        } else {
            // A valid message with a few random byte changes or a random truncation.
            let mut b = seeds[(rng.next() % seeds.len() as u64) as usize].clone();
            for _ in 0..(1 + rng.next() % 3) {
                let at = (rng.next() % b.len() as u64) as usize;
                b[at] = rng.next() as u8;
            }
            if rng.next().is_multiple_of(5) {
                let keep = (rng.next() % (b.len() as u64 + 1)) as usize;
                b.truncate(keep);
            }
            b
        };
        if let Ok(m) = decode(&buf, &lim()) {
            accepted += 1;
            // Whatever is accepted re-encodes to the same bytes: nothing was misread.
            let n = encode(&m, &mut out, false).unwrap();
            assert_eq!(&out[..n], &buf[..], "accepted {buf:x?}");
        }
        let _ = ConnParams::decode(&buf);
    }
    // Mutations that keep a message valid exist (cookies, payload bytes): some pass.
    assert!(accepted > 0);
}

fn any_regs() -> impl Strategy<Value = Vec<(u64, u32, u32)>> {
    prop::collection::vec((0u64..1 << 48, 1u32..65536, any::<u32>()), 1..16)
}

proptest! {
    #[test]
    fn round_trip(
        credits in 0u8..=8,
        cookie in any::<u64>(),
        size in 1u64..=(1 << 20),
        status in -4095i32..=0,
        payload in prop::collection::vec(any::<u8>(), 0..1000),
        rv in any_regs(),
        ck in any::<bool>(),
        seed in any::<u32>(),
        cv in 0u8..3,
    ) {
        let check = Check::from_u8(cv).unwrap();
        let r = regs(&rv);
        let lim = Limits { checksum: ck, ..lim() };
        let bodies = [
            Body::Noop,
            Body::Immediate { cookie, payload: &payload },
            Body::PutReq { cookie, size, seed, check },
            Body::PutResult { cookie, status },
            Body::Done { get: false, cookie, status },
            Body::Done { get: true, cookie, status },
            Body::PutAck { cookie, sink_cookie: !cookie, regs: r },
            Body::GetReq { cookie, size: r.bytes(), seed, check, regs: r },
        ];
        let mut out = [0u8; 4096];
        for body in bodies {
            let m = Msg { credits, src_stamp: PEER, dst_stamp: LOCAL, body };
            let n = encode(&m, &mut out, ck).unwrap();
            prop_assert_eq!(decode(&out[..n], &lim), Ok(m));
        }
        if status != 0 {
            let m = Msg { credits, src_stamp: PEER, dst_stamp: LOCAL, body: Body::PutNak { cookie, status } };
            let n = encode(&m, &mut out, ck).unwrap();
            prop_assert_eq!(decode(&out[..n], &lim), Ok(m));
        }
    }
}

/// A connection negotiated at queue depth 256 admits credits up to 256 + 2 in total: the
/// limit no longer fits a byte (it once overflowed there and panicked the CQ worker).
#[test]
fn credits_limit_at_queue_depth_256() {
    let mut l = lim();
    l.max_credits = 256 + 2;
    let mut buf = [0u8; 4096];
    let mut m = msg(Body::Noop);
    m.credits = 255;
    let n = encode(&m, &mut buf, false).unwrap();
    assert_eq!(decode(&buf[..n], &l).unwrap().credits, 255);
    l.max_credits = 254;
    assert_eq!(decode(&buf[..n], &l), Err(WireError::Credits));
}

#[test]
fn regs_cover_exactly() {
    let r = regs(&[(0x1000, 100, 1), (0x2000, 50, 2)]);
    assert!(regs_cover(&r, 150));
    assert!(!regs_cover(&r, 151), "short advertisement");
    assert!(!regs_cover(&r, 149), "more than asked");
    // Different MRs: their iova ranges are separate spaces, numbers may overlap (as a 2 MiB
    // buffer at offset 4095 in two MRs on rxe, whose iovas are page addresses, does).
    assert!(
        regs_cover(&regs(&[(0x1000, 100, 1), (0x1010, 50, 2)]), 150),
        "two MRs"
    );
    assert!(
        !regs_cover(&regs(&[(0x1000, 100, 1), (0x2000, 50, 1)]), 150),
        "one rkey twice"
    );
    assert!(
        !regs_cover(&regs(&[(0x1000, 100, 1), (0x1000, 100, 1)]), 200),
        "twice"
    );
    assert!(!regs_cover(&Regs::new(), 0), "none");
    let mut s = r;
    s.shorten();
    assert_eq!(s.bytes(), 149);
}

proptest! {
    #[test]
    fn regs_cover_disjoint_ranges(lens in prop::collection::vec(1u32..10_000, 1..MAX_REGS), gap in 0u64..64) {
        let mut r = Regs::new();
        let mut at = 0x10_0000u64;
        for (i, &len) in lens.iter().enumerate() {
            r.push(Reg { addr: at, len, rkey: i as u32 });
            at += u64::from(len) + gap;
        }
        prop_assert!(regs_cover(&r, r.bytes()));
        // Another registration's rkey advertised again is refused, wherever it points.
        if lens.len() > 1 {
            let mut v: Vec<Reg> = r.as_slice().to_vec();
            v[1].rkey = v[0].rkey;
            let mut o = Regs::new();
            for x in v { o.push(x); }
            prop_assert!(!regs_cover(&o, o.bytes()));
        }
    }
}

#[test]
fn misbehave_names_round_trip() {
    for m in Misbehave::ALL {
        assert_eq!(Misbehave::parse(m.name()), Some(m));
    }
    assert_eq!(Misbehave::parse("nice"), None);
}

#[test]
fn remote_errors_are_a_closed_set() {
    for s in [
        0,
        status::EAGAIN,
        status::ENOMEM,
        status::EBADMSG,
        status::EMSGSIZE,
    ] {
        assert_eq!(remote_error(s), s);
    }
    // ERESTARTSYS, EINTR, EPERM, ...: never passed through.
    for s in [-512, -4, -1, -4095, -121, 5, i32::MIN] {
        assert_eq!(remote_error(s), status::EREMOTEIO, "{s}");
    }
}

/// Encodes an inline message whose data is `data`, as the transport does.
fn encode_inline(m: &Msg<'_>, data: &[u8], out: &mut [u8]) -> usize {
    encode_with(m, out, false, |d| d.copy_from_slice(data)).unwrap()
}

#[test]
fn inline_golden_vectors() {
    let mut out = [0u8; 4096];
    let put = msg(Body::PutInline {
        cookie: 7,
        len: 3,
        seed: 0xa1b2_c3d4,
        check: Check::Full,
    });
    let n = encode_inline(&put, b"abc", &mut out);
    assert_eq!(
        hex(&out[..n]),
        header("d9", 32 + 24 + 3)
            + "07000000000000000300000000000000"
            + "d4c3b2a102000000"
            + "616263"
    );
    let m = decode(&out[..n], &lim()).unwrap();
    assert_eq!(m, put);
    assert_eq!(payload(&out[..n], &m), b"abc");
    golden(
        &msg(Body::GetInline {
            cookie: 9,
            size: 2048,
            seed: 5,
            check: Check::Simple,
        }),
        "09000000000000000008000000000000\
         0500000001000000",
        "da",
    );
    let data = msg(Body::GetData {
        cookie: 9,
        status: 0,
        len: 2,
    });
    let n = encode_inline(&data, b"xy", &mut out);
    assert_eq!(
        hex(&out[..n]),
        header("db", 32 + 16 + 2) + "09000000000000000000000000000000" + "7879"
    );
    let m = decode(&out[..n], &lim()).unwrap();
    assert_eq!(payload(&out[..n], &m), b"xy");
    // A failed GET_INLINE: a status and no data.
    golden(
        &msg(Body::GetData {
            cookie: 9,
            status: -12,
            len: 0,
        }),
        "0900000000000000f4ffffff00000000",
        "db",
    );
    // Plain `encode` leaves the data zero; messages of other types have none.
    let n = encode(&put, &mut out, false).unwrap();
    assert_eq!(&out[n - 3..n], &[0, 0, 0]);
    let noop = msg(Body::Noop);
    let n = encode(&noop, &mut out, false).unwrap();
    assert!(payload(&out[..n], &noop).is_empty());
}

#[test]
fn inline_sizes_are_checked_against_the_negotiated_inline_size() {
    let mut out = vec![0u8; MAX_MSG as usize];
    let big = Limits {
        max_msg: MAX_MSG,
        max_inline: MAX_INLINE,
        ..lim()
    };
    for (len, ok) in [(1u32, true), (2048, true), (2049, false)] {
        let m = msg(Body::PutInline {
            cookie: 1,
            len,
            seed: 0,
            check: Check::None,
        });
        let n = encode(&m, &mut out, false).unwrap();
        assert_eq!(decode(&out[..n], &lim()).is_ok(), ok, "PUT_INLINE of {len}");
        assert!(decode(&out[..n], &big).is_ok());
        let g = msg(Body::GetInline {
            cookie: 1,
            size: u64::from(len),
            seed: 0,
            check: Check::None,
        });
        let n = encode(&g, &mut out, false).unwrap();
        assert_eq!(decode(&out[..n], &lim()).is_ok(), ok, "GET_INLINE of {len}");
        let d = msg(Body::GetData {
            cookie: 1,
            status: 0,
            len,
        });
        let n = encode(&d, &mut out, false).unwrap();
        assert_eq!(decode(&out[..n], &lim()).is_ok(), ok, "GET_DATA of {len}");
    }
    // No inline negotiated: every inline message is refused.
    let none = Limits {
        max_inline: 0,
        ..lim()
    };
    let m = msg(Body::PutInline {
        cookie: 1,
        len: 1,
        seed: 0,
        check: Check::None,
    });
    let n = encode(&m, &mut out, false).unwrap();
    assert_eq!(decode(&out[..n], &none), Err(WireError::Limit));
    // A size that is not the data's length, in either direction.
    for delta in [-1i64, 1] {
        let n = encode(&m, &mut out, false).unwrap();
        let mut b = out[..n].to_vec();
        let size = (1 + delta) as u64;
        b[HDR_LEN + 8..HDR_LEN + 16].copy_from_slice(&size.to_le_bytes());
        assert!(decode(&b, &lim()).is_err(), "size {size} with 1 byte");
    }
    // Data with a failed status, and an empty success.
    let mut b = [0u8; 64];
    let n = encode(
        &msg(Body::GetData {
            cookie: 1,
            status: -5,
            len: 0,
        }),
        &mut b,
        false,
    )
    .unwrap();
    let mut with_data = b[..n].to_vec();
    with_data.push(0);
    let l = with_data.len() as u32;
    with_data[8..12].copy_from_slice(&l.to_le_bytes());
    assert_eq!(decode(&with_data, &lim()), Err(WireError::Length));
    let n = encode(
        &msg(Body::GetData {
            cookie: 1,
            status: 0,
            len: 0,
        }),
        &mut b,
        false,
    )
    .unwrap();
    assert_eq!(decode(&b[..n], &lim()), Err(WireError::Limit));
}

#[test]
fn conn_params_refuse_inline_beyond_messages_or_payload() {
    let ok = ConnParams {
        version: VERSION,
        queue_depth: 8,
        max_regs: 16,
        max_payload: 8192,
        max_msg: msg_size(8192),
        page_size: 4096,
        features: 0,
        reason: 0,
        port: 1,
        max_inline: 8192,
        stamp: 1,
        dst_stamp: 0,
    };
    assert_eq!(ConnParams::decode(&ok.encode()), Ok(ok));
    for bad in [
        ConnParams {
            max_inline: 8193,
            ..ok
        },
        ConnParams {
            max_msg: 4096,
            ..ok
        },
        ConnParams {
            max_payload: 8191,
            ..ok
        },
    ] {
        assert_eq!(
            ConnParams::decode(&bad.encode()),
            Err(WireError::Limit),
            "{bad:?}"
        );
    }
}

#[test]
fn message_sizes_for_inline() {
    assert_eq!(msg_size(0), BASE_MSG);
    assert_eq!(msg_size(inline_fits(BASE_MSG)), BASE_MSG);
    assert_eq!(msg_size(4096), 4096 + INLINE_OVERHEAD);
    assert_eq!(msg_size(MAX_INLINE), MAX_MSG);
    assert_eq!(inline_fits(MAX_MSG), MAX_INLINE);
    assert_eq!(inline_fits(100), 44);
    assert_eq!(inline_fits(50), 0);
}

proptest! {
    #[test]
    fn inline_round_trip(data in prop::collection::vec(any::<u8>(), 1..2048usize), seed in any::<u32>(), cookie in any::<u64>()) {
        let mut out = vec![0u8; 4096];
        let put = msg(Body::PutInline { cookie, len: data.len() as u32, seed, check: Check::Full });
        let n = encode_inline(&put, &data, &mut out);
        let m = decode(&out[..n], &lim()).unwrap();
        prop_assert_eq!(m, put);
        prop_assert_eq!(payload(&out[..n], &m), &data[..]);
        let d = msg(Body::GetData { cookie, status: 0, len: data.len() as u32 });
        let n = encode_inline(&d, &data, &mut out);
        let m = decode(&out[..n], &lim()).unwrap();
        prop_assert_eq!(m, d);
        prop_assert_eq!(payload(&out[..n], &m), &data[..]);
    }
}

#[test]
fn control_payload_bounds() {
    let mut out = [0u8; 4096];
    for (n, ok) in [
        (0, false),
        (1, true),
        (MAX_CONTROL, true),
        (MAX_CONTROL + 1, false),
    ] {
        let payload = vec![7u8; n];
        let m = msg(Body::Control {
            reply: false,
            cookie: 1,
            payload: &payload,
        });
        let len = encode(&m, &mut out, false).unwrap();
        let d = decode(&out[..len], &lim());
        assert_eq!(d.is_ok(), ok, "{n} bytes");
        if ok {
            assert_eq!(d.unwrap(), m);
        } else {
            assert_eq!(d, Err(WireError::Length));
        }
    }
}
