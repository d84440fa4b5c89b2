//! Recomputing the log's stored tree from its events, as `verify` does beside the chain: each
//! live event's leaf hash, every stored hash the tree holds, and the root each kept checkpoint
//! names.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;

use tlog_tiles::tlog::{self, Hash};

use crate::db::{vals, Db};
use crate::error::Result;

/// Leaves read and checked at a time.
const PAGE: i64 = 8192;

/// The first disagreement between the stored tree and the log: the event (or leaf) and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TreeProblem {
    /// The event whose leaf disagrees; `None` when it is no event (a checkpoint, a stored hash).
    pub seq: Option<i64>,
    pub why: String,
}

/// The leaf hashes of the live log's events, in seq order, as the chain's walk hashed them
/// (it encodes each event anyway: the tree's check need not read and encode it again).
pub(crate) struct LeafHashes {
    rx: mpsc::Receiver<Vec<(i64, Hash)>>,
    held: VecDeque<(i64, Hash)>,
}

impl LeafHashes {
    /// Hashes sent in batches on `tx`: the stream ends when every sender is dropped.
    pub(crate) fn channel() -> (mpsc::SyncSender<Vec<(i64, Hash)>>, LeafHashes) {
        let (tx, rx) = mpsc::sync_channel(4);
        let held = VecDeque::new();
        (tx, LeafHashes { rx, held })
    }

    /// The leaf hashes of the events `first..=last` the stream holds; those before `first` (not
    /// leaves: logged before the tree began, or a page's gaps) are passed over.
    fn range(&mut self, first: i64, last: i64) -> HashMap<i64, Hash> {
        let mut out = HashMap::new();
        loop {
            while let Some(&(seq, h)) = self.held.front() {
                if seq > last {
                    return out;
                }
                self.held.pop_front();
                if seq >= first {
                    out.insert(seq, h);
                }
            }
            match self.rx.recv() {
                Ok(batch) => self.held.extend(batch),
                Err(_) => return out,
            }
        }
    }
}

/// Walks the tree leaf by leaf: a leaf whose event is live takes its hash from `live` and every
/// stored hash it completes is recomputed; an archived event's stored hashes stand for it (the
/// kept checkpoints' roots vouch for them), and so do those of an event logged after the chain's
/// walk read the log. The right edge of the tree (the roots of its complete subtrees) is all the
/// walk keeps.
/// Stops between two pages once `stop` is set (the chain walk beside it failed or was stopped).
pub(crate) fn check(
    db: &mut dyn Db,
    live: &mut LeafHashes,
    stop: &AtomicBool,
) -> Result<Option<TreeProblem>> {
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
        let hashes = live.range(first_seq, last_seq);
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
            let computed = match step(&mut edge, n, seq, hashes.get(&seq).copied(), block) {
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

/// Leaf `n`'s stored hashes, recomputed from its event's leaf hash when it is live (and checked
/// against `block`, as stored), with the tree's right edge moved past it.
fn step(
    edge: &mut Vec<Hash>,
    n: u64,
    seq: i64,
    leaf: Option<Hash>,
    block: &[Hash],
) -> std::result::Result<Vec<Hash>, TreeProblem> {
    let Some(mut h) = leaf else {
        for _ in 0..(n + 1).trailing_zeros() {
            edge.pop();
        }
        return Ok(block.to_vec());
    };
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
