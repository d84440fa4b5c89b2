//! Queries. Every list is keyset-paged on an indexed column (entries by `id`, events by `seq`,
//! newest first); no query counts a whole table.

use rusqlite::types::ToSql;
use rusqlite::{params, Connection, OptionalExtension};

use crate::error::{LedgerError, Result};
use crate::model::*;
use crate::store::EventRange;

const ENTRY_COLS: &str =
    "id, route, scope, key, state, fingerprint, attempts, replays, created_at, \
    updated_at, expires_at, effect, lease_expires_at, outcome_unknown, last_error, collisions, \
    duplicate_of, resp_status";

fn summary_row(now: Millis) -> impl Fn(&rusqlite::Row<'_>) -> rusqlite::Result<EntrySummary> {
    move |r| {
        let state: String = r.get(4)?;
        let state = State::parse(&state).unwrap_or(State::Pending);
        let effect: String = r.get(11)?;
        let lease_expires_at: Option<Millis> = r.get(12)?;
        let outcome_unknown: bool = r.get(13)?;
        Ok(EntrySummary {
            id: r.get(0)?,
            route: r.get(1)?,
            scope: r.get(2)?,
            key: r.get(3)?,
            state,
            stuck: state == State::Pending
                && (outcome_unknown || lease_expires_at.is_some_and(|l| l <= now)),
            fingerprint: r.get(5)?,
            attempts: r.get(6)?,
            replays: r.get(7)?,
            created_at: r.get(8)?,
            updated_at: r.get(9)?,
            expires_at: r.get(10)?,
            effect: Effect::parse(&effect).unwrap_or_default(),
            lease_expires_at,
            outcome_unknown,
            last_error: r.get(14)?,
            collisions: r.get(15)?,
            duplicate_of: r.get(16)?,
            response_status: r.get(17)?,
        })
    }
}

fn headers_from(json: Option<String>) -> rusqlite::Result<Vec<(String, String)>> {
    match json {
        None => Ok(Vec::new()),
        Some(s) => serde_json::from_str(&s).map_err(|e| {
            rusqlite::Error::FromSqlConversionFailure(0, rusqlite::types::Type::Text, Box::new(e))
        }),
    }
}

/// Maps `(status, headers, body)` starting at column `first` to an optional response.
pub(crate) fn response_cols(
    first: usize,
) -> impl Fn(&rusqlite::Row<'_>) -> rusqlite::Result<Option<ResponseRecord>> {
    move |r| {
        let status: Option<u16> = r.get(first)?;
        let Some(status) = status else {
            return Ok(None);
        };
        Ok(Some(ResponseRecord {
            status,
            headers: headers_from(r.get(first + 1)?)?,
            body: r.get::<_, Option<Vec<u8>>>(first + 2)?.unwrap_or_default(),
        }))
    }
}

pub(crate) fn entry_summary(conn: &Connection, id: i64, now: Millis) -> Result<EntrySummary> {
    conn.prepare_cached(&format!("SELECT {ENTRY_COLS} FROM entries WHERE id = ?1"))?
        .query_row([id], summary_row(now))
        .optional()?
        .ok_or(LedgerError::EntryNotFound(id))
}

pub(crate) fn entry(conn: &Connection, id: i64, now: Millis) -> Result<EntryDetail> {
    let summary = entry_summary(conn, id, now)?;
    let detail = conn
        .prepare_cached(
            "SELECT lease_owner, req_method, req_path, req_headers, req_body, resp_status, resp_headers, \
             resp_body, last_replay_at, completed_at, resolved_by, resolution_reason, external_ref \
             FROM entries WHERE id = ?1",
        )?
        .query_row([id], |r| {
            let method: Option<String> = r.get(1)?;
            let request = match method {
                Some(method) => Some(RequestRecord {
                    method,
                    path: r.get::<_, Option<String>>(2)?.unwrap_or_default(),
                    headers: headers_from(r.get(3)?)?,
                    body: r.get::<_, Option<Vec<u8>>>(4)?.unwrap_or_default(),
                }),
                None => None,
            };
            Ok(EntryDetail {
                summary: summary.clone(),
                lease_owner: r.get(0)?,
                request,
                response: response_cols(5)(r)?,
                last_replay_at: r.get(8)?,
                completed_at: r.get(9)?,
                resolved_by: r.get(10)?,
                resolution_reason: r.get(11)?,
                external_ref: r.get(12)?,
                collision_requests: Vec::new(),
            })
        })?;
    let collisions = conn
        .prepare_cached(
            "SELECT id, entry_id, at, fingerprint, req_method, req_path, req_headers, req_body \
             FROM collisions WHERE entry_id = ?1 ORDER BY id DESC LIMIT 100",
        )?
        .query_map([id], |r| {
            Ok(CollisionRecord {
                id: r.get(0)?,
                entry_id: r.get(1)?,
                at: r.get(2)?,
                fingerprint: r.get(3)?,
                request: RequestRecord {
                    method: r.get(4)?,
                    path: r.get(5)?,
                    headers: headers_from(r.get(6)?)?,
                    body: r.get(7)?,
                },
            })
        })?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(EntryDetail {
        collision_requests: collisions,
        ..detail
    })
}

