//! The HMAC tokens that bind a person's decision to one held call and to the principal it was
//! shown to: [`ApprovalKey`] signs, with HMAC-SHA256, the session id, the call id, the tool
//! name, the canonical JSON of the exact arguments, the pending state's random nonce and a tag
//! of the principal (itself an HMAC of the principal under the key, so the token does not show
//! who it is for). A token is `nonce.tag.mac`. No I/O.

use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use hmac::{Hmac, KeyInit, Mac};
use rand::RngCore;
use serde_json::Value;
use sha2::Sha256;

use super::error::ApprovalError;

/// The environment variable [`ApprovalKey::from_env`] reads: at least 32 bytes of secret
/// (e.g. the 64 hex digits of `openssl rand -hex 32`).
pub const APPROVAL_KEY_ENV: &str = "TOOL_APPROVAL_KEY";

/// The secret that signs decision tokens. Give every process that serves a session the same
/// key (from a secret store or `APPROVAL_KEY_ENV`): a token signed before a restart, or by
/// another worker, verifies only under the same key.
///
/// ```
/// use toolwright_tool_system::ApprovalKey;
/// assert!(ApprovalKey::new("too short").is_err());
/// let key = ApprovalKey::new([7u8; 32])?;
/// assert_eq!(format!("{key:?}"), "ApprovalKey(..)"); // never printed
/// # Ok::<(), toolwright_tool_system::ApprovalError>(())
/// ```
#[derive(Clone)]
pub struct ApprovalKey(Arc<Keyed>);

struct Keyed {
    /// The HMAC state with the key already taken in: each MAC starts from a copy of it
    /// instead of hashing the padded key again (two SHA-256 blocks per MAC).
    mac: Hmac<Sha256>,
    /// The last principal's tag: the same person's tokens are made and checked over and over.
    last_tag: Mutex<Option<(String, [u8; 16])>>,
}

impl std::fmt::Debug for ApprovalKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ApprovalKey(..)")
    }
}

/// What one token binds: a call of a session, with its exact arguments, under the nonce of one
/// pending state (the principal is given beside it: [`ApprovalKey::token`],
/// [`ApprovalKey::verify`]).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Binding<'a> {
    pub(crate) session: &'a str,
    pub(crate) id: &'a str,
    pub(crate) name: &'a str,
    pub(crate) arguments: &'a Value,
    pub(crate) nonce: &'a str,
}

/// What checking a token's `tag.mac` found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// It binds this call and this principal.
    Valid,
    /// It binds this call, for another principal (copied from another account).
    OtherPrincipal,
    /// It does not verify: forged, or made for another session, call or arguments.
    Invalid,
}

impl ApprovalKey {
    /// The fewest bytes a key may have: 32 (SHA-256's output size).
    pub const MIN_LEN: usize = 32;

    /// A key from secret bytes (at least [`MIN_LEN`](Self::MIN_LEN)).
    pub fn new(secret: impl AsRef<[u8]>) -> Result<Self, ApprovalError> {
        let secret = secret.as_ref();
        if secret.len() < Self::MIN_LEN {
            return Err(ApprovalError::KeyTooShort { len: secret.len() });
        }
        Ok(Self::keyed(secret))
    }

    fn keyed(secret: &[u8]) -> Self {
        let mac = <Hmac<Sha256> as KeyInit>::new_from_slice(secret)
            .unwrap_or_else(|_| unreachable!("HMAC takes keys of any length"));
        Self(Arc::new(Keyed {
            mac,
            last_tag: Mutex::new(None),
        }))
    }

    /// The key in the environment variable `APPROVAL_KEY_ENV` (its bytes, as written).
    pub fn from_env() -> Result<Self, ApprovalError> {
        match std::env::var(APPROVAL_KEY_ENV) {
            Ok(v) if !v.trim().is_empty() => Self::new(v.trim()),
            _ => Err(ApprovalError::KeyMissing),
        }
    }

    /// A random key for this process only. Tokens signed with it stop verifying when the
    /// process ends (the pending approval itself is kept: fetch it again for fresh tokens).
    pub fn random() -> Self {
        let mut k = [0u8; 32];
        rand::rng().fill_bytes(&mut k);
        Self::keyed(&k)
    }

    /// The tag of `principal`: HMAC under the key, so a token names its principal without
    /// showing it, and nobody without the key can make the tag of another.
    fn tag(&self, principal: &str) -> [u8; 16] {
        let mut last = self
            .0
            .last_tag
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some((p, tag)) = last.as_ref()
            && p == principal
        {
            return *tag;
        }
        let mut mac = self.0.mac.clone();
        for f in [
            b"tool-system approval principal v2".as_slice(),
            principal.as_bytes(),
        ] {
            mac.update(&(f.len() as u64).to_be_bytes());
            mac.update(f);
        }
        let mut tag = [0u8; 16];
        tag.copy_from_slice(&mac.finalize().into_bytes()[..16]);
        *last = Some((principal.to_owned(), tag));
        tag
    }

