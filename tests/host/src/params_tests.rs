// SPDX-License-Identifier: GPL-2.0

//! Tests of `src/rules/params.rs`.

use crate::rules::params::{self, ParamError, Params, Spec, ALL};
use proptest::prelude::*;

fn defaults() -> [u32; 13] {
    ALL.map(|s| s.default)
}

fn spec_of(e: &ParamError) -> Spec {
    match *e {
        ParamError::OutOfRange { spec, .. } | ParamError::Exceeds { spec, .. } => spec,
    }
}

fn index_of(spec: Spec) -> usize {
    ALL.iter().position(|s| *s == spec).unwrap()
}

#[test]
fn defaults_validate_and_are_listed_in_order() {
    let p = Params::validate(defaults()).expect("defaults must be valid");
    assert_eq!(p.values(), defaults());
    assert_eq!(
        p.listing(" ").to_string(),
        "pool_size=32 pool_max=1024 pool_idle=60 queue_depth=8 max_payload=1048576 \
         port=7471 timeout=20 keepalive=10 max_conns=1024 max_inline=4096 require_privileged_port=1 \
         test_mem=1024 tests_mem=0"
    );
}

#[test]
fn every_spec_is_sane() {
    for s in ALL {
        assert!(s.min <= s.default && s.default <= s.max, "{}", s.name);
    }
    // Names are unique: they are what insmod and the docs use.
    for (i, a) in ALL.iter().enumerate() {
        for b in &ALL[i + 1..] {
            assert_ne!(a.name, b.name);
        }
    }
    assert!(params::PORT.max <= u32::from(u16::MAX));
    // The documented bulk limit: at least 16 MiB must be allowed.
    const { assert!(params::MAX_PAYLOAD.max >= 16 << 20) };
}

#[test]
fn each_bound_is_accepted_and_each_neighbour_refused() {
    for (i, s) in ALL.iter().enumerate() {
        for ok in [s.min, s.max] {
            let mut raw = defaults();
            raw[i] = ok;
            // pool_size=max is larger than the default pool_max: raise the bound for this case.
            raw[index_of(params::POOL_MAX)] = params::POOL_MAX.max;
            assert!(Params::validate(raw).is_ok(), "{}={} refused", s.name, ok);
        }
        let mut bad = vec![s.max.wrapping_add(1), u32::MAX];
        if s.min > 0 {
            bad.push(s.min - 1);
        }
        for v in bad {
            if v >= s.min && v <= s.max {
                continue;
            }
            let mut raw = defaults();
            raw[i] = v;
            let err = Params::validate(raw).unwrap_err();
            assert_eq!(err, ParamError::OutOfRange { spec: *s, value: v });
        }
    }
}

#[test]
fn message_names_parameter_value_and_range() {
    let mut raw = defaults();
    raw[index_of(params::QUEUE_DEPTH)] = 0;
    let msg = Params::validate(raw).unwrap_err().to_string();
    assert_eq!(
        msg,
        "invalid parameter queue_depth=0: allowed range is 1..=256"
    );
}

#[test]
fn pool_size_may_not_exceed_pool_max() {
    let mut raw = defaults();
    raw[index_of(params::POOL_SIZE)] = 64;
    raw[index_of(params::POOL_MAX)] = 16;
    let err = Params::validate(raw).unwrap_err();
    assert_eq!(spec_of(&err), params::POOL_SIZE);
    assert_eq!(
        err.to_string(),
        "invalid parameter pool_size=64: allowed range is 1..=16 (pool_max=16)"
    );
    raw[index_of(params::POOL_SIZE)] = 16;
    assert_eq!(Params::validate(raw).unwrap().pool_size, 16);
}

proptest! {
    #[test]
    fn validate_accepts_exactly_the_ranges(raw in proptest::array::uniform13(0u32..=70_000_000)) {
        let in_range = ALL.iter().zip(raw).all(|(s, v)| v >= s.min && v <= s.max);
        let ordered = raw[index_of(params::POOL_SIZE)] <= raw[index_of(params::POOL_MAX)];
        match Params::validate(raw) {
            Ok(p) => {
                prop_assert!(in_range && ordered);
                prop_assert_eq!(p.values(), raw);
            }
            Err(e) => {
                prop_assert!(!(in_range && ordered));
                // The error names the first offending parameter in the documented order.
                let first_bad = ALL.iter().zip(raw).position(|(s, v)| v < s.min || v > s.max);
                match first_bad {
                    Some(i) => prop_assert_eq!(spec_of(&e), ALL[i]),
                    None => prop_assert_eq!(spec_of(&e), params::POOL_SIZE),
                }
            }
        }
    }
}
