// SPDX-License-Identifier: GPL-2.0

//! Tests of `src/selftest/control/` and `src/selftest/session.rs`: golden vectors of the control payloads,
//! round trips, a decoder fed random and mutated bytes, the allow list. The node's
//! admission rules (keys, sessions, leases) are `auth_tests.rs`'.

use crate::selftest::{control::*, session::*};
use proptest::prelude::*;

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

const A: [u8; 4] = [10, 0, 0, 1];
const B: [u8; 4] = [10, 0, 0, 2];

fn start(peers: &[[u8; 4]]) -> Start {
    let mut p = [[0u8; 4]; MAX_PEERS];
    p[..peers.len()].copy_from_slice(peers);
    Start {
        test: Test::Write,
        check: 2,
        concurrency: 8,
        offset: 1,
        size: 1 << 20,
        span: Span::Seconds(60),
        peers: p,
        npeers: peers.len() as u8,
    }
}

/// A request of `op` in `session` (sequence number 1); a read-only QUERY (session 0) is
/// challenged.
pub(crate) fn req(op: Op, session: u64) -> Request {
    let challenged = op == Op::Query && session == 0;
    Request {
        op,
        session,
        lease_ms: if op == Op::Join { 10_000 } else { 0 },
        start: None,
        nonce: challenged.then_some([0x5a; 16]),
        seq: u64::from(!challenged),
        tag: [0xaa; 16],
    }
}

#[test]
fn golden_requests() {
    let mut out = [0u8; MAX_PAYLOAD];
    let tag = "aa".repeat(16);
    let n = req(Op::Join, 0x1122_3344_5566_7788).encode(&mut out);
    assert_eq!(
        hex(&out[..n]),
        format!("0100000010270000_8877665544332211_0100000000000000_{tag}").replace('_', "")
    );
    // A read-only QUERY: challenged (flag 1), the node's nonce echoed, sequence 0.
    let n = req(Op::Query, 0).encode(&mut out);
    let nonce = "5a".repeat(16);
    assert_eq!(
        hex(&out[..n]),
        format!("0501000000000000_0000000000000000_{nonce}_0000000000000000_{tag}")
            .replace('_', "")
    );
    assert_eq!(Request::decode(&out[..n]), Ok(req(Op::Query, 0)));
    // HELLO: the console's nonce, no sequence number nor tag.
    let h = Request {
        op: Op::Hello,
        nonce: Some([0x11; 16]),
        seq: 0,
        tag: [0; 16],
        ..req(Op::Hello, 5)
    };
    let n = h.encode(&mut out);
    assert_eq!(n, HELLO_LEN);
    assert_eq!(
        hex(&out[..n]),
        format!("0600000000000000_0500000000000000_{}", "11".repeat(16)).replace('_', "")
    );
    assert_eq!(Request::decode(&out[..n]), Ok(h));
    let r = Request {
        start: Some(start(&[B, [10, 0, 0, 3]])),
        ..req(Op::Start, 7)
    };
    let n = r.encode(&mut out);
    assert_eq!(n, START_LEN + 8 + TRAILER_LEN);
    let want = [
        "03000000",
        "00000000",
        "0700000000000000", // op, lease, session
        "02",
        "02",
        "0800",
        "01000000",         // test, check, concurrency, offset
        "0000100000000000", // size
        "01",
        "02",
        "0000",
        "00000000",         // seconds, peers, reserved
        "3c00000000000000", // 60 s
        "0a000002",
        "0a000003",
        "0100000000000000", // sequence number
        &tag,
    ]
    .concat();
    assert_eq!(hex(&out[..n]), want);
    assert_eq!(Request::decode(&out[..n]), Ok(r));
}

