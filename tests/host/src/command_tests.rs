// SPDX-License-Identifier: GPL-2.0

//! Tests of `src/rules/command.rs`.

use crate::rules::command::{parse_ipv4, parse_size};

#[test]
fn sizes() {
    assert_eq!(parse_size("0"), Some(0));
    assert_eq!(parse_size("4095"), Some(4095));
    assert_eq!(parse_size("4k"), Some(4096));
    assert_eq!(parse_size("1M"), Some(1 << 20));
    assert_eq!(parse_size("2g"), Some(2 << 30));
    for bad in [
        "",
        "k",
        "-1",
        "1.5M",
        "1 M",
        "0x10",
        "1Mb",
        "99999999999999999999",
    ] {
        assert_eq!(parse_size(bad), None, "{bad}");
    }
    assert_eq!(parse_size("18446744073709551615k"), None);
}

#[test]
fn addresses() {
    assert_eq!(parse_ipv4("10.0.2.15"), Some([10, 0, 2, 15]));
    for bad in [
        "10.0.2",
        "10.0.2.15.1",
        "256.0.0.1",
        "a.b.c.d",
        "10..2.15",
        "",
    ] {
        assert_eq!(parse_ipv4(bad), None, "{bad}");
    }
}

#[test]
fn control_commands() {
    use crate::rules::command::{Ctl, IfaceTunables, Ports};
    assert_eq!(
        Ctl::parse("iface add rxe1 10.1.0.1 queue_depth=4 max_payload=1M port=9000\n"),
        Ok(Ctl::IfaceAdd {
            dev: "rxe1",
            ip: [10, 1, 0, 1],
            tun: IfaceTunables {
                queue_depth: Some(4),
                max_payload: Some(1 << 20),
                max_regs: None,
                port: Some(9000),
                mr_pages: None,
                max_inline: None,
            },
        })
    );
    for (v, want) in [
        ("0", Some(0u32)),
        ("4k", Some(4096)),
        ("16384", Some(16384)),
        ("16385", None),
    ] {
        let line = format!("iface add rxe1 10.1.0.1 max_inline={v}");
        let r = Ctl::parse(&line);
        match want {
            Some(n) => assert!(
                matches!(r, Ok(Ctl::IfaceAdd { tun, .. }) if tun.max_inline == Some(n)),
                "max_inline={v}: {r:?}"
            ),
            None => assert_eq!(r, Err("value out of range"), "max_inline={v}"),
        }
    }
    assert_eq!(
        Ctl::parse("iface del 10.1.0.1"),
        Ok(Ctl::IfaceDel {
            ip: [10, 1, 0, 1],
            port: None
        })
    );
    assert_eq!(
        Ctl::parse("ping 10.1.0.1 10.1.0.2 5"),
        Ok(Ctl::Ping {
            local: [10, 1, 0, 1],
            peer: [10, 1, 0, 2],
            count: 5,
            ports: Ports::default()
        })
    );
    assert_eq!(
        Ctl::parse("ping 10.1.0.1:7500 10.1.0.2:7471"),
        Ok(Ctl::Ping {
            local: [10, 1, 0, 1],
            peer: [10, 1, 0, 2],
            count: 1,
            ports: Ports {
                local: Some(7500),
                peer: Some(7471)
            }
        })
    );
    assert_eq!(
        Ctl::parse("ping 10.1.0.1:0 10.1.0.2"),
        Err("value out of range")
    );
    assert_eq!(
        Ctl::parse("ping 10.1.0.1:65536 10.1.0.2"),
        Err("value out of range")
    );
    assert_eq!(Ctl::parse("ping 10.1.0.1: 10.1.0.2"), Err("bad number"));
    assert_eq!(
        Ctl::parse("ping 10.1.0.1:7471:1 10.1.0.2"),
        Err("bad number")
    );
    assert_eq!(
        Ctl::parse("get 10.1.0.1 10.1.0.2 4095 1M 3"),
        Ok(Ctl::Bulk {
            get: true,
            local: [10, 1, 0, 1],
            peer: [10, 1, 0, 2],
            offset: 4095,
            len: 1 << 20,
            count: 3,
            ports: Ports::default()
        })
    );
    assert_eq!(
        Ctl::parse("close 10.1.0.1 10.1.0.2"),
        Ok(Ctl::Close {
            local: [10, 1, 0, 1],
            peer: [10, 1, 0, 2],
            ports: Ports::default()
        })
    );
    assert_eq!(
        Ctl::parse("dial 10.1.0.1 10.1.0.2"),
        Ok(Ctl::Dial {
            local: [10, 1, 0, 1],
            peer: [10, 1, 0, 2],
            ports: Ports::default()
        })
    );
    assert_eq!(
        Ctl::parse("dial 10.1.0.1:7472 10.1.0.2"),
        Ok(Ctl::Dial {
            local: [10, 1, 0, 1],
            peer: [10, 1, 0, 2],
            ports: Ports {
                local: Some(7472),
                peer: None
            }
        })
    );
    assert_eq!(Ctl::parse("dial 10.1.0.1"), Err("missing address"));
    assert_eq!(
        Ctl::parse("dial 10.1.0.1 10.1.0.2 3"),
        Err("too many words")
    );
    assert_eq!(
        Ctl::parse("fuzz 10.1.0.2 seed=42 rate=20000 count=100000"),
        Ok(Ctl::Fuzz {
            local: [10, 1, 0, 2],
            seed: 42,
            rate: 20_000,
            count: 100_000
        })
    );
    assert_eq!(
        Ctl::parse("fuzz 10.1.0.2 count=5"),
        Ok(Ctl::Fuzz {
            local: [10, 1, 0, 2],
            seed: 1,
            rate: 1_000_000,
            count: 5
        })
    );
    assert_eq!(
        Ctl::parse("fuzz 10.1.0.2 off"),
        Ok(Ctl::Fuzz {
            local: [10, 1, 0, 2],
            seed: 1,
            rate: 1_000_000,
            count: 0
        })
    );
    for (bad, why) in [
        ("fuzz 10.1.0.2", "missing count"),
        ("fuzz 10.1.0.2 rate=0 count=1", "value out of range"),
        ("fuzz 10.1.0.2 rate=1000001 count=1", "value out of range"),
        ("fuzz 10.1.0.2 count=1 colour=blue", "unknown fuzz setting"),
        ("fuzz 10.1.0.2 count", "fuzz takes key=value or off"),
    ] {
        assert_eq!(Ctl::parse(bad), Err(why), "{bad}");
    }
    for (bad, why) in [
        ("", "unknown command"),
        ("iface add", "missing device"),
        ("iface add rxe0", "missing address"),
        ("iface add rxe0 1.2.3.4 queue_depth=0", "value out of range"),
        (
            "iface add rxe0 1.2.3.4 queue_depth=257",
            "value out of range",
        ),
        (
            "iface add rxe0 1.2.3.4 max_payload=1k",
            "value out of range",
        ),
        ("iface add rxe0 1.2.3.4 colour=blue", "unknown tunable"),
        (
            "iface add rxe0 1.2.3.4 queue_depth",
            "tunables are key=value",
        ),
        ("ping 1.2.3.4", "missing address"),
        ("put 1.2.3.4 1.2.3.5", "missing offset"),
        ("get 1.2.3.4 1.2.3.5 0 0", "value out of range"),
        ("ping 1.2.3.4 1.2.3.5 0", "value out of range"),
        ("frobnicate", "unknown command"),
        ("fault 1.2.3.4 1.2.3.5 gremlins", "unknown fault"),
    ] {
        assert_eq!(Ctl::parse(bad), Err(why), "{bad}");
    }
}

