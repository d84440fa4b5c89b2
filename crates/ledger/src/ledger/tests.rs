//! The ledger's own tests: the writer's panics, the queries' plans, the search index and the
//! replay cache.

use super::*;
use crate::db::vals;
use crate::model::{Effect, EventKind, RequestRecord};
use crate::replays::CATCH_UP_MAX;
use crate::store::Actor;
use crate::testing::charge;

/// A SQLite ledger with `n` claims (one event each), keys `key-00000-x`….
fn ledger_with(dir: &tempfile::TempDir, n: usize) -> Arc<Ledger> {
    let l = Ledger::sqlite(
        dir.path().join("l.db"),
        OpenOptions {
            create: true,
            hasher: ChainHasher::unkeyed(),
        },
    )
    .expect("open");
    claim_keys(&l, 0..n, 1);
    l
}

/// Claims `key-{i:05}-x` for each `i` of `keys`, at `at`: one event each.
fn claim_keys(l: &Ledger, keys: std::ops::Range<usize>, at: Millis) {
    let tickets: Vec<_> = keys
        .map(|i| {
            l.claim(ClaimRequest {
                route: "r".into(),
                scope: "s".into(),
                key: format!("key-{i:05}-x"),
                fingerprint: format!("f{i}"),
                legacy_fingerprint: None,
                effect: Effect::Write,
                request: RequestRecord {
                    method: "POST".into(),
                    path: "/".into(),
                    headers: vec![],
                    body: vec![],
                },
                owner: "o".into(),
                lease_ms: 1_000,
                ttl_ms: 1_000,
                reject_duplicates_within_ms: None,
                tool: None,
                subjects: Vec::new(),
                dup_fp: None,
                approval: None,
                at,
            })
        })
        .collect();
    for t in tickets {
        t.wait().expect("claim");
    }
}

