//! A page of the log as `verify` walks it: each event's canonical encoding, `prev_hash` and
//! `hash`, packed into two buffers as the rows are read, straight from the database's column
//! text. The walk then reads each event from contiguous memory, in order, instead of from a
//! dozen strings an event that another thread filled.

use super::{entry_id_into, field, numbers_into, KIND, TAIL};
use crate::db::Row;
use crate::error::Result;

/// Events packed as [`Packed`] views them; reused page after page (it allocates only to grow).
#[derive(Debug, Default)]
pub(crate) struct CanonPage {
    canon: Vec<u8>,
    /// Each event's `prev_hash` then its `hash`.
    texts: String,
    ends: Vec<Ends>,
}

/// Where an event's parts end in its page's buffers (each starts where the one before ends).
#[derive(Debug)]
struct Ends {
    seq: i64,
    canon: usize,
    prev_hash: usize,
    hash: usize,
}

/// One event of a [`CanonPage`] (or any event, encoded): what the chain checks.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Packed<'p> {
    pub seq: i64,
    pub canon: &'p [u8],
    pub prev_hash: &'p str,
    pub hash: &'p str,
}

impl CanonPage {
    pub(crate) fn clear(&mut self) {
        self.canon.clear();
        self.texts.clear();
        self.ends.clear();
    }

    pub(crate) fn len(&self) -> usize {
        self.ends.len()
    }

    pub(crate) fn last_seq(&self) -> Option<i64> {
        self.ends.last().map(|e| e.seq)
    }

    /// Each event as owned `(seq, canon, prev_hash, hash)`, for tests to compare.
    #[cfg(test)]
    pub(crate) fn owned(&self) -> Vec<(i64, Vec<u8>, String, String)> {
        self.iter()
            .map(|p| (p.seq, p.canon.to_vec(), p.prev_hash.into(), p.hash.into()))
            .collect()
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = Packed<'_>> {
        let mut start = (0, 0);
        self.ends.iter().map(move |e| {
            let p = Packed {
                seq: e.seq,
                canon: &self.canon[start.0..e.canon],
                prev_hash: &self.texts[start.1..e.prev_hash],
                hash: &self.texts[e.prev_hash..e.hash],
            };
            start = (e.canon, e.hash);
            p
        })
    }

    /// Appends the event in `r` (the columns of [`crate::read::EVENT_COLS`]), encoded as
    /// [`super::canonical_event`] encodes it. A NULL where the log allows none is an error, as
    /// reading the event would be, and leaves the page as it was.
    pub(crate) fn push_row(&mut self, r: &dyn Row) -> Result<()> {
        let mark = (self.canon.len(), self.texts.len());
        match self.encode(r) {
            Ok(ends) => {
                self.ends.push(ends);
                Ok(())
            }
            Err(e) => {
                self.canon.truncate(mark.0);
                self.texts.truncate(mark.1);
                Err(e)
            }
        }
    }

    fn encode(&mut self, r: &dyn Row) -> Result<Ends> {
        let seq = r.int(0)?;
        let out = &mut self.canon;
        numbers_into(out, seq, r.int(1)?);
        text(r, 2, KIND, true, out)?;
        entry_id_into(out, r.opt_int(3)?);
        for (i, name) in TAIL.iter().enumerate() {
            // operator, reason and payload_digest may be NULL.
            text(r, 4 + i, name, !matches!(i, 3 | 4 | 6), out)?;
        }
        out.push(b'}');
        let canon = out.len();
        self.push_text(r, 11)?;
        let prev_hash = self.texts.len();
        self.push_text(r, 12)?;
        Ok(Ends {
            seq,
            canon,
            prev_hash,
            hash: self.texts.len(),
        })
    }

    fn push_text(&mut self, r: &dyn Row, i: usize) -> Result<()> {
        let mut null = false;
        r.with_opt_str(i, &mut |s| match s {
            Some(s) => self.texts.push_str(s),
            None => null = true,
        })?;
        if null {
            return Err(crate::db::null(i));
        }
        Ok(())
    }
}

/// Column `i`'s text as the field `name` (`null` if NULL, an error if NULL and `required`).
fn text(r: &dyn Row, i: usize, name: &[u8], required: bool, out: &mut Vec<u8>) -> Result<()> {
    let mut null = false;
    r.with_opt_str(i, &mut |s| {
        null = s.is_none();
        field(out, name, s);
    })?;
    if null && required {
        return Err(crate::db::null(i));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::db::Db;
    use crate::model::Event;

    /// Rows of the log's columns, selected from literals.
    fn rows(db: &mut rusqlite::Connection, sql: &str, page: &mut CanonPage) -> Result<()> {
        (db as &mut dyn Db).each(sql, &[], &mut |r| {
            page.push_row(r)?;
            Ok(true)
        })
    }

    /// A NULL where the log allows none fails the row, as reading it as an event does, and
    /// leaves the page with the rows before it, whole; NULLs where the log allows them encode
    /// as `null`, as the event's own encoding does.
    #[test]
    fn a_row_is_packed_whole_or_not_at_all() {
        let mut db = rusqlite::Connection::open_in_memory().unwrap();
        let mut page = CanonPage::default();
        let sql =
            "SELECT 7, 1000, 'claim', NULL, 'r', 's', 'k\"1', NULL, NULL, '{}', NULL, 'p7', 'h7'";
        rows(&mut db, sql, &mut page).unwrap();
        let ev = Event {
            seq: 7,
            at: 1000,
            kind: "claim".into(),
            route: "r".into(),
            scope: "s".into(),
            key: "k\"1".into(),
            detail: "{}".into(),
            prev_hash: "p7".into(),
            hash: "h7".into(),
            ..Event::default()
        };
        let whole = super::super::canonical_event(&ev);
        let before = page.owned();
        assert_eq!(before, [(7, whole, "p7".to_owned(), "h7".to_owned())]);
        // hash is NULL: the row is refused, after its encoding and prev_hash were packed.
        let sql = "SELECT 8, 1001, 'claim', 3, 'r', 's', 'k', 'op', NULL, 'x', NULL, 'h7', NULL";
        let err = rows(&mut db, sql, &mut page).unwrap_err();
        assert!(
            matches!(&err, crate::LedgerError::Corrupt(m) if m.contains("column 12")),
            "{err}"
        );
        assert_eq!(page.owned(), before);
        assert_eq!((page.len(), page.last_seq()), (1, Some(7)));
        // The next row packs as if the refused one had never been read.
        let sql = "SELECT 8, 1001, 'claim', 3, 'r', 's', 'k', 'op', NULL, 'd', NULL, 'h7', 'h8'";
        rows(&mut db, sql, &mut page).unwrap();
        let next = Event {
            seq: 8,
            at: 1001,
            entry_id: Some(3),
            key: "k".into(),
            operator: Some("op".into()),
            detail: "d".into(),
            prev_hash: "h7".into(),
            hash: "h8".into(),
            ..ev
        };
        let mut all = before;
        all.push((
            8,
            super::super::canonical_event(&next),
            "h7".into(),
            "h8".into(),
        ));
        assert_eq!(page.owned(), all);
    }
}