#[test]
fn golden_reply() {
    let r = Reply {
        op: Op::Query,
        status: EBUSY,
        session: 9,
        holder: A,
        lease_left_ms: 500,
        run: RunState::Running,
        counters: Counters {
            now_us: 1,
            ops: 2,
            bytes: 3,
            errors: [4, 5, 6, 7],
            corrupt: 8,
            usecs: 10,
            first_error: -110,
            rx_ops: 11,
            rx_bytes: 12,
            tx_ops: 13,
            tx_bytes: 14,
        },
        seq: 15,
        tag: [0xbb; 16],
    };
    let mut out = [0u8; MAX_PAYLOAD];
    assert_eq!(r.encode(&mut out), REPLY_LEN);
    let u = |v: u64| hex(&v.to_le_bytes());
    let want = [
        "05000000".into(),
        "f0ffffff".into(),
        u(9),
        "0a000001".into(),
        "02000000".into(),
        "f4010000".into(),
        "00000000".into(),
        u(1),
        u(2),
        u(3),
        u(8),
        u(10),
        "92ffffff".into(),
        "00000000".into(),
        "04000000050000000600000007000000".into(),
        u(11),
        u(12),
        u(13),
        u(14),
        u(15),
        "bb".repeat(16),
    ]
    .concat();
    assert_eq!(hex(&out[..REPLY_LEN]), want);
    assert_eq!(Reply::decode(&out[..REPLY_LEN], Op::Query), Ok(r));
    assert_eq!(Reply::decode(&out[..REPLY_LEN], Op::Join), Err(Bad::Answer));
    assert_eq!(
        Reply::decode(&out[..REPLY_LEN - 1], Op::Query),
        Err(Bad::Length)
    );
    out[2] = 1;
    assert_eq!(
        Reply::decode(&out[..REPLY_LEN], Op::Query),
        Err(Bad::Reserved)
    );
}

#[test]
fn requests_refused() {
    let mut out = [0u8; MAX_PAYLOAD];
    // A session is needed but for a read-only QUERY; a lease only with JOIN.
    let n = req(Op::Stop, 0).encode(&mut out);
    assert_eq!(Request::decode(&out[..n]), Err(Bad::Limit));
    let n = Request {
        lease_ms: 5,
        ..req(Op::Query, 1)
    }
    .encode(&mut out);
    assert_eq!(Request::decode(&out[..n]), Err(Bad::Limit));
    let n = Request {
        lease_ms: 999,
        ..req(Op::Join, 1)
    }
    .encode(&mut out);
    assert_eq!(Request::decode(&out[..n]), Err(Bad::Limit));
    // A sequence number in a session, none when challenged; challenged: JOIN or QUERY.
    let n = Request {
        seq: 0,
        ..req(Op::Stop, 1)
    }
    .encode(&mut out);
    assert_eq!(Request::decode(&out[..n]), Err(Bad::Limit));
    let n = Request {
        nonce: Some([1; 16]),
        seq: 0,
        ..req(Op::Stop, 1)
    }
    .encode(&mut out);
    assert_eq!(Request::decode(&out[..n]), Err(Bad::Limit));
    let n = Request {
        nonce: Some([1; 16]),
        ..req(Op::Join, 1)
    }
    .encode(&mut out);
    assert_eq!(Request::decode(&out[..n]), Err(Bad::Limit));
    let n = Request {
        nonce: None,
        seq: 1,
        ..req(Op::Query, 0)
    }
    .encode(&mut out);
    assert_eq!(Request::decode(&out[..n]), Err(Bad::Limit));
    // Unknown flags; a HELLO with a lease or of the wrong length.
    let n = req(Op::Stop, 1).encode(&mut out);
    out[1] = 2;
    assert_eq!(Request::decode(&out[..n]), Err(Bad::Reserved));
    let h = Request {
        op: Op::Hello,
        nonce: Some([1; 16]),
        seq: 0,
        ..req(Op::Hello, 1)
    };
    let n = h.encode(&mut out);
    assert_eq!(Request::decode(&out[..n - 1]), Err(Bad::Length));
    out[4] = 1;
    assert_eq!(Request::decode(&out[..n]), Err(Bad::Limit));
    // An unknown operation, a short START, peers beyond the length, zero concurrency.
    out[0] = 9;
    assert_eq!(Request::decode(&out[..REQ_LEN]), Err(Bad::Op));
    let r = Request {
        start: Some(start(&[B])),
        ..req(Op::Start, 7)
    };
    let n = r.encode(&mut out);
    assert_eq!(Request::decode(&out[..n - 1]), Err(Bad::Length));
    let mut bad = out;
    bad[33] = 2;
    assert_eq!(Request::decode(&bad[..n]), Err(Bad::Length));
    bad[33] = 0;
    assert_eq!(Request::decode(&bad[..n]), Err(Bad::Limit));
    let mut bad = out;
    bad[18] = 0;
    assert_eq!(Request::decode(&bad[..n]), Err(Bad::Limit));
    let mut bad = out;
    bad[36] = 1;
    assert_eq!(Request::decode(&bad[..n]), Err(Bad::Reserved));
    // A ping moves no data: size 1, offset 0.
    let mut s = start(&[B]);
    s.test = Test::Ping;
    assert!(!s.valid());
    s.size = 1;
    s.offset = 0;
    assert!(s.valid());
}

