//! Queries. Every list is keyset-paged on an indexed column (entries by `id`, events by `seq`,
//! newest first); no query counts a whole table.

use crate::db::{vals, Db, Row, Val};
use crate::error::{LedgerError, Result};
use crate::model::{
    ArchivedSegment, ChainHead, CollisionRecord, Effect, EntryDetail, EntryFilter, EntrySummary,
    Event, EventFilter, Millis, Page, RequestRecord, ResponseRecord, SeriesPoint, State, Stats,
};
use crate::store::EventRange;

mod approvals;
mod fleet;
mod incidents;
mod tree;
pub(crate) use approvals::{approval, approvals, resolution_reason};
pub(crate) use fleet::{count_call, tool_effect};
pub(crate) use incidents::{incidents, review_of};
pub(crate) use tree::{leaf_of, tree_checkpoint, tree_hashes, tree_state};

/// The most rows one page of entries or events holds.
pub(crate) const MAX_PAGE: usize = 100_000;

const ENTRY_COLS: &str =
    "id, route, scope, key, state, fingerprint, attempts, replays, created_at, \
    updated_at, expires_at, effect, lease_expires_at, outcome_unknown, last_error, collisions, \
    duplicate_of, resp_status, tool, subjects";

fn summary_row(now: Millis) -> impl Fn(&dyn Row) -> Result<EntrySummary> {
    move |r| {
        let state = State::parse(&r.text(4)?).unwrap_or(State::Pending);
        let lease_expires_at = r.opt_int(12)?;
        let outcome_unknown = r.flag(13)?;
        Ok(EntrySummary {
            id: r.int(0)?,
            route: r.text(1)?,
            scope: r.text(2)?,
            key: r.text(3)?,
            state,
            stuck: state == State::Pending
                && (outcome_unknown || lease_expires_at.is_some_and(|l| l <= now)),
            fingerprint: r.text(5)?,
            attempts: r.int(6)?,
            replays: r.int(7)?,
            created_at: r.int(8)?,
            updated_at: r.int(9)?,
            expires_at: r.opt_int(10)?,
            effect: Effect::parse(&r.text(11)?).unwrap_or_default(),
            lease_expires_at,
            outcome_unknown,
            last_error: r.opt_text(14)?,
            collisions: r.int(15)?,
            duplicate_of: r.opt_int(16)?,
            response_status: r.opt_int(17)?.map(status),
            tool: r.opt_text(18)?,
            subjects: subjects_from(r.opt_text(19)?),
        })
    }
}

/// An entry's stored subjects (a JSON object of names and values), in name order.
fn subjects_from(json: Option<String>) -> Vec<(String, String)> {
    let Some(Ok(serde_json::Value::Object(m))) =
        json.map(|j| serde_json::from_str::<serde_json::Value>(&j))
    else {
        return Vec::new();
    };
    m.into_iter()
        .map(|(n, v)| (n, v.as_str().map_or_else(|| v.to_string(), str::to_owned)))
        .collect()
}

fn status(s: i64) -> u16 {
    u16::try_from(s).unwrap_or(0)
}

fn headers_from(json: Option<String>) -> Result<Vec<(String, String)>> {
    match json {
        None => Ok(Vec::new()),
        Some(s) => serde_json::from_str(&s)
            .map_err(|e| LedgerError::Corrupt(format!("stored headers are not JSON: {e}"))),
    }
}

/// Maps `(status, headers, body)` starting at column `first` to an optional response.
pub(crate) fn response_cols(r: &dyn Row, first: usize) -> Result<Option<ResponseRecord>> {
    let Some(s) = r.opt_int(first)? else {
        return Ok(None);
    };
    Ok(Some(ResponseRecord {
        status: status(s),
        headers: headers_from(r.opt_text(first + 1)?)?,
        body: r.opt_blob(first + 2)?.unwrap_or_default(),
    }))
}

pub(crate) fn entry_summary(db: &mut dyn Db, id: i64, now: Millis) -> Result<EntrySummary> {
    db.opt(
        &format!("SELECT {ENTRY_COLS} FROM entries WHERE id = ?1"),
        vals![id],
        summary_row(now),
    )?
    .ok_or(LedgerError::EntryNotFound(id))
}

