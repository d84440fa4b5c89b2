//! What the ledger keeps for auditors beside the log: how far the log's Merkle tree has grown and
//! the steps that grow it, signed checkpoints, and an entry as an entries export carries it. They
//! cross the [`crate::store::Storage`] boundary, so they sit below both it and the modules that
//! make and check them.

use serde::{Deserialize, Serialize};

/// How far the tree has grown: its size (leaves `0..size`) and the seq of its last leaf.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TreeState {
    pub size: u64,
    pub last_seq: Option<i64>,
}

/// One integration step's rows: leaves `size..` (each its event's seq) and the stored hashes
/// they add, the first at `tlog::stored_hash_index(0, size)`.
#[derive(Debug, Clone)]
pub struct TreeBatch {
    pub size: u64,
    pub seqs: Vec<i64>,
    pub hashes: Vec<[u8; 32]>,
}

/// A signed checkpoint as manifests and the log carry it: the signed note, and what it says
/// spelled out beside it.
#[cfg_attr(feature = "ts", derive(ts_rs::TS, schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SignedCheckpoint {
    pub origin: String,
    pub seq: i64,
    /// The head's hash, hex.
    pub hash: String,
    pub time: String,
    /// The verifier key that checks it.
    pub key: String,
    /// The signed note itself: the only part a verifier trusts.
    pub note: String,
}

/// One exported entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EntryRow {
    pub id: i64,
    pub route: String,
    pub tool: Option<String>,
    pub scope: String,
    pub key: String,
    pub effect: String,
    pub state: String,
    pub created_at: String,
    pub completed_at: Option<String>,
    pub expires_at: Option<String>,
    pub attempts: i64,
    pub replays: i64,
    pub collisions: i64,
    pub duplicate_of: Option<i64>,
    /// The request's subjects as a JSON object (`{"customer":"cus_123","amount":"49.99"}`).
    pub subjects: Option<String>,
    /// The stored response's status and the sha256 of its body.
    pub status: Option<u16>,
    pub response_sha256: Option<String>,
    pub resolved_by: Option<String>,
    pub resolution_reason: Option<String>,
    pub external_ref: Option<String>,
}
