//! A claim's first statement: the new key's entry inserted (with an id the batch handed out, or
//! the sequence's), or the key's entry found.

use std::sync::LazyLock;

use super::duplicates::{same_effect_elsewhere, Same};
use crate::db::{vals, Db, Dialect, PerDialect, Shifted, Val};
use crate::entry_row::{lookup, map_row, Row, AFTER_ROW, LOOKUP};
use crate::error::Result;
use crate::model::ResponseRecord;
use crate::postgres::locks::effect_locks;
use crate::prepared::Claim;
use crate::read;
use crate::writer::Ctx;

/// What a claim's first statement found: from the rows the batch read ahead when it read the
/// key's, else from [`insert_or_lookup`].
pub(super) fn first(ctx: &mut Ctx<'_>, c: &Claim) -> Result<First> {
    let req = &c.req;
    // A claim under the reject policy is `Touch::Any`: reading ahead ended before it ran.
    let ahead = ctx
        .ahead
        .as_deref_mut()
        .and_then(|a| a.claim(&req.route, &req.scope, &req.key));
    let id = match ahead {
        Some(Some((row, stored))) => return Ok(First::Existing(row, stored)),
        Some(None) => ctx
            .ahead
            .as_deref_mut()
            .and_then(crate::ahead::Ahead::new_id),
        None => None,
    };
    match id {
        Some(id) => insert_ahead(ctx, c, id).map(First::Inserted),
        None => insert_or_lookup(ctx.db, c),
    }
}

/// What a claim's first statement found.
pub(super) enum First {
    /// A new key: its entry, inserted.
    Inserted(i64),
    /// The key's entry, with its stored response.
    Existing(Row, Option<ResponseRecord>),
    /// Neither: a new key whose effect completed under another key within the reject window.
    Refused,
}

/// A claim's first statement: inserts the entry unless its key exists or (with the reject policy)
/// its effect completed under another key in the window; otherwise reads the key's entry. A new key
/// (the common case) costs one statement instead of three (read the key, check for a duplicate,
/// insert). On PostgreSQL the read rides in the same statement, so either answer is one round
/// trip; on SQLite it is a second statement, run only for a key that exists.
fn insert_or_lookup(db: &mut dyn Db, c: &Claim) -> Result<First> {
    let req = &c.req;
    let window = req.reject_duplicates_within_ms;
    let sql = INSERT_OR_LOOKUP.get(db.dialect());
    let mut params = new_entry(c);
    let sql = match window {
        Some(w) => {
            params.push(Val::Int(req.at - w));
            &sql[1 + Same::of(req.dup_fp.as_deref()) as usize]
        }
        None => &sql[0],
    };
    let first = match db.dialect() {
        Dialect::Sqlite => {
            if db.exec(sql, &params)? == 1 {
                return Ok(First::Inserted(db.last_insert_id()?));
            }
            None
        }
        Dialect::Postgres => {
            if window.is_some() {
                // The reject policy's check reads other entries: it waits for a completion of
                // the same effect that another batch is committing ([`effect_locks`]).
                effect_locks(db, &[&req.route], &[c.effect()])?;
            }
            db.one(sql, &params, |r| {
                if let Some(id) = r.opt_int(0)? {
                    return Ok(Some(First::Inserted(id)));
                }
                if r.opt_int(1)?.is_none() {
                    return Ok(None);
                }
                let r = Shifted(r, 1);
                Ok(Some(First::Existing(
                    map_row(&r)?,
                    read::response_cols(&r, AFTER_ROW)?,
                )))
            })?
        }
    };
    // Neither inserted nor found in the statement's snapshot: refused by the reject policy, or
    // (PostgreSQL) the key was inserted by a batch that committed while this insert waited for it.
    Ok(match first {
        Some(first) => first,
        None => match lookup(db, req)? {
            Some((row, stored)) => First::Existing(row, stored),
            None => First::Refused,
        },
    })
}

/// A new key's entry, when the batch read ahead that it has none: it takes `id`, taken with the
/// rows, and its insert is sent with the batch's next statement.
fn insert_ahead(ctx: &mut Ctx<'_>, c: &Claim, id: i64) -> Result<i64> {
    let mut params = new_entry(c);
    params.push(Val::Int(id));
    ctx.exec_later(&INSERT_WITH_ID, &params)?;
    Ok(id)
}