pub(crate) fn entry(db: &mut dyn Db, id: i64, now: Millis) -> Result<EntryDetail> {
    let summary = entry_summary(db, id, now)?;
    let detail = db.one(
        "SELECT lease_owner, req_method, req_path, req_headers, req_body, resp_status, resp_headers, \
         resp_body, last_replay_at, completed_at, resolved_by, resolution_reason, external_ref \
         FROM entries WHERE id = ?1",
        vals![id],
        |r| {
            let request = match r.opt_text(1)? {
                Some(method) => Some(RequestRecord {
                    method,
                    path: r.opt_text(2)?.unwrap_or_default(),
                    headers: headers_from(r.opt_text(3)?)?,
                    body: r.opt_blob(4)?.unwrap_or_default(),
                }),
                None => None,
            };
            Ok(EntryDetail {
                summary: summary.clone(),
                lease_owner: r.opt_text(0)?,
                request,
                response: response_cols(r, 5)?,
                last_replay_at: r.opt_int(8)?,
                completed_at: r.opt_int(9)?,
                resolved_by: r.opt_text(10)?,
                resolution_reason: r.opt_text(11)?,
                external_ref: r.opt_text(12)?,
                collision_requests: Vec::new(),
                approval: None,
                headline: crate::model::headline::call(&summary),
            })
        },
    )?;
    let approval = approval(db, id)?;
    let collisions = db.all(
        "SELECT id, entry_id, at, fingerprint, req_method, req_path, req_headers, req_body \
         FROM collisions WHERE entry_id = ?1 ORDER BY id DESC LIMIT 100",
        vals![id],
        |r| {
            Ok(CollisionRecord {
                id: r.int(0)?,
                entry_id: r.int(1)?,
                at: r.int(2)?,
                fingerprint: r.text(3)?,
                request: RequestRecord {
                    method: r.text(4)?,
                    path: r.text(5)?,
                    headers: headers_from(r.opt_text(6)?)?,
                    body: r.opt_blob(7)?.unwrap_or_default(),
                },
            })
        },
    )?;
    Ok(EntryDetail {
        collision_requests: collisions,
        approval,
        ..detail
    })
}

/// A WHERE clause under construction, with its parameters.
#[derive(Default)]
struct Where {
    sql: String,
    params: Vec<Param>,
}

/// An owned parameter of a [`Where`].
enum Param {
    Int(i64),
    Text(String),
}

impl From<i64> for Param {
    fn from(v: i64) -> Self {
        Param::Int(v)
    }
}

impl From<String> for Param {
    fn from(v: String) -> Self {
        Param::Text(v)
    }
}

impl From<&str> for Param {
    fn from(v: &str) -> Self {
        Param::Text(v.to_owned())
    }
}

impl Where {
    fn and(&mut self, cond: &str) {
        self.sql.push_str(if self.sql.is_empty() {
            " WHERE "
        } else {
            " AND "
        });
        self.sql.push_str(cond);
    }

    /// Adds a condition with one parameter; `?` in `cond` is replaced by its number.
    fn and_p(&mut self, cond: &str, p: impl Into<Param>) {
        self.params.push(p.into());
        let n = self.params.len();
        self.and(&cond.replace('?', &format!("?{n}")));
    }

    fn params(&self) -> Vec<Val<'_>> {
        self.params
            .iter()
            .map(|p| match p {
                Param::Int(i) => Val::Int(*i),
                Param::Text(s) => Val::Text(s),
            })
            .collect()
    }
}

/// "The entry's key is `?`": the entries' unique constraint leads with the key (migration 8).
pub(crate) const ENTRY_KEY: &str = "key = ?";

/// "The event (of table alias `$t`) is not of an entry's lifecycle", spelled as the
/// `events_key` index's condition is.
macro_rules! not_lifecycle {
    ($t:literal) => {
        not_lifecycle!($t; "claim", "complete", "attempt", "release", "lease_expired", "expired")
    };
    ($t:literal; $first:literal $(, $k:literal)*) => {
        concat!($t, "kind <> '", $first, "'" $(, " AND ", $t, "kind <> '", $k, "'")*)
    };
}