/// SQLite's plan of `sql` (one parameter, `?1`), its steps joined by "; ".
fn plan(l: &Ledger, sql: &str, arg: &[crate::db::Val<'_>]) -> String {
    let sql = format!("EXPLAIN QUERY PLAN {sql}");
    l.read(|db| db.all(&sql, arg, |r| r.text(3)))
        .expect("plan")
        .join("; ")
}

/// A write that panics (a bug) fails alone: what it wrote is rolled back, the writes queued
/// with it stand, and the writer takes writes after it. Before, the panic ended the writer
/// thread, and every later write failed as `ledger-closed` until the process restarted.
#[test]
fn a_write_that_panics_fails_alone_and_the_writer_goes_on() {
    let dir = tempfile::tempdir().expect("tempdir");
    let l = ledger_with(&dir, 2);
    let count = |l: &Ledger, sql: &str| l.read(|db| db.one(sql, &[], |r| r.int(0))).expect("count");
    let entries = "SELECT count(*) FROM entries";
    let before = count(&l, entries);
    let mut tickets = vec![];
    let panicking = l.submit(|ctx| -> Result<()> {
        ctx.db
            .exec("UPDATE entries SET key = key || '-changed'", vals![])?;
        panic!("a bug in a write");
    });
    for i in 0..8 {
        tickets.push(l.claim(charge(&format!("after-{i}"), 2)));
    }
    let err = panicking.wait().expect_err("the panicking job fails");
    assert_eq!(err.code(), "internal", "{err}");
    assert!(err.to_string().contains("a bug in a write"), "{err}");
    for t in tickets {
        t.wait().expect("a claim queued with it");
    }
    l.claim(charge("later", 3))
        .wait()
        .expect("a claim after it");
    assert_eq!(count(&l, entries), before + 9);
    let changed = "SELECT count(*) FROM entries WHERE key LIKE '%-changed'";
    assert_eq!(count(&l, changed), 0, "the panicking job's write was kept");
    let health = l.writer_health();
    assert!(health.running);
    assert_eq!(
        health.last_failure_at, None,
        "a failed job is not a failed commit"
    );
    l.close();
    assert!(!l.writer_health().running);
}

/// On SQLite the batch's events take their seq from SQLite's next rowid; the writer checks
/// that it is the seq each event was hashed with. A row that lands in the log behind the
/// writer's back (here, a job's own insert) fails the batch, which then writes nothing.
#[test]
fn events_stored_out_of_place_fail_their_batch() {
    let dir = tempfile::tempdir().expect("tempdir");
    let l = ledger_with(&dir, 3);
    let head = |l: &Ledger| l.read(|db| read::head(db)).expect("head").expect("a head");
    let before = head(&l);
    let stray = l.submit(|ctx| {
        ctx.db.exec(
            "INSERT INTO events (seq, at, kind, route, scope, key, detail, prev_hash, hash) \
             VALUES (?1, 1, 'claim', 'r', 's', 'k', '{}', 'x', 'y')",
            vals![ctx.head.seq + 2],
        )?;
        let row = write::NewEvent {
            at: 1,
            kind: EventKind::Claim,
            entry_id: None,
            route: "r",
            scope: "s",
            key: "k",
            actor: None,
            detail: "{}".into(),
            payload_digest: None,
            tail: None,
        };
        write::append(ctx, row)
    });
    match stray.wait() {
        Err(LedgerError::Unavailable(why)) => {
            assert!(why.contains("was stored as seq"), "{why}")
        }
        other => panic!("the batch committed: {other:?}"),
    }
    let after = head(&l);
    assert_eq!((after.seq, after.hash), (before.seq, before.hash));
    assert!(l.verify(&mut |_| true).expect("verify").ok);
}

#[test]
fn the_expired_count_reads_the_expiry_index_alone() {
    let dir = tempfile::tempdir().expect("tempdir");
    let l = ledger_with(&dir, 3);
    let plan = plan(&l, read::EXPIRED_COUNT, vals![0]);
    assert!(
        plan.contains("COVERING INDEX entries_expires"),
        "the expired count reads table rows: {plan}"
    );
    let stats = l.stats(2_000, 0).expect("stats");
    assert_eq!(stats.expired, 0, "pending entries are not expired");
}

/// The sweeper runs every second on the writer: it must read the entries that are due, not
/// walk the table (it scanned every entry in id order: 50–80 ms a second at 150k entries).
#[test]
fn the_sweeper_reads_only_what_is_due() {
    let dir = tempfile::tempdir().expect("tempdir");
    let l = ledger_with(&dir, 3);
    let leases = plan(&l, &crate::write::LEASES_DUE, vals![0]);
    assert!(
        leases.contains("USING INDEX entries_lease_due (lease_expires_at<?)")
            && !leases.contains("TEMP B-TREE"),
        "the lease sweep does not read its due range in order: {leases}"
    );
    let expiries = plan(&l, &crate::write::EXPIRIES_DUE, vals![0]);
    assert!(
        expiries.contains("USING INDEX entries_expires (expiry_logged=? AND expires_at<?)"),
        "the expiry sweep does not read its due range: {expiries}"
    );
}

/// A key filter reads key indexes and then rows by id, never a scan: the entries' unique
/// constraint leads with the key, and the log's key index holds none of an entry's lifecycle
/// events (migrations 8 and 18).
#[test]
fn key_lookups_read_the_key_index() {
    let dir = tempfile::tempdir().expect("tempdir");
    let l = ledger_with(&dir, 3);
    let key_plan = |table: &str, id: &str, cond: &str| {
        let cond = cond.replace('?', "?1");
        let sql = format!("SELECT {id} FROM {table} WHERE {cond} ORDER BY {id} DESC LIMIT 50");
        plan(&l, &sql, vals!["k"])
    };
    let entries = key_plan("entries", "id", crate::read::ENTRY_KEY);
    assert!(
        entries.contains("USING COVERING INDEX sqlite_autoindex_entries_1 (key=?)")
            && !entries.contains("SCAN"),
        "the entries of a key are not read through the unique constraint's index: {entries}"
    );
    let events = key_plan("events", "seq", crate::read::EVENT_KEY);
    assert!(
        events.contains("SEARCH events USING INTEGER PRIMARY KEY")
            && events.contains("USING INDEX events_key (key=?)")
            && events.contains("USING COVERING INDEX sqlite_autoindex_entries_1 (key=?)")
            && events.contains("USING COVERING INDEX events_entry (entry_id=?)")
            && !events.contains("SCAN"),
        "the events of a key are not read through the key indexes and their entries: {events}"
    );
}

fn found(l: &Ledger, term: &str) -> Vec<i64> {
    let filter = EventFilter {
        search: Some(term.into()),
        ..Default::default()
    };
    l.events(&filter, Page::default())
        .expect("search")
        .iter()
        .map(|e| e.seq)
        .collect()
}

#[test]
fn warming_builds_the_search_index_of_every_complete_block() {
    let dir = tempfile::tempdir().expect("tempdir");
    let l = ledger_with(&dir, 1_100);
    assert_eq!(l.search.lock().expect("index").end(), 0, "built lazily");
    l.warm().expect("warm");
    assert_eq!(l.search.lock().expect("index").end(), search::BLOCK);
}

/// Past its cap the index keeps the newest blocks; the older events are still found (read).
#[test]
fn a_capped_search_index_still_finds_the_oldest_events() {
    let dir = tempfile::tempdir().expect("tempdir");
    let l = ledger_with(&dir, 3_100);
    *l.search.lock().expect("index") = search::SearchIndex::with_cap(1);
    assert_eq!(found(&l, "KEY-00005-"), [6]);
    assert_eq!(found(&l, "key-01500-"), [1_501]);
    assert_eq!(found(&l, "key-03050-"), [3_051]);
    assert_eq!(found(&l, "key-0000").len(), 10);
    assert_eq!(l.search.lock().expect("index").end(), 3 * search::BLOCK);
}

/// Archival takes a prefix of the log: the index forgets the blocks its segments hold, and an
/// index built afterwards (a console opened on the archived ledger) starts at the live log's
/// first block, whose events before the archived head are gone.
#[test]
fn the_search_index_follows_the_live_log_past_an_archived_prefix() {
    let dir = tempfile::tempdir().expect("tempdir");
    let l = ledger_with(&dir, 1_500);
    claim_keys(&l, 1_500..4_100, 10);
    l.warm().expect("warm");
    assert_eq!(l.search.lock().expect("index").kept(), 4);
    let segments = dir.path().join("archive");
    std::fs::create_dir(&segments).expect("archive dir");
    let options = crate::archive::ArchiveOptions {
        before: 5,
        place: crate::archive::Place::Dir(segments),
        segment_events: 1_000,
    };
    let report = crate::archive::archive(&*l, &options, None, &mut |_| true).expect("archive");
    assert_eq!(report.archived_through.map(|h| h.seq), Some(1_500));
    assert_eq!(
        l.search.lock().expect("index").kept(),
        3,
        "the block of seq 1–1024 is forgotten"
    );
    assert_eq!(found(&l, "key-02000-"), [2_001]);
    assert!(found(&l, "key-00005-").is_empty(), "archived");
    drop(l);
    let reopened = opener(&dir.path().join("l.db"));
    reopened.warm().expect("warm");
    let index = reopened.search.lock().expect("index");
    assert_eq!((index.end(), index.kept()), (4 * search::BLOCK, 3));
    drop(index);
    assert_eq!(found(&reopened, "key-04000-"), [4_001]);
}

fn opener(path: &std::path::Path) -> Arc<Ledger> {
    Ledger::sqlite(
        path,
        OpenOptions {
            create: true,
            hasher: ChainHasher::unkeyed(),
        },
    )
    .expect("open")
}

/// Claims and completes `key` at `at` (TTL 60 s); its entry id.
fn executed(l: &Ledger, key: &str, at: Millis) -> i64 {
    let ClaimOutcome::Claimed { entry_id, .. } = l.claim(charge(key, at)).wait().expect("claim")
    else {
        panic!("{key} is not new");
    };
    l.complete(CompleteRequest {
        entry_id,
        owner: "o".into(),
        response: ResponseRecord {
            status: 201,
            headers: vec![("x-order".into(), key.into())],
            body: format!("charged {key}").into_bytes(),
        },
        ttl_ms: 60_000,
        duplicate_window_ms: None,
        at,
    })
    .wait()
    .expect("complete");
    entry_id
}

/// What a retry of `key` at `at` gets: from the cache if it can, else by a claim.
fn retry(l: &Ledger, key: &str, at: Millis) -> ClaimOutcome {
    let fp = format!("fp-{key}");
    match l.cached_replay("charges", "agent", key, &fp, at) {
        Some((entry_id, response)) => ClaimOutcome::Replay { entry_id, response },
        None => l.claim(charge(key, at)).wait().expect("claim"),
    }
}

fn replayed(o: &ClaimOutcome, key: &str) -> bool {
    matches!(o, ClaimOutcome::Replay { response, .. } if response.body == format!("charged {key}").into_bytes())
}

#[test]
fn replays_are_answered_from_memory_once_read() {
    let dir = tempfile::tempdir().expect("tempdir");
    let l = opener(&dir.path().join("l.db"));
    executed(&l, "k1", 1_000);
    // The first replay reads the entry (and keeps it); the next ones need no query.
    for _ in 0..4 {
        assert!(replayed(&retry(&l, "k1", 2_000), "k1"));
    }
    assert_eq!(l.replay_cache_hits(), 3);
    // Another request under the key is not a replay: the ledger decides (a collision).
    assert!(l
        .cached_replay("charges", "agent", "k1", "other", 2_000)
        .is_none());
    // Writes that name no cached entry leave it cached once the cache has caught up.
    executed(&l, "k2", 2_000);
    assert!(replayed(&retry(&l, "k1", 3_000), "k1"));
    assert_eq!(l.replay_cache_hits(), 4);
    // Its replays are counted like any other.
    l.close();
    let l = opener(&dir.path().join("l.db"));
    let id = l
        .entries(&EntryFilter::default(), Page::default(), 3_000)
        .expect("entries")
        .into_iter()
        .find(|e| e.key == "k1")
        .expect("k1");
    assert_eq!(id.replays, 5);
}

/// Under first calls every commit changes the header; a request for a key the cache does not
/// hold must not pay a catch-up (a read of the log) for it.
#[test]
fn only_a_cached_key_makes_the_cache_catch_up() {
    let dir = tempfile::tempdir().expect("tempdir");
    let l = opener(&dir.path().join("l.db"));
    executed(&l, "k1", 1_000);
    for _ in 0..2 {
        assert!(replayed(&retry(&l, "k1", 2_000), "k1"));
    }
    let caught = l.replay_cache_catch_ups();
    for i in 0..5 {
        let key = format!("n{i}");
        assert!(matches!(
            retry(&l, &key, 2_000),
            ClaimOutcome::Claimed { .. }
        ));
        // Another request under a cached key, and a cached key past its TTL, neither.
        assert!(l
            .cached_replay("charges", "agent", "k1", "other", 2_000)
            .is_none());
        assert!(l
            .cached_replay("charges", "agent", "k1", "fp-k1", 61_000)
            .is_none());
    }
    assert_eq!(l.replay_cache_catch_ups(), caught, "a miss caught up");
    // The next replay of the cached key does, once, and is served from memory.
    let hits = l.replay_cache_hits();
    assert!(replayed(&retry(&l, "k1", 3_000), "k1"));
    assert_eq!(l.replay_cache_catch_ups(), caught + 1);
    assert_eq!(l.replay_cache_hits(), hits + 1);
}

#[test]
fn a_cached_replay_ends_with_its_ttl() {
    let dir = tempfile::tempdir().expect("tempdir");
    let l = opener(&dir.path().join("l.db"));
    executed(&l, "k1", 1_000);
    assert!(replayed(&retry(&l, "k1", 2_000), "k1"));
    assert!(replayed(&retry(&l, "k1", 60_999), "k1"));
    assert_eq!(l.replay_cache_hits(), 1);
    // Expired at 61,000: the key runs again.
    assert!(matches!(
        retry(&l, "k1", 61_000),
        ClaimOutcome::Claimed { .. }
    ));
}

/// The cache must never replay an entry purged by anyone: this process, or another connection
/// (as another process: the CLI, the console) — then the key runs again. Also when the other
/// connection wrote more than a catch-up reads.
#[test]
fn a_purge_by_any_connection_ends_the_cached_replays_of_its_entry() {
    for (by_other, extra_writes) in [(false, 0), (true, 0), (true, CATCH_UP_MAX + 10)] {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("l.db");
        let l = opener(&path);
        let id = executed(&l, "k1", 1_000);
        executed(&l, "k2", 1_000);
        for _ in 0..2 {
            assert!(replayed(&retry(&l, "k1", 2_000), "k1"));
            assert!(replayed(&retry(&l, "k2", 2_000), "k2"));
        }
        assert_eq!(l.replay_cache_hits(), 2, "both keys are cached");
        let other = by_other.then(|| opener(&path));
        let writer: &Ledger = other.as_deref().unwrap_or(&l);
        let tickets: Vec<_> = (0..extra_writes)
            .map(|i| writer.claim(charge(&format!("x{i}"), 2_000)))
            .collect();
        for t in tickets {
            t.wait().expect("claim");
        }
        let purged = writer
            .purge(PurgeRequest {
                ids: vec![id],
                expired_by: None,
                actor: Actor {
                    operator: "op".into(),
                    reason: "test".into(),
                },
                at: 2_000,
            })
            .wait()
            .expect("purge");
        assert_eq!(purged, [id]);
        let hits = l.replay_cache_hits();
        assert!(
            matches!(retry(&l, "k1", 3_000), ClaimOutcome::Claimed { .. }),
            "a purged key was replayed (purged by another connection: {by_other}, \
             {extra_writes} other writes)"
        );
        // The other entry is still replayed, from memory unless the catch-up overflowed.
        assert!(replayed(&retry(&l, "k2", 3_000), "k2"));
        assert!(replayed(&retry(&l, "k2", 3_000), "k2"));
        assert_eq!(
            l.replay_cache_hits(),
            hits + if extra_writes > 0 { 1 } else { 2 }
        );
    }
}

/// A verification reads the log into pages it reuses: a page read into one that held other events
/// holds exactly what a fresh read does, with nothing left of those (an operator where a claim has
/// none, a longer detail, more events).
#[test]
fn a_page_read_into_a_used_one_holds_only_its_own_events() {
    let dir = tempfile::tempdir().expect("tempdir");
    let l = ledger_with(&dir, 40);
    for id in 1..=20 {
        let resolved = l.resolve(crate::store::ResolveRequest {
            entry_id: id,
            resolution: crate::store::Resolution::Released,
            actor: Actor {
                operator: "op".into(),
                reason: "stuck".into(),
            },
            ttl_ms: 1_000,
            at: 5_000,
        });
        resolved.wait().expect("resolve");
    }
    let fresh = |db: &mut dyn crate::db::Db, after: i64, n: i64| {
        let sql = format!(
            "SELECT {} FROM events WHERE seq > ?1 ORDER BY seq LIMIT ?2",
            read::EVENT_COLS
        );
        db.all(&sql, vals![after, n], read::event_row)
    };
    // Each page as the chain encodes its events, the page's buffers reused by the next.
    let packed = |evs: Vec<Event>| -> Vec<(i64, Vec<u8>, String, String)> {
        evs.into_iter()
            .map(|e| {
                (
                    e.seq,
                    crate::chain::canonical_event(&e),
                    e.prev_hash,
                    e.hash,
                )
            })
            .collect()
    };
    l.read(|db| {
        let mut page = crate::chain::CanonPage::default();
        read::canon_page_into(db, 40, 20, &mut page)?;
        assert_eq!(page.owned(), packed(fresh(db, 40, 20)?));
        assert!(fresh(db, 40, 20)?.iter().all(|e| e.operator.is_some()));
        read::canon_page_into(db, 0, 30, &mut page)?;
        assert_eq!(
            page.owned(),
            packed(fresh(db, 0, 30)?),
            "claims read over resolutions"
        );
        read::canon_page_into(db, 50, 30, &mut page)?;
        assert_eq!(page.owned(), packed(fresh(db, 50, 30)?), "a short page");
        assert_eq!(page.len(), 10);
        Ok(())
    })
    .expect("read");
    let r = l.verify(&mut |_| true).expect("verify");
    assert!(r.ok && r.count == 60, "{r:?}");
}
