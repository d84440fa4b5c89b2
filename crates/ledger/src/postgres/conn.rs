//! A connection to PostgreSQL and its pipeline: prepared statements, and statements held back to
//! go out with the next one, a run of one single-row statement's rows merged into one
//! ([`super::rows`]).

use std::collections::HashMap;

use tokio_postgres::tls::MakeTlsConnect;
use tokio_postgres::types::ToSql;
use tokio_postgres::{Client, Config, NoTls, Socket, Statement};

use super::rows;
use super::values::{params, placeholders};
use super::{Target, CONNECT_TIMEOUT};
use crate::db::{Db, Dialect, OwnedVal, Row, Val};
use crate::error::{LedgerError, Result};

/// A connection, its prepared statements, and transaction-control statements waiting to be sent.
///
/// The connection is tokio-postgres on a small runtime of its own (driven only while a call waits).
/// That lets a call *pipeline*: statements given to [`Db::defer`] (savepoints) and
/// [`Db::defer_exec`] and the statements of [`Db::exec_all`] go out together and cost one round
/// trip, not one each; a run of one deferred statement's rows goes as one statement ([`rows`]).
pub(crate) struct PgConn {
    rt: tokio::runtime::Runtime,
    client: Client,
    statements: HashMap<String, Statement>,
    /// Each statement deferred so far, and its form over arrays if it has one ([`rows`]).
    array_forms: HashMap<String, Option<ArrayStmt>>,
    /// How many array forms were prepared: the next one's [`ArrayStmt::of`].
    forms: usize,
    pending: Vec<Pending>,
    /// Round trips made, and statements sent.
    traffic: Traffic,
}

/// What a connection sent: round trips (a prepare, or a statement with the deferred ones sent
/// ahead of it), and statements (a merged run of rows counts once).
#[derive(Default)]
struct Traffic {
    trips: u64,
    sent: u64,
}

/// A statement held back to go out with the next one ([`Db::defer`], [`Db::defer_exec`]).
enum Pending {
    Simple(String),
    Prepared(Statement, Vec<OwnedVal>, Option<ArrayStmt>),
    /// A run of one statement's rows, merged ([`rows`]).
    Rows(Statement, Vec<rows::Column>),
}

/// A deferred statement's form over arrays ([`rows::ArrayForm`]), prepared.
#[derive(Clone)]
struct ArrayStmt {
    stmt: Statement,
    by_id: bool,
    /// Which statement's form it is (one per statement the connection deferred).
    of: usize,
}

/// `pending` with each run of two or more rows of one statement that has a form over arrays
/// merged into one, in order.
fn merge_runs(pending: Vec<Pending>) -> Vec<Pending> {
    let mut out = Vec::with_capacity(pending.len());
    let mut run: Option<(Statement, ArrayStmt, Vec<Vec<OwnedVal>>)> = None;
    for p in pending {
        match p {
            Pending::Prepared(stmt, params, Some(array)) => match &mut run {
                Some((_, m, rows)) if m.of == array.of => rows.push(params),
                _ => {
                    end_run(run.take(), &mut out);
                    run = Some((stmt, array, vec![params]));
                }
            },
            other => {
                end_run(run.take(), &mut out);
                out.push(other);
            }
        }
    }
    end_run(run, &mut out);
    out
}

/// Sends a run's rows as one statement if there are several and they merge, else one by one.
fn end_run(run: Option<(Statement, ArrayStmt, Vec<Vec<OwnedVal>>)>, out: &mut Vec<Pending>) {
    let Some((stmt, array, rows)) = run else {
        return;
    };
    let rows = if rows.len() >= 2 {
        match rows::columns_of(rows, stmt.params(), array.by_id) {
            Ok(cols) => return out.push(Pending::Rows(array.stmt, cols)),
            Err(rows) => rows,
        }
    } else {
        rows
    };
    out.extend(
        rows.into_iter()
            .map(|p| Pending::Prepared(stmt.clone(), p, None)),
    );
}

