//! The ledger's behavioural suite: every transition of the entry state machine, with the log
//! checked after — run on both backends, a real SQLite file and a real PostgreSQL database (the
//! test cluster of `tests/pg/cluster.sh`, named by IDEMGATE_TEST_PG).

#![allow(
    clippy::too_many_lines,
    reason = "a test is one scenario told top to bottom, its steps checked in order"
)]

use std::sync::Arc;

use idemgate_ledger::testing::{fresh_postgres, postgres_exec, postgres_i64};
use idemgate_ledger::*;

/// `suite!(name, …)`: each named test, once per backend (`name::sqlite`, `name::postgres`).
macro_rules! suite {
    ($($name:ident),* $(,)?) => {$(
        mod $name {
            #[test]
            fn sqlite() {
                super::$name(super::Backend::Sqlite);
            }
            #[test]
            fn postgres() {
                super::$name(super::Backend::Postgres);
            }
        }
    )*};
}

const T0: Millis = 1_800_000_000_000;
const LEASE: i64 = 30_000;
const TTL: i64 = 3_600_000;

#[derive(Debug, Clone, Copy)]
enum Backend {
    Sqlite,
    Postgres,
}

struct Fx {
    _dir: tempfile::TempDir,
    /// A SQLite path or a PostgreSQL URL.
    location: String,
    l: Arc<Ledger>,
}

impl Backend {
    /// A location for a new ledger; `None` when PostgreSQL tests are skipped.
    fn fresh(self, dir: &tempfile::TempDir, tag: &str) -> Option<String> {
        match self {
            Backend::Sqlite => Some(dir.path().join(format!("{tag}.db")).display().to_string()),
            Backend::Postgres => fresh_postgres(tag),
        }
    }

    fn open(self, location: &str, create: bool, hasher: ChainHasher) -> Result<Arc<Ledger>> {
        let opts = OpenOptions { create, hasher };
        match self {
            Backend::Sqlite => Ledger::sqlite(location, opts),
            Backend::Postgres => Ledger::postgres(location, opts),
        }
    }

    /// Runs `sql` on a raw connection of its own, outside the ledger.
    fn raw(self, location: &str, sql: &str) -> std::result::Result<(), String> {
        match self {
            Backend::Sqlite => rusqlite::Connection::open(location)
                .and_then(|c| c.execute_batch(sql))
                .map_err(|e| e.to_string()),
            Backend::Postgres => postgres_exec(location, sql),
        }
    }
}

fn try_fx(b: Backend) -> Option<Fx> {
    let dir = tempfile::tempdir().expect("tempdir");
    let location = b.fresh(&dir, "ledger")?;
    let l = b
        .open(&location, true, ChainHasher::unkeyed())
        .expect("open");
    Some(Fx {
        _dir: dir,
        location,
        l,
    })
}

/// The fixture; with IDEMGATE_TEST_PG=skip a PostgreSQL test returns early (says so on stderr).
macro_rules! fx {
    ($b:expr) => {
        match try_fx($b) {
            Some(f) => f,
            None => {
                eprintln!("skipped: IDEMGATE_TEST_PG=skip");
                return;
            }
        }
    };
}

fn req(key: &str, body: &str, at: Millis) -> ClaimRequest {
    ClaimRequest {
        route: "charges".into(),
        scope: "agent-1".into(),
        key: key.into(),
        fingerprint: canon::fingerprint("POST", "charges", &[], body.as_bytes()),
        legacy_fingerprint: None,
        effect: Effect::Write,
        request: RequestRecord {
            method: "POST".into(),
            path: "/v1/charges".into(),
            headers: vec![
                ("content-type".into(), "application/json".into()),
                ("authorization".into(), "Bearer sk_live_SECRET".into()),
            ],
            body: body.as_bytes().to_vec(),
        },
        owner: "proxy-a".into(),
        lease_ms: LEASE,
        ttl_ms: TTL,
        reject_duplicates_within_ms: None,
        tool: None,
        subjects: Vec::new(),
        dup_fp: None,
        approval: None,
        at,
    }
}

fn resp(status: u16, body: &str) -> ResponseRecord {
    ResponseRecord {
        status,
        headers: vec![("content-type".into(), "application/json".into())],
        body: body.as_bytes().to_vec(),
    }
}

/// Claims of keys `k0`.. `k{n-1}`, a second apart from `T0`.
fn with_claims(l: &Ledger, n: i64) {
    with_claims_from(l, 0, n);
}

