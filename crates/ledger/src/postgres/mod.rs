//! The PostgreSQL backend: one database shared by several idemgate instances.
//!
//! Each process runs the shared writer (`writer.rs`) on one connection, and the batches of all
//! instances run side by side. A batch locks the rows it decides on (`ahead.rs`, and `FOR UPDATE`
//! on every row a job reads to change), so two batches that touch one entry take turns; a new
//! key's claim is decided by the unique constraint on `(key, route, scope)`: the second insert
//! waits for the first and fails, and its batch runs again and finds the key's entry. A claim
//! under the reject policy and every completion take a lock of their effect ([`locks`]). A
//! batch's events go to the intake, unnumbered; the sequencer (`write/intake.rs`, under
//! [`locks::SEQ_LOCK`]) numbers and chains them into the log, so the hash chain stays one chain
//! without the write path knowing its head. Batches hold [`locks::WRITE_LOCK`] shared: a copy of
//! the ledger takes it alone, for a consistent cut. Commits are durable (`synchronous_commit` as
//! the server has it, `on` by default);
//! one commit carries the whole batch — group commit across the instance's requests.
//!
//! A lost connection (the server restarted, a network cut) fails the batch in flight — its writes
//! are answered with an error, never acknowledged — and the next batch reconnects. Readers use a
//! small pool of connections, checked before use when they have been idle.

mod conn;
mod lead;
pub(crate) mod locks;
mod rows;
mod schema;
mod tls;
mod values;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio_postgres::Config;
use tokio_postgres_rustls::MakeRustlsConnect;

use crate::db::{Db, Dialect, Row, Val};
use crate::error::{LedgerError, Result};
use crate::lead::{Lead, Leader};
use crate::ledger::{self, Ledger, OpenOptions, ReadPool};
use crate::model::Millis;
use crate::writer::{WriteConn, Writer, MAX_BATCH};
pub(crate) use conn::PgConn;
use locks::{begin_batch, begin_locked, MIGRATE_LOCK};

/// The commits through which the writer has its tables analysed itself ([`analyze_due`]).
const YOUNG_COMMITS: u64 = 16_384;
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// A pooled reader idle longer than this is checked before use.
const CHECK_IDLE: Duration = Duration::from_secs(1);

impl Ledger {
    /// Opens (and if asked, creates) the ledger in the PostgreSQL database at `url`
    /// (`postgres://user:password@host:port/database`), running pending migrations.
    pub fn postgres(url: &str, opts: OpenOptions) -> Result<Arc<Ledger>> {
        Ledger::postgres_with_batch(url, opts, MAX_BATCH)
    }

    /// [`Ledger::postgres`] with at most `max_batch` jobs per transaction.
    pub fn postgres_with_batch(
        url: &str,
        opts: OpenOptions,
        max_batch: usize,
    ) -> Result<Arc<Ledger>> {
        let location = redact(url);
        let config = Target::of(url)?;
        let mut conn = PgConn::connect(&config)?;
        migrate(&mut conn, opts.create, &location)?;
        let recorded = ledger::record_alg(&mut conn, &opts.hasher)?;
        let refusal = ledger::write_refusal(&opts.hasher, &recorded);
        let writer = Writer::spawn(
            PgWriter::new(config.clone(), conn),
            opts.hasher.clone(),
            max_batch,
            refusal,
        )?;
        let readers = Box::new(Readers {
            config,
            location,
            pool: Mutex::new(Vec::new()),
        });
        Ok(Ledger::new(opts.hasher, readers, writer, None))
    }
}

/// Where and how to connect: the settings of a URL, with idemgate's defaults (a connect timeout,
/// a name), and its TLS ([`tls`]).
#[derive(Clone)]
pub(crate) struct Target {
    config: Config,
    tls: Option<MakeRustlsConnect>,
}