/// A WHERE clause under construction, with its parameters.
#[derive(Default)]
struct Where {
    sql: String,
    params: Vec<Box<dyn ToSql>>,
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
    fn and_p(&mut self, cond: &str, p: impl ToSql + 'static) {
        self.params.push(Box::new(p));
        let n = self.params.len();
        self.and(&cond.replace('?', &format!("?{n}")));
    }

    fn params(&self) -> Vec<&dyn ToSql> {
        self.params.iter().map(|p| p.as_ref()).collect()
    }
}

pub(crate) fn entries(
    conn: &Connection,
    f: &EntryFilter,
    page: Page,
    now: Millis,
) -> Result<Vec<EntrySummary>> {
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
    if let Some(k) = &f.key {
        w.and_p("key = ?", k.clone());
    }
    if let Some(b) = page.before {
        w.and_p("id < ?", b);
    }
    let sql = format!(
        "SELECT {ENTRY_COLS} FROM entries{} ORDER BY id DESC LIMIT {}",
        w.sql,
        page.limit.clamp(1, 100_000)
    );
    let mut stmt = conn.prepare_cached(&sql)?;
    let rows = stmt.query_map(w.params().as_slice(), summary_row(now))?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}

pub(crate) const EVENT_COLS: &str =
    "seq, at, kind, entry_id, route, scope, key, operator, reason, detail, payload_digest, prev_hash, hash";

pub(crate) fn event_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<Event> {
    Ok(Event {
        seq: r.get(0)?,
        at: r.get(1)?,
        kind: r.get(2)?,
        entry_id: r.get(3)?,
        route: r.get(4)?,
        scope: r.get(5)?,
        key: r.get(6)?,
        operator: r.get(7)?,
        reason: r.get(8)?,
        detail: r.get(9)?,
        payload_digest: r.get(10)?,
        prev_hash: r.get(11)?,
        hash: r.get(12)?,
    })
}

pub(crate) fn events(conn: &Connection, f: &EventFilter, page: Page) -> Result<Vec<Event>> {
    let mut w = Where::default();
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
        w.and_p("key = ?", k.clone());
    }
    if let Some(k) = &f.kind {
        w.and_p("kind = ?", k.clone());
    }
    if let Some(o) = &f.operator {
        w.and_p("operator = ?", o.clone());
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
        w.params.push(Box::new(like));
        let n = w.params.len();
        w.and(&format!(
            "(key LIKE ?{n} ESCAPE '\\' OR route LIKE ?{n} ESCAPE '\\' OR scope LIKE ?{n} ESCAPE '\\' \
             OR reason LIKE ?{n} ESCAPE '\\' OR detail LIKE ?{n} ESCAPE '\\' OR operator LIKE ?{n} ESCAPE '\\')"
        ));
    }
    if let Some(b) = page.before {
        w.and_p("seq < ?", b);
    }
    let sql = format!(
        "SELECT {EVENT_COLS} FROM events{} ORDER BY seq DESC LIMIT {}",
        w.sql,
        page.limit.clamp(1, 100_000)
    );
    let mut stmt = conn.prepare_cached(&sql)?;
    let rows = stmt.query_map(w.params().as_slice(), event_row)?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}

/// The contiguous run of sequence numbers covering `range` (first event at or after `since`, last
/// event before `until`), so an exported range is one unbroken piece of the chain.
pub(crate) fn seq_bounds(conn: &Connection, range: EventRange) -> Result<Option<(i64, i64)>> {
    let lo: Option<i64> = match range.since {
        Some(s) => conn.query_row("SELECT MIN(seq) FROM events WHERE at >= ?1", [s], |r| {
            r.get(0)
        })?,
        None => conn.query_row("SELECT MIN(seq) FROM events", [], |r| r.get(0))?,
    };
    let hi: Option<i64> = match range.until {
        Some(u) => conn.query_row("SELECT MAX(seq) FROM events WHERE at < ?1", [u], |r| {
            r.get(0)
        })?,
        None => conn.query_row("SELECT MAX(seq) FROM events", [], |r| r.get(0))?,
    };
    Ok(match (lo, hi) {
        (Some(lo), Some(hi)) if lo <= hi => Some((lo, hi)),
        _ => None,
    })
}

