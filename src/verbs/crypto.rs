// SPDX-License-Identifier: GPL-2.0

//! The kernel's HMAC-SHA256 (lib/crypto) and random bytes, for the console's proofs of the
//! cluster key (`crate::selftest::auth`).

use super::ib;

/// HMAC-SHA256 of `msg` under `key` (lib/crypto's `hmac_sha256_usingrawkey`): an
/// `auth::Mac`.
pub(crate) fn hmac_sha256(key: &[u8], msg: &[u8]) -> [u8; 32] {
    let mut out = [0u8; 32];
    // SAFETY: `key` and `msg` are valid for reads of their lengths and `out` for writes of
    // the 32 bytes of a SHA-256 digest; the helper only reads and writes them during the
    // call, and may be called from any context.
    unsafe {
        ib::fastreg_hmac_sha256(
            key.as_ptr(),
            key.len(),
            msg.as_ptr(),
            msg.len(),
            out.as_mut_ptr(),
        )
    };
    out
}

/// `N` random bytes from the kernel's CRNG (`get_random_bytes`): nonces.
pub(crate) fn random_bytes<const N: usize>() -> [u8; N] {
    let mut out = [0u8; N];
    // SAFETY: `out` is valid for writes of `N` bytes for the duration of the call;
    // `get_random_bytes` may be called from any context and never fails.
    unsafe { kernel::bindings::get_random_bytes(out.as_mut_ptr().cast(), N) };
    out
}
