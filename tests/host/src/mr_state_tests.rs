// SPDX-License-Identifier: GPL-2.0

//! Tests of `src/rules/mr_state.rs`: the typestate drives a model of rxe's MR (which refuses
//! REG on a valid MR and invalidation with a wrong key) through every legal path, and
//! misuse is rejected by the compiler.

use crate::rules::mr_state::{Handle, Mr};
use std::{cell::RefCell, collections::HashSet, process::Command, rc::Rc};

/// rxe's MR states (drivers/infiniband/sw/rxe/rxe_mr.c).
#[derive(Debug, PartialEq, Eq, Clone, Copy)]
enum Hw {
    Free,
    Valid,
}

/// The "hardware" side of a model MR: its key and what rxe would do with work requests.
struct HwMr {
    key: u32,
    hw: Hw,
    mapped: bool,
}

impl HwMr {
    fn new() -> Rc<RefCell<Self>> {
        Rc::new(RefCell::new(HwMr {
            key: 0x1234_5600,
            hw: Hw::Free,
            mapped: false,
        }))
    }
    /// Executes a REG_MR work request.
    fn exec_reg(&mut self, key: u32) {
        assert_eq!(self.hw, Hw::Free, "REG_MR on a valid MR: rxe fails the QP");
        assert!(self.mapped, "REG_MR of an unmapped MR");
        assert_eq!(key, self.key, "REG_MR with a key other than the MR's");
        self.hw = Hw::Valid;
    }
    /// Executes a LOCAL_INV (or a remote invalidation) of `rkey`.
    fn exec_inv(&mut self, rkey: u32) {
        assert_eq!(self.hw, Hw::Valid);
        assert_eq!(rkey, self.key, "invalidation with a stale key");
        self.hw = Hw::Free;
        self.mapped = false;
    }
}

/// The software handle of a model MR.
struct Model(Rc<RefCell<HwMr>>);

impl Handle for Model {
    type Error = ();
    type Sgl = [u8];
    fn map(&mut self, sgl: &[u8]) -> Result<(), ()> {
        if sgl.is_empty() {
            return Err(());
        }
        let mut m = self.0.borrow_mut();
        assert_eq!(m.hw, Hw::Free, "map while the MR may be in use");
        m.mapped = true;
        Ok(())
    }
    fn release(&mut self) {
        let mut m = self.0.borrow_mut();
        assert_eq!(m.hw, Hw::Free, "mapping released while the key is valid");
        m.mapped = false;
    }
    fn bump_key(&mut self) -> u32 {
        let mut m = self.0.borrow_mut();
        m.key = (m.key & !0xff) | ((m.key + 1) & 0xff);
        m.key
    }
    fn rkey(&self) -> u32 {
        self.0.borrow().key
    }
}

#[test]
fn local_invalidation_cycle_300_times() {
    let hw = HwMr::new();
    let mut free = Mr::new(Model(hw.clone()));
    let mut keys = HashSet::new();
    for _ in 0..300 {
        let mapped = free.map(&[1u8][..]).ok().unwrap();
        let (reg, key) = mapped.register();
        hw.borrow_mut().exec_reg(key);
        assert_eq!(reg.rkey(), key);
        keys.insert(key & 0xff);
        let (inv, rkey) = reg.invalidate();
        hw.borrow_mut().exec_inv(rkey);
        free = inv.invalidated().recycle();
    }
    // The key byte went through all 256 values; the rest of the key never changed.
    assert_eq!(keys.len(), 256);
    assert_eq!(hw.borrow().key & !0xff, 0x1234_5600);
}

#[test]
fn remote_invalidation_must_name_the_current_key() {
    let hw = HwMr::new();
    let mapped = Mr::new(Model(hw.clone())).map(&[1u8][..]).ok().unwrap();
    let (reg, key) = mapped.register();
    hw.borrow_mut().exec_reg(key);
    let reg = reg
        .remotely_invalidated(key.wrapping_sub(1))
        .err()
        .expect("stale key accepted");
    hw.borrow_mut().exec_inv(key);
    let done = reg
        .remotely_invalidated(key)
        .ok()
        .expect("current key refused");
    assert!(done.recycle().map(&[1u8][..]).is_ok());
}

#[test]
fn failed_map_keeps_the_mr_free() {
    let (free, ()) = Mr::new(Model(HwMr::new())).map(&[][..]).err().unwrap();
    assert!(free.map(&[1u8][..]).is_ok());
}

/// Compiles `body` against `src/rules/mr_state.rs` with the same rustc cargo uses.
fn compiles(body: &str) -> (bool, String) {
    let dir = std::env::temp_dir().join(format!("fastreg-typestate-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let src = dir.join(format!("case{}.rs", body.len()));
    let state = concat!(env!("CARGO_MANIFEST_DIR"), "/../../src/rules/mr_state.rs");
    std::fs::write(
        &src,
        format!(
            "#![allow(dead_code, unused)]\n#[path = \"{state}\"] mod mr_state;\nuse mr_state::{{*, state::*}};\n\
             struct H;\nimpl Handle for H {{ type Error = (); type Sgl = u8;\n\
             fn map(&mut self, _: &u8) -> Result<(), ()> {{ Ok(()) }}\n fn release(&mut self) {{}}\n\
             fn bump_key(&mut self) -> u32 {{ 1 }}\nfn rkey(&self) -> u32 {{ 1 }} }}\n\
             struct Pool;\nimpl Pool {{ fn put(&self, _: Mr<H, Invalidated>) {{}} }}\n\
             fn case(pool: Pool) {{ {body} }}\n"
        ),
    )
    .unwrap();
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let out = Command::new(rustc)
        .args([
            "--edition",
            "2021",
            "--crate-type",
            "lib",
            "--emit",
            "metadata",
            "-o",
        ])
        .arg(dir.join("out.rmeta"))
        .arg(&src)
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn legal_sequence_compiles() {
    let (ok, err) = compiles(
        "let m = Mr::new(H).map(&0).ok().unwrap(); let (r, _k) = m.register(); \
         let (i, _rk) = r.invalidate(); pool.put(i.invalidated());",
    );
    assert!(ok, "{err}");
}

#[test]
fn misuse_does_not_compile() {
    let cases = [
        // Registering a free (unmapped) MR.
        ("let (r, _) = Mr::new(H).register();", "no method named `register`"),
        // Mapping a registered MR again (REG on a valid MR).
        ("let (r, _) = Mr::new(H).map(&0).ok().unwrap().register(); let _ = r.map(&0);", "E0599"),
        // Returning a registered (still valid) MR to the pool.
        ("let (r, _) = Mr::new(H).map(&0).ok().unwrap().register(); pool.put(r);", "mismatched types"),
        // Returning an MR whose LOCAL_INV has not completed.
        ("let (r, _) = Mr::new(H).map(&0).ok().unwrap().register(); let (i, _) = r.invalidate(); pool.put(i);", "mismatched types"),
        // Recycling a mapped MR without registering and invalidating it.
        ("let _ = Mr::new(H).map(&0).ok().unwrap().recycle();", "no method named `recycle`"),
        // Forging a state: the constructor is private.
        ("let _: Mr<H, Invalidated> = Mr::with(H);", "private"),
    ];
    for (body, expect) in cases {
        let (ok, err) = compiles(body);
        assert!(!ok, "misuse compiled: {body}");
        assert!(
            err.contains(expect),
            "{body}: expected `{expect}` in:\n{err}"
        );
    }
}
