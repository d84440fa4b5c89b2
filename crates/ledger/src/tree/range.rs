//! A run of the tree's leaves as a file holds it (an export, an archive segment), and what proves
//! it without the log: the hashes of the complete subtrees left of its first leaf (the compact
//! range of leaves `0..first`, as Trillian's `merkle/compact` calls it). Appending the file's
//! leaves to them, in order, gives the root of the tree whose last leaf is the file's last event;
//! the manifest names that tree and, with a signing key, carries its signed checkpoint. So a
//! verifier holding only the file, its manifest and the log's public key knows the file is
//! exactly those leaves of the signed tree: none added, removed, altered or reordered.

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;
use serde::{Deserialize, Serialize};
use tlog_tiles::tlog::{self, Hash};

use super::TreeHead;
use crate::checkpoint::{PublicKey, Signer};
use crate::error::Result;
use crate::model::now_millis;
use crate::store::Storage;

/// Where a file's events sit in the log's tree, with what checks it.
#[cfg_attr(feature = "ts", derive(ts_rs::TS, schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TreeRange {
    /// The leaf index of the file's first event.
    pub first_leaf: u64,
    /// The size of the tree whose last leaf is the file's last event.
    pub size: u64,
    /// The hashes of the complete subtrees covering leaves `0..first_leaf`, leftmost first, in
    /// base64.
    pub left: Vec<String>,
    /// The root of the tree of `size` leaves, in base64.
    pub root: String,
    /// That tree's signed checkpoint (a C2SP tlog-checkpoint), when the ledger's operator
    /// configured a signing key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoint: Option<String>,
}

impl TreeRange {
    /// The range of the file holding events `first_seq..=last_seq`, `count` of them, signed by
    /// `signer` when given, when every one is a leaf of the tree and they are consecutive leaves;
    /// `None` otherwise (events logged before the tree began, or not yet integrated).
    pub fn of(
        store: &dyn Storage,
        (first_seq, last_seq): (i64, i64),
        count: u64,
        signer: Option<&Signer>,
    ) -> Result<Option<TreeRange>> {
        let (Some(first), Some(last)) = (store.leaf_of(first_seq)?, store.leaf_of(last_seq)?)
        else {
            return Ok(None);
        };
        if last < first || last - first + 1 != count {
            return Ok(None);
        }
        let left = store.tree_hashes(&tlog::sub_tree_index(0, first, vec![]))?;
        let head = super::root_at(store, last + 1)?;
        Ok(Some(TreeRange {
            first_leaf: first,
            size: head.size,
            left: left.iter().map(|h| B64.encode(h)).collect(),
            root: head.root_base64(),
            checkpoint: signer.map(|s| s.sign(&head.signed_head(), now_millis()).note),
        }))
    }

    /// The tree the range names.
    pub fn head(&self) -> std::result::Result<TreeHead, String> {
        Ok(TreeHead {
            size: self.size,
            root: hash(&self.root).ok_or("its root is not a base64 SHA-256 hash")?,
        })
    }

    /// A hasher that takes the file's leaves.
    pub fn hasher(&self) -> std::result::Result<RangeHasher, String> {
        let left = self
            .left
            .iter()
            .map(|h| hash(h).ok_or_else(|| format!("{h:?} is not a base64 SHA-256 hash")))
            .collect::<std::result::Result<Vec<_>, _>>()?;
        RangeHasher::new(self.first_leaf, &left)
    }

    /// Whether `key` signed the checkpoint and it names the range's tree.
    pub fn check_signed(&self, key: &PublicKey) -> std::result::Result<(), String> {
        let note = self
            .checkpoint
            .as_deref()
            .ok_or("the manifest carries no signed checkpoint of the tree")?;
        let signed = crate::proof::signed_tree(key, note)
            .map_err(|e| format!("the tree's checkpoint: {e}"))?;
        if Ok(signed) == self.head() {
            return Ok(());
        }
        Err(format!(
            "the tree's signed checkpoint names {} leaves with root {}, the manifest {} with root {}",
            signed.size,
            signed.root_base64(),
            self.size,
            self.root
        ))
    }
}