impl Target {
    pub(crate) fn of(url: &str) -> Result<Target> {
        let (rest, settings) = tls::split(url)?;
        let mut config: Config = rest.parse().map_err(|e| {
            LedgerError::Unsupported(format!("not a PostgreSQL URL ({}): {e}", redact(url)))
        })?;
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(CONNECT_TIMEOUT);
        }
        if config.get_application_name().is_none() {
            config.application_name("idemgate");
        }
        config.ssl_mode(settings.mode.ssl_mode());
        let tls = tls::connector(&settings)?;
        Ok(Target { config, tls })
    }
}

/// A write connection of its own on the (migrated) ledger at `url` (for `copy`).
pub(crate) fn write_conn(url: &str) -> Result<impl WriteConn> {
    let config = Target::of(url)?;
    let conn = PgConn::connect(&config)?;
    Ok(PgWriter::new(config, conn))
}

/// `url` without its password.
fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let (authority, tail) = match rest.find(['/', '?']) {
        Some(i) => rest.split_at(i),
        None => (rest, ""),
    };
    let Some((userinfo, host)) = authority.rsplit_once('@') else {
        return url.to_owned();
    };
    let user = userinfo.split_once(':').map_or(userinfo, |(u, _)| u);
    let shown = if user.len() < userinfo.len() {
        format!("{user}:***")
    } else {
        user.to_owned()
    };
    let tail = match tail.split_once('?') {
        Some((path, query)) => {
            let query: Vec<String> = query
                .split('&')
                .map(|kv| match kv.split_once('=') {
                    Some((k, _)) if k.eq_ignore_ascii_case("password") => format!("{k}=***"),
                    _ => kv.to_owned(),
                })
                .collect();
            format!("{path}?{}", query.join("&"))
        }
        None => tail.to_owned(),
    };
    format!("{scheme}://{shown}@{host}{tail}")
}

fn migrate(db: &mut dyn Db, create: bool, location: &str) -> Result<()> {
    db.batch(&begin_locked(MIGRATE_LOCK))?;
    let r = migrate_locked(db, create, location);
    match r {
        Ok(()) => db.batch("COMMIT"),
        Err(e) => {
            let _ = db.batch("ROLLBACK");
            Err(e)
        }
    }
}

fn migrate_locked(db: &mut dyn Db, create: bool, location: &str) -> Result<()> {
    let supported = schema::current_version();
    let exists = db.one(
        "SELECT CAST(COUNT(*) AS BIGINT) FROM pg_class WHERE oid = to_regclass('idemgate_schema')",
        &[],
        |r| r.int(0),
    )? > 0;
    let version = if exists {
        db.opt("SELECT version FROM idemgate_schema", &[], |r| r.int(0))?
            .unwrap_or(0)
    } else {
        if !create {
            return Err(LedgerError::NotFound(location.to_owned()));
        }
        db.batch(
            "CREATE TABLE idemgate_schema (version BIGINT NOT NULL); \
             INSERT INTO idemgate_schema (version) VALUES (0)",
        )?;
        0
    };
    if version > supported {
        return Err(LedgerError::TooNew {
            found: version,
            supported,
        });
    }
    for (i, m) in schema::MIGRATIONS.iter().enumerate().skip(version as usize) {
        db.batch(m)?;
        db.exec(
            "UPDATE idemgate_schema SET version = ?1",
            &[Val::Int((i + 1) as i64)],
        )?;
    }
    Ok(())
}

/// The writer's connection; `None` after it was lost, until the next batch reconnects.
struct PgWriter {
    config: Target,
    conn: Option<PgConn>,
    lost: Disconnected,
    commits: u64,
    /// The commit at which the writer last had the tables analysed (0: never).
    analyzed_at: u64,
    analyzing: Arc<AtomicBool>,
    /// The round trips of the connections lost so far.
    trips_before: u64,
    /// The statements they sent.
    sent_before: u64,
}

impl PgWriter {
    fn new(config: Target, conn: PgConn) -> PgWriter {
        PgWriter {
            config,
            conn: Some(conn),
            lost: Disconnected,
            commits: 0,
            analyzed_at: 0,
            analyzing: Arc::default(),
            trips_before: 0,
            sent_before: 0,
        }
    }
}