/// A new entry's values, ?1–?16 of [`INSERT_OR_LOOKUP`] and [`INSERT_WITH_ID`].
fn new_entry(c: &Claim) -> Vec<Val<'_>> {
    let req = &c.req;
    let request = &req.request;
    vals![
        &req.route,
        &req.scope,
        &req.key,
        &req.fingerprint,
        req.effect.as_str(),
        &req.owner,
        req.at + req.lease_ms,
        &request.method,
        &request.path,
        &c.headers,
        &request.body,
        req.at,
        req.at + req.ttl_ms,
        req.tool.as_deref(),
        c.subjects.as_deref(),
        req.dup_fp.as_deref(),
    ]
    .to_vec()
}

/// [`insert_ahead`]'s statement (PostgreSQL): [`new_entry`]'s values ?1–?16, and the id ?17.
static INSERT_WITH_ID: LazyLock<String> = LazyLock::new(|| {
    format!(
        "INSERT INTO entries ({NEW_ENTRY_COLS}, id) VALUES ({}, ?17)",
        new_entry_marks("", "", "")
    )
});

/// The columns a new entry is inserted with; [`new_entry_marks`] gives their values.
const NEW_ENTRY_COLS: &str = "route, scope, key, fingerprint, effect, state, attempts, \
     lease_owner, lease_expires_at, req_method, req_path, req_headers, req_body, created_at, \
     updated_at, expires_at, tool, subjects, dup_fp";

/// [`NEW_ENTRY_COLS`]' values from [`new_entry`]'s parameters, each text, integer and bytes
/// parameter followed by `text`, `int` and `bytes` (a cast, where the statement needs one).
fn new_entry_marks(text: &str, int: &str, bytes: &str) -> String {
    format!(
        "?1{text}, ?2{text}, ?3{text}, ?4{text}, ?5{text}, 'pending', 1, ?6{text}, ?7{int}, \
         ?8{text}, ?9{text}, ?10{text}, ?11{bytes}, ?12{int}, ?12{int}, ?13{int}, ?14{text}, \
         ?15{text}, ?16{text}"
    )
}

/// [`insert_or_lookup`]'s statement, without the reject policy's duplicate check, then with it
/// for each [`Same`]. ?1–?16: the new entry's route, scope, key, fingerprint, effect, lease owner,
/// lease expiry, request method, path, headers and body, claim time, expiry, tool, subjects and
/// duplicate values; then the reject window's start (with the check).
pub(crate) static INSERT_OR_LOOKUP: PerDialect<[String; 4]> = PerDialect::new(|d| {
    let build = |guard: &str| {
        // PostgreSQL types a SELECT list's parameters on their own: they are cast to the columns'.
        let (text, int, bytes, id_col, id) = match d {
            Dialect::Sqlite => ("", "", "", "", String::new()),
            Dialect::Postgres => (
                "::text",
                "::bigint",
                "::bytea",
                ", id",
                ", nextval(pg_get_serial_sequence('entries', 'id')::regclass)".to_owned(),
            ),
        };
        let insert = format!(
            "{} INTO entries ({NEW_ENTRY_COLS}{id_col}) SELECT {}{id} WHERE {guard} \
             ON CONFLICT (route, scope, key) DO NOTHING{}",
            d.insert(),
            new_entry_marks(text, int, bytes),
            // SQLite buffers a RETURNING clause's rows in an ephemeral table it opens and closes
            // for each run; the new rowid is the connection's last insert instead.
            match d {
                Dialect::Sqlite => "",
                Dialect::Postgres => " RETURNING id",
            }
        );
        match d {
            Dialect::Sqlite => insert,
            // The key's entry as it was before this statement (a data-modifying WITH and the
            // query around it see the same snapshot): the new id, or the existing entry.
            Dialect::Postgres => format!(
                "WITH ins AS ({insert}), old AS ({} FOR UPDATE) SELECT (SELECT id FROM ins), \
                 old.* FROM (SELECT 1) AS one LEFT JOIN old ON true",
                *LOOKUP
            ),
        }
    };
    let guard = |same, what| {
        build(&format!(
            "NOT EXISTS (SELECT 1 FROM entries WHERE {})",
            same_effect_elsewhere(same, what, "?17", "?3")
        ))
    };
    [
        build("true"),
        guard(Same::Fingerprint, "?4"),
        guard(Same::Values, "?16"),
        guard(Same::ValuesAnyScope, "?16"),
    ]
});
