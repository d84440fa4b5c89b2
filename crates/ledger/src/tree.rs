//! A Merkle tree over the log (RFC 6962), so an auditor checks one event, or that one history
//! extends another, with O(log n) hashes instead of the whole log.
//!
//! Each event is a leaf; its bytes are [`leaf_bytes`]: the canonical encoding the chain hashes
//! ([`crate::chain::canonical_event`]), every field but the chain's own hash fields. An
//! *integrator* adds committed events to the tree after the fact, in seq order, and gives each
//! its leaf index: the request's write path never waits for the tree. The tree's hashes are
//! stored as Go's `sumdb/tlog` stores them (one row per stored hash, addressed by its
//! `StoredHashIndex`), from which any C2SP tlog-tiles tile is read byte for byte; the tree
//! arithmetic is `tlog_tiles`' port of that package.
//!
//! Invariant: leaves and stored hashes are only ever appended, in one transaction per batch that
//! fails unless the tree still has the size its hashes were computed from; so two integrators
//! (a new leader and a stale one, or a CLI beside the server) never add an event twice.

use tlog_tiles::tlog::{self, Hash, HashReader};

mod check;
mod range;

pub use check::TreeProblem;
pub(crate) use check::{check, LeafHashes};
pub use range::{RangeHasher, TreeRange};

use crate::chain::canonical_event;
use crate::error::{LedgerError, Result};
use crate::model::{ChainHead, Event};
pub use crate::model::{TreeBatch, TreeState};
use crate::store::Storage;

/// The most events one integration step adds to the tree in one write.
pub const BATCH: usize = 4096;

/// The bytes of an event's leaf: what a verifier recomputes from an exported NDJSON line.
pub fn leaf_bytes(ev: &Event) -> Vec<u8> {
    canonical_event(ev)
}

/// The tree's size and root hash.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TreeHead {
    pub size: u64,
    pub root: [u8; 32],
}

impl TreeHead {
    /// The root in base64, as a checkpoint writes it.
    pub fn root_base64(&self) -> String {
        use base64::Engine as _;
        base64::engine::general_purpose::STANDARD.encode(self.root)
    }

    /// The head as a checkpoint signs it: the size, and the root in hex.
    pub fn signed_head(&self) -> ChainHead {
        ChainHead {
            seq: i64::try_from(self.size).unwrap_or(i64::MAX),
            hash: hex::encode(self.root),
        }
    }
}

impl TryFrom<&ChainHead> for TreeHead {
    type Error = String;

    /// The tree a checkpoint signs, read back from its size and hash.
    fn try_from(h: &ChainHead) -> std::result::Result<TreeHead, String> {
        let size = u64::try_from(h.seq).map_err(|_| format!("size {} is negative", h.seq))?;
        let root = hex::decode(&h.hash)
            .ok()
            .and_then(|b| <[u8; 32]>::try_from(b).ok())
            .ok_or_else(|| "its hash is not a SHA-256 root".to_owned())?;
        Ok(TreeHead { size, root })
    }
}

/// Stored hashes read from a ledger, with a batch not yet written laid over them.
struct Reader<'a> {
    store: &'a dyn Storage,
    first_new: u64,
    new: &'a [Hash],
    /// The ledger's own error, which `tlog` can only carry as text: kept to be the call's.
    failed: std::cell::RefCell<Option<LedgerError>>,
}

impl Reader<'_> {
    /// What a `tlog` call that read through this reader failed with: the ledger's error when
    /// reading failed (an outage is not a corrupt tree), else the tree's.
    fn error(&self, e: &tlog::Error) -> LedgerError {
        self.failed.take().unwrap_or_else(|| tree_error(e))
    }
}

impl HashReader for Reader<'_> {
    fn read_hashes(&self, indexes: &[u64]) -> std::result::Result<Vec<Hash>, tlog::Error> {
        let old: Vec<u64> = indexes
            .iter()
            .copied()
            .filter(|&i| i < self.first_new)
            .collect();
        let stored = if old.is_empty() {
            Vec::new()
        } else {
            self.store.tree_hashes(&old).map_err(|e| {
                let text = e.to_string();
                self.failed.replace(Some(e));
                tlog::Error::InvalidInput(text)
            })?
        };
        let mut stored = stored.into_iter();
        indexes
            .iter()
            .map(|&i| {
                if i < self.first_new {
                    stored.next().map(Hash).ok_or(tlog::Error::IndexesNotInTree)
                } else {
                    usize::try_from(i - self.first_new)
                        .ok()
                        .and_then(|k| self.new.get(k).copied())
                        .ok_or(tlog::Error::IndexesNotInTree)
                }
            })
            .collect()
    }
}

fn reader(store: &dyn Storage) -> Reader<'_> {
    Reader {
        store,
        first_new: u64::MAX,
        new: &[],
        failed: std::cell::RefCell::default(),
    }
}