/// Caches `value` for `sql`, starting over past 512 statements: a ledger prepares a few dozen,
/// so more means statements built at run time that would otherwise grow the cache forever.
fn remember<V>(cache: &mut HashMap<String, V>, sql: &str, value: V) {
    if cache.len() >= 512 {
        cache.clear();
    }
    cache.insert(sql.to_owned(), value);
}

impl PgConn {
    pub(crate) fn connect(target: &Target) -> Result<PgConn> {
        let unavailable = |e: &tokio_postgres::Error| {
            LedgerError::Unavailable(format!(
                "cannot connect to PostgreSQL: {}",
                crate::error::pg_message(e)
            ))
        };
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let client = match &target.tls {
            None => start(&rt, &target.config, NoTls),
            Some(tls) => start(&rt, &target.config, tls.clone()),
        }
        .map_err(|e| unavailable(&e))?;
        Ok(PgConn {
            rt,
            client,
            statements: HashMap::new(),
            array_forms: HashMap::new(),
            forms: 0,
            pending: Vec::new(),
            traffic: Traffic::default(),
        })
    }

    /// The round trips made so far: a prepare, or a statement with the deferred ones sent
    /// ahead of it.
    pub(super) fn trips(&self) -> u64 {
        self.traffic.trips
    }

    /// The statements sent so far (a merged run of rows counts once).
    pub(super) fn sent(&self) -> u64 {
        self.traffic.sent
    }

    pub(super) fn is_closed(&self) -> bool {
        self.client.is_closed()
    }

    /// Whether the server answers (one round trip).
    pub(super) fn is_valid(&mut self) -> bool {
        let client = &self.client;
        let ping = self.rt.block_on(async {
            tokio::time::timeout(CONNECT_TIMEOUT, client.simple_query("")).await
        });
        matches!(ping, Ok(Ok(_)))
    }

    /// The prepared form of `sql` (its `?N` placeholders rewritten to `$N`), prepared once.
    fn statement(&mut self, sql: &str) -> Result<Statement> {
        if let Some(s) = self.statements.get(sql) {
            return Ok(s.clone());
        }
        // A deferred ROLLBACK TO must reach the server before anything is parsed.
        if !self.pending.is_empty() {
            PgConn::run(
                &self.rt,
                &self.client,
                &mut self.pending,
                &mut self.traffic,
                async { Ok(()) },
                0,
            )?;
        }
        self.traffic.trips += 1;
        let stmt = self.rt.block_on(self.client.prepare(&placeholders(sql)))?;
        remember(&mut self.statements, sql, stmt.clone());
        Ok(stmt)
    }

    /// The form over arrays of `sql` (prepared as `stmt`), prepared the first time `sql` is
    /// deferred, if it has one.
    fn array_form_of(&mut self, sql: &str, stmt: &Statement) -> Result<Option<ArrayStmt>> {
        if let Some(m) = self.array_forms.get(sql) {
            return Ok(m.clone());
        }
        let array = match rows::array_form(&placeholders(sql), stmt.params()) {
            Some(form) => {
                let prepared = self.statement(&form.sql)?;
                self.forms += 1;
                Some(ArrayStmt {
                    stmt: prepared,
                    by_id: form.by_id,
                    of: self.forms - 1,
                })
            }
            None => None,
        };
        remember(&mut self.array_forms, sql, array.clone());
        Ok(array)
    }

    /// Runs `f` with the deferred statements sent ahead of it, in order, in the same round trip,
    /// and counts that trip and the statements sent (`f`'s: `statements`). The first error among
    /// them is the call's.
    fn run<T>(
        rt: &tokio::runtime::Runtime,
        client: &Client,
        pending: &mut Vec<Pending>,
        traffic: &mut Traffic,
        f: impl std::future::Future<Output = std::result::Result<T, tokio_postgres::Error>>,
        statements: u64,
    ) -> Result<T> {
        traffic.trips += 1;
        traffic.sent += statements;
        if pending.is_empty() {
            return Ok(rt.block_on(f)?);
        }
        let before = merge_runs(std::mem::take(pending));
        traffic.sent += before.len() as u64;
        // Each future sends its statement when first polled, and `join_all` polls them in order.
        let sent = futures_util::future::join_all(before.iter().map(|p| {
            let fut: std::pin::Pin<Box<dyn std::future::Future<Output = _>>> = match p {
                Pending::Simple(sql) => Box::pin(client.batch_execute(sql)),
                Pending::Prepared(stmt, ps, _) => {
                    let ps = ps.iter().map(|v| v as &(dyn ToSql + Sync));
                    Box::pin(async move { client.execute_raw(stmt, ps).await.map(|_| ()) })
                }
                Pending::Rows(stmt, cols) => {
                    let ps = cols.iter().map(|c| c as &(dyn ToSql + Sync));
                    Box::pin(async move { client.execute_raw(stmt, ps).await.map(|_| ()) })
                }
            };
            fut
        }));
        let (a, b) = rt.block_on(futures_util::future::join(sent, f));
        for r in a {
            r?;
        }
        Ok(b?)
    }
}

