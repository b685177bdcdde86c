// SPDX-License-Identifier: GPL-2.0
//
// The host tests compile the pure files as the module's test build does (`--cfg
// fastreg_test`, Kbuild's FASTREG_TEST=1): the test-only rules (the debugfs `ctl` grammar,
// the fuzzing peer's mutator) are host-tested too.
fn main() {
    println!("cargo:rustc-check-cfg=cfg(fastreg_test)");
    println!("cargo:rustc-cfg=fastreg_test");
}
