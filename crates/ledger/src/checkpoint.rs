//! Signed checkpoints: an Ed25519 signature over the chain's head, which anyone holding the public
//! key can check without any secret of the ledger's.
//!
//! A checkpoint is a C2SP signed note (`c2sp.org/signed-note`) whose text follows the C2SP
//! tlog-checkpoint layout: the origin, the size (the head's sequence number: the log holds events
//! 1..=size), the head's hash in base64, then one extension line with the time it was signed.
//!
//! ```text
//! ci.example/idemgate
//! 1041
//! 0f4jkT7aVqB3mIDgPEzkb5QBFx8GNvH9R9YbSmk1b5k=
//! time 2026-11-26T09:00:00.000Z
//!
//! — ci.example/idemgate Az3grnhk1ZS…
//! ```
//!
//! Keys are written as the Go `note` package writes them: the signer key
//! `PRIVATE+KEY+NAME+KEYID+BASE64(0x01 || seed)` and the verifier key `NAME+KEYID+BASE64(0x01 ||
//! public key)`, where KEYID is the first four bytes of `sha256(NAME || "\n" || 0x01 || public
//! key)` in hex. Unlike a transparency log's Merkle root, the hash is the head of a hash chain:
//! a later checkpoint extends an earlier one when the chain leads from the earlier head to it.

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;
use ed25519_dalek::{Signature, Signer as _, SigningKey, Verifier as _, VerifyingKey};
use sha2::{Digest, Sha256};

pub use crate::model::SignedCheckpoint;
use crate::model::{rfc3339, ChainHead, Millis};

/// The algorithm byte of an Ed25519 key in a note key.
const ED25519: u8 = 0x01;

/// A key or note that does not read.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum CheckpointError {
    #[error("not a signing key: {0}")]
    BadSigningKey(String),
    #[error("cannot read the signing key {0}")]
    UnreadableSigningKey(String),
    #[error("not a public key: {0}")]
    BadPublicKey(String),
    #[error("not a signed checkpoint: {0}")]
    BadNote(String),
    #[error("the checkpoint is not signed by {0}")]
    NotSigned(String),
}

/// A key's id, as a signature line names it: the first four bytes of
/// `sha256(name || "\n" || alg || public key)`.
pub(crate) fn key_id_of(name: &str, alg: u8, public: &VerifyingKey) -> [u8; 4] {
    let mut h = Sha256::new();
    h.update(name.as_bytes());
    h.update(b"\n");
    h.update([alg]);
    h.update(public.as_bytes());
    let d = h.finalize();
    [d[0], d[1], d[2], d[3]]
}

fn key_id(name: &str, public: &VerifyingKey) -> [u8; 4] {
    key_id_of(name, ED25519, public)
}

/// Reads a signer key of algorithm `alg` (`PRIVATE+KEY+NAME+KEYID+BASE64(alg || seed)`).
pub(crate) fn parse_private(text: &str, alg: u8) -> Result<(String, SigningKey), String> {
    let rest = text
        .trim()
        .strip_prefix("PRIVATE+KEY+")
        .ok_or("it does not start with PRIVATE+KEY+")?;
    // The key's base64 may hold '+' itself: only the first two separate.
    let mut parts = rest.splitn(3, '+');
    let (Some(name), Some(id), Some(key)) = (parts.next(), parts.next(), parts.next()) else {
        return Err("expected PRIVATE+KEY+NAME+KEYID+KEY".into());
    };
    check_name(name)?;
    let raw = B64.decode(key).map_err(|e| format!("key: {e}"))?;
    let (Some(&a), Ok(seed)) = (raw.first(), <[u8; 32]>::try_from(&raw[1.min(raw.len())..])) else {
        return Err("not an Ed25519 key".into());
    };
    if a != alg {
        return Err(format!("a key of type {a:#04x}, not {alg:#04x}"));
    }
    let key = SigningKey::from_bytes(&seed);
    if hex::encode(key_id_of(name, alg, &key.verifying_key())) != id {
        return Err("its key id does not match its key".into());
    }
    Ok((name.to_owned(), key))
}