impl WriteConn for PgWriter {
    /// Queues the `BEGIN` and the lock to go out with the batch's first read; a lost connection
    /// is replaced first.
    fn begin(&mut self) -> Result<()> {
        if let Some(c) = &mut self.conn {
            if !c.is_closed() {
                return c.defer(&begin_batch());
            }
        }
        if let Some(lost) = self.conn.take() {
            self.trips_before += lost.trips();
            self.sent_before += lost.sent();
        }
        let mut c = PgConn::connect(&self.config)?;
        c.defer(&begin_batch())?;
        tracing::info!("ledger writer reconnected to PostgreSQL");
        self.conn = Some(c);
        Ok(())
    }

    fn lost(&mut self) -> bool {
        self.conn.as_ref().is_none_or(PgConn::is_closed)
    }

    /// A new ledger's tables have no statistics until autovacuum's first ANALYZE (a minute or
    /// more), and a statement prepared meanwhile keeps the generic plan made for the table's size
    /// then until the table is analysed again: the completion's update by primary key scanned all
    /// of `entries`, every time, planned when `entries` held a few dozen rows. So while the
    /// ledger is young the writer has its tables analysed each time its commits have doubled
    /// ([`analyze_due`]) — on a connection and thread of their own (ANALYZE waits for
    /// autovacuum's lock and reads a sample; the writer must not wait for either), one at a
    /// time; a point passed while one runs is taken by the next commit after it. What the plans
    /// need is the tables' size and the columns the ledger's statements look rows up by
    /// ([`YOUNG_ANALYZE`]): statistics of every column (bodies and headers among them) cost a
    /// full ANALYZE eight times as much, in CPU the server's calls share.
    fn committed(&mut self) {
        self.commits += 1;
        if !analyze_due(self.commits, self.analyzed_at)
            || self.analyzing.swap(true, Ordering::AcqRel)
        {
            return;
        }
        self.analyzed_at = self.commits;
        let (config, busy) = (self.config.clone(), self.analyzing.clone());
        let spawned = std::thread::Builder::new()
            .name("idemgate-stats".into())
            .spawn(move || {
                let r = PgConn::connect(&config).and_then(|mut c| c.batch(YOUNG_ANALYZE));
                if let Err(e) = r {
                    tracing::debug!(error = %e, "ANALYZE of a young ledger skipped");
                }
                busy.store(false, Ordering::Release);
            });
        if spawned.is_err() {
            self.analyzing.store(false, Ordering::Release);
        }
    }

    fn db(&mut self) -> &mut dyn Db {
        match &mut self.conn {
            Some(c) => c,
            None => &mut self.lost,
        }
    }

    fn round_trips(&self) -> u64 {
        self.trips_before + self.conn.as_ref().map_or(0, |c| c.trips())
    }

    fn statements(&self) -> u64 {
        self.sent_before + self.conn.as_ref().map_or(0, |c| c.sent())
    }
}

/// A young ledger's analysis: the tables' size (which any ANALYZE records) and the statistics
/// of the columns the ledger's statements select rows by, from a small sample; autovacuum's own
/// analyses later cover every column at the server's default target.
const YOUNG_ANALYZE: &str = "SET lock_timeout = '5s'; SET default_statistics_target = 10; \
    ANALYZE entries (id, route, scope, key, state, fingerprint, dup_fp, expires_at), \
    events (seq, entry_id, kind, key)";

/// The commits of a young ledger's writer after which its tables are analysed: the 16th, then
/// each time the commits have doubled since the last analysis, up to [`YOUNG_COMMITS`] (past
/// that, autovacuum's own analyses keep up with the tables' growth).
fn analyze_due(commits: u64, analyzed_at: u64) -> bool {
    (16..=YOUNG_COMMITS).contains(&commits) && commits >= analyzed_at.saturating_mul(2)
}

/// Stands in for a lost connection: every statement fails.
struct Disconnected;

impl Db for Disconnected {
    fn dialect(&self) -> Dialect {
        Dialect::Postgres
    }