#[test]
fn corrupt_command() {
    use crate::rules::command::Ctl;
    assert_eq!(
        Ctl::parse("corrupt 10.1.0.2 3"),
        Ok(Ctl::Corrupt {
            local: [10, 1, 0, 2],
            n: 3
        })
    );
    assert_eq!(Ctl::parse("corrupt 10.1.0.2"), Err("missing count"));
    assert_eq!(Ctl::parse("corrupt 10.1.0.2 1 2"), Err("too many words"));
}

#[test]
fn selftest_commands() {
    use crate::rules::{
        command::{Lst, LstOp, Span},
        wire::Check,
    };
    let t = Lst::parse("ping").unwrap();
    assert_eq!(t.op, LstOp::Ping);
    assert_eq!(t.peers(), &[] as &[[u8; 4]]);
    assert_eq!((t.concurrency, t.span, t.from), (1, Span::Count(1), None));

    let t = Lst::parse(
        "brw write from=10.1.0.1 peers=10.1.0.2,10.1.0.1 size=1M offset=4103 check=full \
         concurrency=64 seconds=5\n",
    )
    .unwrap();
    assert_eq!(t.op, LstOp::Write);
    assert_eq!(t.from, Some([10, 1, 0, 1]));
    assert_eq!(t.peers(), &[[10, 1, 0, 2], [10, 1, 0, 1]]);
    assert_eq!((t.size, t.offset, t.check), (1 << 20, 4103, Check::Full));
    assert_eq!((t.concurrency, t.span), (64, Span::Seconds(5)));

    let t = Lst::parse("brw read size=4k count=10 check=simple").unwrap();
    assert_eq!(
        (t.op, t.size, t.span, t.check),
        (LstOp::Read, 4096, Span::Count(10), Check::Simple)
    );

    for (bad, why) in [
        ("", "unknown test"),
        ("pong", "unknown test"),
        ("brw", "brw needs read or write"),
        ("brw copy size=1", "brw needs read or write"),
        ("brw read", "brw needs size"),
        ("brw read size=0", "value out of range"),
        ("brw read size=65M", "value out of range"),
        ("brw read size=1 offset=2M", "value out of range"),
        ("brw read size=1 check=some", "check is none, simple or full"),
        ("brw read size=1 concurrency=0", "value out of range"),
        ("brw read size=1 concurrency=257", "value out of range"),
        ("brw read size=1 count=1 seconds=1", "count and seconds exclude each other"),
        ("brw read size=1 count=0", "value out of range"),
        ("brw read size=1 seconds=3601", "value out of range"),
        ("brw read size=1 size=2", "option given twice"),
        ("brw read size=1 colour=red", "unknown option"),
        ("brw read size=1 peers", "options are key=value"),
        ("brw read size=1 peers=1.2.3", "bad IPv4 address"),
        ("brw read size=1 peers=1.1.1.1,1.1.1.2,1.1.1.3,1.1.1.4,1.1.1.5,1.1.1.6,1.1.1.7,1.1.1.8,1.1.1.9",
         "more than 8 peers"),
        ("ping size=1", "ping takes no size, offset or check"),
    ] {
        assert_eq!(Lst::parse(bad), Err(why), "{bad}");
    }
}

