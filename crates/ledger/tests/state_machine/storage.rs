//! The database itself: a newer schema refused, a keyed log, readers that never create, the append-only rule, checkpoints, the books' lead.

use super::*;

fn a_database_newer_than_the_binary_is_refused(b: Backend) {
    let f = fx!(b);
    f.l.close();
    drop(f.l);
    let bump = match b {
        Backend::Sqlite => "PRAGMA user_version = 99",
        Backend::Postgres => "UPDATE idemgate_schema SET version = 99",
    };
    b.raw(&f.location, bump).expect("bump the version");
    match b.open(&f.location, false, ChainHasher::unkeyed()) {
        Err(LedgerError::TooNew { found, supported }) => {
            assert_eq!(found, 99);
            assert!((1..99).contains(&supported), "{supported}");
        }
        other => panic!("expected TooNew, got {other:?}"),
    }
    // Refused means refused: nothing was migrated back or otherwise changed.
    let again = b.open(&f.location, true, ChainHasher::unkeyed());
    assert!(matches!(again, Err(LedgerError::TooNew { found: 99, .. })));
}

fn a_missing_ledger_is_not_created_by_readers(b: Backend) {
    let dir = tempfile::tempdir().expect("tempdir");
    let Some(location) = b.fresh(&dir, "nope") else {
        return;
    };
    assert!(matches!(
        b.open(&location, false, ChainHasher::unkeyed()),
        Err(LedgerError::NotFound(_))
    ));
    match b {
        Backend::Sqlite => assert!(!std::path::Path::new(&location).exists()),
        Backend::Postgres => assert_eq!(
            idemgate_ledger::testing::postgres_i64(
                &location,
                "SELECT count(*) FROM pg_tables WHERE schemaname = 'public'"
            ),
            Ok(0),
            "opening without create made tables"
        ),
    }
}

fn the_log_is_append_only_in_the_database_itself(b: Backend) {
    let f = fx!(b);
    claim_new(&f.l, "k1", "{}", T0);
    // A read of the log numbers what was written (PostgreSQL: out of the intake).
    assert_eq!(f.l.head().expect("head").map(|h| h.seq), Some(1));
    for sql in [
        "UPDATE events SET detail = '{}' WHERE seq = 1",
        "DELETE FROM events WHERE seq = 1",
    ] {
        let e = b.raw(&f.location, sql).expect_err(sql);
        assert!(e.contains("append-only"), "{sql}: {e}");
    }
    if let Backend::Postgres = b {
        let e = b.raw(&f.location, "TRUNCATE events").expect_err("truncate");
        assert!(e.contains("append-only"), "{e}");
        // An event not yet numbered cannot be rewritten in the intake either.
        claim_new(&f.l, "k2", "{}", T0);
        for sql in [
            "UPDATE intake SET detail = '{}'",
            "DELETE FROM intake",
            "TRUNCATE intake",
        ] {
            let e = b.raw(&f.location, sql).expect_err(sql);
            assert!(e.contains("append-only"), "{sql}: {e}");
        }
        // Nor dropped from it: only the sequencer, holding its lock, moves it to the log.
        assert_eq!(all_events(&f.l).len(), 2);
    }
    verify_ok(&f.l);
}

fn a_keyed_log_refuses_writes_without_its_key_and_detects_plain_forgeries(b: Backend) {
    let dir = tempfile::tempdir().expect("tempdir");
    let Some(path) = b.fresh(&dir, "keyed") else {
        return;
    };
    let keyed = ChainHasher::keyed(b"s3cret".to_vec());
    let l = b.open(&path, true, keyed.clone()).expect("open");
    claim_new(&l, "k1", "{}", T0);
    assert_eq!(l.chain_alg().expect("alg"), "hmac-sha256");
    assert!(l.verify(&mut |_| true).expect("verify").ok);
    l.close();
    drop(l);
    let unkeyed = b.open(&path, false, ChainHasher::unkeyed()).expect("open");
    assert!(matches!(
        unkeyed.claim(req("k2", "{}", T0)).wait(),
        Err(LedgerError::ChainKeyRequired)
    ));
    assert!(matches!(
        unkeyed.verify(&mut |_| true),
        Err(LedgerError::ChainKeyRequired)
    ));
    // Reads still work without the key.
    assert_eq!(
        unkeyed
            .entries(&EntryFilter::default(), Page::default(), T0)
            .expect("list")
            .len(),
        1
    );
    let wrong = b
        .open(&path, false, ChainHasher::keyed(b"guess".to_vec()))
        .expect("open");
    let r = wrong.verify(&mut |_| true).expect("verify");
    assert!(!r.ok);
    assert_eq!(r.first_bad_seq, Some(1));
}