#[test]
fn payload_fits_a_message() {
    assert_eq!(MAX_PAYLOAD, crate::rules::wire::MAX_CONTROL);
    const { assert!(START_LEN + 4 * MAX_PEERS + TRAILER_LEN <= MAX_PAYLOAD && REPLY_LEN <= MAX_PAYLOAD) };
    let r = Reply::decode(&[0u8; REPLY_LEN], Op::Query);
    assert_eq!(r, Err(Bad::Op));
}

#[test]
fn buffers_capped() {
    let mut s = start(&[B; MAX_PEERS]);
    s.concurrency = MAX_CONCURRENCY;
    s.offset = 0;
    s.size = MAX_BUFFERS / (u64::from(MAX_CONCURRENCY) * MAX_PEERS as u64);
    assert!(s.valid());
    assert_eq!(s.buffers(), MAX_BUFFERS);
    s.offset = 1;
    assert!(!s.valid());
    s.offset = 0;
    s.size = MAX_SIZE;
    assert!(!s.valid());
    // A ping allocates nothing.
    s.test = Test::Ping;
    s.size = 1;
    assert!(s.valid());
}

#[test]
fn refusals_logged_once() {
    let mut n = Node::default();
    assert!(n.refuse(A));
    assert!(!n.refuse(A));
    assert!(n.refuse(B));
    assert_eq!(n.refused.not_allowed, 3);
    // Allowed, then denied: logged again.
    assert_eq!(n.allow(A), Ok(true));
    assert_eq!(n.deny(A), (true, None));
    assert!(n.refuse(A));
    // Past MAX_ALLOWED addresses, counted only.
    for i in 0..MAX_ALLOWED as u8 {
        n.refuse([192, 168, 1, i]);
    }
    assert!(!n.refuse([172, 16, 0, 1]));
    assert_eq!(n.refused.not_allowed, 5 + MAX_ALLOWED as u64);
}

#[test]
fn allow_list() {
    let mut a = Allow::default();
    assert!(!a.contains(A));
    assert_eq!(a.add(A), Ok(true));
    assert_eq!(a.add(A), Ok(false));
    for i in 1..MAX_ALLOWED as u8 {
        assert_eq!(a.add([192, 168, 0, i]), Ok(true));
    }
    assert_eq!(a.add(B), Err(()));
    assert!(a.remove([192, 168, 0, 3]));
    assert!(!a.remove([192, 168, 0, 3]));
    assert_eq!(a.list().len(), MAX_ALLOWED - 1);
    assert_eq!(a.list()[2], [192, 168, 0, 2]);
    assert_eq!(a.list()[3], [192, 168, 0, 4]);
    assert_eq!(a.add(B), Ok(true));
}

