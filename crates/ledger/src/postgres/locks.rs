//! The PostgreSQL advisory locks the instances sharing a ledger take: every key in one place, so
//! that no two uses share one by accident.

use std::sync::LazyLock;

use crate::db::{Db, Val};
use crate::error::Result;

/// The advisory lock every write batch holds shared, and a copy alone (any constant; "idemgate"
/// in ASCII, truncated).
pub(crate) const WRITE_LOCK: i64 = 0x6964_656d_6761_7465;
/// The advisory lock a step of the sequencer holds: one at a time numbers and chains the intake.
pub(crate) const SEQ_LOCK: i64 = 0x6964_656d_7365_7173;
/// The advisory lock a step of the tree's integrator holds (not the write lock: see
/// `write::tree::extend_tree_alone`).
pub(crate) const TREE_LOCK: i64 = 0x6964_656d_7472_6565;
/// The advisory lock migrations hold.
pub(super) const MIGRATE_LOCK: i64 = 0x6964_656d_6d69_6772;

/// Begins a transaction holding the advisory lock `lock` until it ends.
pub(crate) fn begin_locked(lock: i64) -> String {
    format!("BEGIN; SELECT pg_advisory_xact_lock({lock})")
}

/// Begins a write batch's transaction: [`WRITE_LOCK`] shared, so batches run side by side and
/// wait only for one that holds it alone (a copy taking a consistent cut).
pub(super) fn begin_batch() -> String {
    format!("BEGIN; SELECT pg_advisory_xact_lock_shared({WRITE_LOCK})")
}

/// Takes (PostgreSQL) the locks of effects — each a route in `routes` and the fingerprint or
/// duplicate values at the same place in `effects` — until the batch ends, with its statement
/// that follows. A completion takes its effect's before it commits, a claim under the reject
/// policy before it looks for a completion of the same effect: so the claim sees every such
/// completion that committed, or comes before it.
pub(crate) fn effect_locks(db: &mut dyn Db, routes: &[&str], effects: &[&str]) -> Result<()> {
    db.defer_exec(&EFFECT_LOCKS, &[Val::Texts(routes), Val::Texts(effects)])
}

/// The effect locks' key space: two int4 keys, apart from the ledger's fixed bigint locks.
pub(crate) const EFFECT_LOCK_SPACE: i32 = 26_980;

/// The SQL of an effect lock's key, from the SQL of its route and of its effect.
pub(crate) fn effect_key(route: &str, effect: &str) -> String {
    format!("hashtext({route} || chr(10) || {effect})")
}

/// Takes the locks of the effects (routes ?1, fingerprints or duplicate values ?2) in the order
/// of their keys, so two batches never wait for each other's in a cycle.
static EFFECT_LOCKS: LazyLock<String> = LazyLock::new(|| {
    format!(
        "SELECT pg_advisory_xact_lock({EFFECT_LOCK_SPACE}, h) FROM (SELECT DISTINCT {} AS h \
         FROM unnest(?1::text[], ?2::text[]) AS t(r, e) ORDER BY h) AS l",
        effect_key("r", "e")
    )
});
