//! A batch's writes sent behind: its events, the hourly counts and the entry counts, gathered
//! from its jobs and written just before its commit.

use crate::db::{vals, Db, Dialect, PerDialect, Val};
use crate::error::{LedgerError, Result};
use crate::model::{Event, State};
use crate::read;

/// Writes deferred to the end of a batch: they are only ever read after it commits, and one
/// multi-row statement per batch is much cheaper than one statement per job (on PostgreSQL the
/// entry counts would otherwise be one hot row updated by every job).
#[derive(Debug, Default)]
pub(crate) struct Deferred {
    pub events: Vec<Event>,
    /// (hour, kind, n): the hourly event counts.
    pub bumps: Vec<(i64, String, i64)>,
    /// Entries gained (or lost) per state, in `State::ALL` order.
    pub counts: [i64; State::ALL.len()],
}

impl Deferred {
    pub fn bump(&mut self, hour: i64, kind: &str, n: i64) {
        match self
            .bumps
            .iter_mut()
            .find(|(h, k, _)| *h == hour && k == kind)
        {
            Some((_, _, m)) => *m += n,
            None => self.bumps.push((hour, kind.to_owned(), n)),
        }
    }

    pub(super) fn merge(&mut self, job: Deferred) {
        self.events.extend(job.events);
        for (hour, kind, n) in &job.bumps {
            self.bump(*hour, kind, *n);
        }
        for (a, b) in self.counts.iter_mut().zip(job.counts) {
            *a += b;
        }
    }

    pub(super) fn clear(&mut self) {
        self.events.clear();
        self.bumps.clear();
        self.counts = [0; State::ALL.len()];
    }
}

/// Writes (on PostgreSQL: queues, to go out with the COMMIT) a batch's deferred writes just before
/// its commit: its events (multi-row inserts), the hourly counts and the entry counts. Deferring
/// them costs nothing in consistency — no job reads the log or the counters — and saves a
/// statement (on PostgreSQL a round trip) per event and per counter, and a hot-row update per job.
pub(crate) fn flush(db: &mut dyn Db, out: &Deferred) -> Result<()> {
    let dialect = db.dialect();
    let shape = match dialect {
        Dialect::Sqlite => Rows::Log,
        Dialect::Postgres => Rows::Intake,
    };
    let mut stmts = inserts(&out.events, shape);
    if let (Dialect::Sqlite, Some(last)) = (dialect, out.events.last()) {
        db.exec_all(&stmts)?;
        stmts.clear();
        // Each row took the next rowid, one past the log's last: the rows are where their hashes
        // say they are only if the last one is.
        let stored = db.last_insert_id()?;
        if stored != last.seq {
            return Err(LedgerError::Corrupt(format!(
                "the log's event {} was stored as seq {stored} (the log changed under the writer)",
                last.seq
            )));
        }
    }
    // In one order whatever the batch, so that two writers sharing a shard never deadlock.
    let mut bumps: Vec<_> = out.bumps.iter().collect();
    bumps.sort_unstable_by(|a, b| (a.0, &a.1).cmp(&(b.0, &b.1)));
    for (hour, kind, n) in bumps {
        stmts.push((counter_sql(db.dialect()), vals![*hour, kind, *n].to_vec()));
    }
    for (state, n) in State::ALL.iter().zip(out.counts) {
        if n != 0 {
            stmts.push((
                COUNTER_SQL.get(db.dialect()).1.as_str(),
                vals![state.as_str(), n].to_vec(),
            ));
        }
    }
    for (sql, params) in &stmts {
        db.defer_exec(sql, params)?;
    }
    Ok(())
}

/// The statement that adds `n` (?3) to the hourly count of events of kind ?2 in hour ?1.
pub(crate) fn counter_sql(d: Dialect) -> &'static str {
    COUNTER_SQL.get(d).0.as_str()
}

/// The batch's counter writes: an hour's count of a kind, the count of entries in a state. On
/// PostgreSQL each writer adds to rows of its shard (its session's process id, modulo
/// [`SHARDS`]), summed on read, so the batches of several instances do not wait for each other's
/// commits on one hot row.
static COUNTER_SQL: PerDialect<(String, String)> = PerDialect::new(|d| {
    match d {
    Dialect::Sqlite => (
        format!(
            "{} INTO event_counts (hour, kind, n) VALUES (?1, ?2, ?3) \
             ON CONFLICT (hour, kind) DO UPDATE SET n = event_counts.n + ?3",
            d.insert()
        ),
        format!(
            "{} entry_counts SET n = n + ?2 WHERE state = ?1",
            d.update()
        ),
    ),
    Dialect::Postgres => (
        format!(
            "INSERT INTO event_counts (hour, kind, shard, n) \
             VALUES (?1, ?2, pg_backend_pid() % {SHARDS}, ?3) \
             ON CONFLICT (hour, kind, shard) DO UPDATE SET n = event_counts.n + excluded.n"
        ),
        format!(
            "INSERT INTO entry_counts (state, shard, n) VALUES (?1, pg_backend_pid() % {SHARDS}, ?2) \
             ON CONFLICT (state, shard) DO UPDATE SET n = entry_counts.n + excluded.n"
        ),
    ),
}
});