fn hash(b64: &str) -> Option<[u8; 32]> {
    B64.decode(b64)
        .ok()
        .and_then(|h| <[u8; 32]>::try_from(h).ok())
}

/// Leaves appended to the compact range of the ones before them: the root of the tree they end.
#[derive(Debug, Clone)]
pub struct RangeHasher {
    size: u64,
    /// Complete subtrees, by level, leftmost first; levels strictly decrease.
    stack: Vec<(u8, Hash)>,
}

impl RangeHasher {
    /// Starts after leaf `first - 1`, from the hashes of the complete subtrees covering leaves
    /// `0..first` ([`tlog::sub_tree_index`]'s, leftmost first).
    pub fn new(first: u64, left: &[[u8; 32]]) -> std::result::Result<RangeHasher, String> {
        let levels: Vec<u8> = tlog::sub_tree_index(0, first, vec![])
            .into_iter()
            .map(|i| tlog::split_stored_hash_index(i).0)
            .collect();
        if levels.len() != left.len() {
            return Err(format!(
                "a range from leaf {first} needs {} hashes left of it, not {}",
                levels.len(),
                left.len()
            ));
        }
        Ok(RangeHasher {
            size: first,
            stack: levels
                .into_iter()
                .zip(left.iter().map(|h| Hash(*h)))
                .collect(),
        })
    }

    /// Appends the leaf whose bytes are `leaf`.
    pub fn push(&mut self, leaf: &[u8]) {
        let mut node = (0u8, tlog::record_hash(leaf));
        while let Some(&(level, left)) = self.stack.last() {
            if level != node.0 {
                break;
            }
            self.stack.pop();
            node = (level + 1, tlog::node_hash(left, node.1));
        }
        self.stack.push(node);
        self.size += 1;
    }

    /// The tree of every leaf so far (RFC 6962: the complete subtrees folded from the right).
    pub fn head(&self) -> TreeHead {
        let mut nodes = self.stack.iter().rev();
        let root = match nodes.next() {
            Some(&(_, last)) => nodes.fold(last, |right, &(_, left)| tlog::node_hash(left, right)),
            None => tlog::EMPTY_HASH,
        };
        TreeHead {
            size: self.size,
            root: root.0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 6962's MTH, from its definition.
    fn mth(leaves: &[Vec<u8>]) -> [u8; 32] {
        use sha2::{Digest, Sha256};
        match leaves.len() {
            0 => Sha256::digest([]).into(),
            1 => Sha256::new()
                .chain_update([0])
                .chain_update(&leaves[0])
                .finalize()
                .into(),
            n => {
                let mut k = 1;
                while k * 2 < n {
                    k *= 2;
                }
                Sha256::new()
                    .chain_update([1])
                    .chain_update(mth(&leaves[..k]))
                    .chain_update(mth(&leaves[k..]))
                    .finalize()
                    .into()
            }
        }
    }

    /// The complete subtrees left of `first`, from the definition.
    fn left_of(leaves: &[Vec<u8>], first: u64) -> Vec<[u8; 32]> {
        let mut out = Vec::new();
        let mut lo = 0usize;
        for k in (0..64).rev() {
            if first >> k & 1 == 1 {
                out.push(mth(&leaves[lo..lo + (1 << k)]));
                lo += 1 << k;
            }
        }
        out
    }

    #[test]
    fn every_range_of_every_small_tree_gives_its_root() {
        let leaves: Vec<Vec<u8>> = (0..40u32)
            .map(|i| format!("leaf {i}").into_bytes())
            .collect();
        for size in 0..=leaves.len() {
            for first in 0..=size {
                let mut h =
                    RangeHasher::new(first as u64, &left_of(&leaves, first as u64)).unwrap();
                for leaf in &leaves[first..size] {
                    h.push(leaf);
                }
                let head = h.head();
                assert_eq!(head.size, size as u64);
                assert_eq!(head.root, mth(&leaves[..size]), "leaves {first}..{size}");
            }
        }
    }

    #[test]
    fn a_range_is_refused_without_the_hashes_left_of_it() {
        assert!(RangeHasher::new(6, &[[0; 32]]).is_err());
        assert!(RangeHasher::new(6, &[[0; 32]; 2]).is_ok());
    }
}