/// Reads a verifier key of algorithm `alg` (`NAME+KEYID+BASE64(alg || public key)`).
pub(crate) fn parse_public(text: &str, alg: u8) -> Result<(String, VerifyingKey), String> {
    let text = text.trim();
    if text.starts_with("PRIVATE+") {
        return Err("this is the private key: give the .pub file".into());
    }
    let mut parts = text.splitn(3, '+');
    let (Some(name), Some(id), Some(key)) = (parts.next(), parts.next(), parts.next()) else {
        return Err("expected NAME+KEYID+KEY".into());
    };
    check_name(name)?;
    let raw = B64.decode(key).map_err(|e| format!("key: {e}"))?;
    let (Some(&a), Ok(bytes)) = (raw.first(), <[u8; 32]>::try_from(&raw[1.min(raw.len())..]))
    else {
        return Err("not an Ed25519 key".into());
    };
    if a != alg {
        return Err(format!("a key of type {a:#04x}, not {alg:#04x}"));
    }
    let key = VerifyingKey::from_bytes(&bytes).map_err(|e| e.to_string())?;
    if hex::encode(key_id_of(name, alg, &key)) != id {
        return Err("its key id does not match its key".into());
    }
    Ok((name.to_owned(), key))
}

/// A key as the Go note format writes it: `NAME+KEYID+BASE64(alg || key bytes)`.
pub(crate) fn encode_key(
    name: &str,
    alg: u8,
    public: &VerifyingKey,
    secret: Option<&SigningKey>,
) -> String {
    let mut raw = vec![alg];
    match secret {
        Some(k) => raw.extend_from_slice(k.as_bytes()),
        None => raw.extend_from_slice(public.as_bytes()),
    }
    let body = format!(
        "{name}+{}+{}",
        hex::encode(key_id_of(name, alg, public)),
        B64.encode(raw)
    );
    if secret.is_some() {
        format!("PRIVATE+KEY+{body}")
    } else {
        body
    }
}

pub(crate) fn check_name(name: &str) -> Result<(), String> {
    if name.is_empty() || name.contains('+') || name.chars().any(char::is_whitespace) {
        return Err(format!(
            "{name:?}: a key name is not empty and has no space or '+'"
        ));
    }
    Ok(())
}

/// The private half: signs checkpoints. Never logged, never exported.
pub struct Signer {
    name: String,
    key: SigningKey,
}

impl std::fmt::Debug for Signer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Signer")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

/// A new key pair named `name` (the log's origin, e.g. `host.example/idemgate`): the signer key
/// and the verifier key, each as one line of text.
pub fn generate(name: &str) -> Result<(String, String), CheckpointError> {
    check_name(name).map_err(CheckpointError::BadSigningKey)?;
    let mut seed = [0u8; 32];
    rand::RngCore::fill_bytes(&mut rand::rng(), &mut seed);
    let signer = Signer {
        name: name.to_owned(),
        key: SigningKey::from_bytes(&seed),
    };
    Ok((signer.encode(), signer.public().encode()))
}

impl Signer {
    /// Reads a signer key (`PRIVATE+KEY+NAME+KEYID+BASE64`); surrounding whitespace is ignored.
    pub fn parse(text: &str) -> Result<Signer, CheckpointError> {
        let (name, key) = parse_private(text, ED25519).map_err(CheckpointError::BadSigningKey)?;
        Ok(Signer { name, key })
    }

