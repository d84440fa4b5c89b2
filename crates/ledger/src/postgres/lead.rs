//! The books' lead on PostgreSQL ([`crate::lead`]): a session advisory lock, held by a connection
//! of its own for as long as its instance leads, and the `leader` row that names that instance.

use super::{PgConn, Target};
use crate::db::{Db, Val};
use crate::error::Result;
use crate::lead::{Lead, Leader};
use crate::model::Millis;

/// The lock the leader's session holds ("idembook" in ASCII).
const BOOKS_LOCK: i64 = 0x6964_656d_626f_6f6b;

/// Settings of the leader's session. A leader that froze, or whose host vanished, would keep the
/// lock as long as PostgreSQL keeps its session: the server ends a session idle for 15 s (the
/// leader looks every few seconds, [`Lead::holds`]), and keepalives find a peer that is gone. A
/// setting the server does not know (before PostgreSQL 14) is skipped.
const SESSION: [&str; 4] = [
    "SET idle_session_timeout = '15s'",
    "SET tcp_keepalives_idle = 5",
    "SET tcp_keepalives_interval = 2",
    "SET tcp_keepalives_count = 3",
];

/// Takes the lead for `instance` unless another session holds it.
pub(super) fn try_lead(target: &Target, instance: &str, at: Millis) -> Result<Option<PgLead>> {
    let mut conn = PgConn::connect(target)?;
    for s in SESSION {
        if let Err(e) = conn.batch(s) {
            tracing::debug!(setting = s, error = %e, "leader session setting skipped");
        }
    }
    let db: &mut dyn Db = &mut conn;
    let got = db.one(
        &format!(
            "SELECT CAST(CASE WHEN pg_try_advisory_lock({BOOKS_LOCK}) THEN 1 ELSE 0 END AS BIGINT)"
        ),
        &[],
        |r| r.int(0),
    )? == 1;
    if !got {
        super::drop_off_runtime(vec![conn]);
        return Ok(None);
    }
    db.exec(
        "INSERT INTO leader (id, instance, pid, since) VALUES (1, ?1, pg_backend_pid(), ?2) \
         ON CONFLICT (id) DO UPDATE SET instance = EXCLUDED.instance, pid = EXCLUDED.pid, \
         since = EXCLUDED.since",
        &[Val::Text(instance), Val::Int(at)],
    )?;
    Ok(Some(PgLead { conn: Some(conn) }))
}

/// The instance whose session holds the lock now, from the row it wrote when it took it; `None`
/// between a leader's end and the next one's start.
pub(super) fn leader(db: &mut dyn Db) -> Result<Option<Leader>> {
    // A bigint advisory key shows in pg_locks as its high half (classid) and low half (objid).
    let (high, low) = (BOOKS_LOCK >> 32, BOOKS_LOCK & 0xffff_ffff);
    db.opt(
        &format!(
            "SELECT l.instance, l.since FROM leader l WHERE EXISTS (SELECT 1 FROM pg_locks k \
             WHERE k.locktype = 'advisory' AND k.granted AND k.pid = l.pid \
             AND k.database = (SELECT oid FROM pg_database WHERE datname = current_database()) \
             AND k.classid = {high} AND k.objid = {low} AND k.objsubid = 1)"
        ),
        &[],
        |r| {
            Ok(Leader {
                instance: r.text(0)?,
                since: r.int(1)?,
            })
        },
    )
}

/// The held lead: the session holding the lock.
pub(crate) struct PgLead {
    conn: Option<PgConn>,
}

impl Lead for PgLead {
    /// A live session still holds its session lock: nothing but its end or an unlock frees one.
    fn holds(&mut self) -> bool {
        if self.conn.as_mut().is_some_and(PgConn::is_valid) {
            return true;
        }
        if let Some(c) = self.conn.take() {
            super::drop_off_runtime(vec![c]);
        }
        false
    }
}

impl Drop for PgLead {
    fn drop(&mut self) {
        if let Some(c) = self.conn.take() {
            super::drop_off_runtime(vec![c]);
        }
    }
}