impl Db for PgConn {
    fn dialect(&self) -> Dialect {
        Dialect::Postgres
    }

    fn exec(&mut self, sql: &str, p: &[Val<'_>]) -> Result<u64> {
        let stmt = self.statement(sql)?;
        let p = params(p);
        PgConn::run(
            &self.rt,
            &self.client,
            &mut self.pending,
            &mut self.traffic,
            self.client.execute(&stmt, &p),
            1,
        )
    }

    fn exec_all(&mut self, stmts: &[(&str, Vec<Val<'_>>)]) -> Result<()> {
        let prepared = stmts
            .iter()
            .map(|(sql, _)| self.statement(sql))
            .collect::<Result<Vec<_>>>()?;
        let ps: Vec<_> = stmts.iter().map(|(_, p)| params(p)).collect();
        let all = futures_util::future::try_join_all(
            prepared
                .iter()
                .zip(&ps)
                .map(|(stmt, p)| self.client.execute(stmt, p)),
        );
        PgConn::run(
            &self.rt,
            &self.client,
            &mut self.pending,
            &mut self.traffic,
            all,
            stmts.len() as u64,
        )?;
        Ok(())
    }

    fn batch(&mut self, sql: &str) -> Result<()> {
        PgConn::run(
            &self.rt,
            &self.client,
            &mut self.pending,
            &mut self.traffic,
            self.client.batch_execute(sql),
            1,
        )
    }

    fn defer(&mut self, sql: &str) -> Result<()> {
        self.pending.push(Pending::Simple(sql.to_owned()));
        Ok(())
    }

    fn defer_exec(&mut self, sql: &str, p: &[Val<'_>]) -> Result<()> {
        let stmt = self.statement(sql)?;
        let array = self.array_form_of(sql, &stmt)?;
        let owned = p.iter().map(|v| v.to_owned_val()).collect();
        self.pending.push(Pending::Prepared(stmt, owned, array));
        Ok(())
    }

    fn each(
        &mut self,
        sql: &str,
        p: &[Val<'_>],
        f: &mut dyn FnMut(&dyn Row) -> Result<bool>,
    ) -> Result<()> {
        use futures_util::StreamExt;
        let stmt = self.statement(sql)?;
        let rows = PgConn::run(
            &self.rt,
            &self.client,
            &mut self.pending,
            &mut self.traffic,
            self.client.query_raw(&stmt, p.iter()),
            1,
        )?;
        let mut rows = std::pin::pin!(rows);
        while let Some(r) = self.rt.block_on(rows.next()) {
            if !f(&r?)? {
                break;
            }
        }
        Ok(())
    }
}

/// Connects with `tls` (a type of its own for each: none, or rustls) and drives the connection
/// on `rt`; the client.
fn start<T>(
    rt: &tokio::runtime::Runtime,
    config: &Config,
    tls: T,
) -> std::result::Result<Client, tokio_postgres::Error>
where
    T: MakeTlsConnect<Socket>,
    T::Stream: Send + 'static,
{
    let (client, connection) = rt.block_on(config.connect(tls))?;
    rt.spawn(async move {
        if let Err(e) = connection.await {
            tracing::debug!(error = %e, "PostgreSQL connection ended");
        }
    });
    Ok(client)
}