    /// Reads a signer key from a file.
    pub fn from_file(path: &std::path::Path) -> Result<Signer, CheckpointError> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            let hint = if e.kind() == std::io::ErrorKind::PermissionDenied {
                " (the server reads it as its own user: `idemgate keygen --group GROUP` \
                     writes a key that user's group may read)"
            } else {
                ""
            };
            CheckpointError::UnreadableSigningKey(format!("{}: {e}{hint}", path.display()))
        })?;
        Signer::parse(&text)
    }

    fn encode(&self) -> String {
        encode_key(
            &self.name,
            ED25519,
            &self.key.verifying_key(),
            Some(&self.key),
        )
    }

    /// The key's name: the origin of the checkpoints it signs.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The public half.
    pub fn public(&self) -> PublicKey {
        PublicKey {
            name: self.name.clone(),
            key: self.key.verifying_key(),
        }
    }

    /// Signs `head` now and logs the checkpoint in `store`: the checkpoint, and its event's seq.
    pub fn sign_and_log(
        &self,
        store: &dyn crate::store::Storage,
        head: &ChainHead,
    ) -> crate::error::Result<(SignedCheckpoint, i64)> {
        self.log_signed(store, head, false)
    }

    /// [`Signer::sign_and_log`] for the periodic checkpoint of the log's head: refused when one
    /// of this head or a later one is logged already (another instance signed it).
    pub fn sign_head_and_log(
        &self,
        store: &dyn crate::store::Storage,
        head: &ChainHead,
    ) -> crate::error::Result<(SignedCheckpoint, i64)> {
        self.log_signed(store, head, true)
    }

    fn log_signed(
        &self,
        store: &dyn crate::store::Storage,
        head: &ChainHead,
        of_head: bool,
    ) -> crate::error::Result<(SignedCheckpoint, i64)> {
        let now = crate::model::now_millis();
        let cp = self.sign(head, now);
        let seq = store.note_checkpoint(cp.clone(), now, of_head).wait()?;
        Ok((cp, seq))
    }

    /// Signs `head` as of `at`.
    pub fn sign(&self, head: &ChainHead, at: Millis) -> SignedCheckpoint {
        let time = rfc3339(at);
        let body = body_text(&self.name, head, &time);
        let sig = self.key.sign(body.as_bytes());
        let mut raw = key_id(&self.name, &self.key.verifying_key()).to_vec();
        raw.extend_from_slice(&sig.to_bytes());
        let note = format!("{body}\n\u{2014} {} {}\n", self.name, B64.encode(raw));
        SignedCheckpoint {
            origin: self.name.clone(),
            seq: head.seq,
            hash: head.hash.clone(),
            time,
            key: self.public().encode(),
            note,
        }
    }
}

fn body_text(origin: &str, head: &ChainHead, time: &str) -> String {
    let hash = hex::decode(&head.hash).map_or_else(|_| head.hash.clone(), |b| B64.encode(b));
    format!("{origin}\n{}\n{hash}\ntime {time}\n", head.seq)
}

/// The public half of a signing key: checks checkpoints.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PublicKey {
    name: String,
    key: VerifyingKey,
}

impl PublicKey {
    /// Reads a verifier key (`NAME+KEYID+BASE64`).
    pub fn parse(text: &str) -> Result<PublicKey, CheckpointError> {
        let (name, key) = parse_public(text, ED25519).map_err(CheckpointError::BadPublicKey)?;
        Ok(PublicKey { name, key })
    }

