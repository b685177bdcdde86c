// SPDX-License-Identifier: GPL-2.0

//! Tests of `src/rules/ctldev.rs`: the control device's requests and replies, byte for byte
//! (golden vectors, as `scripts/fastreg-lst` lays them out), and every length, version,
//! op and reserved field refused.

use proptest::prelude::*;

use crate::rules::ctldev::{
    self,
    Op,
    Refusal,
    ReplyHead,
    TestState,
    HEAD_LEN,
    MAX_BODY,
    MAX_REQUEST,
    REPLY_HEAD_LEN, //
};

fn encode(op: Op, body: &str) -> Vec<u8> {
    let mut out = vec![0u8; MAX_REQUEST];
    let n = ctldev::request(op, body, &mut out).expect("fits");
    out.truncate(n);
    out
}

/// A request with each field given (for the refusals).
fn raw(magic: &[u8; 4], version: u16, op: u16, flags: u32, len: u32, body: &[u8]) -> Vec<u8> {
    let mut b = Vec::new();
    b.extend_from_slice(magic);
    b.extend_from_slice(&version.to_le_bytes());
    b.extend_from_slice(&op.to_le_bytes());
    b.extend_from_slice(&flags.to_le_bytes());
    b.extend_from_slice(&len.to_le_bytes());
    b.extend_from_slice(body);
    b
}

#[test]
fn golden_start_request() {
    // What fastreg-lst writes for `fastreg-lst ping` (scripts/fastreg-lst, `request`).
    let body = "ping concurrency=1 count=10";
    let want: Vec<u8> = [
        &b"FRRQ"[..],
        &[1, 0],        // version 1
        &[1, 0],        // op 1: start
        &[0, 0, 0, 0],  // flags
        &[27, 0, 0, 0], // body length
        body.as_bytes(),
    ]
    .concat();
    assert_eq!(encode(Op::Start, body), want);
    assert_eq!(
        ctldev::parse(&want),
        Ok(ctldev::Request {
            op: Op::Start,
            body
        })
    );
}

#[test]
fn golden_empty_requests() {
    for (op, n) in [
        (Op::Wait, 2u8),
        (Op::Poll, 3),
        (Op::Stop, 4),
        (Op::Result, 5),
        (Op::Stat, 6),
    ] {
        let want = [b'F', b'R', b'R', b'Q', 1, 0, n, 0, 0, 0, 0, 0, 0, 0, 0, 0];
        assert_eq!(encode(op, ""), want, "{op:?}");
        assert_eq!(ctldev::parse(&want), Ok(ctldev::Request { op, body: "" }));
    }
}

#[test]
fn golden_reply() {
    let h = ReplyHead {
        op: Op::Wait,
        status: -5,
        state: TestState::Over,
        len: 300,
    };
    let want = [
        b'F', b'R', b'R', b'P', 1, 0, 2, 0, 0xfb, 0xff, 0xff, 0xff, 2, 0, 0, 0, 0x2c, 1, 0, 0, 0,
        0, 0, 0,
    ];
    assert_eq!(h.bytes(), want);
    let mut whole = want.to_vec();
    whole.extend(std::iter::repeat_n(b'x', 300));
    assert_eq!(ReplyHead::parse(&whole), Ok(h));
    assert_eq!(
        ReplyHead::parse(&whole[..whole.len() - 1]),
        Err(Refusal::Truncated)
    );
    whole.push(b'x');
    assert_eq!(ReplyHead::parse(&whole), Err(Refusal::Trailing));
}

#[test]
fn every_short_length_is_truncated() {
    let full = encode(Op::Console, "join nodes=10.0.0.1 timeout=1000");
    for n in 0..full.len() {
        assert_eq!(
            ctldev::parse(&full[..n]),
            Err(Refusal::Truncated),
            "{n} bytes"
        );
    }
    let empty = encode(Op::Stat, "");
    for n in 0..empty.len() {
        assert_eq!(
            ctldev::parse(&empty[..n]),
            Err(Refusal::Truncated),
            "{n} bytes"
        );
    }
}

#[test]
fn bytes_past_the_body_are_refused() {
    let mut b = encode(Op::Poll, "");
    b.push(0);
    assert_eq!(ctldev::parse(&b), Err(Refusal::Trailing));
    let mut b = encode(Op::Start, "ping");
    b.extend_from_slice(b" count=1");
    assert_eq!(ctldev::parse(&b), Err(Refusal::Trailing));
}

#[test]
fn oversized_refused_with_e2big() {
    let body = "x".repeat(MAX_BODY);
    assert!(ctldev::parse(&encode(Op::Start, &body)).is_ok());
    let long = "x".repeat(MAX_BODY + 1);
    let mut out = vec![0u8; MAX_REQUEST + 16];
    assert_eq!(ctldev::request(Op::Start, &long, &mut out), None);
    // A head that claims more than a body may hold, with or without the bytes.
    let b = raw(b"FRRQ", 1, 1, 0, MAX_BODY as u32 + 1, long.as_bytes());
    assert_eq!(ctldev::parse(&b), Err(Refusal::Oversized));
    assert_eq!(Refusal::Oversized.errno(), 7);
    let b = raw(b"FRRQ", 1, 1, 0, u32::MAX, b"ping");
    assert_eq!(ctldev::parse(&b), Err(Refusal::Oversized));
    // A length whose low half is small and high half not: all 32 bits are read.
    let b = raw(b"FRRQ", 1, 1, 0, 0x0001_0004, b"ping");
    assert_eq!(ctldev::parse(&b), Err(Refusal::Oversized));
    // A write longer than any request, whatever its head says.
    let b = raw(b"FRRQ", 1, 1, 0, 4, &vec![b'p'; MAX_BODY + 1]);
    assert_eq!(ctldev::parse(&b), Err(Refusal::Oversized));
}