/// SQLite: committed pages move from the WAL into the database file while the ledger is open and
/// without the writer doing it (its own auto-checkpoint only starts at a 64 MiB WAL): the
/// checkpointer thread does. The file grows while the WAL's pages are copied into it.
#[test]
fn sqlite_checkpoints_off_the_writer() {
    let f = fx!(Backend::Sqlite);
    let size = || std::fs::metadata(&f.location).expect("ledger file").len();
    let before = size();
    let body = "x".repeat(2_000);
    let tickets: Vec<_> = (0..1_000)
        .map(|i| {
            f.l.claim(req(
                &format!("c{i}"),
                &format!(r#"{{"pad":"{body}{i}"}}"#),
                T0,
            ))
        })
        .collect();
    for t in tickets {
        claimed(t.wait().expect("claim"));
    }
    let wal = std::fs::metadata(format!("{}-wal", f.location))
        .expect("wal")
        .len();
    assert!(wal > 2_000_000, "the claims are in the WAL ({wal} bytes)");
    wait_for(10, || {
        let now = size();
        if now >= before + 2_000_000 {
            Ok(())
        } else {
            Err(format!(
                "the database file stayed at {now} bytes (was {before}): no checkpoint"
            ))
        }
    });
    verify_ok(&f.l);
}

/// What a `tools/list` said of an MCP route's tools is kept per route and upstream, the latest
/// list winning, and outlives the process (a reopen) and a copy of the ledger.
fn a_listed_tool_s_effect_is_kept_per_route_and_upstream(b: Backend) {
    let f = fx!(b);
    let listed = |tools: &[(&str, Effect)], at: Millis| ToolsListed {
        route: "tools".into(),
        upstream: "http://127.0.0.1:9/mcp".into(),
        tools: tools.iter().map(|(n, e)| ((*n).to_owned(), *e)).collect(),
        at,
    };
    let effect = |l: &Ledger, tool: &str| {
        l.tool_effect("tools", "http://127.0.0.1:9/mcp", tool)
            .expect("read")
    };
    assert_eq!(effect(&f.l, "lookup"), None);
    f.l.note_tools(listed(
        &[("lookup", Effect::Read), ("charge", Effect::Destructive)],
        T0,
    ))
    .wait()
    .expect("noted");
    assert_eq!(effect(&f.l, "lookup"), Some(Effect::Read));
    assert_eq!(effect(&f.l, "charge"), Some(Effect::Destructive));
    assert_eq!(effect(&f.l, "refund"), None);
    let other_upstream =
        f.l.tool_effect("tools", "http://127.0.0.1:10/mcp", "lookup");
    assert_eq!(other_upstream.expect("read"), None);
    assert_eq!(
        f.l.tool_effect("other-route", "http://127.0.0.1:9/mcp", "lookup")
            .expect("read"),
        None
    );
    // A later list that says otherwise wins.
    f.l.note_tools(listed(&[("lookup", Effect::Write)], T0 + 1))
        .wait()
        .expect("noted");
    assert_eq!(effect(&f.l, "lookup"), Some(Effect::Write));
    // Another process on the ledger reads it; so does a copy.
    let reopened = b
        .open(&f.location, false, ChainHasher::unkeyed())
        .expect("reopen");
    assert_eq!(effect(&reopened, "lookup"), Some(Effect::Write));
    let dir = tempfile::tempdir().expect("tempdir");
    let to = dir.path().join("copy.db").display().to_string();
    idemgate_ledger::copy::copy(&f.location, &to, &ChainHasher::unkeyed(), &mut |_| true)
        .expect("copy");
    let copy = Backend::Sqlite
        .open(&to, false, ChainHasher::unkeyed())
        .expect("open the copy");
    assert_eq!(effect(&copy, "charge"), Some(Effect::Destructive));
}

/// PostgreSQL counts loop-guard windows for every instance on the ledger: calls in a window
/// add up, a new window starts once it ended, and the sweep drops ended windows. SQLite leaves
/// the count to its one server.
fn loop_guard_windows_are_counted_in_the_ledger_on_postgresql(b: Backend) {
    let f = fx!(b);
    if matches!(b, Backend::Sqlite) {
        assert!(!f.l.counts_calls());
        assert!(f.l.count_call("w", 60_000, T0).is_err());
        return;
    }
    assert!(f.l.counts_calls());
    let count = |name: &str, at: Millis| f.l.count_call(name, 60_000, at).expect("count");
    assert_eq!(count("w", T0), (T0 + 60_000, 1));
    assert_eq!(count("w", T0 + 10), (T0 + 60_000, 2));
    assert_eq!(count("other", T0 + 20), (T0 + 60_020, 1));
    assert_eq!(count("w", T0 + 59_999), (T0 + 60_000, 3));
    assert_eq!(count("w", T0 + 60_000), (T0 + 120_000, 1), "a new window");
    f.l.sweep(T0 + 60_020).wait().expect("sweep");
    let rows = |sql: &str| b.raw(&f.location, sql);
    rows("DO $$ BEGIN IF (SELECT COUNT(*) FROM loop_windows) <> 1 THEN RAISE EXCEPTION 'left'; END IF; END $$")
        .expect("only the window still open is left");
}

/// A young PostgreSQL ledger is analysed as it grows (each time the writer's commits double), so
/// that statements planned on a nearly empty table are planned again: one planned on a few dozen
/// rows scanned the whole table. Each commit here adds one entry, so an analysis at commit `c`
/// counts about `c` rows; one counting 256 or more is due by commit 512, long before 1,000 (it
/// runs on a thread of its own: one started by the last commits is waited for).
fn a_young_postgresql_ledger_is_analysed_as_it_grows(b: Backend) {
    let f = fx!(b);
    if matches!(b, Backend::Sqlite) {
        return;
    }
    let analysed = || {
        postgres_i64(
            &f.location,
            "SELECT CAST(reltuples AS BIGINT) FROM pg_class WHERE relname = 'entries'",
        )
        .expect("reltuples")
    };
    let mut commits = 0;
    while analysed() < 256 && commits < 1_000 {
        for _ in 0..50 {
            let key = format!("young-{commits}");
            claim_new(&f.l, &key, "{}", T0);
            commits += 1;
        }
    }
    wait_for(30, || {
        let rows = analysed();
        if rows >= 256 {
            Ok(())
        } else {
            Err(format!(
                "after {commits} commits the newest analysis of entries counted {rows} rows"
            ))
        }
    });
}

/// The periodic checkpoint signs a head once: a second signer of that head (or an older one) is
/// refused and logs nothing, while an export's or a segment's checkpoint may sign any head again.
fn a_head_gets_one_periodic_checkpoint(b: Backend) {
    let f = fx!(b);
    f.l.claim(req("k1", "{}", T0)).wait().expect("claim");
    let (private, _) = checkpoint::generate("test.example/idemgate").expect("keys");
    let signer = checkpoint::Signer::parse(&private).expect("signer");
    let head = f.l.head().expect("head").expect("a head");
    let (_, first) = signer.sign_head_and_log(&*f.l, &head).expect("signed");
    let e = signer
        .sign_head_and_log(&*f.l, &head)
        .expect_err("a second checkpoint of the head");
    assert!(matches!(e, LedgerError::AlreadySigned { .. }), "{e}");
    assert_eq!(e.code(), error::Code::Conflict);
    assert_eq!(f.l.head().expect("head").map(|h| h.seq), Some(first));
    // An export signs the same head again, as often as it is made.
    signer
        .sign_and_log(&*f.l, &head)
        .expect("an export's checkpoint");
    // The head moved on: its periodic checkpoint is taken.
    let now = f.l.head().expect("head").expect("a head");
    signer
        .sign_head_and_log(&*f.l, &now)
        .expect("the next head");
}

/// One session at a time leads the books on PostgreSQL: every handle names it, a second cannot
/// take it, and when the leader's session ends (killed from outside here) its holder sees it gone
/// and another takes the lead. A SQLite ledger is led by the one process that writes it.
fn one_instance_leads_the_books_at_a_time(b: Backend) {
    let f = fx!(b);
    let mut a = f.l.lead("host:1:aaaa", T0).expect("try").expect("leads");
    assert!(a.holds());
    if matches!(b, Backend::Sqlite) {
        assert_eq!(f.l.leader().expect("leader"), None);
        return;
    }
    let other = b
        .open(&f.location, false, ChainHasher::unkeyed())
        .expect("a second instance");
    assert!(other.lead("host:2:bbbb", T0 + 1).expect("try").is_none());
    let named = Leader {
        instance: "host:1:aaaa".into(),
        since: T0,
    };
    assert_eq!(other.leader().expect("leader"), Some(named.clone()));
    assert_eq!(f.l.leader().expect("leader"), Some(named));
    b.raw(
        &f.location,
        "SELECT pg_terminate_backend(pid::int) FROM leader",
    )
    .expect("end the leader's session");
    wait_for(10, || {
        if a.holds() {
            Err("the lead outlived its session".into())
        } else {
            Ok(())
        }
    });
    let _b = wait_for(10, || {
        other
            .lead("host:2:bbbb", T0 + 2)
            .expect("try")
            .ok_or_else(|| "no one took the lead".to_string())
    });
    assert_eq!(
        f.l.leader().expect("leader").map(|l| l.instance),
        Some("host:2:bbbb".into())
    );
}

/// A batch's events are in the log, numbered and chained, when a read of the log looks: on SQLite
/// the writer numbered them; on PostgreSQL they waited in the intake, unnumbered (the write path
/// knows nothing of the log's head), and the read had the sequencer take them. There an event
/// whose transaction committed later is numbered after, though its id is lower.
fn a_read_of_the_log_finds_every_event_written_before_it(b: Backend) {
    let f = fx!(b);
    claim_new(&f.l, "a", "{}", T0);
    let keys = || -> Vec<String> {
        let mut evs = all_events(&f.l);
        evs.reverse();
        evs.into_iter().map(|e| e.key).collect()
    };
    if let Backend::Postgres = b {
        let count =
            |table: &str| postgres_i64(&f.location, &format!("SELECT count(*) FROM {table}"));
        assert_eq!((count("events"), count("intake")), (Ok(0), Ok(1)));
        let mut open = idemgate_ledger::testing::begin(
            &f.location,
            "INSERT INTO intake (at, kind, route, scope, key, detail) \
             VALUES (1, 'resolve', 'charges', 'agent-1', 'late', '{}')",
        );
        claim_new(&f.l, "b", "{}", T0);
        assert_eq!(
            keys(),
            ["a", "b"],
            "an event not committed yet is not taken"
        );
        let late = open.i64("SELECT id FROM intake WHERE key = 'late'");
        assert!(
            late < postgres_i64(&f.location, "SELECT last_value FROM intake_id_seq").expect("seq")
        );
        open.commit();
        assert_eq!(keys(), ["a", "b", "late"]);
        assert_eq!(count("intake"), Ok(0));
    } else {
        assert_eq!(keys(), ["a"]);
    }
    verify_ok(&f.l);
}

/// The overview's counts are the ledger's, whichever instance wrote: two handles on one ledger
/// (two writers: on PostgreSQL each adds to counters of its own shard) read the same sums.
fn the_overview_counts_every_instance_s_writes(b: Backend) {
    let f = fx!(b);
    let other = b
        .open(&f.location, false, ChainHasher::unkeyed())
        .expect("a second instance");
    claim_new(&f.l, "a", "{}", T0);
    let id = claim_new(&other, "b", "{}", T0);
    complete(&other, id, T0 + 1, "{}");
    for l in [&f.l, &other] {
        let stats = l.stats(T0 + 2, 1).expect("stats");
        let pending = stats
            .entries_by_state
            .iter()
            .filter(|(s, _)| *s == State::Pending);
        assert_eq!(pending.map(|(_, n)| *n).collect::<Vec<_>>(), [1]);
        let completed = stats
            .entries_by_state
            .iter()
            .filter(|(s, _)| *s == State::Completed);
        assert_eq!(completed.map(|(_, n)| *n).collect::<Vec<_>>(), [1]);
        let claims: Vec<_> = stats.series.iter().filter(|p| p.kind == "claim").collect();
        assert_eq!(
            claims.iter().map(|p| p.count).collect::<Vec<_>>(),
            [2],
            "{claims:?}"
        );
    }
    other.close();
    verify_ok(&f.l);
}

/// On PostgreSQL the write batches of two instances run side by side: one held up on an entry's
/// row (locked by a transaction left open) does not hold up another instance's claim of another
/// key. A SQLite file has one writer at a time.
fn a_batch_held_up_on_a_row_does_not_hold_up_another_instance(b: Backend) {
    let f = fx!(b);
    if !matches!(b, Backend::Postgres) {
        return;
    }
    let id = claim_new(&f.l, "held", "{}", T0);
    let other = b
        .open(&f.location, false, ChainHasher::unkeyed())
        .expect("a second instance");
    let row = idemgate_ledger::testing::begin(
        &f.location,
        &format!("SELECT id FROM entries WHERE id = {id} FOR UPDATE"),
    );
    let completing = f.l.complete(CompleteRequest {
        entry_id: id,
        owner: "proxy-a".into(),
        response: resp(201, "{}"),
        ttl_ms: TTL,
        duplicate_window_ms: None,
        at: T0 + 1,
    });
    let waiting = "SELECT count(*) FROM pg_stat_activity \
                   WHERE datname = current_database() AND wait_event_type = 'Lock'";
    wait_for(30, || match postgres_i64(&f.location, waiting) {
        Ok(1) => Ok(()),
        n => Err(format!("the completion's batch never waited: {n:?}")),
    });
    let (tx, rx) = std::sync::mpsc::channel();
    let claim = other.claim(req("free", "{}", T0 + 1));
    std::thread::spawn(move || tx.send(claim.wait()));
    let claimed = rx
        .recv_timeout(std::time::Duration::from_secs(30))
        .expect("the other instance's claim waited for the held batch");
    assert!(
        matches!(claimed, Ok(ClaimOutcome::Claimed { .. })),
        "{claimed:?}"
    );
    assert_eq!(
        postgres_i64(&f.location, waiting),
        Ok(1),
        "the held batch went on"
    );
    row.commit();
    completing.wait().expect("the held completion");
    other.close();
    verify_ok(&f.l);
}

suite!(
    a_batch_held_up_on_a_row_does_not_hold_up_another_instance,
    the_overview_counts_every_instance_s_writes,
    a_read_of_the_log_finds_every_event_written_before_it,
    a_head_gets_one_periodic_checkpoint,
    one_instance_leads_the_books_at_a_time,
    a_database_newer_than_the_binary_is_refused,
    loop_guard_windows_are_counted_in_the_ledger_on_postgresql,
    a_young_postgresql_ledger_is_analysed_as_it_grows,
    a_listed_tool_s_effect_is_kept_per_route_and_upstream,
    a_keyed_log_refuses_writes_without_its_key_and_detects_plain_forgeries,
    a_missing_ledger_is_not_created_by_readers,
    the_log_is_append_only_in_the_database_itself,
);