    /// Reads a verifier key from a file.
    pub fn from_file(path: &std::path::Path) -> Result<PublicKey, CheckpointError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| CheckpointError::BadPublicKey(format!("{}: {e}", path.display())))?;
        PublicKey::parse(&text)
    }

    pub fn encode(&self) -> String {
        encode_key(&self.name, ED25519, &self.key, None)
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// Checks `note`'s signature by this key and reads the head it signs. Only the note counts:
    /// the fields a manifest repeats beside it are for people.
    pub fn verify(&self, note: &str) -> Result<VerifiedCheckpoint, CheckpointError> {
        let bad = |why: &str| CheckpointError::BadNote(why.to_owned());
        let split = note
            .find("\n\n")
            .ok_or_else(|| bad("no blank line before the signatures"))?;
        let (body, sigs) = (&note[..=split], &note[split + 2..]);
        let id = key_id(&self.name, &self.key);
        let mut signed = false;
        for line in sigs.lines() {
            let Some(rest) = line.strip_prefix("\u{2014} ") else {
                return Err(bad("a signature line does not start with an em dash"));
            };
            let Some((name, sig)) = rest.split_once(' ') else {
                return Err(bad("a signature line has no signature"));
            };
            if name != self.name {
                continue;
            }
            let raw = B64
                .decode(sig)
                .map_err(|e| bad(&format!("signature: {e}")))?;
            if raw.len() != 4 + 64 || raw[..4] != id {
                continue;
            }
            let sig = Signature::from_slice(&raw[4..]).map_err(|e| bad(&e.to_string()))?;
            if self.key.verify(body.as_bytes(), &sig).is_ok() {
                signed = true;
                break;
            }
        }
        if !signed {
            return Err(CheckpointError::NotSigned(self.encode()));
        }
        let mut lines = body.lines();
        let origin = lines.next().unwrap_or_default().to_owned();
        let seq = lines
            .next()
            .and_then(|s| s.parse::<i64>().ok())
            .ok_or_else(|| bad("the second line is not a size"))?;
        let hash = lines
            .next()
            .and_then(|h| B64.decode(h).ok())
            .map(hex::encode)
            .ok_or_else(|| bad("the third line is not a base64 hash"))?;
        let time = lines
            .find_map(|l| l.strip_prefix("time "))
            .unwrap_or_default()
            .to_owned();
        Ok(VerifiedCheckpoint {
            origin,
            head: ChainHead { seq, hash },
            time,
        })
    }
}

/// What a checked signature vouches for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifiedCheckpoint {
    pub origin: String,
    pub head: ChainHead,
    pub time: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head() -> ChainHead {
        ChainHead {
            seq: 1041,
            hash: "d1".repeat(32),
        }
    }

    #[test]
    fn a_checkpoint_verifies_with_its_public_key_only() {
        let (private, public) = generate("ci.example/idemgate").expect("keys");
        let signer = Signer::parse(&private).expect("signer");
        let public = PublicKey::parse(&public).expect("public");
        let cp = signer.sign(&head(), 1_764_147_600_000);
        let v = public.verify(&cp.note).expect("verifies");
        assert_eq!(v.head, head());
        assert_eq!(v.origin, "ci.example/idemgate");
        assert_eq!(cp.key, public.encode());
        assert!(
            cp.note.starts_with("ci.example/idemgate\n1041\n"),
            "{}",
            cp.note
        );

        let (_, other) = generate("ci.example/idemgate").expect("keys");
        let other = PublicKey::parse(&other).expect("public");
        assert!(matches!(
            other.verify(&cp.note),
            Err(CheckpointError::NotSigned(_))
        ));
        // Any change to the signed text breaks the signature.
        let edited = cp.note.replacen("1041", "1042", 1);
        assert!(public.verify(&edited).is_err());
    }

    #[test]
    fn keys_read_back_and_a_private_key_is_not_taken_for_a_public_one() {
        // Many keys: base64 holds '+' often enough that one in a few keys has one.
        for _ in 0..64 {
            let (private, public) = generate("h/idemgate").expect("keys");
            assert_eq!(Signer::parse(&private).expect("signer").encode(), private);
            assert_eq!(PublicKey::parse(&public).expect("public").encode(), public);
        }
        let (private, public) = generate("h/idemgate").expect("keys");
        assert_eq!(Signer::parse(&private).expect("signer").encode(), private);
        assert_eq!(PublicKey::parse(&public).expect("public").encode(), public);
        assert!(PublicKey::parse(&private).is_err());
        assert!(Signer::parse(&public).is_err());
        let tampered = public.replacen('+', "x+", 1);
        assert!(PublicKey::parse(&tampered).is_err());
        assert!(generate("two words").is_err());
    }
}
