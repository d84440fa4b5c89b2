//! A skip index for the log's free-text search (SQLite).
//!
//! The search is a case-insensitive substring match over six columns of every event; no b-tree
//! index answers that, and a term found in no recent event meant reading the whole log (0.8 s on
//! a million events). This index lets the search skip most of the log: the log is cut into
//! blocks of [`BLOCK`] events by sequence number, and each block keeps a bit set of the 3-byte
//! and 6-byte substrings (n-grams, ASCII-lowercased, hashed) of its searchable text. A block
//! whose set lacks one of the term's n-grams cannot contain the term and is skipped; the blocks
//! that may are searched with the ordinary query, confined to their sequence range — so results
//! are exactly the plain search's. (A random key of 36 characters brings 31 6-grams: with a set
//! half full, a block without the key passes with odds of 2⁻³¹.)
//!
//! The index lives in the memory of the process that searches (16 bytes per event; the newest
//! 16 Mi events at most, 256 MiB — older ones are read when a search gets to them), is built on
//! the first search (or by `Storage::warm`) and extended on each later one; events are
//! append-only, so a complete block never changes. Events after the last complete block are
//! always searched. If the event the index ends at is gone or different (the file was replaced),
//! the index starts over. An archival's segment makes it forget the blocks the segment covers.
//!
//! Only SQLite uses it: its `LIKE` folds ASCII case only, as the n-grams do. PostgreSQL's `ILIKE`
//! folds Unicode case, which byte n-grams cannot follow; there the search scans.

use std::sync::{Mutex, MutexGuard};

use crate::db::{vals, Db, Dialect};
use crate::error::Result;
use crate::model::{Event, EventFilter, Page};
use crate::read;

/// Events per block.
pub(crate) const BLOCK: i64 = 1024;
/// A block's set has 2^LOG_BITS bits (16 KiB).
const LOG_BITS: u32 = 17;
const WORDS: usize = (1 << LOG_BITS) / 64;
/// The most blocks kept (16 Mi events, 256 MiB); older events are searched by reading them.
const MAX_BLOCKS: usize = 16_384;

#[derive(Debug)]
pub(crate) struct SearchIndex {
    /// The first block kept: `blocks[i]` covers sequence numbers `(first + i) * BLOCK + 1 ..=
    /// (first + i + 1) * BLOCK`; events up to `first * BLOCK` are not indexed.
    first: i64,
    blocks: std::collections::VecDeque<Box<[u64]>>,
    /// The hash of the event the index ends at ([`SearchIndex::end`]).
    end_hash: Option<String>,
    max_blocks: usize,
}

impl Default for SearchIndex {
    fn default() -> Self {
        SearchIndex::with_cap(MAX_BLOCKS)
    }
}

fn gram3(b: &[u8]) -> usize {
    let v = u32::from(b[0]) | u32::from(b[1]) << 8 | u32::from(b[2]) << 16;
    (u64::from(v).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - LOG_BITS)) as usize
}

fn gram6(b: &[u8]) -> usize {
    let v = b[..6]
        .iter()
        .enumerate()
        .fold(0u64, |v, (i, &c)| v | u64::from(c) << (8 * i));
    ((v ^ 0x5555).wrapping_mul(0xD6E8_FEB8_6659_FD93) >> (64 - LOG_BITS)) as usize
}

/// Each n-gram of `text` (ASCII-lowercased) once per length.
fn grams(text: &[u8], mut f: impl FnMut(usize)) {
    let lower: Vec<u8> = text.iter().map(u8::to_ascii_lowercase).collect();
    for w in lower.windows(3) {
        f(gram3(w));
    }
    for w in lower.windows(6) {
        f(gram6(w));
    }
}

impl SearchIndex {
    /// An index keeping at most `max_blocks` blocks (the newest).
    pub fn with_cap(max_blocks: usize) -> Self {
        SearchIndex {
            first: 0,
            blocks: std::collections::VecDeque::new(),
            end_hash: None,
            max_blocks: max_blocks.max(1),
        }
    }

    /// The last sequence number the blocks cover.
    pub fn end(&self) -> i64 {
        (self.first + self.blocks.len() as i64) * BLOCK
    }