    fn mac(&self, b: &Binding<'_>, tag: &[u8]) -> Hmac<Sha256> {
        let mut mac = self.0.mac.clone();
        let args = canonical_json(b.arguments);
        let fields: [&[u8]; 7] = [
            b"tool-system approval v2",
            b.session.as_bytes(),
            b.id.as_bytes(),
            b.name.as_bytes(),
            args.as_bytes(),
            b.nonce.as_bytes(),
            tag,
        ];
        for f in fields {
            // Length-prefixed, so no two different field lists give the same bytes.
            mac.update(&(f.len() as u64).to_be_bytes());
            mac.update(f);
        }
        mac
    }

    /// `nonce.tag.mac`: the token a [`crate::HeldCall`] shown to `principal` carries.
    pub(crate) fn token(&self, b: &Binding<'_>, principal: &str) -> String {
        let tag = self.tag(principal);
        let mac = self.mac(b, &tag).finalize().into_bytes();
        format!("{}.{}.{}", b.nonce, hex(&tag), hex(&mac))
    }

    /// Whether `tag_mac` (a token's `tag.mac`) is this key's MAC of `b` (compared in constant
    /// time), and for `principal`.
    pub(crate) fn verify(&self, b: &Binding<'_>, tag_mac: &str, principal: &str) -> Verdict {
        let Some((tag_hex, mac_hex)) = tag_mac.split_once('.') else {
            return Verdict::Invalid;
        };
        let (Some(tag), Some(mac_bytes)) = (unhex(tag_hex), unhex(mac_hex)) else {
            return Verdict::Invalid;
        };
        if tag.len() != 16 {
            return Verdict::Invalid;
        }
        if self.mac(b, &tag).verify_slice(&mac_bytes).is_err() {
            return Verdict::Invalid;
        }
        // The call's binding verifies: now whether it was made for this principal (the tag is
        // authenticated by the MAC, so comparing it is enough; in constant time all the same).
        let mine = self.tag(principal);
        let same = mine.iter().zip(&tag).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0;
        if same {
            Verdict::Valid
        } else {
            Verdict::OtherPrincipal
        }
    }
}

impl ApprovalKey {
    /// The seal of a stored run `body` of session `session`: HMAC-SHA256 under the key, hex.
    pub(crate) fn seal(&self, session: &str, body: &str) -> String {
        hex(&self.seal_mac(session, body).finalize().into_bytes())
    }

    /// Whether `seal` (hex) is this key's seal of `body` in `session` (constant time).
    pub(crate) fn seal_holds(&self, session: &str, body: &str, seal: &str) -> bool {
        unhex(seal).is_some_and(|bytes| self.seal_mac(session, body).verify_slice(&bytes).is_ok())
    }

    fn seal_mac(&self, session: &str, body: &str) -> Hmac<Sha256> {
        let mut mac = self.0.mac.clone();
        for f in [
            b"tool-system stored run v1".as_slice(),
            session.as_bytes(),
            body.as_bytes(),
        ] {
            mac.update(&(f.len() as u64).to_be_bytes());
            mac.update(f);
        }
        mac
    }
}

/// The key used when an agent was given none: random, for this process. A sound default
/// rather than an error because gates can come from providers at run time (an MCP tool
/// configured for approval) in an agent whose author set no key: holding the call and keeping
/// the pending state durable is safe; only tokens handed out before a restart stop verifying,
/// and [`pending_approval`](crate::pending_approval) hands out fresh ones. A warning says so once.
fn process_key() -> &'static ApprovalKey {
    static KEY: OnceLock<ApprovalKey> = OnceLock::new();
    KEY.get_or_init(|| {
        tracing::warn!(
            "a tool call is held for approval but no approval key was set: using a random key for \
             this process, so decision tokens will not verify after a restart or in another \
             worker; set one with AgentBuilder::approval_key (e.g. ApprovalKey::from_env, {APPROVAL_KEY_ENV})"
        );
        ApprovalKey::random()
    })
}

/// The key given (`LoopOptions::approval_key`), else the process's own ([`process_key`]).
pub(crate) fn key_or_process(key: Option<&ApprovalKey>) -> &ApprovalKey {
    key.unwrap_or_else(|| process_key())
}

/// A fresh random nonce for a pending state (16 bytes, hex).
pub(crate) fn nonce() -> String {
    let mut n = [0u8; 16];
    rand::rng().fill_bytes(&mut n);
    hex(&n)
}

fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(DIGITS[(b >> 4) as usize] as char);
        s.push(DIGITS[(b & 15) as usize] as char);
    }
    s
}

pub(crate) fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

/// JSON with every object's keys sorted (serde_json keeps insertion order here), so equal
/// arguments sign equally however they were written.
fn canonical_json(v: &Value) -> String {
    fn write(v: &Value, out: &mut String) {
        match v {
            Value::Object(m) => {
                let mut keys: Vec<&String> = m.keys().collect();
                keys.sort();
                out.push('{');
                for (i, k) in keys.into_iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    out.push_str(&Value::String(k.clone()).to_string());
                    out.push(':');
                    if let Some(x) = m.get(k) {
                        write(x, out);
                    }
                }
                out.push('}');
            }
            Value::Array(a) => {
                out.push('[');
                for (i, x) in a.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    write(x, out);
                }
                out.push(']');
            }
            other => out.push_str(&other.to_string()),
        }
    }
    let mut out = String::new();
    write(v, &mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn call<'a>(session: &'a str, id: &'a str, args: &'a Value, nonce: &'a str) -> Binding<'a> {
        Binding {
            session,
            id,
            name: "delete_file",
            arguments: args,
            nonce,
        }
    }

    /// `tag.mac` of a token.
    fn rest(t: &str) -> &str {
        t.split_once('.').unwrap().1
    }

    #[test]
    fn approval_token_binds_session_call_name_arguments_nonce_and_principal() {
        let key = ApprovalKey::new([1u8; 32]).unwrap();
        let args = json!({"path": "/tmp/a", "force": true});
        let c = call("s1", "c1", &args, "00ff");
        let t = key.token(&c, "alice");
        let (n, mac) = t.split_once('.').unwrap();
        assert_eq!(n, "00ff");
        assert!(
            !t.contains("alice"),
            "the token does not show its principal"
        );
        assert_eq!(key.verify(&c, mac, "alice"), Verdict::Valid);
        assert_eq!(
            key.verify(&c, mac, "bob"),
            Verdict::OtherPrincipal,
            "copied to another principal"
        );
        let invalid = |b: &Binding<'_>| key.verify(b, mac, "alice");
        assert_eq!(invalid(&call("s2", "c1", &args, "00ff")), Verdict::Invalid);
        assert_eq!(invalid(&call("s1", "c2", &args, "00ff")), Verdict::Invalid);
        let other_args = json!({"path": "/etc", "force": true});
        assert_eq!(
            invalid(&call("s1", "c1", &other_args, "00ff")),
            Verdict::Invalid
        );
        assert_eq!(
            invalid(&call("s1", "c1", &args, "00fe")),
            Verdict::Invalid,
            "other pending state"
        );
        let renamed = Binding {
            name: "read_file",
            ..c
        };
        assert_eq!(invalid(&renamed), Verdict::Invalid, "other tool");
        let other_key = ApprovalKey::new([2u8; 32]).unwrap();
        assert_eq!(other_key.verify(&c, mac, "alice"), Verdict::Invalid);
        // bob's tag put into alice's token: the MAC covers the tag
        let bobs = key.token(&c, "bob");
        let bob_tag = rest(&bobs).split_once('.').unwrap().0;
        let alice_mac = mac.split_once('.').unwrap().1;
        let spliced = format!("{bob_tag}.{alice_mac}");
        assert_eq!(key.verify(&c, &spliced, "bob"), Verdict::Invalid);
        for bad in ["zz", "", "00.zz", ".", "ab.cd"] {
            assert_eq!(key.verify(&c, bad, "alice"), Verdict::Invalid, "{bad:?}");
        }
        // the same arguments written in another key order sign the same
        let reordered = json!({"force": true, "path": "/tmp/a"});
        assert_eq!(
            key.verify(&call("s1", "c1", &reordered, "00ff"), mac, "alice"),
            Verdict::Valid
        );
    }

    #[test]
    fn approval_canonical_json_sorts_keys_at_every_depth() {
        let v = json!({"b": [{"y": 1, "x": "é\"q"}], "a": null});
        assert_eq!(canonical_json(&v), r#"{"a":null,"b":[{"x":"é\"q","y":1}]}"#);
    }

    #[test]
    fn approval_key_rules() {
        assert_eq!(
            ApprovalKey::new([0u8; 31]).unwrap_err(),
            ApprovalError::KeyTooShort { len: 31 }
        );
        assert!(ApprovalKey::new([0u8; 32]).is_ok());
        assert_eq!(unhex("0aff"), Some(vec![10, 255]));
        assert_eq!(unhex("0af"), None);
        assert_eq!(hex(&[10, 255]), "0aff");
    }
}