/// "The event's key is `?`". `events_key` holds every event but an entry's lifecycle (claim,
/// completion, attempt, release, lease and TTL expiry; SQLite migrations 8 and 18), which is
/// always logged under its entry, with its key and id. So: the events in `events_key`; the
/// events of every entry of the key; and the events of every entry that one of the indexed
/// events names — a purged entry's, through its purge's event (and, under another key, a
/// refused duplicate's original). The outer `key = ?` keeps what is under another key. The
/// kinds are spelled as the partial index's condition is, so both planners use it.
pub(crate) const EVENT_KEY: &str = concat!(
    "key = ? AND seq IN (SELECT seq FROM events WHERE key = ? AND ",
    not_lifecycle!(""),
    " UNION SELECT e.seq FROM entries n CROSS JOIN events e WHERE n.key = ? AND e.entry_id = n.id",
    " UNION SELECT e.seq FROM events k CROSS JOIN events e WHERE k.key = ? AND ",
    not_lifecycle!("k."),
    " AND e.entry_id = k.entry_id)"
);

pub(crate) fn entries(
    db: &mut dyn Db,
    f: &EntryFilter,
    page: Page,
    now: Millis,
) -> Result<Vec<EntrySummary>> {
    let mut w = entry_where(f, now);
    let order = if page.oldest_first {
        if let Some(a) = page.after {
            w.and_p("id > ?", a);
        }
        "ASC"
    } else {
        if let Some(b) = page.before {
            w.and_p("id < ?", b);
        }
        "DESC"
    };
    let sql = format!(
        "SELECT {ENTRY_COLS} FROM entries{} ORDER BY id {order} LIMIT {}",
        w.sql,
        page.limit.clamp(1, MAX_PAGE)
    );
    db.all(&sql, &w.params(), summary_row(now))
}

/// The conditions of `f`, at `now`.
fn entry_where(f: &EntryFilter, now: Millis) -> Where {
    let mut w = Where::default();
    if let Some(s) = f.state {
        w.and_p("state = ?", s.as_str());
    }
    if f.stuck {
        w.and_p(
            "state = 'pending' AND (outcome_unknown = 1 OR lease_expires_at <= ?)",
            now,
        );
    }
    if f.collisions {
        w.and("collisions > 0");
    }
    if f.expired {
        w.and_p("expires_at <= ? AND state <> 'pending'", now);
    }
    if let Some(within) = f.expiring_within {
        w.and_p("expires_at > ?", now);
        w.and_p(
            "expires_at <= ? AND state <> 'pending'",
            now.saturating_add(within),
        );
    }
    if f.duplicates {
        w.and(
            "(duplicate_of IS NOT NULL OR id IN (SELECT duplicate_of FROM entries \
             WHERE duplicate_of IS NOT NULL))",
        );
    }
    if let Some(r) = &f.route {
        w.and_p("route = ?", r.clone());
    }
    if let Some(s) = &f.scope {
        w.and_p("scope = ?", s.clone());
    }
    if let Some(t) = &f.tool {
        w.and_p("tool = ?", t.clone());
    }
    if let Some(sub) = &f.subject {
        match sub.split_once('=') {
            Some((name, value)) => {
                w.params.push(Param::Text(value.to_owned()));
                w.params.push(Param::Text(name.to_owned()));
                let n = w.params.len();
                w.and(&format!(
                    "id IN (SELECT entry_id FROM subjects WHERE value = ?{} AND name = ?{n})",
                    n - 1
                ));
            }
            None => w.and_p(
                "id IN (SELECT entry_id FROM subjects WHERE value = ?)",
                sub.clone(),
            ),
        }
    }
    if let Some(term) = &f.search {
        w.params.push(Param::Text(term.clone()));
        let n = w.params.len();
        w.and(&format!(
            "(id IN (SELECT entry_id FROM subjects WHERE value = ?{n}) \
             OR id IN (SELECT id FROM entries WHERE key = ?{n}))"
        ));
    }
    if let Some(k) = &f.key {
        w.and_p(ENTRY_KEY, k.clone());
    }
    w
}

pub(crate) const EVENT_COLS: &str =
    "seq, at, kind, entry_id, route, scope, key, operator, reason, detail, payload_digest, prev_hash, hash";

pub(crate) fn event_row(r: &dyn Row) -> Result<Event> {
    Ok(Event {
        seq: r.int(0)?,
        at: r.int(1)?,
        kind: r.text(2)?,
        entry_id: r.opt_int(3)?,
        route: r.text(4)?,
        scope: r.text(5)?,
        key: r.text(6)?,
        operator: r.opt_text(7)?,
        reason: r.opt_text(8)?,
        detail: r.text(9)?,
        payload_digest: r.opt_text(10)?,
        prev_hash: r.text(11)?,
        hash: r.text(12)?,
    })
}