/// The counters' shards on PostgreSQL: two writers share one with a chance of one in this many,
/// which costs them a wait, never a wrong count.
const SHARDS: u32 = 64;

/// Which rows an insert of events writes.
#[derive(Clone, Copy)]
pub(crate) enum Rows {
    /// SQLite's log: numbered and chained by the writer, `seq` left out (see [`LOG_INSERTS`]).
    Log,
    /// PostgreSQL's intake: neither numbered nor chained (`write/intake.rs`).
    Intake,
    /// PostgreSQL's log: every column, as the sequencer numbered and chained them.
    Numbered,
}

/// The statements that insert `events` as `shape`, with their parameters. The log's are
/// multi-row, of a few fixed chunk sizes, so each is prepared (and written) once; the intake's
/// (a write batch's events) insert a row each, deferred one after another, and PostgreSQL's
/// connection sends the run as one statement over arrays, whatever its length.
pub(crate) fn inserts(events: &[Event], shape: Rows) -> Vec<(&'static str, Vec<Val<'_>>)> {
    let sizes = match shape {
        Rows::Log => LOG_INSERTS.get(Dialect::Sqlite),
        Rows::Intake => &INTAKE_INSERTS,
        Rows::Numbered => LOG_INSERTS.get(Dialect::Postgres),
    };
    let mut stmts = Vec::new();
    let mut rest = events;
    while !rest.is_empty() {
        let (n, sql) = sizes
            .iter()
            .find(|(n, _)| rest.len() >= *n)
            .map_or((1, ""), |(n, sql)| (*n, sql.as_str()));
        let (chunk, tail) = rest.split_at(n);
        rest = tail;
        let mut params = Vec::with_capacity(n * 13);
        for ev in chunk {
            if let Rows::Numbered = shape {
                params.push(Val::Int(ev.seq));
            }
            params.extend_from_slice(vals![
                ev.at,
                &ev.kind,
                ev.entry_id,
                &ev.route,
                &ev.scope,
                &ev.key,
                ev.operator.as_deref(),
                ev.reason.as_deref(),
                &ev.detail,
                ev.payload_digest.as_deref()
            ]);
            if !matches!(shape, Rows::Intake) {
                params.extend_from_slice(vals![&ev.prev_hash, &ev.hash]);
            }
        }
        stmts.push((sql, params));
    }
    stmts
}

/// The statements that insert each of `sizes` rows (largest first, the last 1) of `per_row`
/// columns into `table (cols)`, with their row counts.
fn multi_row(
    insert: &str,
    table: &str,
    cols: &str,
    per_row: usize,
    sizes: &[usize],
) -> Vec<(usize, String)> {
    sizes
        .iter()
        .copied()
        .map(|n| {
            let rows: Vec<String> = (0..n)
                .map(|r| {
                    let marks: Vec<String> = (1..=per_row)
                        .map(|c| format!("?{}", r * per_row + c))
                        .collect();
                    format!("({})", marks.join(", "))
                })
                .collect();
            let sql = format!("{insert} INTO {table} ({cols}) VALUES {}", rows.join(", "));
            (n, sql)
        })
        .collect()
}

/// The rows of the log's multi-row event inserts.
const CHUNKS: [usize; 4] = [256, 64, 8, 1];

/// The log's multi-row event inserts.
///
/// On SQLite the rows leave out `seq`, the table's rowid, and SQLite numbers them one past the
/// last: given a rowid, SQLite must be ready to refuse one that is not an integer halfway through
/// the rows, and so keeps a statement journal for a multi-row insert (a copy of every page it
/// touches first, ~2% of the writer's time).
static LOG_INSERTS: PerDialect<Vec<(usize, String)>> = PerDialect::new(|d| match d {
    Dialect::Sqlite => {
        let cols = read::EVENT_COLS
            .strip_prefix("seq, ")
            .unwrap_or(read::EVENT_COLS);
        multi_row(d.insert(), "events", cols, 12, &CHUNKS)
    }
    Dialect::Postgres => multi_row(d.insert(), "events", read::EVENT_COLS, 13, &CHUNKS),
});

/// The intake's insert (PostgreSQL): the event's columns but its number and hashes.
static INTAKE_INSERTS: std::sync::LazyLock<Vec<(usize, String)>> = std::sync::LazyLock::new(|| {
    multi_row(Dialect::Postgres.insert(), "intake", INTAKE_COLS, 10, &[1])
});

/// The intake's columns, in the order [`inserts`] gives them.
pub(crate) const INTAKE_COLS: &str =
    "at, kind, entry_id, route, scope, key, operator, reason, detail, payload_digest";