#[test]
fn misbehave_and_fault_commands() {
    use crate::rules::{
        command::{Ctl, Fault},
        wire::{Mangle, Misbehave},
    };
    assert_eq!(
        Ctl::parse("misbehave 10.1.0.2 short"),
        Ok(Ctl::Misbehave {
            local: [10, 1, 0, 2],
            how: Misbehave::Short,
            n: 1
        })
    );
    assert_eq!(
        Ctl::parse("misbehave 10.1.0.2 dup_done 0"),
        Ok(Ctl::Misbehave {
            local: [10, 1, 0, 2],
            how: Misbehave::DupDone,
            n: 0
        })
    );
    assert_eq!(
        Ctl::parse("misbehave 10.1.0.2 nice"),
        Err("unknown misbehaviour")
    );
    assert_eq!(
        Ctl::parse("misbehave 10.1.0.2 short 1 2"),
        Err("too many words")
    );
    for (word, what) in [
        ("magic", Fault::Mangle(Mangle::Magic)),
        ("regs", Fault::Mangle(Mangle::Regs)),
        ("length", Fault::Mangle(Mangle::Length)),
        ("credits", Fault::Mangle(Mangle::Credits)),
        ("stale_rkey", Fault::StaleRkey),
        ("stale_get", Fault::StaleGet),
    ] {
        assert_eq!(
            Ctl::parse(&format!("fault 10.1.0.1 10.1.0.2 {word}")),
            Ok(Ctl::Fault {
                local: [10, 1, 0, 1],
                peer: [10, 1, 0, 2],
                what
            })
        );
    }
}
