//! Recomputing the log's stored tree from its events, as `verify` does beside the chain: each
//! live event's leaf hash, every stored hash the tree holds, and the root each kept checkpoint
//! names.

use std::collections::VecDeque;
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

    /// The leaf hashes of the events `first..=last` the stream holds, into `out` (emptied first)
    /// in seq order; those before `first` (not leaves: logged before the tree began, or a page's
    /// gaps) are passed over.
    fn range_into(&mut self, first: i64, last: i64, out: &mut Vec<(i64, Hash)>) {
        out.clear();
        loop {
            while let Some(&(seq, h)) = self.held.front() {
                if seq > last {
                    return;
                }
                self.held.pop_front();
                if seq >= first {
                    out.push((seq, h));
                }
            }
            match self.rx.recv() {
                Ok(batch) => self.held.extend(batch),
                Err(_) => return,
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
    // By size, in order: the walk meets them as the tree grows.
    let checkpoints: Vec<(u64, [u8; 32])> = db
        .all(
            "SELECT size, note FROM tree_checkpoints ORDER BY size",
            &[],
            |r| Ok((r.int(0)?, r.text(1)?)),
        )?
        .into_iter()
        .filter_map(|(size, note)| Some((u64::try_from(size).ok()?, note_root(&note)?)))
        .collect();
    let mut checkpoints = checkpoints.into_iter().peekable();
    let mut edge: Vec<Hash> = Vec::new();
    let mut leaf: i64 = 0;
    // The previous leaf's event: the integrator adds events in seq order.
    let mut after = i64::MIN;
    // Reused page after page: the leaf hashes (in seq order), and a leaf's recomputed hashes.
    let (mut hashes, mut scratch) = (Vec::new(), Vec::new());
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
        live.range_into(first_seq, last_seq, &mut hashes);
        // The leaves are in seq order as the hashes are: one cursor finds each leaf's.
        let mut next = hashes.iter().peekable();
        let lo = tlog::stored_hash_index(0, leaf as u64) as i64;
        let hi = tlog::stored_hash_index(0, (leaf + leaves.len() as i64) as u64) as i64;
        let stored = stored_range(db, lo, hi)?;
        for (i, seq) in leaves {
            if i != leaf {
                return Ok(Some(problem(None, format!("leaf {leaf} is missing"))));
            }
            if seq <= after {
                let why = format!("leaf {i} holds event {seq}, not one after leaf {}'s", i - 1);
                return Ok(Some(problem(Some(seq), why)));
            }
            after = seq;
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
            while next.next_if(|(s, _)| *s < seq).is_some() {}
            let own = next.next_if(|(s, _)| *s == seq).map(|&(_, h)| h);
            match step(&mut edge, &mut scratch, n, seq, own, block) {
                Ok(top) => edge.push(top),
                Err(p) => return Ok(Some(p)),
            }
            leaf += 1;
            while checkpoints.next_if(|(size, _)| *size < n + 1).is_some() {}
            if let Some((_, root)) = checkpoints.next_if(|(size, _)| *size == n + 1) {
                if edge_root(&edge) != Hash(root) {
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

/// Leaf `n`'s stored hashes, recomputed (into `hashes`) from its event's leaf hash when it is
/// live and checked against `block`, as stored, with the tree's right edge moved past it: the
/// last of them, the root of the subtree the leaf completes, is what the edge takes.
fn step(
    edge: &mut Vec<Hash>,
    hashes: &mut Vec<Hash>,
    n: u64,
    seq: i64,
    leaf: Option<Hash>,
    block: &[Hash],
) -> std::result::Result<Hash, TreeProblem> {
    let top = |b: &[Hash]| b.last().copied().unwrap_or(tlog::EMPTY_HASH);
    let Some(mut h) = leaf else {
        for _ in 0..(n + 1).trailing_zeros() {
            edge.pop();
        }
        return Ok(top(block));
    };
    hashes.clear();
    hashes.push(h);
    for _ in 0..(n + 1).trailing_zeros() {
        let left = edge
            .pop()
            .ok_or_else(|| problem(None, "the tree's edge is short".into()))?;
        h = tlog::node_hash(left, h);
        hashes.push(h);
    }
    if hashes.as_slice() != block {
        let why = if hashes[0] == block[0] {
            format!("the tree's hashes above leaf {n} are not its events'")
        } else {
            format!("event {seq} is not the one leaf {n} of the tree holds")
        };
        return Err(problem(Some(seq), why));
    }
    Ok(top(hashes))
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
