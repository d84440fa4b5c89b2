//! Reads ahead, writes behind: how a PostgreSQL batch costs a few round trips instead of one per
//! job.
//!
//! On PostgreSQL every statement is a round trip, made while the batch holds its rows' locks. Most
//! jobs are claims (one key's row) and completions (one entry's row), whose only statement that
//! returns something is the read of that row. So, at the start of a batch and in one statement,
//! the writer reads and locks every such row ([`Ahead::read`]), sent with the batch's `BEGIN`;
//! each job then decides from its row
//! and sends its writes later ([`crate::db::Db::defer_exec`]), in order, with the batch's
//! `COMMIT`: two round trips a batch, whatever its size. A completion whose effect the instance
//! knows from its claim ([`Effects`]) has its effect's lock taken by a statement sent just before
//! the read, which then also looks for the effect's duplicates: it sees every completion of
//! another batch that held that lock. The read also takes an id from the
//! entries' sequence for each claim read ahead, so a new key's entry has its id before its insert
//! is sent; ids a batch does not use are never handed out (the sequence only moves forward).
//!
//! **Invariant: a job decides from a row read ahead only if no job before it in the batch could
//! have changed that row.** A claim changes only its key's row, a completion only its entry's; any
//! other job ([`Touch::Any`]) may change anything, and ends reading ahead for the batch. A claim
//! whose decision reads other rows (the reject policy's duplicate check) counts as
//! [`Touch::Any`]. Statements still run in the order the jobs gave them, so a job that reads
//! (anything not read ahead) sees every earlier job's writes. A write sent later that fails fails
//! the batch's first run; the writer then runs it again, each job in its savepoint, without
//! reading ahead.

use std::collections::{HashMap, HashSet};

use crate::db::{Db, Row as _, Shifted, Val};
use crate::entry_row::{map_row, Row, AFTER_ROW, ROW_COLS};
use crate::error::Result;
use crate::model::ResponseRecord;
use crate::read;

/// What a queued job may change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Touch {
    /// The row of one key (route, scope, key): a claim.
    Key(String, String, String),
    /// One entry's row: a completion, with the start of its duplicate window if it has one, and
    /// its effect (route, fingerprint or duplicate values) if the instance knows it.
    Entry(i64, Option<i64>, Option<(String, String)>),
    /// Anything.
    Any,
}

type Key = (String, String, String);

/// The rows a batch read ahead, and what its jobs have touched so far.
#[derive(Default)]
pub(crate) struct Ahead {
    by_key: HashMap<Key, (Row, Option<ResponseRecord>)>,
    /// The keys read ahead (found or not).
    keys: HashSet<Key>,
    /// Each completion's entry, whether an entry that may be its duplicate had completed, and
    /// whether its effect's lock was taken before that was read.
    by_id: HashMap<i64, (Row, bool, bool)>,
    /// The effects (route, fingerprint or duplicate values) completed by this batch so far.
    completed: HashSet<(String, String)>,
    /// The entry id of each key found.
    key_ids: HashMap<Key, i64>,
    touched_keys: HashSet<Key>,
    touched_ids: HashSet<i64>,
    /// Cleared by a job that may change anything.
    valid: bool,
    /// Ids taken from the entries' sequence for new entries, not handed out yet.
    ids: std::collections::VecDeque<i64>,
}