/// The events matching `f`, newest first; `within`: only those in this sequence range (inclusive).
pub(crate) fn events(
    db: &mut dyn Db,
    f: &EventFilter,
    page: Page,
    within: Option<(i64, i64)>,
) -> Result<Vec<Event>> {
    let mut w = Where::default();
    if let Some((lo, hi)) = within {
        w.and_p("seq >= ?", lo);
        w.and_p("seq <= ?", hi);
    }
    if let Some(e) = f.entry_id {
        w.and_p("entry_id = ?", e);
    }
    if let Some(r) = &f.route {
        w.and_p("route = ?", r.clone());
    }
    if let Some(s) = &f.scope {
        w.and_p("scope = ?", s.clone());
    }
    if let Some(k) = &f.key {
        w.and_p(EVENT_KEY, k.clone());
    }
    if let Some(k) = &f.kind {
        w.and_p("kind = ?", k.clone());
    }
    if let Some(o) = &f.operator {
        // The name, alone or with what vouches for it after it: "alice (OS user ada)" from the
        // desktop console, "alice (shared admin token)" from the admin API.
        let qualified = format!("{o} (");
        let len = qualified.chars().count() as i64;
        w.params.push(Param::Text(o.clone()));
        w.params.push(Param::Text(qualified));
        let n = w.params.len();
        w.and(&format!(
            "(operator = ?{} OR substr(operator, 1, {len}) = ?{n})",
            n - 1
        ));
    }
    if let Some(s) = f.since {
        w.and_p("at >= ?", s);
    }
    if let Some(u) = f.until {
        w.and_p("at < ?", u);
    }
    if let Some(q) = f.search.as_ref().filter(|q| !q.is_empty()) {
        let like = format!(
            "%{}%",
            q.replace('\\', "\\\\")
                .replace('%', "\\%")
                .replace('_', "\\_")
        );
        w.params.push(Param::Text(like));
        let n = w.params.len();
        let like = db.dialect().ilike();
        w.and(&format!(
            "(key {like} ?{n} ESCAPE '\\' OR route {like} ?{n} ESCAPE '\\' OR scope {like} ?{n} ESCAPE '\\' \
             OR reason {like} ?{n} ESCAPE '\\' OR detail {like} ?{n} ESCAPE '\\' OR operator {like} ?{n} ESCAPE '\\')"
        ));
    }
    if let Some(b) = page.before {
        w.and_p("seq < ?", b);
    }
    let sql = format!(
        "SELECT {EVENT_COLS} FROM events{} ORDER BY seq DESC LIMIT {}",
        w.sql,
        page.limit.clamp(1, MAX_PAGE)
    );
    db.all(&sql, &w.params(), event_row)
}

/// The contiguous run of sequence numbers covering `range` (first event at or after `since`, last
/// event before `until`), so an exported range is one unbroken piece of the chain.
pub(crate) fn seq_bounds(db: &mut dyn Db, range: EventRange) -> Result<Option<(i64, i64)>> {
    let lo = match range.since {
        Some(s) => db.one(
            "SELECT MIN(seq) FROM events WHERE at >= ?1",
            vals![s],
            |r| r.opt_int(0),
        )?,
        None => db.one("SELECT MIN(seq) FROM events", &[], |r| r.opt_int(0))?,
    };
    let hi = match range.until {
        Some(u) => seq_before(db, u)?,
        None => db.one("SELECT MAX(seq) FROM events", &[], |r| r.opt_int(0))?,
    };
    Ok(match (lo, hi) {
        (Some(lo), Some(hi)) if lo <= hi => Some((lo, hi)),
        _ => None,
    })
}

/// The seq of the last live event logged before `before`.
pub(crate) fn seq_before(db: &mut dyn Db, before: Millis) -> Result<Option<i64>> {
    db.one(
        "SELECT MAX(seq) FROM events WHERE at < ?1",
        vals![before],
        |r| r.opt_int(0),
    )
}

