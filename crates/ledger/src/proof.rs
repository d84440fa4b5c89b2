//! Proofs an auditor checks with the log's public key alone: a C2SP tlog-proof
//! (`c2sp.org/tlog-proof`) that one event is in the log's tree.
//!
//! ```text
//! c2sp.org/tlog-proof@v1
//! extra eyJ2IjoxLCJzZXEiOjQyLC…
//! index 41
//! gSKyXoYZUgZ6jduWYrkDOARinOMGJveXjgMkBTcdPlQ=
//! …
//!
//! ci.example/idemgate
//! 1041
//! sFodV/vSp5O8n9a8QpW6PRY97tfOSW5bsc2Xl/EQi08=
//! time 2026-11-26T09:00:00.000Z
//!
//! — ci.example/idemgate Az3grnhk1ZS…
//! ```
//!
//! And a consistency proof, that one signed tree extends another, in the body of a C2SP
//! tlog-witness `add-checkpoint` request (`c2sp.org/tlog-witness`): what a witness is sent.
//!
//! ```text
//! old 1000
//! PlRNCrwHpqhGrupue0L7gxbjbMiKA9temvuZZDDpkaw=
//! …
//!
//! ci.example/idemgate
//! 1041
//! …
//! ```
//!
//! The `extra` line is the event's leaf bytes ([`crate::tree::leaf_bytes`]): the verifier hashes
//! them as RFC 6962 does (`SHA-256(0x00 ‖ bytes)`) and checks the audit path against the signed
//! checkpoint's root. The extra data is not trusted on its own: only the path to the signed root
//! makes it the log's.

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;

use crate::checkpoint::{CheckpointError, PublicKey};
use crate::tree::{self, TreeHead};

/// The first line of a tlog-proof.
pub const HEADER: &str = "c2sp.org/tlog-proof@v1";

/// A proof that does not read or does not check.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ProofError {
    #[error("not a tlog-proof: {0}")]
    Malformed(String),
    #[error(transparent)]
    Checkpoint(#[from] CheckpointError),
    #[error("the proof carries no event (no extra line)")]
    NoEvent,
    #[error("event at index {index} is not in the tree of size {size} that the checkpoint signs")]
    NotIncluded { index: u64, size: u64 },
    #[error("the proof starts from a tree of {proof} events, the older checkpoint signs {old}")]
    OtherOld { proof: u64, old: u64 },
    #[error("rollback: the newer checkpoint signs {new} events, fewer than the older one's {old}")]
    Rollback { old: u64, new: u64 },
    #[error("fork: the tree of {old} events does not lead to the tree of {new}")]
    Fork { old: u64, new: u64 },
}

/// An event's inclusion in the tree of a signed checkpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InclusionProof {
    /// The event's leaf bytes.
    pub leaf: Vec<u8>,
    pub index: u64,
    /// From the leaf's sibling up to the root's child.
    pub path: Vec<[u8; 32]>,
    /// The signed note of the tree's checkpoint, verbatim.
    pub checkpoint: String,
}

impl InclusionProof {
    /// The proof in the tlog-proof text format.
    pub fn encode(&self) -> String {
        let first = format!(
            "{HEADER}\nextra {}\nindex {}\n",
            B64.encode(&self.leaf),
            self.index
        );
        with_path(first, &self.path, &self.checkpoint)
    }

    /// Reads a tlog-proof; the checkpoint is kept as text, checked by [`InclusionProof::verify`].
    pub fn parse(text: &str) -> Result<InclusionProof, ProofError> {
        let bad = |why: &str| ProofError::Malformed(why.to_owned());
        let (head, checkpoint) = split(text)?;
        let mut lines = head.split('\n');
        if lines.next() != Some(HEADER) {
            return Err(bad(&format!("the first line is not {HEADER}")));
        }
        let mut line = lines.next().ok_or_else(|| bad("no index line"))?;
        let mut leaf = None;
        if let Some(extra) = line.strip_prefix("extra ") {
            leaf = Some(B64.decode(extra).map_err(|e| bad(&format!("extra: {e}")))?);
            line = lines.next().ok_or_else(|| bad("no index line"))?;
        }
        let index = line
            .strip_prefix("index ")
            .and_then(decimal)
            .ok_or_else(|| bad("expected `index N`"))?;
        let path = lines.map(hash_line).collect::<Result<Vec<_>, _>>()?;
        Ok(InclusionProof {
            leaf: leaf.ok_or(ProofError::NoEvent)?,
            index,
            path,
            checkpoint: checkpoint.to_owned(),
        })
    }

    /// Checks the checkpoint's signature by `key` and the event's path to its root: the tree
    /// that holds the event, and when it was signed.
    pub fn verify(&self, key: &PublicKey) -> Result<(TreeHead, String), ProofError> {
        let (head, time) = signed_tree_at(key, &self.checkpoint)?;
        // An index past the tree fails here too: no path leads from it to the root.
        if !tree::check_leaf(&self.path, head.size, head.root, self.index, &self.leaf) {
            return Err(ProofError::NotIncluded {
                index: self.index,
                size: head.size,
            });
        }
        Ok((head, time))
    }
}