impl Ahead {
    /// Reads, in one statement, the rows of the claims and completions of `touches` that come
    /// before the first [`Touch::Any`], and an id for each of those claims; the completions'
    /// known effects locked just before, in the same round trip. No [`Ahead`] if there is
    /// nothing to read (then one statement all the same, to find a lost connection at the start).
    pub fn read<'t>(
        db: &mut dyn Db,
        touches: impl Iterator<Item = &'t Touch>,
    ) -> Result<Option<Ahead>> {
        let (mut routes, mut scopes, mut keys) = (vec![], vec![], vec![]);
        let (mut ids, mut sinces) = (vec![], vec![]);
        let (mut effect_routes, mut effects) = (vec![], vec![]);
        let mut known = HashMap::new();
        for t in touches {
            match t {
                Touch::Key(r, s, k) => {
                    routes.push(r.as_str());
                    scopes.push(s.as_str());
                    keys.push(k.as_str());
                }
                Touch::Entry(id, since, effect) => {
                    ids.push(*id);
                    // No window: a start no completion reaches.
                    sinces.push(since.unwrap_or(i64::MAX));
                    if let Some((route, effect)) = effect {
                        effect_routes.push(route.as_str());
                        effects.push(effect.as_str());
                        known.insert(*id, (route, effect));
                    }
                }
                Touch::Any => break,
            }
        }
        if keys.is_empty() && ids.is_empty() {
            db.one("SELECT CAST(1 AS BIGINT)", &[], |r| r.int(0))?;
            return Ok(None);
        }
        let mut ahead = Ahead {
            keys: routes
                .iter()
                .zip(&scopes)
                .zip(&keys)
                .map(|((r, s), k)| ((*r).to_owned(), (*s).to_owned(), (*k).to_owned()))
                .collect(),
            valid: true,
            ..Ahead::default()
        };
        if !effects.is_empty() {
            crate::postgres::locks::effect_locks(db, &effect_routes, &effects)?;
        }
        let sql = &*READ_AHEAD;
        let params = [
            Val::Texts(&routes),
            Val::Texts(&scopes),
            Val::Texts(&keys),
            Val::Ints(&ids),
            Val::Int(keys.len() as i64),
            Val::Ints(&sinces),
        ];
        let mut rows = Vec::new();
        db.each(sql, &params, &mut |r| {
            let new_ids = r.opt_text(0)?.unwrap_or_default();
            let found = match r.opt_int(1)? {
                None => None,
                Some(_) => {
                    let shifted = Shifted(r, 1);
                    let maybe_duplicate = shifted.flag(AFTER_ROW + 3)?;
                    let by_id = shifted.flag(AFTER_ROW + 4)?;
                    let stored = read::response_cols(&shifted, AFTER_ROW)?;
                    Some((map_row(&shifted)?, stored, by_id, maybe_duplicate))
                }
            };
            rows.push((new_ids, found));
            Ok(true)
        })?;
        for (new_ids, found) in rows {
            if ahead.ids.is_empty() {
                ahead.ids = parse_ids(&new_ids)?;
            }
            if let Some((row, stored, by_id, maybe_duplicate)) = found {
                ahead.keep(row, stored, by_id.then_some(maybe_duplicate), &known);
            }
        }
        Ok(Some(ahead))
    }

    /// Keeps a row read ahead: a claim's with its stored response, or a completion's
    /// (`maybe_duplicate` given) with the effects whose locks were taken before the read.
    fn keep(
        &mut self,
        row: Row,
        stored: Option<ResponseRecord>,
        maybe_duplicate: Option<bool>,
        known: &HashMap<i64, (&String, &String)>,
    ) {
        let key = (row.route.clone(), row.scope.clone(), row.key.clone());
        self.key_ids.insert(key.clone(), row.id);
        match maybe_duplicate {
            Some(maybe_duplicate) => {
                // The lock taken is the effect the instance knew: if the row's is another (an
                // entry claimed under an older fingerprint, say), neither the lock nor the look
                // for duplicates covered it, and the completion takes and looks for its own.
                let locked = known
                    .get(&row.id)
                    .is_some_and(|(r, e)| **r == row.route && **e == row.effect());
                self.by_id
                    .insert(row.id, (row, maybe_duplicate || !locked, locked));
            }
            None => {
                self.by_key.insert(key, (row, stored));
            }
        }
    }

    /// A claim's key as read ahead: `Some(None)` if it has no entry, `Some(Some(..))` its row and
    /// stored response; `None` if not read ahead or touched since (read it now).
    pub fn claim(
        &mut self,
        route: &str,
        scope: &str,
        key: &str,
    ) -> Option<Option<(Row, Option<ResponseRecord>)>> {
        let k = (route.to_owned(), scope.to_owned(), key.to_owned());
        if !self.valid || !self.keys.contains(&k) || self.touched_keys.contains(&k) {
            return None;
        }
        match self.key_ids.get(&k) {
            Some(id) if self.touched_ids.contains(id) => None,
            Some(_) => self.by_key.remove(&k).map(Some),
            None => Some(None),
        }
    }

    /// A completion's entry as read ahead, whether an entry that may be its duplicate had
    /// completed before the batch, and whether its effect's lock is held; `None` if not read
    /// ahead or touched since.
    pub fn entry(&mut self, id: i64) -> Option<(Row, bool, bool)> {
        if !self.valid || self.touched_ids.contains(&id) {
            return None;
        }
        self.by_id.remove(&id)
    }

    /// `row` completed in this batch.
    pub fn completed(&mut self, row: &Row) {
        self.completed.insert(effect(row));
    }

    /// Whether `row` (just completed, and read ahead with no possible duplicate before the
    /// batch) can have none: no entry of this batch completed its effect. The duplicate check
    /// looks for an entry that completed the same effect, and nothing but a completion (or a job
    /// that ends reading ahead) completes one.
    pub fn no_duplicate(&self, row: &Row) -> bool {
        self.valid && !self.completed.contains(&effect(row))
    }

    /// The id of a new entry, taken with the rows; `None` once every one is handed out.
    pub fn new_id(&mut self) -> Option<i64> {
        self.ids.pop_front()
    }

    /// A job that may change `t` is about to run.
    pub fn touching(&mut self, t: &Touch) {
        match t {
            Touch::Key(r, s, k) => {
                let key = (r.clone(), s.clone(), k.clone());
                if let Some(id) = self.key_ids.get(&key) {
                    self.touched_ids.insert(*id);
                }
                self.touched_keys.insert(key);
            }
            Touch::Entry(id, ..) => {
                self.touched_ids.insert(*id);
            }
            Touch::Any => self.valid = false,
        }
    }
}