    fn exec(&mut self, _: &str, _: &[Val<'_>]) -> Result<u64> {
        Err(LedgerError::Unavailable(
            "no connection to PostgreSQL".into(),
        ))
    }

    fn batch(&mut self, _: &str) -> Result<()> {
        Err(LedgerError::Unavailable(
            "no connection to PostgreSQL".into(),
        ))
    }

    fn each(
        &mut self,
        _: &str,
        _: &[Val<'_>],
        _: &mut dyn FnMut(&dyn Row) -> Result<bool>,
    ) -> Result<()> {
        Err(LedgerError::Unavailable(
            "no connection to PostgreSQL".into(),
        ))
    }
}

struct Readers {
    config: Target,
    location: String,
    /// Idle connections, each with when it was last used.
    pool: Mutex<Vec<(PgConn, Instant)>>,
}

impl std::fmt::Debug for Readers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Readers")
            .field("location", &self.location)
            .finish_non_exhaustive()
    }
}

impl ReadPool for Readers {
    fn backend(&self) -> &'static str {
        "postgres"
    }

    fn location(&self) -> String {
        self.location.clone()
    }

    fn with(&self, f: &mut dyn FnMut(&mut dyn Db)) -> Result<()> {
        let pooled = self.pool.lock().ok().and_then(|mut p| p.pop());
        // A pooled connection may have died with a server restart: one idle for a while is
        // checked first (a round trip); one used just now is not, so a read in a stream of them
        // costs its own round trips only. A restart within that moment fails one read.
        let mut conn = match pooled {
            Some((c, used)) if !c.is_closed() && used.elapsed() < CHECK_IDLE => c,
            Some((mut c, _)) => {
                if c.is_valid() {
                    c
                } else {
                    PgConn::connect(&self.config)?
                }
            }
            None => PgConn::connect(&self.config)?,
        };
        f(&mut conn);
        if !conn.is_closed() {
            if let Ok(mut p) = self.pool.lock() {
                if p.len() < 8 {
                    p.push((conn, Instant::now()));
                }
            }
        }
        Ok(())
    }

    fn clear(&self) {
        let conns = self
            .pool
            .lock()
            .map(|mut p| p.drain(..).map(|(c, _)| c).collect())
            .unwrap_or_default();
        drop_off_runtime(conns);
    }

    fn lead(&self, instance: &str, at: Millis) -> Result<Option<Box<dyn Lead>>> {
        Ok(lead::try_lead(&self.config, instance, at)?.map(|l| Box::new(l) as Box<dyn Lead>))
    }

    fn leader(&self) -> Result<Option<Leader>> {
        let mut out = Ok(None);
        self.with(&mut |db| out = lead::leader(db))?;
        out
    }
}

/// Drops `conns`. A client owns a small runtime, which must not be dropped inside an async
/// context, and a ledger (or a lead) may be dropped in one: there, on a thread of their own.
fn drop_off_runtime(conns: Vec<PgConn>) {
    if conns.is_empty() {
        return;
    }
    if tokio::runtime::Handle::try_current().is_err() {
        drop(conns);
    } else {
        let _ = std::thread::spawn(move || drop(conns)).join();
    }
}

#[cfg(test)]
mod tests {
    use super::values::placeholders;
    use super::*;

    #[test]
    fn placeholders_are_rewritten() {
        assert_eq!(
            placeholders("SELECT a FROM t WHERE b = ?1 AND c LIKE ?12 ESCAPE '\\' AND d = '?'"),
            "SELECT a FROM t WHERE b = $1 AND c LIKE $12 ESCAPE '\\' AND d = '?'"
        );
    }

    #[test]
    fn passwords_are_redacted() {
        assert_eq!(
            redact("postgres://idem:s3cret@db.example:5432/ledger"),
            "postgres://idem:***@db.example:5432/ledger"
        );
        assert_eq!(
            redact("postgresql://idem@127.0.0.1/ledger?password=s3cret&sslmode=disable"),
            "postgresql://idem@127.0.0.1/ledger?password=***&sslmode=disable"
        );
        assert_eq!(redact("postgres://127.0.0.1/l"), "postgres://127.0.0.1/l");
    }
}
