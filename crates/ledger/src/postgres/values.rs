//! How the ledger's values and rows cross to PostgreSQL: its parameters, its placeholders, its
//! rows read by position.

use bytes::BytesMut;
use tokio_postgres::types::{IsNull, ToSql, Type};

use crate::db::{OwnedVal, Row, Val};
use crate::error::Result;

/// Rewrites SQLite's `?N` placeholders to PostgreSQL's `$N`.
pub(super) fn placeholders(sql: &str) -> String {
    let mut out = String::with_capacity(sql.len());
    let mut chars = sql.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '?' && chars.peek().is_some_and(char::is_ascii_digit) {
            out.push('$');
        } else {
            out.push(c);
        }
    }
    out
}

impl ToSql for Val<'_> {
    fn to_sql(
        &self,
        ty: &Type,
        out: &mut BytesMut,
    ) -> std::result::Result<IsNull, Box<dyn std::error::Error + Sync + Send>> {
        match *self {
            Val::Null => Ok(IsNull::Yes),
            Val::Int(i) if *ty == Type::INT4 => i32::try_from(i)?.to_sql(ty, out),
            Val::Int(i) => i.to_sql(ty, out),
            Val::Text(s) => s.to_sql(ty, out),
            Val::Blob(b) => b.to_sql(ty, out),
            Val::Texts(v) => v.to_sql(ty, out),
            Val::Ints(v) => v.to_sql(ty, out),
        }
    }

    fn accepts(_: &Type) -> bool {
        true
    }

    tokio_postgres::types::to_sql_checked!();
}

impl ToSql for OwnedVal {
    fn to_sql(
        &self,
        ty: &Type,
        out: &mut BytesMut,
    ) -> std::result::Result<IsNull, Box<dyn std::error::Error + Sync + Send>> {
        // Encoded as the `Val` it owns, so the encoding is written once; owned texts cannot be lent
        // as a `Val`'s `&[&str]` without a second vector.
        let val = match self {
            OwnedVal::Texts(v) => return v.to_sql(ty, out),
            OwnedVal::Null => Val::Null,
            OwnedVal::Int(i) => Val::Int(*i),
            OwnedVal::Text(s) => Val::Text(s),
            OwnedVal::Blob(b) => Val::Blob(b),
            OwnedVal::Ints(v) => Val::Ints(v),
        };
        val.to_sql(ty, out)
    }

    fn accepts(_: &Type) -> bool {
        true
    }

    tokio_postgres::types::to_sql_checked!();
}

impl Row for tokio_postgres::Row {
    fn opt_int(&self, i: usize) -> Result<Option<i64>> {
        Ok(self.try_get(i)?)
    }

    fn opt_text(&self, i: usize) -> Result<Option<String>> {
        Ok(self.try_get(i)?)
    }

    fn opt_blob(&self, i: usize) -> Result<Option<Vec<u8>>> {
        Ok(self.try_get(i)?)
    }
}

pub(super) fn params<'a>(params: &'a [Val<'_>]) -> Vec<&'a (dyn ToSql + Sync)> {
    params.iter().map(|p| p as _).collect()
}
