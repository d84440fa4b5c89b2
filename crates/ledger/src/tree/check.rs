//! Recomputing the log's stored tree from its events, as `verify` does after the chain: each
//! live event's leaf hash, every stored hash the tree holds, and the root each kept checkpoint
//! names.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};

use tlog_tiles::tlog::{self, Hash};

use crate::db::{vals, Db};
use crate::error::Result;
use crate::read;

/// Leaves read and checked at a time.
const PAGE: i64 = 8192;

/// The first disagreement between the stored tree and the log: the event (or leaf) and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TreeProblem {
    /// The event whose leaf disagrees; `None` when it is no event (a checkpoint, a stored hash).
    pub seq: Option<i64>,
    pub why: String,
}

/// Walks the tree leaf by leaf: a leaf whose event is live is hashed again and every stored hash
/// it completes recomputed; an archived event's stored hashes stand for it (the kept checkpoints'
/// roots vouch for them). The right edge of the tree (the roots of its complete subtrees) is all
/// the walk keeps.
/// Stops between two pages once `stop` is set (the chain walk beside it failed or was stopped).
pub(crate) fn check(db: &mut dyn Db, stop: &AtomicBool) -> Result<Option<TreeProblem>> {
    let checkpoints: HashMap<u64, [u8; 32]> = db
        .all(
            "SELECT size, note FROM tree_checkpoints ORDER BY size",
            &[],
            |r| Ok((r.int(0)?, r.text(1)?)),
        )?
        .into_iter()
        .filter_map(|(size, note)| Some((u64::try_from(size).ok()?, note_root(&note)?)))
        .collect();
    let mut edge: Vec<Hash> = Vec::new();
    let mut leaf: i64 = 0;
    while !stop.load(Ordering::SeqCst) {
        let leaves = db.all(
            "SELECT leaf, seq FROM tree_leaves WHERE leaf >= ?1 ORDER BY leaf LIMIT ?2",
            vals![leaf, PAGE],
            |r| Ok((r.int(0)?, r.int(1)?)),
        )?;
        let Some(&(_, first_seq)) = leaves.first() else {
            break;
        };
        let last_seq = leaves.last().map_or(first_seq, |l| l.1);
        let mut events = HashMap::with_capacity(leaves.len());
        read::scan_seqs(db, first_seq, last_seq, &mut |e| {
            events.insert(e.seq, e);
            Ok(true)
        })?;
        let lo = tlog::stored_hash_index(0, leaf as u64) as i64;
        let hi = tlog::stored_hash_index(0, (leaf + leaves.len() as i64) as u64) as i64;
        let stored = stored_range(db, lo, hi)?;
        for (i, seq) in leaves {
            if i != leaf {
                return Ok(Some(problem(None, format!("leaf {leaf} is missing"))));
            }
            let n = i as u64;
            let at = (tlog::stored_hash_index(0, n) as i64 - lo) as usize;
            let count =
                (tlog::stored_hash_index(0, n + 1) - tlog::stored_hash_index(0, n)) as usize;
            let Some(block) = stored.get(at..at + count) else {
                return Ok(Some(problem(
                    Some(seq),
                    format!("leaf {n}'s stored hashes are missing"),
                )));
            };
            let computed = match step(&mut edge, n, seq, events.get(&seq), block) {
                Ok(c) => c,
                Err(p) => return Ok(Some(p)),
            };
            edge.push(*computed.last().unwrap_or(&computed[0]));
            leaf += 1;
            if let Some(root) = checkpoints.get(&(n + 1)) {
                if edge_root(&edge) != Hash(*root) {
                    return Ok(Some(problem(
                        None,
                        format!("the kept checkpoint of {} events names another root", n + 1),
                    )));
                }
            }
        }
    }
    Ok(None)
}

/// Leaf `n`'s stored hashes, recomputed from its event when it is live (and checked against
/// `block`, as stored), with the tree's right edge moved past it.
fn step(
    edge: &mut Vec<Hash>,
    n: u64,
    seq: i64,
    event: Option<&crate::model::Event>,
    block: &[Hash],
) -> std::result::Result<Vec<Hash>, TreeProblem> {
    let Some(ev) = event else {
        for _ in 0..(n + 1).trailing_zeros() {
            edge.pop();
        }
        return Ok(block.to_vec());
    };
    let mut h = tlog::record_hash(&super::leaf_bytes(ev));
    let mut hashes = vec![h];
    for _ in 0..(n + 1).trailing_zeros() {
        let left = edge
            .pop()
            .ok_or_else(|| problem(None, "the tree's edge is short".into()))?;
        h = tlog::node_hash(left, h);
        hashes.push(h);
    }
    if hashes != block {
        let why = if hashes[0] == block[0] {
            format!("the tree's hashes above leaf {n} are not its events'")
        } else {
            format!("event {seq} is not the one leaf {n} of the tree holds")
        };
        return Err(problem(Some(seq), why));
    }
    Ok(hashes)
}

fn problem(seq: Option<i64>, why: String) -> TreeProblem {
    TreeProblem { seq, why }
}

/// The stored hashes `lo..hi`, in order.
fn stored_range(db: &mut dyn Db, lo: i64, hi: i64) -> Result<Vec<Hash>> {
    db.all(
        "SELECT hash FROM tree_hashes WHERE idx >= ?1 AND idx < ?2 ORDER BY idx",
        vals![lo, hi],
        |r| {
            let b = r.opt_blob(0)?.unwrap_or_default();
            Ok(Hash(<[u8; 32]>::try_from(b.as_slice()).unwrap_or([0; 32])))
        },
    )
}

/// The root of the tree whose complete subtrees' roots are `edge`, left to right.
fn edge_root(edge: &[Hash]) -> Hash {
    let mut it = edge.iter().rev();
    let Some(&last) = it.next() else {
        return tlog::EMPTY_HASH;
    };
    it.fold(last, |acc, &left| tlog::node_hash(left, acc))
}

/// The root a checkpoint note names (its third line, base64).
fn note_root(note: &str) -> Option<[u8; 32]> {
    use base64::Engine as _;
    let line = note.lines().nth(2)?;
    let raw = base64::engine::general_purpose::STANDARD
        .decode(line)
        .ok()?;
    <[u8; 32]>::try_from(raw).ok()
}