pub(crate) fn scan_events(
    db: &mut dyn Db,
    range: EventRange,
    f: &mut dyn FnMut(Event) -> Result<bool>,
) -> Result<()> {
    match seq_bounds(db, range)? {
        Some((lo, hi)) => scan_seqs(db, lo, hi, f),
        None => Ok(()),
    }
}

/// The entries created in `range`, oldest first, as an entries export writes them; `f` returns
/// `false` to stop.
pub(crate) fn scan_entries(
    db: &mut dyn Db,
    range: EventRange,
    f: &mut dyn FnMut(crate::model::EntryRow) -> Result<bool>,
) -> Result<()> {
    use crate::entries_export::{time, EntryRow};
    db.each(
        "SELECT id, route, tool, scope, key, effect, state, created_at, completed_at, expires_at, \
         attempts, replays, collisions, duplicate_of, subjects, resp_status, resp_body, \
         resolved_by, resolution_reason, external_ref FROM entries \
         WHERE created_at >= ?1 AND created_at < ?2 ORDER BY id",
        vals![
            range.since.unwrap_or(i64::MIN),
            range.until.unwrap_or(i64::MAX)
        ],
        &mut |r| {
            let status = r.opt_int(15)?.and_then(|s| u16::try_from(s).ok());
            f(EntryRow {
                id: r.int(0)?,
                route: r.text(1)?,
                tool: r.opt_text(2)?,
                scope: r.text(3)?,
                key: r.text(4)?,
                effect: r.text(5)?,
                state: r.text(6)?,
                created_at: time(Some(r.int(7)?)).unwrap_or_default(),
                completed_at: time(r.opt_int(8)?),
                expires_at: time(r.opt_int(9)?),
                attempts: r.int(10)?,
                replays: r.int(11)?,
                collisions: r.int(12)?,
                duplicate_of: r.opt_int(13)?,
                subjects: r.opt_text(14)?,
                response_sha256: match status {
                    Some(_) => Some(crate::canon::sha256_hex(
                        &r.opt_blob(16)?.unwrap_or_default(),
                    )),
                    None => None,
                },
                status,
                resolved_by: r.opt_text(17)?,
                resolution_reason: r.opt_text(18)?,
                external_ref: r.opt_text(19)?,
            })
        },
    )
}

/// Events `first..=last` in sequence order; `f` returns `false` to stop.
pub(crate) fn scan_seqs(
    db: &mut dyn Db,
    first: i64,
    last: i64,
    f: &mut dyn FnMut(Event) -> Result<bool>,
) -> Result<()> {
    db.each(
        &format!("SELECT {EVENT_COLS} FROM events WHERE seq BETWEEN ?1 AND ?2 ORDER BY seq"),
        vals![first, last],
        &mut |r| f(event_row(r)?),
    )
}

/// The next `page` events after seq `after`, in order, packed into `out` (emptied first) as the
/// chain's walk checks them: one short statement a page, so a walk over the whole log holds no
/// statement open.
pub(crate) fn canon_page_into(
    db: &mut dyn Db,
    after: i64,
    page: usize,
    out: &mut crate::chain::CanonPage,
) -> Result<()> {
    let sql = format!("SELECT {EVENT_COLS} FROM events WHERE seq > ?1 ORDER BY seq LIMIT {page}");
    out.clear();
    db.each(&sql, vals![after], &mut |r| {
        out.push_row(r)?;
        Ok(true)
    })
}

/// The overview's count of expired entries: those whose expiry the sweeper has logged, kept by
/// triggers (a logged expiry has passed), and those it has not logged yet, an index-only range
/// (entries_expires leads with `expiry_logged` and holds `state`).
pub(crate) const EXPIRED_COUNT: &str = "SELECT (SELECT n FROM expired_counts) + \
     (SELECT COUNT(*) FROM entries WHERE expiry_logged = 0 AND expires_at <= ?1 \
     AND state <> 'pending')";