/// Claims of keys `k{from}`.. , `n` of them, key `ki` at `T0 + i` seconds.
fn with_claims_from(l: &Ledger, from: i64, n: i64) {
    for i in from..from + n {
        claimed(
            l.claim(req(&format!("k{i}"), "{}", T0 + i * 1000))
                .wait()
                .expect("claim"),
        );
    }
}

/// Claims a new `key` for `body` at `at`: the new entry's id.
fn claim_new(l: &Ledger, key: &str, body: &str, at: Millis) -> i64 {
    claimed(l.claim(req(key, body, at)).wait().expect("claim"))
}

/// An operator's purge of `ids` at `at`.
fn purge_of(ids: Vec<i64>, at: Millis) -> PurgeRequest {
    PurgeRequest {
        ids,
        expired_by: None,
        actor: actor(),
        at,
    }
}

fn claimed(o: ClaimOutcome) -> i64 {
    match o {
        ClaimOutcome::Claimed { entry_id, .. } => entry_id,
        other => panic!("expected Claimed, got {other:?}"),
    }
}

fn complete(l: &Ledger, id: i64, at: Millis, body: &str) -> CompleteOutcome {
    l.complete(CompleteRequest {
        entry_id: id,
        owner: "proxy-a".into(),
        response: resp(201, body),
        ttl_ms: TTL,
        duplicate_window_ms: Some(600_000),
        at,
    })
    .wait()
    .expect("complete")
}

fn kinds(l: &Ledger, id: i64) -> Vec<String> {
    let mut evs = l
        .events(
            &EventFilter {
                entry_id: Some(id),
                ..Default::default()
            },
            Page::default(),
        )
        .expect("events");
    evs.reverse();
    evs.into_iter().map(|e| e.kind).collect()
}

/// Every event of the log, newest first.
fn all_events(l: &Ledger) -> Vec<Event> {
    l.events(&EventFilter::default(), Page::newest(None, 100_000))
        .expect("events")
}

/// The sequence numbers `filter` finds, newest first, walked `limit` a page with the keyset cursor
/// as the console walks them.
fn walk_events(l: &Ledger, filter: &EventFilter, limit: usize) -> Vec<i64> {
    let mut got = Vec::new();
    let mut before = None;
    loop {
        let page = l
            .events(filter, Page::newest(before, limit))
            .expect("events");
        assert!(page.len() <= limit);
        got.extend(page.iter().map(|e| e.seq));
        match page.last() {
            Some(e) if page.len() == limit => before = Some(e.seq),
            _ => return got,
        }
    }
}

fn actor() -> Actor {
    Actor {
        operator: "alice".into(),
        reason: "checked upstream".into(),
    }
}

/// The chain verifies, and the overview's entry counts (kept per batch) match the entries.
fn verify_ok(l: &Ledger) {
    let r = l.verify(&mut |_| true).expect("verify");
    assert!(r.ok, "chain must verify: {r:?}");
    let stats = l.stats(T0, 0).expect("stats");
    for (state, n) in stats.entries_by_state {
        let listed = l
            .entries(
                &EntryFilter {
                    state: Some(state),
                    ..Default::default()
                },
                Page::newest(None, 100_000),
                T0,
            )
            .expect("entries")
            .len();
        assert_eq!(n, listed as i64, "entry count of {state:?}");
    }
}

/// A claim under a route at `path` (beyond the route's own), as the proxy fingerprints it since
/// the target counts: the fingerprint with the target, and the one without as the legacy one.
fn req_at(key: &str, path: &str, at: Millis) -> ClaimRequest {
    let r = req(key, "{}", at);
    ClaimRequest {
        fingerprint: canon::with_target(&r.fingerprint, path, None),
        legacy_fingerprint: Some(r.fingerprint.clone()),
        request: RequestRecord {
            path: path.into(),
            ..r.request.clone()
        },
        ..r
    }
}

/// Polls `check` every 20 ms until it returns `Ok`, for at most `secs` seconds (a bound on a
/// hang, not a timing), then fails with what the last poll said of the state it waited on.
fn wait_for<T>(secs: u64, mut check: impl FnMut() -> Result<T, String>) -> T {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(secs);
    loop {
        match check() {
            Ok(t) => return t,
            Err(why) => assert!(std::time::Instant::now() < deadline, "{why}"),
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

// After the macros above, which the modules use.
mod approvals;
mod archive;
mod claims;
mod deadlock;
mod ids;
mod lifecycle;
mod reads;
mod storage;
mod tree;
