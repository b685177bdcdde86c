// SPDX-License-Identifier: GPL-2.0

//! Tests of `src/rules/config.rs`: what configfs attributes take and refuse, and that
//! `iface add` takes the same ranges.

use crate::rules::{
    command::Ctl,
    config::{
        self,
        Knob,
        Refusal, //
    },
};

const KNOBS: [Knob; 6] = [
    config::PORT,
    config::QUEUE_DEPTH,
    config::MAX_PAYLOAD,
    config::MAX_REGS,
    config::MR_PAGES,
    config::MAX_INLINE,
];

#[test]
fn numbers_within_range_with_or_without_newline() {
    for k in KNOBS {
        for v in [k.min, k.max, (k.min + k.max) / 2] {
            assert_eq!(
                config::number(&k, format!("{v}\n").as_bytes()),
                Ok(v),
                "{}",
                k.name
            );
            assert_eq!(
                config::number(&k, format!("{v}").as_bytes()),
                Ok(v),
                "{}",
                k.name
            );
        }
    }
    assert_eq!(config::number(&config::MAX_PAYLOAD, b"1M\n"), Ok(1 << 20));
}

#[test]
fn out_of_range_refused_at_both_ends() {
    for k in KNOBS {
        assert_eq!(
            config::number(&k, format!("{}\n", k.max + 1).as_bytes()),
            Err(Refusal::OutOfRange),
            "{}",
            k.name
        );
        if k.min > 0 {
            assert_eq!(
                config::number(&k, format!("{}", k.min - 1).as_bytes()),
                Err(Refusal::OutOfRange),
                "{}",
                k.name
            );
        }
    }
    // Past u64: not a number (no wrap into range).
    assert_eq!(
        config::number(&config::QUEUE_DEPTH, b"18446744073709551617"),
        Err(Refusal::NotANumber)
    );
}

#[test]
fn not_numbers_refused() {
    for v in [
        &b"abc"[..],
        b"",
        b"\n",
        b"-1",
        b"1 2",
        b"0x10",
        b"\xff\xfe",
        b"8\n\n",
    ] {
        assert!(config::number(&config::QUEUE_DEPTH, v).is_err(), "{v:?}");
    }
}

#[test]
fn not_text_refused_as_such_by_every_reader() {
    let bad = b"\xff\xfe";
    assert_eq!(config::text(bad), Err(Refusal::NotText));
    assert_eq!(config::number(&config::PORT, bad), Err(Refusal::NotText));
    assert_eq!(config::address(bad), Err(Refusal::NotText));
    assert_eq!(config::device(bad), Err(Refusal::NotText));
    assert_eq!(config::boolean(bad), Err(Refusal::NotText));
    assert_eq!(config::key(bad), Err(Refusal::BadKey));
}

#[test]
fn too_long_refused() {
    let long = vec![b'1'; config::MAX_VALUE + 1];
    assert_eq!(config::number(&config::PORT, &long), Err(Refusal::TooLong));
    assert_eq!(config::text(b"1\n2\n"), Err(Refusal::TooLong));
}

#[test]
fn addresses() {
    assert_eq!(config::address(b"10.0.2.15\n"), Ok([10, 0, 2, 15]));
    for v in [
        &b"10.0.2"[..],
        b"300.1.1.1",
        b"10.0.2.15.1",
        b"a.b.c.d",
        b"",
        b"10.0.2.15 x",
    ] {
        assert_eq!(config::address(v), Err(Refusal::BadAddress), "{v:?}");
    }
}

#[test]
fn devices() {
    assert_eq!(config::device(b"rxe0\n"), Ok("rxe0"));
    assert_eq!(config::device(b"siw_eth0"), Ok("siw_eth0"));
    for v in [&b""[..], b"\n", b"rx e0", b"\xc3\xa9"] {
        assert!(config::device(v).is_err(), "{v:?}");
    }
    assert_eq!(config::device(&[b'a'; 64]), Err(Refusal::BadName));
    assert_eq!(config::device(&[b'a'; 63]), Ok(&"a".repeat(63)[..]));
}

#[test]
fn booleans() {
    for (v, b) in [
        (&b"1\n"[..], true),
        (b"y", true),
        (b"0", false),
        (b"N\n", false),
    ] {
        assert_eq!(config::boolean(v), Ok(b));
    }
    for v in [&b"2"[..], b"yes", b"", b"01"] {
        assert_eq!(config::boolean(v), Err(Refusal::NotBoolean), "{v:?}");
    }
}

#[test]
fn keys() {
    let hex = "0123456789abcdef".repeat(4);
    let k = config::key(format!("{hex}\n").as_bytes()).unwrap().unwrap();
    assert_eq!(k[0], 0x01);
    assert_eq!(k[31], 0xef);
    assert_eq!(config::key(b"none\n"), Ok(None));
    for v in [&hex.as_bytes()[1..], b"zz", b"", b"NONE"] {
        assert_eq!(config::key(v), Err(Refusal::BadKey), "{v:?}");
    }
}

#[test]
fn refused_values_shown_printable_and_short() {
    assert_eq!(config::shown(b"abc\n").to_string(), "abc");
    assert_eq!(config::shown(b"a\x01b").to_string(), "a\\x01b");
    let long = "x".repeat(100);
    assert_eq!(
        config::shown(long.as_bytes()).to_string(),
        format!("{}...", "x".repeat(32))
    );
}

#[test]
fn iface_add_takes_the_same_ranges() {
    for k in KNOBS {
        let ok = format!("iface add rxe0 10.0.2.15 {}={}", k.name, k.max);
        assert!(Ctl::parse(&ok).is_ok(), "{ok}");
        let bad = format!("iface add rxe0 10.0.2.15 {}={}", k.name, k.max + 1);
        assert!(Ctl::parse(&bad).is_err(), "{bad}");
    }
}
