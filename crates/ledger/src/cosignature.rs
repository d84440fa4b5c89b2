//! Witness cosignatures (C2SP `tlog-cosignature`, its Ed25519 `cosignature/v1` type): a
//! witness's statement that, at a time, the checkpoint is the largest consistent tree it has seen
//! of the log. Keys use the note key format with algorithm byte 0x04.
//!
//! The signed message is `cosignature/v1\ntime <POSIX seconds>\n` followed by the checkpoint's
//! whole body; the signature line carries `key id (4) || timestamp (8, big-endian) || signature
//! (64)`.

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;
use ed25519_dalek::{Signature, Signer as _, SigningKey, Verifier as _, VerifyingKey};

use crate::checkpoint::{
    check_name, encode_key, key_id_of, parse_private, parse_public, CheckpointError,
};

/// The algorithm byte of an Ed25519 cosignature/v1 key.
pub const COSIGNATURE_V1: u8 = 0x04;

/// A witness's private key: cosigns checkpoints. Never logged.
pub struct Cosigner {
    name: String,
    key: SigningKey,
}

impl std::fmt::Debug for Cosigner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cosigner")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

/// A witness's public key: checks its cosignatures.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WitnessKey {
    name: String,
    key: VerifyingKey,
}

/// A new witness key pair named `name`: the private key and the public key, each one line.
pub fn generate(name: &str) -> Result<(String, String), CheckpointError> {
    check_name(name).map_err(CheckpointError::BadSigningKey)?;
    let mut seed = [0u8; 32];
    rand::RngCore::fill_bytes(&mut rand::rng(), &mut seed);
    let key = SigningKey::from_bytes(&seed);
    let public = key.verifying_key();
    Ok((
        encode_key(name, COSIGNATURE_V1, &public, Some(&key)),
        encode_key(name, COSIGNATURE_V1, &public, None),
    ))
}

/// The message a cosignature signs.
fn message(body: &str, time: u64) -> String {
    format!("cosignature/v1\ntime {time}\n{body}")
}

/// A note's body: its text up to and including the newline before the blank line.
fn body_of(note: &str) -> Option<&str> {
    note.find("\n\n").map(|i| &note[..=i])
}

impl Cosigner {
    /// Reads a witness key (`PRIVATE+KEY+NAME+KEYID+BASE64(0x04 || seed)`).
    pub fn parse(text: &str) -> Result<Cosigner, CheckpointError> {
        let (name, key) =
            parse_private(text, COSIGNATURE_V1).map_err(CheckpointError::BadSigningKey)?;
        Ok(Cosigner { name, key })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn public(&self) -> WitnessKey {
        WitnessKey {
            name: self.name.clone(),
            key: self.key.verifying_key(),
        }
    }

    /// The cosignature line (ending in a newline) of `note`'s checkpoint at `time` (POSIX
    /// seconds).
    pub fn cosign(&self, note: &str, time: u64) -> Result<String, CheckpointError> {
        let body = body_of(note)
            .ok_or_else(|| CheckpointError::BadNote("no blank line after the body".into()))?;
        let sig = self.key.sign(message(body, time).as_bytes());
        let mut raw = key_id_of(&self.name, COSIGNATURE_V1, &self.key.verifying_key()).to_vec();
        raw.extend_from_slice(&time.to_be_bytes());
        raw.extend_from_slice(&sig.to_bytes());
        Ok(format!("\u{2014} {} {}\n", self.name, B64.encode(raw)))
    }
}

impl WitnessKey {
    /// Reads a witness's public key (`NAME+KEYID+BASE64(0x04 || public key)`).
    pub fn parse(text: &str) -> Result<WitnessKey, CheckpointError> {
        let (name, key) =
            parse_public(text, COSIGNATURE_V1).map_err(CheckpointError::BadPublicKey)?;
        Ok(WitnessKey { name, key })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn encode(&self) -> String {
        encode_key(&self.name, COSIGNATURE_V1, &self.key, None)
    }

    /// When this witness cosigned `note` (POSIX seconds), if one of its signature lines is this
    /// witness's valid cosignature of the note's body.
    pub fn cosigned(&self, note: &str) -> Option<u64> {
        let body = body_of(note)?;
        let id = key_id_of(&self.name, COSIGNATURE_V1, &self.key);
        note[body.len() + 1..].lines().find_map(|line| {
            let (name, sig) = line.strip_prefix("\u{2014} ")?.split_once(' ')?;
            let raw = B64.decode(sig).ok()?;
            if name != self.name || raw.len() != 4 + 8 + 64 || raw[..4] != id {
                return None;
            }
            let time = u64::from_be_bytes(raw[4..12].try_into().ok()?);
            let sig = Signature::from_slice(&raw[12..]).ok()?;
            self.key
                .verify(message(body, time).as_bytes(), &sig)
                .ok()
                .map(|()| time)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOTE: &str = "example.com/behind-the-sofa\n20852163\n\
        CsUYapGGPo4dkMgIAUqom/Xajj7h2fB2MPA3j2jxq2I=\n\n\
        \u{2014} example.com/behind-the-sofa Az3grlgtzPICa5OS8npVmf1Myq/5IZniMp+ZJurmRDeOoRDe4URYN7u5/Zhcyv2q1gGzGku9nTo+zyWE+xeMcTOAYQ8=\n";

    #[test]
    fn a_cosignature_signs_the_spec_s_message_and_checks_with_the_witness_key() {
        let (private, public) = generate("witness.example.com/w1").expect("keys");
        let w = Cosigner::parse(&private).expect("cosigner");
        let key = WitnessKey::parse(&public).expect("key");
        assert_eq!(key.encode(), public);
        let line = w.cosign(NOTE, 1_679_315_147).expect("cosign");
        // The spec's layout: key id, then the big-endian timestamp, then the signature.
        let raw = B64
            .decode(line.trim_end().rsplit(' ').next().expect("sig"))
            .expect("base64");
        assert_eq!(raw.len(), 76);
        assert_eq!(raw[4..12], 1_679_315_147u64.to_be_bytes());
        let signed = "cosignature/v1\ntime 1679315147\nexample.com/behind-the-sofa\n20852163\n\
             CsUYapGGPo4dkMgIAUqom/Xajj7h2fB2MPA3j2jxq2I=\n";
        let sig = Signature::from_slice(&raw[12..]).expect("sig");
        assert!(
            key.key.verify(signed.as_bytes(), &sig).is_ok(),
            "the spec's message"
        );
        let cosigned = format!("{NOTE}{line}");
        assert_eq!(key.cosigned(&cosigned), Some(1_679_315_147));
        assert_eq!(key.cosigned(NOTE), None, "no cosignature yet");
        let other = cosigned.replacen("20852163", "20852164", 1);
        assert_eq!(key.cosigned(&other), None, "another tree");
        let (_, stranger) = generate("witness.example.com/w1").expect("keys");
        assert_eq!(
            WitnessKey::parse(&stranger)
                .expect("key")
                .cosigned(&cosigned),
            None
        );
    }

    #[test]
    fn a_witness_key_is_not_a_log_key() {
        let (private, public) = generate("w.example/w").expect("keys");
        assert!(crate::checkpoint::PublicKey::parse(&public).is_err());
        assert!(crate::checkpoint::Signer::parse(&private).is_err());
        let (log_private, log_public) = crate::checkpoint::generate("l.example/log").expect("keys");
        assert!(WitnessKey::parse(&log_public).is_err());
        assert!(Cosigner::parse(&log_private).is_err());
    }
}