#[test]
fn other_versions_refused() {
    for v in [0u16, 2, 0x100, u16::MAX] {
        let b = raw(b"FRRQ", v, 6, 0, 0, b"");
        assert_eq!(ctldev::parse(&b), Err(Refusal::Version(v)));
        assert_eq!(Refusal::Version(v).errno(), 93);
    }
}

#[test]
fn the_version_is_checked_before_the_op() {
    // Another version's ops are its own: an op unknown here is not what refuses it.
    for op in [6u16, 99] {
        let b = raw(b"FRRQ", 2, op, 0, 0, b"");
        assert_eq!(ctldev::parse(&b), Err(Refusal::Version(2)));
    }
    // And the magic before the version.
    let b = raw(b"XXXX", 2, 99, 0, 0, b"");
    assert_eq!(ctldev::parse(&b), Err(Refusal::Magic));
}

#[test]
fn unknown_ops_refused() {
    for op in [0u16, 8, 9, 0x100, u16::MAX] {
        let b = raw(b"FRRQ", 1, op, 0, 0, b"");
        assert_eq!(ctldev::parse(&b), Err(Refusal::UnknownOp(op)));
        assert_eq!(Refusal::UnknownOp(op).errno(), 95);
    }
    for op in Op::ALL {
        assert_eq!(Op::from_u16(op as u16), Some(op));
    }
}

#[test]
fn bad_magic_flags_and_bodies_refused() {
    assert_eq!(
        ctldev::parse(&raw(b"FRRP", 1, 6, 0, 0, b"")),
        Err(Refusal::Magic)
    );
    assert_eq!(
        ctldev::parse(&raw(b"frrq", 1, 6, 0, 0, b"")),
        Err(Refusal::Magic)
    );
    for flags in [1u32, 0x8000_0000] {
        assert_eq!(
            ctldev::parse(&raw(b"FRRQ", 1, 6, flags, 0, b"")),
            Err(Refusal::Reserved)
        );
    }
    // Ops without words refuse a body; the others need one.
    assert_eq!(
        ctldev::parse(&raw(b"FRRQ", 1, 6, 0, 1, b"x")),
        Err(Refusal::Body)
    );
    assert_eq!(
        ctldev::parse(&raw(b"FRRQ", 1, 1, 0, 0, b"")),
        Err(Refusal::Body)
    );
    assert_eq!(
        ctldev::parse(&raw(b"FRRQ", 1, 7, 0, 0, b"")),
        Err(Refusal::Body)
    );
    assert_eq!(
        ctldev::parse(&raw(b"FRRQ", 1, 1, 0, 2, &[0xc3, 0x28])),
        Err(Refusal::NotText)
    );
    for r in [
        Refusal::Truncated,
        Refusal::Trailing,
        Refusal::Magic,
        Refusal::Reserved,
        Refusal::Body,
        Refusal::NotText,
    ] {
        assert_eq!(r.errno(), 22, "{r:?}");
    }
}

#[test]
fn replies_checked_as_requests_are() {
    let h = ReplyHead {
        op: Op::Stat,
        status: 0,
        state: TestState::Idle,
        len: 0,
    };
    let b = h.bytes();
    assert_eq!(b.len(), REPLY_HEAD_LEN);
    assert_eq!(ReplyHead::parse(&b), Ok(h));
    for n in 0..b.len() {
        assert_eq!(ReplyHead::parse(&b[..n]), Err(Refusal::Truncated));
    }
    let mut v = b;
    v[4] = 2;
    assert_eq!(ReplyHead::parse(&v), Err(Refusal::Version(2)));
    let mut v = b;
    v[12] = 3; // no such state
    assert_eq!(ReplyHead::parse(&v), Err(Refusal::Reserved));
    let mut v = b;
    v[23] = 1;
    assert_eq!(ReplyHead::parse(&v), Err(Refusal::Reserved));
    let mut v = b;
    v[8] = 1; // a positive status
    assert_eq!(ReplyHead::parse(&v), Err(Refusal::Reserved));
    let mut v = b;
    v[0..4].copy_from_slice(b"FRRQ"); // a request's magic
    assert_eq!(ReplyHead::parse(&v), Err(Refusal::Magic));
    for op in [0u16, 8, u16::MAX] {
        let mut v = b;
        v[6..8].copy_from_slice(&op.to_le_bytes());
        assert_eq!(ReplyHead::parse(&v), Err(Refusal::UnknownOp(op)));
    }
}

proptest! {
    #[test]
    fn any_bytes_parse_or_refuse_without_panic(b in proptest::collection::vec(any::<u8>(), 0..2048)) {
        if let Ok(r) = ctldev::parse(&b) {
            prop_assert_eq!(b.len(), HEAD_LEN + r.body.len());
            prop_assert!(r.body.len() <= MAX_BODY);
        }
    }

    #[test]
    fn every_request_round_trips(op in 1u16..=7, body in "[ -~]{1,1024}") {
        let op = Op::from_u16(op).unwrap();
        let body = if op.takes_body() { body.as_str() } else { "" };
        let b = encode(op, body);
        prop_assert_eq!(ctldev::parse(&b), Ok(ctldev::Request { op, body }));
    }
}