/// A newer signed tree and the proof that it extends the tree of `old` leaves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsistencyProof {
    pub old: u64,
    /// RFC 6962 2.1.2's proof from `old` leaves to the checkpoint's size.
    pub path: Vec<[u8; 32]>,
    /// The newer tree's signed note, verbatim.
    pub checkpoint: String,
}

impl ConsistencyProof {
    /// The proof as an `add-checkpoint` request's body.
    pub fn encode(&self) -> String {
        with_path(format!("old {}\n", self.old), &self.path, &self.checkpoint)
    }

    /// Reads an `add-checkpoint` body; the checkpoint is checked by
    /// [`ConsistencyProof::verify_from`].
    pub fn parse(text: &str) -> Result<ConsistencyProof, ProofError> {
        let bad = |why: &str| ProofError::Malformed(why.to_owned());
        let (head, checkpoint) = split(text)?;
        let mut lines = head.split('\n');
        let old = lines
            .next()
            .and_then(|l| l.strip_prefix("old "))
            .and_then(decimal)
            .ok_or_else(|| bad("expected `old N` first"))?;
        let path = lines.map(hash_line).collect::<Result<Vec<_>, _>>()?;
        if path.len() > 63 {
            return Err(bad("more than 63 proof lines"));
        }
        Ok(ConsistencyProof {
            old,
            path,
            checkpoint: checkpoint.to_owned(),
        })
    }

    /// Checks that the checkpoint is `key`'s and extends `old` (a tree `key` signed, already
    /// checked): the newer tree.
    pub fn verify_from(&self, key: &PublicKey, old: TreeHead) -> Result<TreeHead, ProofError> {
        let new = signed_tree(key, &self.checkpoint)?;
        if self.old != old.size {
            return Err(ProofError::OtherOld {
                proof: self.old,
                old: old.size,
            });
        }
        extends(&self.path, new, old)?;
        Ok(new)
    }
}

/// The signed note a file carries: a tlog-proof's or an `add-checkpoint` body's checkpoint, the
/// checkpoint of the tree an export's or archive segment's manifest places its events in, or the
/// file itself when it is a checkpoint.
pub fn checkpoint_of(text: &str) -> std::borrow::Cow<'_, str> {
    if text.starts_with(HEADER) || text.starts_with("old ") {
        return text.split_once("\n\n").map_or(text, |(_, cp)| cp).into();
    }
    if text.starts_with('{') {
        if let Some(cp) = serde_json::from_str::<crate::export::Manifest>(text)
            .ok()
            .and_then(|m| m.tree?.checkpoint)
        {
            return cp.into();
        }
    }
    text.into()
}

/// The tree a checkpoint signed by `key` commits to.
pub fn signed_tree(key: &PublicKey, note: &str) -> Result<TreeHead, ProofError> {
    Ok(signed_tree_at(key, note)?.0)
}

/// [`signed_tree`], and when the checkpoint was signed.
fn signed_tree_at(key: &PublicKey, note: &str) -> Result<(TreeHead, String), ProofError> {
    let signed = key.verify(note)?;
    let head = TreeHead::try_from(&signed.head)
        .map_err(|why| ProofError::Malformed(format!("the checkpoint: {why}")))?;
    Ok((head, signed.time))
}

/// A proof file's lines before its checkpoint, then its checkpoint.
fn split(text: &str) -> Result<(&str, &str), ProofError> {
    text.split_once("\n\n")
        .ok_or_else(|| ProofError::Malformed("no blank line before the checkpoint".into()))
}

/// `first` (its lines, each ending in a newline), a hash a line, a blank line, the checkpoint.
fn with_path(mut out: String, path: &[[u8; 32]], checkpoint: &str) -> String {
    for h in path {
        out.push_str(&B64.encode(h));
        out.push('\n');
    }
    out.push('\n');
    out.push_str(checkpoint);
    out
}

/// A decimal with no leading zero (but `0` itself), as the C2SP formats write sizes and indexes.
fn decimal(n: &str) -> Option<u64> {
    (n == "0" || !n.starts_with('0')).then(|| n.parse().ok())?
}

/// Whether `path` shows that `new` extends `old`, naming a rollback or a fork when it does not.
pub fn extends(path: &[[u8; 32]], new: TreeHead, old: TreeHead) -> Result<(), ProofError> {
    if new.size < old.size {
        return Err(ProofError::Rollback {
            old: old.size,
            new: new.size,
        });
    }
    let same = new.size == old.size && new.root == old.root && path.is_empty();
    if same || old.size == 0 || tree::check_extends(path, new, old) {
        return Ok(());
    }
    Err(ProofError::Fork {
        old: old.size,
        new: new.size,
    })
}

fn hash_line(l: &str) -> Result<[u8; 32], ProofError> {
    B64.decode(l)
        .ok()
        .and_then(|h| <[u8; 32]>::try_from(h).ok())
        .ok_or_else(|| ProofError::Malformed(format!("{l:?} is not a base64 SHA-256 hash")))
}
