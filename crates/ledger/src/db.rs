//! The seam between the ledger's SQL and a database driver.
//!
//! The state machine (`write.rs`) and the queries (`read.rs`) are written once, in the SQL both
//! SQLite and PostgreSQL accept, against [`Db`]. Each backend adapts its driver: SQLite runs the text
//! as is; PostgreSQL rewrites the `?N` placeholders to `$N`. Integers are 64-bit everywhere
//! (`INTEGER` / `BIGINT`), flags are integers 0/1, bytes are `BLOB` / `BYTEA`.

use crate::error::Result;

/// A statement parameter.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Val<'a> {
    Null,
    Int(i64),
    Text(&'a str),
    Blob(&'a [u8]),
    /// An array of texts (PostgreSQL only).
    Texts(&'a [&'a str]),
    /// An array of integers (PostgreSQL only).
    Ints(&'a [i64]),
}

/// A parameter kept past the statement that named it (a statement sent later: [`Db::defer_exec`]).
#[derive(Debug, Clone)]
pub(crate) enum OwnedVal {
    Null,
    Int(i64),
    Text(String),
    Blob(Vec<u8>),
    Texts(Vec<String>),
    Ints(Vec<i64>),
}

impl Val<'_> {
    pub fn to_owned_val(self) -> OwnedVal {
        match self {
            Val::Null => OwnedVal::Null,
            Val::Int(i) => OwnedVal::Int(i),
            Val::Text(s) => OwnedVal::Text(s.to_owned()),
            Val::Blob(b) => OwnedVal::Blob(b.to_vec()),
            Val::Texts(v) => OwnedVal::Texts(v.iter().map(|s| (*s).to_owned()).collect()),
            Val::Ints(v) => OwnedVal::Ints(v.to_vec()),
        }
    }
}

impl From<i64> for Val<'_> {
    fn from(v: i64) -> Self {
        Val::Int(v)
    }
}

impl<'a> From<&'a str> for Val<'a> {
    fn from(v: &'a str) -> Self {
        Val::Text(v)
    }
}

impl<'a> From<&'a String> for Val<'a> {
    fn from(v: &'a String) -> Self {
        Val::Text(v)
    }
}

impl<'a> From<&'a [u8]> for Val<'a> {
    fn from(v: &'a [u8]) -> Self {
        Val::Blob(v)
    }
}

impl<'a> From<&'a Vec<u8>> for Val<'a> {
    fn from(v: &'a Vec<u8>) -> Self {
        Val::Blob(v)
    }
}

impl<'a, T: Into<Val<'a>>> From<Option<T>> for Val<'a> {
    fn from(v: Option<T>) -> Self {
        v.map_or(Val::Null, Into::into)
    }
}

/// `vals![a, b, …]`: a parameter slice.
macro_rules! vals {
    ($($v:expr),* $(,)?) => { &[$($crate::db::Val::from($v)),*][..] };
}
pub(crate) use vals;

/// One result row; columns by position.
pub(crate) trait Row {
    fn opt_int(&self, i: usize) -> Result<Option<i64>>;
    fn opt_text(&self, i: usize) -> Result<Option<String>>;
    fn opt_blob(&self, i: usize) -> Result<Option<Vec<u8>>>;

    fn int(&self, i: usize) -> Result<i64> {
        self.opt_int(i)?.ok_or_else(|| null(i))
    }
    fn text(&self, i: usize) -> Result<String> {
        self.opt_text(i)?.ok_or_else(|| null(i))
    }
    fn flag(&self, i: usize) -> Result<bool> {
        Ok(self.int(i)? != 0)
    }
    /// Column `i`'s text handed to `f` (`None`: NULL), borrowed from the row where the backend
    /// can (a walk that encodes each row as it reads it copies nothing).
    fn with_opt_str(&self, i: usize, f: &mut dyn FnMut(Option<&str>)) -> Result<()> {
        f(self.opt_text(i)?.as_deref());
        Ok(())
    }
}

/// A row read from column `.1` on (a statement's leading columns are something else).
pub(crate) struct Shifted<'a>(pub &'a dyn Row, pub usize);

impl Row for Shifted<'_> {
    fn opt_int(&self, i: usize) -> Result<Option<i64>> {
        self.0.opt_int(i + self.1)
    }

    fn opt_text(&self, i: usize) -> Result<Option<String>> {
        self.0.opt_text(i + self.1)
    }

    fn opt_blob(&self, i: usize) -> Result<Option<Vec<u8>>> {
        self.0.opt_blob(i + self.1)
    }
}

pub(crate) fn null(i: usize) -> crate::LedgerError {
    crate::LedgerError::Corrupt(format!("unexpected NULL in column {i}"))
}

/// Which SQL the database speaks, where the shared text must differ.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Dialect {
    Sqlite,
    Postgres,
}