/// The ids taken from the sequence, as the read ahead lists them.
fn parse_ids(ids: &str) -> Result<std::collections::VecDeque<i64>> {
    ids.split(',')
        .filter(|s| !s.is_empty())
        .map(str::parse)
        .collect::<std::result::Result<_, _>>()
        .map_err(|e| crate::error::LedgerError::Corrupt(format!("a new entry's id: {e}")))
}

/// The effects of the entries this instance claimed and has not completed yet (PostgreSQL), so
/// that a completion's batch can lock its effect before it reads ([`Touch::Entry`]). A hint: an
/// entry missing (claimed elsewhere, or forgotten when the map was full) costs its completion a
/// round trip, and a wrong one is found out against the row read.
#[derive(Debug, Default)]
pub(crate) struct Effects(std::sync::Mutex<HashMap<i64, (String, String)>>);

impl Effects {
    /// The most entries remembered: entries claimed and never completed here (released, left to
    /// an operator) are forgotten all at once past it.
    const MOST: usize = 1 << 16;

    /// `id` was claimed here for `route` with `effect`.
    pub fn claimed(&self, id: i64, route: &str, effect: &str) {
        let mut map = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if map.len() >= Self::MOST {
            map.clear();
        }
        map.insert(id, (route.to_owned(), effect.to_owned()));
    }

    /// The effect of `id` if claimed here, forgotten.
    pub fn take(&self, id: i64) -> Option<(String, String)> {
        let mut map = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        map.remove(&id)
    }
}

/// The effect a duplicate shares: the route, and the duplicate values or the fingerprint.
fn effect(row: &Row) -> (String, String) {
    (row.route.clone(), row.effect().to_owned())
}

/// The batch's read ahead: ?5 ids from the entries' sequence (comma-separated, the same on every
/// row: the CTE runs once), then one row per entry found by key (?1–?3: arrays of routes, scopes
/// and keys; with its stored response) or by id (?4), whether another entry completed its effect
/// since the start of its duplicate window (?6, beside ?4; always 1 for a row found by key), and
/// which of the two (1: by id); a single row of NULLs after the ids if no entry is found. Every
/// row found is locked until the batch ends, each set in id order, and read as it is once locked
/// (a lock waited for returns the row its holder committed): the write batches of other instances
/// run at the same time. The look for duplicates (what `write::FIND_DUPLICATE` asks, less the key
/// and, for duplicate values, the scope: where it finds none, that finds none) reads the
/// statement's snapshot, taken after the effect locks sent before it.
static READ_AHEAD: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
    let cols = format!("{ROW_COLS}, resp_status, resp_headers, resp_body");
    let done = "d.route = x.route AND d.state = 'completed' AND d.completed_at >= a.since \
                AND d.id <> x.id";
    format!(
        "WITH new AS MATERIALIZED (SELECT array_to_string(ARRAY(SELECT \
         nextval(pg_get_serial_sequence('entries', 'id')::regclass) \
         FROM generate_series(1, ?5::bigint)), ',') AS ids), \
         by_key AS MATERIALIZED (SELECT {cols}, CAST(1 AS BIGINT) AS maybe FROM entries \
         WHERE (route, scope, key) IN (SELECT * FROM unnest(?1::text[], ?2::text[], ?3::text[])) \
         ORDER BY id FOR UPDATE), \
         by_id AS MATERIALIZED (SELECT {cols}, CAST(CAST(CASE \
         WHEN a.since = {max} THEN FALSE \
         WHEN x.dup_fp IS NULL THEN EXISTS (SELECT 1 FROM entries d WHERE {done} \
         AND d.scope = x.scope AND d.fingerprint = x.fingerprint) \
         ELSE EXISTS (SELECT 1 FROM entries d WHERE {done} AND d.dup_fp = x.dup_fp) \
         END AS INTEGER) AS BIGINT) AS maybe \
         FROM entries x JOIN unnest(?4::bigint[], ?6::bigint[]) AS a(want, since) ON x.id = a.want \
         ORDER BY x.id FOR UPDATE OF x) \
         SELECT new.ids, e.* FROM new LEFT JOIN (\
         SELECT by_key.*, CAST(0 AS BIGINT) AS by_id FROM by_key \
         UNION ALL SELECT by_id.*, CAST(1 AS BIGINT) FROM by_id) AS e ON true",
        max = i64::MAX
    )
});
