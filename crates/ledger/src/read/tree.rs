//! The log's Merkle tree as stored ([`crate::tree`]).

use crate::db::{vals, Db, Val};
use crate::error::{LedgerError, Result};
use crate::model::TreeState;

/// The tree's size and the seq of its last leaf.
pub(crate) fn tree_state(db: &mut dyn Db) -> Result<TreeState> {
    let last = db.opt(
        "SELECT leaf, seq FROM tree_leaves ORDER BY leaf DESC LIMIT 1",
        &[],
        |r| Ok((r.int(0)?, r.int(1)?)),
    )?;
    Ok(match last {
        Some((leaf, seq)) => TreeState {
            size: u64::try_from(leaf).unwrap_or(0) + 1,
            last_seq: Some(seq),
        },
        None => TreeState::default(),
    })
}

/// The leaf index of the event `seq`, once it is in the tree.
pub(crate) fn leaf_of(db: &mut dyn Db, seq: i64) -> Result<Option<u64>> {
    db.opt(
        "SELECT leaf FROM tree_leaves WHERE seq = ?1",
        vals![seq],
        |r| Ok(u64::try_from(r.int(0)?).unwrap_or(0)),
    )
}

/// How many stored hashes one statement reads.
const CHUNK: usize = 32;

/// The stored hashes at `indexes`, in their order; an index not stored is corruption.
pub(crate) fn tree_hashes(db: &mut dyn Db, indexes: &[u64]) -> Result<Vec<[u8; 32]>> {
    let mut out = Vec::with_capacity(indexes.len());
    for chunk in indexes.chunks(CHUNK) {
        let ids: Vec<i64> = chunk.iter().map(|&i| i as i64).collect();
        let marks: Vec<String> = (1..=ids.len()).map(|i| format!("?{i}")).collect();
        let sql = format!(
            "SELECT idx, hash FROM tree_hashes WHERE idx IN ({})",
            marks.join(", ")
        );
        let params: Vec<Val<'_>> = ids.iter().map(|&i| Val::Int(i)).collect();
        let mut found = std::collections::HashMap::with_capacity(ids.len());
        db.each(&sql, &params, &mut |r| {
            let hash = r.opt_blob(1)?.unwrap_or_default();
            let hash = <[u8; 32]>::try_from(hash.as_slice())
                .map_err(|_| LedgerError::Corrupt("a tree hash is not 32 bytes".into()))?;
            found.insert(r.int(0)?, hash);
            Ok(true)
        })?;
        for i in &ids {
            out.push(*found.get(i).ok_or_else(|| {
                LedgerError::Corrupt(format!("the tree's stored hash {i} is missing"))
            })?);
        }
    }
    Ok(out)
}

/// The newest signed checkpoint of the tree whose size is past `index` (one that covers the
/// leaf), as its size and note.
pub(crate) fn tree_checkpoint(db: &mut dyn Db, index: u64) -> Result<Option<(u64, String)>> {
    db.opt(
        "SELECT size, note FROM tree_checkpoints WHERE size > ?1 ORDER BY size DESC LIMIT 1",
        vals![i64::try_from(index).unwrap_or(i64::MAX)],
        |r| Ok((u64::try_from(r.int(0)?).unwrap_or(0), r.text(1)?)),
    )
}
