// SPDX-License-Identifier: GPL-2.0

//! Selftest statistics: merging, percentiles, rates, error kinds.

use crate::selftest::stats::*;
use proptest::prelude::*;

#[test]
fn empty_stats_print_zeros() {
    let s = Stats::new();
    let mut out = String::new();
    s.write(&mut out, 0).unwrap();
    assert_eq!(
        out,
        "ops=0 bytes=0 errors=0 corrupt=0 usecs=0 seconds=0.000000 mib_per_s=0.00 \
         ops_per_s=0.00 lat_min_us=0 lat_avg_us=0 lat_p99_us=0 lat_max_us=0 \
         err_timeout=0 err_connection=0 err_refused=0 err_other=0"
    );
}

#[test]
fn rates_and_latencies() {
    let mut s = Stats::new();
    // 10 transfers of 1 MiB in 2.5 s: 4.00 MiB/s, 4.00 ops/s.
    for us in [100, 200, 300, 400, 500, 600, 700, 800, 900, 10_000] {
        s.ok(1 << 20, us);
    }
    s.error(ErrKind::of_errno(-110));
    s.error(ErrKind::of_errno(-111));
    s.error(ErrKind::of_errno(-5));
    s.corrupt += 1;
    let mut out = String::new();
    s.write(&mut out, 2_500_000).unwrap();
    assert!(out.starts_with("ops=10 bytes=10485760 errors=3 corrupt=1 usecs=2500000 seconds=2.500000 mib_per_s=4.00 ops_per_s=4.00 lat_min_us=100 lat_avg_us=1450 "), "{out}");
    assert!(
        out.ends_with("lat_max_us=10000 err_timeout=1 err_connection=1 err_refused=0 err_other=1"),
        "{out}"
    );
    // p99 of 10 samples is the largest.
    assert_eq!(s.percentile(99), 10_000);
    // p50: the 5th sample (500) within 12.5% above.
    let p50 = s.percentile(50);
    assert!((500..=562).contains(&p50), "{p50}");
}

#[test]
fn error_kinds() {
    assert_eq!(ErrKind::of_errno(-110), ErrKind::Timeout);
    for e in [111, 113, 101, 104, 103, 107, 19] {
        assert_eq!(ErrKind::of_errno(-e), ErrKind::Connection, "{e}");
    }
    assert_eq!(ErrKind::of_errno(-90), ErrKind::Refused);
    assert_eq!(ErrKind::of_errno(-5), ErrKind::Other);
}

#[test]
fn restart_pause_backs_off_to_a_second() {
    assert_eq!(restart_pause_ms(0), 10);
    assert_eq!(restart_pause_ms(1), 20);
    assert_eq!(restart_pause_ms(6), 640);
    assert_eq!(restart_pause_ms(7), 1000);
    assert_eq!(restart_pause_ms(u32::MAX), 1000);
    for n in 0..64 {
        assert!(restart_pause_ms(n) <= restart_pause_ms(n + 1));
    }
}

proptest! {
    #[test]
    fn percentiles_are_close_and_merging_adds(
        a in prop::collection::vec(0u64..1 << 40, 1..200),
        b in prop::collection::vec(0u64..1 << 40, 0..200),
        pct in 1u64..=100,
    ) {
        let (mut sa, mut sb, mut all) = (Stats::new(), Stats::new(), Stats::new());
        for &v in &a { sa.ok(1, v); all.ok(1, v); }
        for &v in &b { sb.ok(1, v); all.ok(1, v); }
        sa.merge(&sb);
        prop_assert_eq!(sa.percentile(pct), all.percentile(pct));
        prop_assert_eq!(sa.latency(), all.latency());
        prop_assert_eq!(sa.ops, (a.len() + b.len()) as u64);
        // The exact percentile, and the histogram's answer within 12.5% above it.
        let mut v: Vec<u64> = a.iter().chain(b.iter()).copied().collect();
        v.sort();
        let want = v[(((v.len() as u64) * pct).div_ceil(100) as usize).max(1) - 1];
        let got = sa.percentile(pct);
        prop_assert!(got >= want && got <= want + want / 8, "p{} want {} got {}", pct, want, got);
    }
}