fn tree_error(e: &tlog::Error) -> LedgerError {
    LedgerError::Corrupt(format!("the log's Merkle tree: {e}"))
}

/// What one run of the integrator did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Integrated {
    /// The events added to the tree.
    pub events: usize,
    /// When the first of them was logged: how long the oldest waited, seen from now.
    pub oldest_at: Option<crate::model::Millis>,
}

/// Adds up to `max` committed events after the tree's last leaf to the tree: the events added.
/// The hashes are computed on the caller's thread; one write stores them.
pub fn integrate(store: &dyn Storage, max: usize) -> Result<usize> {
    Ok(integrate_step(store, max)?.events)
}

fn integrate_step(store: &dyn Storage, max: usize) -> Result<Integrated> {
    let state = store.tree_state()?;
    let mut events = Vec::new();
    store.scan_seqs(
        state.last_seq.map_or(i64::MIN, |s| s + 1),
        i64::MAX,
        &mut |e| {
            events.push(e);
            Ok(events.len() < max)
        },
    )?;
    if events.is_empty() {
        return Ok(Integrated::default());
    }
    let first_new = tlog::stored_hash_index(0, state.size);
    let mut new: Vec<Hash> = Vec::with_capacity(events.len() * 2);
    for (i, ev) in events.iter().enumerate() {
        let r = Reader {
            new: &new,
            first_new,
            ..reader(store)
        };
        let hashes = tlog::stored_hashes(state.size + i as u64, &leaf_bytes(ev), &r)
            .map_err(|e| r.error(&e))?;
        new.extend(hashes);
    }
    let added = Integrated {
        events: events.len(),
        oldest_at: events.first().map(|e| e.at),
    };
    store
        .extend_tree(TreeBatch {
            size: state.size,
            seqs: events.iter().map(|e| e.seq).collect(),
            hashes: new.into_iter().map(|h| h.0).collect(),
        })
        .wait()?;
    Ok(added)
}

/// How many steps in a row [`catch_up`] lets another integrator win before it gives up.
const RACES: usize = 8;

/// Integrates until the tree holds every committed event (or `keep_going` says stop). A step
/// another integrator won (a leader beside a CLI's proof or export) is taken up from the tree as
/// that one left it.
pub fn catch_up(store: &dyn Storage, keep_going: &dyn Fn() -> bool) -> Result<Integrated> {
    let mut total = Integrated::default();
    let mut races = 0;
    while keep_going() {
        let step = match integrate_step(store, BATCH) {
            Err(LedgerError::TreeMoved { .. }) if races < RACES => {
                races += 1;
                continue;
            }
            step => step?,
        };
        races = 0;
        total.events += step.events;
        total.oldest_at = total.oldest_at.or(step.oldest_at);
        if step.events < BATCH {
            break;
        }
    }
    Ok(total)
}

/// The tree's head now.
pub fn head(store: &dyn Storage) -> Result<TreeHead> {
    let size = store.tree_state()?.size;
    root_at(store, size)
}

/// The root of the tree when it had `size` leaves.
pub fn root_at(store: &dyn Storage, size: u64) -> Result<TreeHead> {
    let r = reader(store);
    let root = tlog::tree_hash(size, &r).map_err(|e| r.error(&e))?;
    Ok(TreeHead { size, root: root.0 })
}

/// The inclusion proof of leaf `index` in the tree of `size` leaves: the audit path from the
/// leaf's sibling up to the root's child (RFC 6962, 2.1.1).
pub fn prove_leaf(store: &dyn Storage, size: u64, index: u64) -> Result<Vec<[u8; 32]>> {
    let r = reader(store);
    let p = tlog::prove_record(size, index, &r).map_err(|e| r.error(&e))?;
    Ok(p.into_iter().map(|h| h.0).collect())
}

/// The consistency proof that the tree of `size` leaves extends the one of `old` leaves.
pub fn prove_extends(store: &dyn Storage, size: u64, old: u64) -> Result<Vec<[u8; 32]>> {
    let r = reader(store);
    let p = tlog::prove_tree(size, old, &r).map_err(|e| r.error(&e))?;
    Ok(p.into_iter().map(|h| h.0).collect())
}

/// Whether `proof` shows that the tree of `size` leaves and root `root` holds `leaf` at `index`.
pub fn check_leaf(proof: &[[u8; 32]], size: u64, root: [u8; 32], index: u64, leaf: &[u8]) -> bool {
    let p: Vec<Hash> = proof.iter().copied().map(Hash).collect();
    tlog::check_record(&p, size, Hash(root), index, tlog::record_hash(leaf)).is_ok()
}

/// Whether `proof` shows that the tree `new` extends the tree `old`.
pub fn check_extends(proof: &[[u8; 32]], new: TreeHead, old: TreeHead) -> bool {
    let p: Vec<Hash> = proof.iter().copied().map(Hash).collect();
    tlog::check_tree(&p, new.size, Hash(new.root), old.size, Hash(old.root)).is_ok()
}
