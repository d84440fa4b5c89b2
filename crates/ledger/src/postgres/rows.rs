//! A run of one single-row statement deferred again and again in a batch (its claims' inserts,
//! its completions' updates), sent as one statement over arrays, a row per element. PostgreSQL
//! then starts one statement and answers one `Sync` for the run instead of one per row, which is
//! much of what a small row's insert or update costs it.

use std::collections::HashSet;

use bytes::BytesMut;
use tokio_postgres::types::{IsNull, ToSql, Type};

use crate::db::OwnedVal;

/// A statement's form over arrays ([`array_form`]).
#[derive(Debug, PartialEq, Eq)]
pub(super) struct ArrayForm {
    pub sql: String,
    /// An update of the row whose id is `$1`: a run merges only if its ids differ (one statement
    /// updates a row once, where several would each update it).
    pub by_id: bool,
}

/// `sql` (with `$N` placeholders of `types`) rewritten to take each parameter as an array, if it
/// is `INSERT INTO t (cols) VALUES (exprs)` or `UPDATE t SET sets WHERE id = $1` with nothing
/// after, and every parameter an integer, a text or bytes.
pub(super) fn array_form(sql: &str, types: &[Type]) -> Option<ArrayForm> {
    if types.is_empty() {
        return None;
    }
    let mut arrays = Vec::with_capacity(types.len());
    for (i, ty) in types.iter().enumerate() {
        let name = match *ty {
            Type::INT8 => "bigint",
            Type::TEXT => "text",
            Type::BYTEA => "bytea",
            _ => return None,
        };
        arrays.push(format!("${}::{name}[]", i + 1));
    }
    let from = format!(
        "FROM unnest({}) AS u({})",
        arrays.join(", "),
        (1..=types.len())
            .map(|i| format!("p{i}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    if let Some(rest) = sql.strip_prefix("INSERT INTO ") {
        let (head, values) = rest.split_once(" VALUES (")?;
        let exprs = values.strip_suffix(')')?;
        if !balanced(exprs) || head.contains(" SELECT ") {
            return None;
        }
        return Some(ArrayForm {
            sql: format!("INSERT INTO {head} SELECT {} {from}", columns(exprs)),
            by_id: false,
        });
    }
    let rest = sql.strip_prefix("UPDATE ")?;
    let (head, sets) = rest.split_once(" SET ")?;
    let sets = sets.strip_suffix(" WHERE id = $1")?;
    if head.contains(' ') || sets.contains(" WHERE ") || sets.contains(" FROM ") {
        return None;
    }
    Some(ArrayForm {
        sql: format!(
            "UPDATE {head} SET {} {from} WHERE {head}.id = u.p1",
            columns(sets)
        ),
        by_id: true,
    })
}

/// Whether `s`'s parentheses outside its string literals pair up, none closing before it opens:
/// the `VALUES` list is one row's, not several.
fn balanced(s: &str) -> bool {
    let mut depth = 0usize;
    let mut quoted = false;
    for c in s.chars() {
        match c {
            '\'' => quoted = !quoted,
            '(' if !quoted => depth += 1,
            ')' if !quoted => match depth.checked_sub(1) {
                Some(d) => depth = d,
                None => return false,
            },
            _ => {}
        }
    }
    depth == 0 && !quoted
}

/// `s` with each `$N` outside its string literals read from the run's row, `u.pN`.
fn columns(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 16);
    let mut chars = s.chars().peekable();
    let mut quoted = false;
    while let Some(c) = chars.next() {
        if c == '\'' {
            quoted = !quoted;
        }
        if !quoted && c == '$' && chars.peek().is_some_and(char::is_ascii_digit) {
            out.push_str("u.p");
        } else {
            out.push(c);
        }
    }
    out
}

/// One parameter of a run's rows, as the array [`array_form`]'s statement takes.
#[derive(Debug)]
pub(super) enum Column {
    Ints(Vec<Option<i64>>),
    Texts(Vec<Option<String>>),
    Blobs(Vec<Option<Vec<u8>>>),
}

/// The run's `rows` (each the statement's parameters, of `types`) as one array per parameter, or
/// the rows back if they cannot be merged: a value not of its parameter's type, or (`by_id`) an
/// id twice.
pub(super) fn columns_of(
    rows: Vec<Vec<OwnedVal>>,
    types: &[Type],
    by_id: bool,
) -> std::result::Result<Vec<Column>, Vec<Vec<OwnedVal>>> {
    let fits = rows.iter().all(|row| {
        row.len() == types.len()
            && row.iter().zip(types).all(|(v, ty)| {
                matches!(
                    (v, ty),
                    (OwnedVal::Null, _)
                        | (OwnedVal::Int(_), &Type::INT8)
                        | (OwnedVal::Text(_), &Type::TEXT)
                        | (OwnedVal::Blob(_), &Type::BYTEA)
                )
            })
    });
    let distinct = || {
        let mut seen = HashSet::with_capacity(rows.len());
        rows.iter()
            .all(|row| matches!(row.first(), Some(OwnedVal::Int(id)) if seen.insert(*id)))
    };
    if !fits || (by_id && !distinct()) {
        return Err(rows);
    }
    let mut cols: Vec<Column> = types
        .iter()
        .map(|ty| match *ty {
            Type::INT8 => Column::Ints(Vec::with_capacity(rows.len())),
            Type::TEXT => Column::Texts(Vec::with_capacity(rows.len())),
            _ => Column::Blobs(Vec::with_capacity(rows.len())),
        })
        .collect();
    for row in rows {
        for (v, col) in row.into_iter().zip(&mut cols) {
            match (col, v) {
                (Column::Ints(c), OwnedVal::Int(i)) => c.push(Some(i)),
                (Column::Texts(c), OwnedVal::Text(s)) => c.push(Some(s)),
                (Column::Blobs(c), OwnedVal::Blob(b)) => c.push(Some(b)),
                (Column::Ints(c), _) => c.push(None),
                (Column::Texts(c), _) => c.push(None),
                (Column::Blobs(c), _) => c.push(None),
            }
        }
    }
    Ok(cols)
}

impl ToSql for Column {
    fn to_sql(
        &self,
        ty: &Type,
        out: &mut BytesMut,
    ) -> std::result::Result<IsNull, Box<dyn std::error::Error + Sync + Send>> {
        match self {
            Column::Ints(v) => v.to_sql(ty, out),
            Column::Texts(v) => v.to_sql(ty, out),
            Column::Blobs(v) => v.to_sql(ty, out),
        }
    }

    fn accepts(_: &Type) -> bool {
        true
    }

    tokio_postgres::types::to_sql_checked!();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_insert_of_one_row_reads_its_values_from_arrays() {
        let sql =
            "INSERT INTO entries (route, state, n, body, id) VALUES ($1, 'pending', 1, $2, $3)";
        let form = array_form(sql, &[Type::TEXT, Type::BYTEA, Type::INT8]).unwrap();
        assert_eq!(
            form,
            ArrayForm {
                sql: "INSERT INTO entries (route, state, n, body, id) SELECT u.p1, 'pending', 1, \
                      u.p2, u.p3 FROM unnest($1::text[], $2::bytea[], $3::bigint[]) AS u(p1, p2, p3)"
                    .into(),
                by_id: false,
            }
        );
    }

    #[test]
    fn string_literals_are_left_as_they_are() {
        let sql = "INSERT INTO t (a, b, c) VALUES ('$1 (', $1, 'it''s $2')";
        let form = array_form(sql, &[Type::TEXT]).unwrap();
        assert_eq!(
            form.sql,
            "INSERT INTO t (a, b, c) SELECT '$1 (', u.p1, 'it''s $2' FROM unnest($1::text[]) AS u(p1)"
        );
        let sql = "UPDATE t SET a = '$1', b = $2 WHERE id = $1";
        let form = array_form(sql, &[Type::INT8, Type::TEXT]).unwrap();
        assert!(
            form.sql.starts_with("UPDATE t SET a = '$1', b = u.p2 FROM"),
            "{}",
            form.sql
        );
    }

    #[test]
    fn an_update_by_id_reads_its_values_from_arrays() {
        let sql = "UPDATE entries SET state = 'completed', a = $2, b = $2 WHERE id = $1";
        let form = array_form(sql, &[Type::INT8, Type::TEXT]).unwrap();
        assert_eq!(
            form,
            ArrayForm {
                sql: "UPDATE entries SET state = 'completed', a = u.p2, b = u.p2 FROM \
                      unnest($1::bigint[], $2::text[]) AS u(p1, p2) WHERE entries.id = u.p1"
                    .into(),
                by_id: true,
            }
        );
    }

    #[test]
    fn other_shapes_are_sent_a_row_at_a_time() {
        let t = [Type::TEXT, Type::TEXT];
        for sql in [
            // Several rows already, a clause after the values, a guard besides the id.
            "INSERT INTO t (a) VALUES ($1), ($2)",
            "INSERT INTO t (a, b) VALUES ($1, $2) ON CONFLICT (a) DO NOTHING",
            "INSERT INTO t (a, b) VALUES ($1, $2) RETURNING a",
            "INSERT INTO t (a, b) SELECT $1, $2 WHERE true",
            "UPDATE t SET a = $2 WHERE id = $1 AND b = 'x'",
            "UPDATE t SET a = $2 WHERE id = $1 RETURNING a",
            "SELECT $1, $2",
        ] {
            assert_eq!(array_form(sql, &t), None, "{sql}");
        }
        let sql = "INSERT INTO t (a) VALUES ($1)";
        assert_eq!(array_form(sql, &[Type::INT4]), None, "an int4 parameter");
    }

    #[test]
    fn rows_merge_only_whole_and_an_update_s_ids_once_each() {
        let types = [Type::INT8, Type::TEXT, Type::BYTEA];
        let row = |id, s: Option<&str>| {
            vec![
                OwnedVal::Int(id),
                s.map_or(OwnedVal::Null, |s| OwnedVal::Text(s.into())),
                OwnedVal::Blob(vec![1]),
            ]
        };
        let cols = columns_of(vec![row(1, Some("a")), row(2, None)], &types, true).unwrap();
        assert!(matches!(&cols[0], Column::Ints(v) if *v == [Some(1), Some(2)]));
        assert!(matches!(&cols[1], Column::Texts(v) if *v == [Some("a".into()), None]));
        assert!(matches!(&cols[2], Column::Blobs(v) if *v == [Some(vec![1]), Some(vec![1])]));
        let twice = vec![row(1, Some("a")), row(1, Some("b"))];
        assert_eq!(
            columns_of(twice.clone(), &types, true).unwrap_err().len(),
            2
        );
        assert!(columns_of(twice, &types, false).is_ok());
        let wrong = vec![
            row(1, None),
            vec![OwnedVal::Text("1".into()), OwnedVal::Null, OwnedVal::Null],
        ];
        assert!(columns_of(wrong, &types, false).is_err());
    }
}