pub(crate) fn scan_events(
    conn: &Connection,
    range: EventRange,
    f: &mut dyn FnMut(Event) -> Result<bool>,
) -> Result<()> {
    let Some((lo, hi)) = seq_bounds(conn, range)? else {
        return Ok(());
    };
    let mut stmt = conn.prepare(&format!(
        "SELECT {EVENT_COLS} FROM events WHERE seq BETWEEN ?1 AND ?2 ORDER BY seq"
    ))?;
    let mut rows = stmt.query(params![lo, hi])?;
    while let Some(r) = rows.next()? {
        if !f(event_row(r)?)? {
            break;
        }
    }
    Ok(())
}

pub(crate) fn incidents(conn: &Connection, page: Page, now: Millis) -> Result<Vec<Incident>> {
    // Each incident is keyed by its most recent suspect entry id, for keyset paging.
    let mut w = Where::default();
    w.and("duplicate_of IS NOT NULL");
    if let Some(b) = page.before {
        w.and_p("id < ?", b);
    }
    let sql = format!(
        "SELECT route, scope, fingerprint, MAX(id) AS last FROM entries{} \
         GROUP BY route, scope, fingerprint ORDER BY last DESC LIMIT {}",
        w.sql,
        page.limit.clamp(1, 1000)
    );
    let groups: Vec<(String, String, String)> = conn
        .prepare_cached(&sql)?
        .query_map(w.params().as_slice(), |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?))
        })?
        .collect::<rusqlite::Result<_>>()?;
    let mut out = Vec::with_capacity(groups.len());
    for (route, scope, fingerprint) in groups {
        let entries = conn
            .prepare_cached(&format!(
                "SELECT {ENTRY_COLS} FROM entries WHERE route = ?1 AND scope = ?2 AND fingerprint = ?3 \
                 AND state = 'completed' ORDER BY id LIMIT 100"
            ))?
            .query_map(params![route, scope, fingerprint], summary_row(now))?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        out.push(Incident {
            route,
            scope,
            fingerprint,
            entries,
        });
    }
    Ok(out)
}

pub(crate) fn stats(conn: &Connection, now: Millis, hours: u32) -> Result<Stats> {
    let entries_by_state = conn
        .prepare_cached("SELECT state, n FROM entry_counts ORDER BY state")?
        .query_map([], |r| {
            let s: String = r.get(0)?;
            Ok((State::parse(&s).unwrap_or(State::Pending), r.get(1)?))
        })?
        .collect::<rusqlite::Result<_>>()?;
    let count = |sql: &str, p: &[&dyn ToSql]| -> Result<i64> {
        Ok(conn.prepare_cached(sql)?.query_row(p, |r| r.get(0))?)
    };
    let stuck = count(
        "SELECT COUNT(*) FROM entries WHERE state = 'pending' AND (outcome_unknown = 1 OR lease_expires_at <= ?1)",
        &[&now],
    )?;
    let collisions = count("SELECT COUNT(*) FROM entries WHERE collisions > 0", &[])?;
    let expired = count(
        "SELECT COUNT(*) FROM entries WHERE expires_at <= ?1 AND state <> 'pending'",
        &[&now],
    )?;
    let duplicate_suspects = count(
        "SELECT COUNT(*) FROM entries WHERE duplicate_of IS NOT NULL",
        &[],
    )?;
    let events_by_kind = conn
        .prepare_cached("SELECT kind, SUM(n) FROM event_counts GROUP BY kind ORDER BY kind")?
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
        .collect::<rusqlite::Result<_>>()?;
    let from = now - now.rem_euclid(3_600_000) - i64::from(hours) * 3_600_000;
    let series = conn
        .prepare_cached(
            "SELECT hour, kind, n FROM event_counts WHERE hour >= ?1 ORDER BY hour, kind",
        )?
        .query_map([from], |r| {
            Ok(SeriesPoint {
                hour: r.get(0)?,
                kind: r.get(1)?,
                count: r.get(2)?,
            })
        })?
        .collect::<rusqlite::Result<_>>()?;
    let head = conn
        .query_row(
            "SELECT seq, hash FROM events ORDER BY seq DESC LIMIT 1",
            [],
            |r| {
                Ok(ChainHead {
                    seq: r.get(0)?,
                    hash: r.get(1)?,
                })
            },
        )
        .optional()?;
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