fn any_request() -> impl Strategy<Value = Request> {
    let peers = proptest::collection::vec(any::<[u8; 4]>(), 1..=MAX_PEERS);
    let span = prop_oneof![
        (1..=MAX_COUNT).prop_map(Span::Count),
        (1..=MAX_SECONDS).prop_map(Span::Seconds)
    ];
    let st = (
        0u8..3,
        0u8..3,
        1..=MAX_CONCURRENCY,
        0..=MAX_OFFSET,
        1..=MAX_SIZE,
        span,
        peers,
    )
        .prop_map(|(t, check, concurrency, offset, size, span, peers)| {
            let test = [Test::Ping, Test::Read, Test::Write][t as usize];
            // Within what a node allocates for one START.
            let cap = MAX_BUFFERS / (u64::from(concurrency) * peers.len() as u64);
            let offset = (u64::from(offset) % cap.min(u64::from(MAX_OFFSET) + 1)) as u32;
            let size = 1 + (size - 1) % (cap - u64::from(offset)).min(MAX_SIZE);
            let (size, offset) = if test == Test::Ping {
                (1, 0)
            } else {
                (size, offset)
            };
            let mut s = start(&peers);
            s = Start {
                test,
                check,
                concurrency,
                offset,
                size,
                span,
                ..s
            };
            s
        });
    let how = (any::<bool>(), any::<[u8; 16]>(), 1u64.., any::<[u8; 16]>());
    (1u8..=6, 0u64.., LEASE_MS, st, how).prop_map(|(op, session, lease, st, how)| {
        let op = Op::from_u8(op).unwrap();
        let (challenge, nonce, seq, tag) = how;
        // A read-only QUERY is challenged; a JOIN may be; HELLO carries a nonce only.
        let challenged = match op {
            Op::Query => session == 0,
            Op::Join => challenge,
            _ => false,
        };
        let session = if session == 0 && op != Op::Query && op != Op::Hello {
            1
        } else {
            session
        };
        Request {
            op,
            session,
            lease_ms: if op == Op::Join { lease } else { 0 },
            start: (op == Op::Start).then_some(st),
            nonce: (challenged || op == Op::Hello).then_some(nonce),
            seq: if challenged || op == Op::Hello {
                0
            } else {
                seq
            },
            tag: if op == Op::Hello { [0; 16] } else { tag },
        }
    })
}

proptest! {
    #[test]
    fn request_round_trip(r in any_request()) {
        let mut out = [0u8; MAX_PAYLOAD];
        let n = r.encode(&mut out);
        prop_assert!(n <= MAX_PAYLOAD);
        prop_assert_eq!(Request::decode(&out[..n]), Ok(r));
    }

    /// Whatever a peer sends, the decoders answer without panicking, and what they accept
    /// is within the limits and encodes back to the same bytes.
    #[test]
    fn decoders_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..=MAX_PAYLOAD)) {
        if let Ok(r) = Request::decode(&bytes) {
            prop_assert!(r.start.is_none_or(|s| s.valid()));
            let mut out = [0u8; MAX_PAYLOAD];
            let n = r.encode(&mut out);
            prop_assert_eq!(&out[..n], &bytes[..]);
        }
        for op in [Op::Join, Op::Start, Op::Query, Op::Hello] {
            if let Ok(r) = Reply::decode(&bytes, op) {
                let mut out = [0u8; MAX_PAYLOAD];
                let n = r.encode(&mut out);
                prop_assert_eq!(&out[..n], &bytes[..]);
            }
        }
    }

    /// A valid request with one byte flipped either decodes to something valid or is
    /// refused; never accepted beyond the limits.
    #[test]
    fn mutated_requests(r in any_request(), at in any::<usize>(), bit in 0u8..8) {
        let mut out = [0u8; MAX_PAYLOAD];
        let n = r.encode(&mut out);
        out[at % n] ^= 1 << bit;
        if let Ok(d) = Request::decode(&out[..n]) {
            prop_assert!(d.start.is_none_or(|s| s.valid()));
            prop_assert!(d.session != 0 || d.op == Op::Query || d.op == Op::Hello);
            prop_assert_eq!(d.seq == 0, d.nonce.is_some());
        }
    }
}

mod commands {
    use crate::{
        rules::command::Ctl, //
        selftest::{console_cmd::*, control::*},
    };