impl Dialect {
    /// Case-insensitive LIKE (SQLite's LIKE already is, for ASCII).
    pub fn ilike(self) -> &'static str {
        match self {
            Dialect::Sqlite => "LIKE",
            Dialect::Postgres => "ILIKE",
        }
    }

    /// `INSERT` for the writer's single-row inserts and the batch's event rows. On SQLite, `OR
    /// FAIL`: a failed constraint check stops the statement before it writes anything to that
    /// row, so SQLite needs no statement journal (with the default ABORT it copies every page the
    /// insert touches first — a tenth of the writer's time). Nothing is lost by it: a failing job
    /// is undone by the writer (whole batch, then its savepoint).
    pub fn insert(self) -> &'static str {
        match self {
            Dialect::Sqlite => "INSERT OR FAIL",
            Dialect::Postgres => "INSERT",
        }
    }

    /// What a writer's read of rows it will decide on ends with: on PostgreSQL, where the write
    /// batches of several instances run at once, it locks them until the batch ends. SQLite has
    /// one writer at a time.
    pub fn for_update(self) -> &'static str {
        match self {
            Dialect::Sqlite => "",
            Dialect::Postgres => " FOR UPDATE",
        }
    }

    /// [`Dialect::for_update`] for a sweep's read of rows due: rows another writer holds are left
    /// to it.
    pub fn skip_locked(self) -> &'static str {
        match self {
            Dialect::Sqlite => "",
            Dialect::Postgres => " FOR UPDATE SKIP LOCKED",
        }
    }

    /// `UPDATE` for the writer's single-row updates on the hot path (a completion, the counters),
    /// for the reason [`Dialect::insert`] gives: on SQLite, `OR FAIL` spares the statement journal.
    pub fn update(self) -> &'static str {
        match self {
            Dialect::Sqlite => "UPDATE OR FAIL",
            Dialect::Postgres => "UPDATE",
        }
    }
}

/// Something built once per dialect on first use (SQL text that names [`Dialect::insert`]).
pub(crate) struct PerDialect<T: 'static> {
    build: fn(Dialect) -> T,
    built: [std::sync::OnceLock<T>; 2],
}

impl<T> PerDialect<T> {
    pub const fn new(build: fn(Dialect) -> T) -> Self {
        PerDialect {
            build,
            built: [std::sync::OnceLock::new(), std::sync::OnceLock::new()],
        }
    }

    pub fn get(&'static self, d: Dialect) -> &'static T {
        self.built[usize::from(d == Dialect::Postgres)].get_or_init(|| (self.build)(d))
    }
}

/// A connection (or open transaction) the shared SQL runs on.
pub(crate) trait Db {
    fn dialect(&self) -> Dialect;
    /// Runs a statement; returns the rows it changed.
    fn exec(&mut self, sql: &str, params: &[Val<'_>]) -> Result<u64>;
    /// Runs statements without parameters (transaction control, savepoints).
    fn batch(&mut self, sql: &str) -> Result<()>;
    /// Like `batch`, but may be held back and sent with the next statement (one round trip for
    /// both); an error then surfaces there.
    fn defer(&mut self, sql: &str) -> Result<()> {
        self.batch(sql)
    }
    /// Like `exec`, but may be held back and sent with the next statement; an error then surfaces
    /// there (or at the next statement after it), and fails whatever ran it. Statements still run
    /// in the order they were given.
    fn defer_exec(&mut self, sql: &str, params: &[Val<'_>]) -> Result<()> {
        self.exec(sql, params).map(|_| ())
    }
    /// Runs several statements (pipelined where the backend can).
    fn exec_all(&mut self, stmts: &[(&str, Vec<Val<'_>>)]) -> Result<()> {
        for (sql, params) in stmts {
            self.exec(sql, params)?;
        }
        Ok(())
    }
    /// The rowid of the last row this connection inserted (SQLite; PostgreSQL uses `RETURNING`).
    fn last_insert_id(&self) -> Result<i64> {
        Err(crate::LedgerError::Corrupt(
            "this backend has no last insert id".into(),
        ))
    }
    /// Calls `f` on each row until it returns `false`.
    fn each(
        &mut self,
        sql: &str,
        params: &[Val<'_>],
        f: &mut dyn FnMut(&dyn Row) -> Result<bool>,
    ) -> Result<()>;
}

impl dyn Db + '_ {
    /// The first row, if any.
    pub fn opt<T>(
        &mut self,
        sql: &str,
        params: &[Val<'_>],
        f: impl Fn(&dyn Row) -> Result<T>,
    ) -> Result<Option<T>> {
        let mut out = None;
        self.each(sql, params, &mut |r| {
            out = Some(f(r)?);
            Ok(false)
        })?;
        Ok(out)
    }

    /// Exactly one row (a missing row is corrupt data).
    pub fn one<T>(
        &mut self,
        sql: &str,
        params: &[Val<'_>],
        f: impl Fn(&dyn Row) -> Result<T>,
    ) -> Result<T> {
        self.opt(sql, params, f)?.ok_or_else(|| {
            crate::LedgerError::Corrupt(format!("no row returned by: {}", first_line(sql)))
        })
    }

    /// Runs `f` in one read-only transaction, so that its statements see the ledger as one
    /// moment did (PostgreSQL: repeatable read; SQLite: the WAL snapshot of its first read) even
    /// while a writer removes rows it has yet to read. The transaction ends with `f`.
    pub fn in_snapshot<T>(&mut self, f: impl FnOnce(&mut dyn Db) -> Result<T>) -> Result<T> {
        self.batch(match self.dialect() {
            Dialect::Sqlite => "BEGIN",
            Dialect::Postgres => "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY",
        })?;
        let out = f(self);
        let ended = self.batch("ROLLBACK");
        let out = out?;
        ended.map(|()| out)
    }

    /// Every row.
    pub fn all<T>(
        &mut self,
        sql: &str,
        params: &[Val<'_>],
        f: impl Fn(&dyn Row) -> Result<T>,
    ) -> Result<Vec<T>> {
        let mut out = Vec::new();
        self.each(sql, params, &mut |r| {
            out.push(f(r)?);
            Ok(true)
        })?;
        Ok(out)
    }
}

fn first_line(sql: &str) -> &str {
    sql.lines().next().unwrap_or(sql)
}
