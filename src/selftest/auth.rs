// SPDX-License-Identifier: GPL-2.0

//! The console's proofs of the cluster key.
//!
//! Every node of a cluster holds the same key (`fastreg-lst console key FILE`: 32 bytes,
//! the SHA-256 of a file the site distributes as it does munge's key). A console proves it
//! holds the key, and a node proves it back, without either sending it:
//!
//! 1. HELLO: the console sends a fresh nonce `nc`; the node answers with a fresh nonce `nn`
//!    and remembers the pair for [`CHALLENGE_MS`] (a [`Challenges`] slot).
//! 2. The console's JOIN (or read-only QUERY) echoes `nn` and is tagged with the challenge's
//!    key, [`challenge_key`]: HMAC-SHA256 of the cluster key over both addresses and both
//!    nonces. The node finds the challenge by `nn` (used once), derives the same key and
//!    checks the tag; its reply is tagged with that key too.
//! 3. A JOIN admitted makes that key the session's key: every later request of the session
//!    carries a sequence number above the last one admitted and a tag under the session's
//!    key, and so does every reply to it. A request replayed, or from anyone without the
//!    session's key, is refused and changes nothing.
//!
//! Tags are the first [`TAG_LEN`] bytes of an HMAC-SHA256 (as IPsec's HMAC-SHA-256-128,
//! RFC 4868), over a direction byte and the message's bytes before the tag.
//!
//! The HMAC itself is given by the caller ([`Mac`]): the kernel's lib/crypto in the module,
//! a reference implementation in the host tests.
//!
//! Pure logic: no `kernel::`, compiled by the host tests too.

/// Bytes of the cluster key and of derived keys.
pub(crate) const KEY_LEN: usize = 32;
/// Bytes of a nonce.
pub(crate) const NONCE_LEN: usize = 16;
/// Bytes of a tag.
pub(crate) const TAG_LEN: usize = 16;
/// How long a node keeps a challenge it answered, in milliseconds.
pub(crate) const CHALLENGE_MS: u64 = 10_000;
/// Most challenges a node keeps at once (the oldest gives way).
pub(crate) const MAX_CHALLENGES: usize = 8;

/// A key: the cluster's, a challenge's, a session's.
pub(crate) type Key = [u8; KEY_LEN];
/// A nonce.
pub(crate) type Nonce = [u8; NONCE_LEN];
/// A tag.
pub(crate) type Tag = [u8; TAG_LEN];

/// HMAC-SHA256 of `msg` under `key`.
pub(crate) type Mac = fn(key: &[u8], msg: &[u8]) -> [u8; 32];

/// Whose message a tag covers: a console's request or a node's reply (so neither can be
/// played back as the other).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum Dir {
    /// A console's request.
    Request = b'Q',
    /// A node's reply.
    Reply = b'R',
}

/// Label of the challenge key derivation.
const CHALLENGE_LABEL: &[u8] = b"fastreg console challenge v1";
/// Label of a key's fingerprint.
const FINGERPRINT_LABEL: &[u8] = b"fastreg console key fingerprint v1";
/// Longest message tagged: a control payload and the direction byte.
const MAX_TAGGED: usize = 256;

/// The key of a challenge between `console` and `node` with nonces `nc` (the console's)
/// and `nn` (the node's).
pub(crate) fn challenge_key(
    mac: Mac,
    key: &Key,
    console: [u8; 4],
    node: [u8; 4],
    nc: &Nonce,
    nn: &Nonce,
) -> Key {
    let mut m = [0u8; CHALLENGE_LABEL.len() + 8 + 2 * NONCE_LEN];
    let parts: [&[u8]; 5] = [CHALLENGE_LABEL, &console, &node, nc, nn];
    let mut at = 0;
    for p in parts {
        m[at..at + p.len()].copy_from_slice(p);
        at += p.len();
    }
    mac(key, &m)
}

/// The tag of `bytes` (a message up to its tag) sent in direction `dir` under `key`;
/// `None` when the message is longer than any control payload.
pub(crate) fn tag(mac: Mac, key: &Key, dir: Dir, bytes: &[u8]) -> Option<Tag> {
    let mut m = [0u8; MAX_TAGGED];
    let body = m.get_mut(1..1 + bytes.len())?;
    body.copy_from_slice(bytes);
    m[0] = dir as u8;
    let full = mac(key, &m[..1 + bytes.len()]);
    let mut t = [0u8; TAG_LEN];
    t.copy_from_slice(&full[..TAG_LEN]);
    Some(t)
}

/// Whether `got` is the tag of `bytes` in direction `dir` under `key`, compared in constant
/// time.
pub(crate) fn check(mac: Mac, key: &Key, dir: Dir, bytes: &[u8], got: &Tag) -> bool {
    match tag(mac, key, dir, bytes) {
        Some(want) => want.iter().zip(got).fold(0u8, |d, (a, b)| d | (a ^ b)) == 0,
        None => false,
    }
}

/// A short public name of `key` (`console list` shows it, so an administrator can tell
/// that two nodes hold the same key without reading it).
pub(crate) fn fingerprint(mac: Mac, key: &Key) -> u32 {
    let d = mac(key, FINGERPRINT_LABEL);
    u32::from_be_bytes([d[0], d[1], d[2], d[3]])
}

/// A challenge a node answered (HELLO), waiting for the console's proof.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Challenge {
    /// The console it was given to.
    pub(crate) console: [u8; 4],
    /// The console's nonce.
    pub(crate) nc: Nonce,
    /// The node's nonce.
    pub(crate) nn: Nonce,
    /// When it was given, on the node's clock (milliseconds).
    pub(crate) at_ms: u64,
}

/// The challenges a node has answered and not yet seen used: at most
/// [`MAX_CHALLENGES`], each for [`CHALLENGE_MS`], each used once.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Challenges {
    slots: [Option<Challenge>; MAX_CHALLENGES],
}

impl Challenges {
    /// Keeps `c`, in place of an expired one or else of the oldest.
    pub(crate) fn give(&mut self, c: Challenge) {
        let slot = self
            .slots
            .iter_mut()
            .min_by_key(|s| s.map_or((0, 0), |x| (1, x.at_ms)))
            .expect("MAX_CHALLENGES > 0");
        *slot = Some(c);
    }

    /// Takes out the challenge of `console` whose node nonce is `nn`, if it was given less
    /// than [`CHALLENGE_MS`] before `now_ms`. A challenge is used at most once.
    pub(crate) fn take(&mut self, now_ms: u64, console: [u8; 4], nn: &Nonce) -> Option<Challenge> {
        let s = self
            .slots
            .iter_mut()
            .find(|s| s.is_some_and(|c| c.console == console && c.nn == *nn))?;
        let c = s.take()?;
        (now_ms.saturating_sub(c.at_ms) < CHALLENGE_MS).then_some(c)
    }

    /// Challenges kept (expired ones included until they give way).
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.slots.iter().filter(|s| s.is_some()).count()
    }
}