    /// Adds every block completed since the last call (all of them, up to the cap, the first time).
    pub fn extend(&mut self, db: &mut dyn Db) -> Result<()> {
        if !self.blocks.is_empty() {
            let hash = db.opt(
                "SELECT hash FROM events WHERE seq = ?1",
                vals![self.end()],
                |r| r.text(0),
            )?;
            if hash != self.end_hash {
                *self = SearchIndex::with_cap(self.max_blocks);
            }
        }
        let head = db
            .opt("SELECT MAX(seq) FROM events", &[], |r| r.opt_int(0))?
            .flatten()
            .unwrap_or(0);
        let complete = head - head.rem_euclid(BLOCK);
        if self.blocks.is_empty() {
            // Start no further back than the cap reaches, nor before the live log's first block:
            // a block is complete when its last event is read, and archived events are gone.
            let live = db
                .opt("SELECT MIN(seq) FROM events", &[], |r| r.opt_int(0))?
                .flatten()
                .unwrap_or(1);
            self.first = (complete / BLOCK - self.max_blocks as i64).max((live - 1) / BLOCK);
        }
        if complete <= self.end() {
            return Ok(());
        }
        let mut bits = vec![0u64; WORDS];
        let start = self.end();
        let mut block_end = start + BLOCK;
        let mut last_hash = None;
        let blocks = &mut self.blocks;
        db.each(
            "SELECT seq, key, route, scope, reason, detail, operator, hash FROM events \
             WHERE seq > ?1 AND seq <= ?2 ORDER BY seq",
            vals![start, complete],
            &mut |r| {
                let seq = r.int(0)?;
                for i in 1..=6 {
                    if let Some(t) = r.opt_text(i)? {
                        grams(t.as_bytes(), |g| bits[g / 64] |= 1 << (g % 64));
                    }
                }
                if seq == block_end {
                    blocks.push_back(std::mem::replace(&mut bits, vec![0u64; WORDS]).into());
                    last_hash = Some(r.text(7)?);
                    block_end += BLOCK;
                }
                Ok(true)
            },
        )?;
        if last_hash.is_some() {
            self.end_hash = last_hash;
        }
        while self.blocks.len() > self.max_blocks {
            self.blocks.pop_front();
            self.first += 1;
        }
        Ok(())
    }

    /// Forgets the blocks wholly at or below seq `through`: archived, their events leave the live
    /// log, and the memory they held is freed. A search below the first block kept reads the log.
    pub fn forget_through(&mut self, through: i64) {
        while !self.blocks.is_empty() && (self.first + 1) * BLOCK <= through {
            self.blocks.pop_front();
            self.first += 1;
        }
        if self.blocks.is_empty() {
            self.end_hash = None;
        }
    }

    /// The blocks kept.
    #[cfg(test)]
    pub(crate) fn kept(&self) -> usize {
        self.blocks.len()
    }

    /// The sequence ranges that may hold `term`, newest first, below `before`: everything after
    /// the last complete block, each block whose set has all of the term's n-grams, and everything
    /// before the first block kept. `None` when the index cannot narrow the search (a term under 3
    /// bytes, or non-ASCII).
    pub fn ranges(&self, term: &str, before: Option<i64>) -> Option<Vec<(i64, i64)>> {
        if term.len() < 3 || !term.is_ascii() {
            return None;
        }
        let mut wanted = Vec::new();
        grams(term.as_bytes(), |g| wanted.push(g));
        let top = before.map_or(i64::MAX, |b| b - 1);
        let mut out = Vec::new();
        if top > self.end() {
            out.push((self.end() + 1, top));
        }
        for (i, bits) in self.blocks.iter().enumerate().rev() {
            let lo = (self.first + i as i64) * BLOCK + 1;
            let hi = (lo + BLOCK - 1).min(top);
            if lo > hi {
                continue;
            }
            if wanted.iter().all(|&g| bits[g / 64] & (1 << (g % 64)) != 0) {
                out.push((lo, hi));
            }
        }
        let unindexed = (self.first * BLOCK).min(top);
        if unindexed >= 1 {
            out.push((1, unindexed));
        }
        Some(out)
    }
}

/// The log's events matching `filter`, newest first (as [`read::events`]); a search term on SQLite
/// goes through `index`, extended first.
pub(crate) fn events(
    db: &mut dyn Db,
    index: &Mutex<SearchIndex>,
    filter: &EventFilter,
    page: Page,
) -> Result<Vec<Event>> {
    let ranges = match filter.search.as_deref().filter(|q| !q.is_empty()) {
        Some(q) => extended(db, index)?.and_then(|index| index.ranges(q, page.before)),
        None => None,
    };
    let Some(ranges) = ranges else {
        return read::events(db, filter, page, None);
    };
    let limit = page.limit.clamp(1, read::MAX_PAGE);
    let mut out = Vec::new();
    for range in ranges {
        if out.len() >= limit {
            break;
        }
        let page = Page::newest(page.before, limit - out.len());
        out.extend(read::events(db, filter, page, Some(range))?);
    }
    Ok(out)
}

/// Builds (or extends) `index` now, where it is used (SQLite).
pub(crate) fn warm(db: &mut dyn Db, index: &Mutex<SearchIndex>) -> Result<()> {
    extended(db, index).map(drop)
}

/// `index`, extended to the log's last complete block; `None` where it is not used (PostgreSQL).
fn extended<'i>(
    db: &mut dyn Db,
    index: &'i Mutex<SearchIndex>,
) -> Result<Option<MutexGuard<'i, SearchIndex>>> {
    if db.dialect() != Dialect::Sqlite {
        return Ok(None);
    }
    let mut index = index
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    index.extend(db)?;
    Ok(Some(index))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_text_has_every_gram_of_its_substrings_and_case_does_not_matter() {
        let mut set = std::collections::HashSet::new();
        grams(b"Order-7f3a9c2e-Charges", |g| {
            set.insert(g);
        });
        for term in ["7F3A9C", "order", "CHARGES", "e-ch"] {
            let mut all = true;
            grams(term.as_bytes(), |g| all &= set.contains(&g));
            assert!(all, "{term}");
        }
        let mut all = true;
        grams(b"7f3a9d", |g| all &= set.contains(&g));
        assert!(!all, "a different 6-gram is (almost surely) missing");
    }
}