pub(crate) fn stats(db: &mut dyn Db, now: Millis, hours: u32) -> Result<Stats> {
    let entries_by_state = db.all(
        "SELECT state, CAST(SUM(n) AS BIGINT) FROM entry_counts GROUP BY state ORDER BY state",
        &[],
        |r| {
            Ok((
                State::parse(&r.text(0)?).unwrap_or(State::Pending),
                r.int(1)?,
            ))
        },
    )?;
    let mut count = |sql: &str, p: &[Val<'_>]| db.one(sql, p, |r| r.int(0));
    let stuck = count(
        "SELECT COUNT(*) FROM entries WHERE state = 'pending' AND (outcome_unknown = 1 OR lease_expires_at <= ?1)",
        vals![now],
    )?;
    let collisions = count("SELECT COUNT(*) FROM entries WHERE collisions > 0", &[])?;
    let expired = count(EXPIRED_COUNT, vals![now])?;
    let duplicate_suspects = count(
        "SELECT COUNT(*) FROM entries WHERE duplicate_of IS NOT NULL",
        &[],
    )?;
    let events_by_kind = db.all(
        "SELECT kind, CAST(SUM(n) AS BIGINT) FROM event_counts GROUP BY kind ORDER BY kind",
        &[],
        |r| Ok((r.text(0)?, r.int(1)?)),
    )?;
    let from = now - now.rem_euclid(3_600_000) - i64::from(hours) * 3_600_000;
    let series = db.all(
        "SELECT hour, kind, CAST(SUM(n) AS BIGINT) FROM event_counts WHERE hour >= ?1 \
         GROUP BY hour, kind ORDER BY hour, kind",
        vals![from],
        |r| {
            Ok(SeriesPoint {
                hour: r.int(0)?,
                kind: r.text(1)?,
                count: r.int(2)?,
            })
        },
    )?;
    let head = head(db)?;
    Ok(Stats {
        entries_by_state,
        stuck,
        collisions,
        expired,
        duplicate_suspects,
        events_by_kind,
        head,
        series,
    })
}

/// The newest event's sequence number and hash; when every event has been archived, the last
/// archived one's. `None` for a log that never had an event.
pub(crate) fn head(db: &mut dyn Db) -> Result<Option<ChainHead>> {
    db.opt(HEAD, &[], chain_head)
}

/// The chain's head: the live log's last event, or, when the live log is empty, the last one an
/// archive segment holds. One statement, so a write batch can read it with its rows
/// ([`crate::ahead`]).
pub(crate) const HEAD: &str = "SELECT seq, hash FROM \
     (SELECT seq, hash FROM events ORDER BY seq DESC LIMIT 1) AS l UNION ALL SELECT seq, hash FROM \
     (SELECT seq, hash FROM archived ORDER BY seq DESC LIMIT 1) AS a ORDER BY seq DESC LIMIT 1";

fn chain_head(r: &dyn Row) -> Result<ChainHead> {
    Ok(ChainHead {
        seq: r.int(0)?,
        hash: r.text(1)?,
    })
}

/// The last event a recorded archive segment holds: the live log's chain resumes after it.
pub(crate) fn archived_through(db: &mut dyn Db) -> Result<Option<ChainHead>> {
    db.opt(
        "SELECT seq, hash FROM archived ORDER BY seq DESC LIMIT 1",
        &[],
        chain_head,
    )
}

/// The archive segments the ledger recorded, oldest first.
pub(crate) fn archived(db: &mut dyn Db) -> Result<Vec<ArchivedSegment>> {
    db.all(
        "SELECT first_seq, seq, hash, count, file, sha256, bytes, at FROM archived ORDER BY seq",
        &[],
        |r| {
            Ok(ArchivedSegment {
                first_seq: r.int(0)?,
                seq: r.int(1)?,
                hash: r.text(2)?,
                count: r.int(3)?,
                file: r.text(4)?,
                sha256: r.text(5)?,
                bytes: r.int(6)?,
                at: r.int(7)?,
            })
        },
    )
}

/// Whether the log holds event `head.seq` with exactly `head.hash`, live or as the last event of
/// a recorded archive segment.
pub(crate) fn contains(db: &mut dyn Db, head: &ChainHead) -> Result<bool> {
    let found = db.opt(
        "SELECT hash FROM events WHERE seq = ?1 UNION ALL SELECT hash FROM archived WHERE seq = ?1",
        vals![head.seq],
        |r| r.text(0),
    )?;
    Ok(found.as_deref() == Some(head.hash.as_str()))
}

/// The chain algorithm recorded in the ledger.
pub(crate) fn chain_alg(db: &mut dyn Db) -> Result<Option<String>> {
    db.opt(
        "SELECT value FROM meta WHERE name = 'chain_alg'",
        &[],
        |r| r.text(0),
    )
}