    #[test]
    fn console_commands() {
        let c = ConsoleCmd::parse("join nodes=10.0.0.1,10.0.0.2 session=7 lease=10000").unwrap();
        assert_eq!(c.nodes(), &[[10, 0, 0, 1], [10, 0, 0, 2]]);
        assert_eq!(
            (c.req.op, c.req.session, c.req.lease_ms),
            (Op::Join, 7, 10_000)
        );
        assert_eq!((c.from, c.timeout_ms), (None, TIMEOUT_MS));
        let c = ConsoleCmd::parse("query nodes=10.0.0.1 from=10.0.0.9 timeout=2000").unwrap();
        assert_eq!(
            (c.req.session, c.from, c.timeout_ms),
            (0, Some([10, 0, 0, 9]), 2000)
        );
        let c = ConsoleCmd::parse(
            "start nodes=10.0.0.1 session=3 test=write size=1M offset=8 check=full \
             concurrency=8 seconds=60 peers=10.0.0.3,10.0.0.4",
        )
        .unwrap();
        let s = c.req.start.unwrap();
        assert_eq!(
            (s.test, s.size, s.offset, s.check, s.concurrency),
            (Test::Write, 1 << 20, 8, 2, 8)
        );
        assert_eq!(
            (s.span, s.peers()),
            (Span::Seconds(60), &[[10, 0, 0, 3], [10, 0, 0, 4]][..])
        );
        let p =
            ConsoleCmd::parse("start nodes=10.0.0.1 session=3 test=ping count=5 peers=10.0.0.3")
                .unwrap();
        assert_eq!(p.req.start.unwrap().size, 1);
        for bad in [
            "",
            "hello nodes=10.0.0.1",
            "query",
            "join nodes=10.0.0.1 session=1",
            "join nodes=10.0.0.1 session=1 lease=10",
            "stop nodes=10.0.0.1",
            "leave nodes=10.0.0.1 session=1 lease=5000",
            "stop nodes=10.0.0.1 session=1 size=4k",
            "start nodes=10.0.0.1 session=1 test=write count=1 peers=10.0.0.2",
            "start nodes=10.0.0.1 session=1 test=write size=4k peers=10.0.0.2",
            "start nodes=10.0.0.1 session=1 test=write size=4k count=1",
            "start nodes=10.0.0.1 session=1 test=ping size=4k count=1 peers=10.0.0.2",
            "start nodes=10.0.0.1 session=1 test=read size=4k count=1 concurrency=257 peers=10.0.0.2",
            "query nodes=10.0.0.1 timeout=99",
            "query nodes=10.0.0.256",
        ] {
            assert!(ConsoleCmd::parse(bad).is_err(), "{bad}");
        }
        let many = (0..=MAX_NODES).map(|i| format!("10.0.{}.{}", i / 250, i % 250 + 1));
        let line = format!("query nodes={}", many.collect::<Vec<_>>().join(","));
        assert!(ConsoleCmd::parse(&line).is_err());
    }

    #[test]
    fn console_allow_commands() {
        assert_eq!(
            Ctl::parse("console allow 10.0.0.3"),
            Ok(Ctl::Console {
                allow: Some(true),
                ip: [10, 0, 0, 3]
            })
        );
        assert_eq!(
            Ctl::parse("console deny 10.0.0.3"),
            Ok(Ctl::Console {
                allow: Some(false),
                ip: [10, 0, 0, 3]
            })
        );
        assert_eq!(
            Ctl::parse("console list"),
            Ok(Ctl::Console {
                allow: None,
                ip: [0; 4]
            })
        );
        let hex = "00112233445566778899aabbccddeeff".repeat(2);
        let mut key = [0u8; 32];
        for (i, k) in key.iter_mut().enumerate() {
            *k = (i as u8 % 16) * 0x11;
        }
        assert_eq!(
            Ctl::parse(&format!("console key {hex}")),
            Ok(Ctl::ConsoleKey { key: Some(key) })
        );
        assert_eq!(
            Ctl::parse(&format!("console key {}", hex.to_uppercase())),
            Ok(Ctl::ConsoleKey { key: Some(key) })
        );
        assert_eq!(
            Ctl::parse("console key none"),
            Ok(Ctl::ConsoleKey { key: None })
        );
        for bad in [&hex[1..], &format!("{hex}0"), &hex.replace('a', "g"), ""] {
            let line = format!("console key {bad}");
            assert!(Ctl::parse(&line).is_err(), "{line}");
            // A refused key is never logged.
            assert!(
                !crate::rules::command::shown(&line).contains("0011"),
                "{line}"
            );
        }
        assert!(Ctl::parse(&format!("console key {hex} x")).is_err());
        assert_eq!(
            crate::rules::command::shown(" console  allow 10.0.0.3 "),
            "console  allow 10.0.0.3"
        );
        assert!(Ctl::parse("console allow").is_err());
        assert!(Ctl::parse("console list 1").is_err());
        assert!(Ctl::parse("console grant 10.0.0.3").is_err());
    }
}
