//! Claims: a new key, a collision, replays off the writer, group commit, two ledgers racing, a failing job.

use super::*;

fn new_key_is_claimed_durably_then_in_flight_then_replayed(b: Backend) {
    let f = fx!(b);
    let id = claimed(
        f.l.claim(req("k1", r#"{"amount":100}"#, T0))
            .wait()
            .expect("claim"),
    );
    // Same key while the lease is live: in flight.
    match f
        .l
        .claim(req("k1", r#"{ "amount": 100 }"#, T0 + 1_000))
        .wait()
        .expect("claim")
    {
        ClaimOutcome::InFlight {
            entry_id,
            lease_expires_at,
        } => {
            assert_eq!(entry_id, id);
            assert_eq!(lease_expires_at, T0 + LEASE);
        }
        o => panic!("expected InFlight, got {o:?}"),
    }
    complete(&f.l, id, T0 + 2_000, r#"{"id":"ch_1"}"#);
    // Same key, same fingerprint (key order/whitespace differ): replayed, counted.
    for n in 1..=3 {
        match f
            .l
            .claim(req("k1", r#"{"amount" : 100}"#, T0 + 3_000 + n))
            .wait()
            .expect("claim")
        {
            ClaimOutcome::Replay { entry_id, response } => {
                assert_eq!(entry_id, id);
                assert_eq!(response.status, 201);
                assert_eq!(response.body, br#"{"id":"ch_1"}"#);
            }
            o => panic!("expected Replay, got {o:?}"),
        }
    }
    // Replays answered off the writer are counted with a later batch; any later write waits for it.
    f.l.sweep(T0 + 4_000).wait().expect("sweep");
    let e = f.l.entry(id, T0 + 5_000).expect("entry");
    assert_eq!(e.summary.state, State::Completed);
    assert_eq!(e.summary.replays, 3);
    assert_eq!(e.last_replay_at, Some(T0 + 3_003));
    assert_eq!(e.summary.expires_at, Some(T0 + 2_000 + TTL));
    // The secret header never reached the ledger.
    let headers = &e.request.expect("request").headers;
    assert!(
        headers.iter().all(|(n, _)| n != "authorization"),
        "{headers:?}"
    );
    assert_eq!(kinds(&f.l, id), ["claim", "complete"]);
    verify_ok(&f.l);
}

fn different_fingerprint_is_a_collision_and_keeps_the_rejected_request(b: Backend) {
    let f = fx!(b);
    let id = claimed(
        f.l.claim(req("k1", r#"{"amount":100}"#, T0))
            .wait()
            .expect("claim"),
    );
    complete(&f.l, id, T0 + 10, "{}");
    let o =
        f.l.claim(req("k1", r#"{"amount":999}"#, T0 + 20))
            .wait()
            .expect("claim");
    assert_eq!(o, ClaimOutcome::Collision { entry_id: id });
    let e = f.l.entry(id, T0 + 30).expect("entry");
    assert_eq!(e.summary.collisions, 1);
    assert_eq!(
        e.summary.state,
        State::Completed,
        "a collision changes nothing else"
    );
    assert_eq!(e.collision_requests.len(), 1);
    assert_eq!(e.collision_requests[0].request.body, br#"{"amount":999}"#);
    assert!(e.collision_requests[0]
        .request
        .headers
        .iter()
        .all(|(n, _)| n != "authorization"));
    let listed =
        f.l.entries(
            &EntryFilter {
                collisions: true,
                ..Default::default()
            },
            Page::default(),
            T0 + 30,
        )
        .expect("list");
    assert_eq!(listed.iter().map(|e| e.id).collect::<Vec<_>>(), [id]);
    assert_eq!(kinds(&f.l, id), ["claim", "complete", "collision"]);
    verify_ok(&f.l);
}

/// Entries claimed before fingerprints covered the request target have the fingerprint without
/// it: the very request they were claimed with still matches them (a retry across the upgrade is
/// replayed), a request at another path does not, and neither does a request beyond the path of
/// an entry claimed at its route's own path (which has that fingerprint today).
fn an_entry_fingerprinted_without_its_target_matches_only_its_own_target(b: Backend) {
    let f = fx!(b);
    let refund = "/v1/charges/ch_1/refund";
    // As the proxy fingerprinted it then: without the target.
    let before = ClaimRequest {
        fingerprint: canon::fingerprint("POST", "charges", &[], b"{}"),
        legacy_fingerprint: None,
        ..req_at("k-old", refund, T0)
    };
    let old = claimed(f.l.claim(before).wait().expect("claim"));
    complete(&f.l, old, T0 + 10, r#"{"refund":"re_1"}"#);
    match f
        .l
        .claim(req_at("k-old", refund, T0 + 20))
        .wait()
        .expect("claim")
    {
        ClaimOutcome::Replay { entry_id, response } => {
            assert_eq!(
                (entry_id, response.body),
                (old, br#"{"refund":"re_1"}"#.to_vec())
            );
        }
        other => panic!("the same request across the upgrade: {other:?}"),
    }
    let elsewhere = req_at("k-old", "/v1/charges/ch_2/refund", T0 + 30);
    assert_eq!(
        f.l.claim(elsewhere).wait().expect("claim"),
        ClaimOutcome::Collision { entry_id: old }
    );

    let at_route = claim_new(&f.l, "k-route", "{}", T0);
    complete(&f.l, at_route, T0 + 10, "{}");
    assert_eq!(
        f.l.claim(req_at("k-route", refund, T0 + 20))
            .wait()
            .expect("claim"),
        ClaimOutcome::Collision { entry_id: at_route }
    );

    let e = f.l.entry(old, T0 + 40).expect("entry");
    assert_eq!((e.summary.replays, e.summary.collisions), (1, 1));
    assert_eq!(kinds(&f.l, old), ["claim", "complete", "collision"]);
    verify_ok(&f.l);
}

/// A replay of a completed key is answered from a read, not by the writer (on PostgreSQL once the
/// key was seen replayed): 200 replays from 8 threads take far fewer than 200 writer jobs (only the
/// first replays and the jobs that write their counts), and the counts still add up. A changed
/// body, or an expired key, still goes to the writer.
fn replays_are_answered_without_waiting_for_the_writer(b: Backend) {
    let f = fx!(b);
    let id = claim_new(&f.l, "r", r#"{"n":1}"#, T0);
    complete(&f.l, id, T0 + 1, "{}");
    let (_, jobs_before) = f.l.writer_counters();
    let threads: Vec<_> = (0..8)
        .map(|t| {
            let l = f.l.clone();
            std::thread::spawn(move || {
                for i in 0..25 {
                    let o = l.claim(req("r", r#"{"n":1}"#, T0 + 10 + t * 25 + i));
                    assert!(matches!(o.wait(), Ok(ClaimOutcome::Replay { .. })));
                }
            })
        })
        .collect();
    for t in threads {
        t.join().expect("thread");
    }
    f.l.sweep(T0 + 1_000).wait().expect("sweep");
    let (_, jobs_after) = f.l.writer_counters();
    let jobs = jobs_after - jobs_before;
    assert!(jobs < 100, "200 replays took {jobs} writer jobs");
    let e = f.l.entry(id, T0 + 1_000).expect("entry");
    assert_eq!(e.summary.replays, 200);
    assert_eq!(e.last_replay_at, Some(T0 + 10 + 7 * 25 + 24));
    let stats = f.l.stats(T0 + 1_000, 24).expect("stats");
    let absorbed: i64 = stats
        .series
        .iter()
        .filter(|p| p.kind == "replay_absorbed")
        .map(|p| p.count)
        .sum();
    assert_eq!(absorbed, 200);
    // Another body under the key: a collision, decided and logged by the writer.
    assert!(matches!(
        f.l.claim(req("r", r#"{"n":2}"#, T0 + 2_000)).wait(),
        Ok(ClaimOutcome::Collision { .. })
    ));
    // Past its TTL the key runs again.
    assert!(matches!(
        f.l.claim(req("r", r#"{"n":1}"#, T0 + 1 + TTL + 1)).wait(),
        Ok(ClaimOutcome::Claimed { attempt: 1, .. })
    ));
    assert_eq!(
        kinds(&f.l, id),
        ["claim", "complete", "collision", "expired", "claim"]
    );
    verify_ok(&f.l);
}

/// On PostgreSQL the retries waiting for a replay read share it: 200 retries of known keys, queued
/// while their entries cannot be read, are answered by a few reads (at most 64 retries each), not
/// one read each. SQLite answers replays from its cache and makes none.
fn replays_waiting_together_are_read_together(b: Backend) {
    let f = fx!(b);
    let keys: Vec<String> = (0..50).map(|i| format!("k{i}")).collect();
    for (i, k) in keys.iter().enumerate() {
        let id = claimed(
            f.l.claim(req(k, "{}", T0 + i as i64))
                .wait()
                .expect("claim"),
        );
        complete(&f.l, id, T0 + 100, "{}");
        // The first replay of a key here goes through the writer, and makes the key known.
        let first = f.l.claim(req(k, "{}", T0 + 200)).wait();
        assert!(
            matches!(first, Ok(ClaimOutcome::Replay { .. })),
            "{first:?}"
        );
    }
    let before = f.l.replay_reads();
    let locked =
        matches!(b, Backend::Postgres).then(|| testing::lock_table(&f.location, "entries"));
    let retries: Vec<_> = (0..200)
        .map(|i| {
            f.l.claim(req(&keys[i % keys.len()], "{}", T0 + 300 + i as i64))
        })
        .collect();
    drop(locked);
    for r in retries {
        let o = r.wait();
        assert!(matches!(o, Ok(ClaimOutcome::Replay { .. })), "{o:?}");
    }
    let reads = f.l.replay_reads() - before;
    if matches!(b, Backend::Sqlite) {
        assert_eq!(reads, 0);
        return;
    }
    // Each reader took one retry or more before the lock let it read, then up to 64 at a time.
    assert!(
        (1..=12).contains(&reads),
        "200 retries took {reads} replay reads"
    );
}

/// On PostgreSQL the counts of replays answered by reads are written outside the log's write lock:
/// they land while another instance holds it. (SQLite's one writer takes no such lock.)
fn replay_counts_land_while_the_write_lock_is_held(b: Backend) {
    if matches!(b, Backend::Sqlite) {
        return;
    }
    let f = fx!(b);
    let id = claim_new(&f.l, "c", "{}", T0);
    complete(&f.l, id, T0 + 1, "{}");
    // The first replay goes through the writer (counted in its batch) and makes the key known.
    let first = f.l.claim(req("c", "{}", T0 + 2)).wait();
    assert!(
        matches!(first, Ok(ClaimOutcome::Replay { .. })),
        "{first:?}"
    );
    let held = testing::hold_write_lock(&f.location);
    for i in 0..5 {
        let o = f.l.claim(req("c", "{}", T0 + 10 + i)).wait();
        assert!(matches!(o, Ok(ClaimOutcome::Replay { .. })), "{o:?}");
    }
    // Waits for the counts (nothing the test holds is in their way).
    let e = wait_for(60, || {
        let e = f.l.entry(id, T0 + 100).expect("entry");
        if e.summary.replays == 6 {
            Ok(e)
        } else {
            Err(format!(
                "the counts waited for the write lock: {} replays counted",
                e.summary.replays
            ))
        }
    });
    assert_eq!(e.last_replay_at, Some(T0 + 14));
    drop(held);
}

/// A batch runs without savepoints first; a job that fails after changing something (this purge
/// deletes `a`, then refuses the pending `b`) makes the writer roll the batch back and run it
/// again with a savepoint per job: the failure is undone alone, every other job in the batch lands.
fn a_failing_job_is_undone_alone_and_its_batch_lands(b: Backend) {
    let f = fx!(b);
    let a = claim_new(&f.l, "a", "{}", T0);
    let b = claim_new(&f.l, "b", "{}", T0);
    complete(&f.l, a, T0 + 1, "{}");
    let (commits_before, _) = f.l.writer_counters();
    let reruns = f.l.writer_reruns();
    // Queued without waiting, so they share batches with the purge.
    let before: Vec<_> = (0..40)
        .map(|i| f.l.claim(req(&format!("x{i}"), "{}", T0 + 2)))
        .collect();
    let purge = f.l.purge(purge_of(vec![a, b], T0 + 2));
    let after: Vec<_> = (40..80)
        .map(|i| f.l.claim(req(&format!("x{i}"), "{}", T0 + 2)))
        .collect();
    assert!(matches!(
        purge.wait(),
        Err(LedgerError::InvalidTransition { .. })
    ));
    for t in before.into_iter().chain(after) {
        claimed(t.wait().expect("claim"));
    }
    let (commits_after, _) = f.l.writer_counters();
    assert!(
        commits_after - commits_before < 81,
        "81 queued jobs took {} commits: no batching",
        commits_after - commits_before
    );
    assert_eq!(
        f.l.writer_reruns() - reruns,
        1,
        "the purge's batch ran again"
    );
    assert_eq!(
        f.l.entry(a, T0).expect("a is kept").summary.state,
        State::Completed
    );
    assert_eq!(kinds(&f.l, a), ["claim", "complete"]);
    for i in 0..80 {
        let found = f.l.entries(
            &EntryFilter {
                key: Some(format!("x{i}")),
                ..Default::default()
            },
            Page::default(),
            T0,
        );
        assert_eq!(found.expect("entries").len(), 1, "x{i}");
    }
    verify_ok(&f.l);
}

fn concurrent_claims_are_group_committed(b: Backend) {
    let f = fx!(b);
    let threads: Vec<_> = (0..16)
        .map(|t| {
            let l = f.l.clone();
            std::thread::spawn(move || {
                for i in 0..50 {
                    claimed(
                        l.claim(req(&format!("t{t}-{i}"), "{}", T0))
                            .wait()
                            .expect("claim"),
                    );
                }
            })
        })
        .collect();
    for t in threads {
        t.join().expect("thread");
    }
    let (commits, jobs) = f.l.writer_counters();
    assert_eq!(jobs, 800);
    assert!(
        commits < jobs,
        "800 claims from 16 threads took {commits} commits: no batching"
    );
    verify_ok(&f.l);
}

fn two_ledgers_on_one_database_claim_each_key_once(b: Backend) {
    let f = fx!(b);
    let other = b
        .open(&f.location, false, ChainHasher::unkeyed())
        .expect("second instance");
    let threads: Vec<_> = (0..16)
        .map(|t| {
            let l = if t % 2 == 0 {
                f.l.clone()
            } else {
                other.clone()
            };
            std::thread::spawn(move || {
                (0..40)
                    .filter(|i| {
                        matches!(
                            l.claim(req(&format!("k{i}"), "{}", T0))
                                .wait()
                                .expect("claim"),
                            ClaimOutcome::Claimed { .. }
                        )
                    })
                    .count()
            })
        })
        .collect();
    let won: usize = threads.into_iter().map(|t| t.join().expect("thread")).sum();
    assert_eq!(
        won, 40,
        "each of 40 keys claimed exactly once across both instances"
    );
    verify_ok(&f.l);
    verify_ok(&other);
}

/// Jobs queued together share a batch, and each one decides from what the jobs before it in that
/// batch did (on PostgreSQL the batch reads its rows ahead, once): a second claim of a key just
/// claimed is in flight, a claim of a key just completed is its replay.
fn jobs_in_one_batch_decide_after_the_jobs_before_them(b: Backend) {
    let f = fx!(b);
    let done = claim_new(&f.l, "done", "{}", T0);
    let completion = |at| CompleteRequest {
        entry_id: done,
        owner: "proxy-a".into(),
        response: resp(201, "{}"),
        ttl_ms: TTL,
        duplicate_window_ms: None,
        at,
    };
    let (commits_before, _) = f.l.writer_counters();
    // Queued while another connection holds PostgreSQL's write lock: the writer waits in its
    // first batch (a filler or two) and takes every job after them in the next. Two groups,
    // because a unique key refuses a second insert of "k" whatever the writer decided, and the
    // batch would then run again without reading ahead.
    let hold = || match b {
        Backend::Postgres => Some(testing::hold_write_lock(&f.location)),
        Backend::Sqlite => None,
    };
    let filler = |n: i64| -> Vec<_> {
        (0..10)
            .map(|i| f.l.claim(req(&format!("f{n}-{i}"), "{}", T0 + n)))
            .collect()
    };
    let held = hold();
    let before = filler(1);
    let first = f.l.claim(req("k", "{}", T0 + 1));
    let second = f.l.claim(req("k", "{}", T0 + 1));
    drop(held);
    for t in before {
        claimed(t.wait().expect("filler"));
    }
    let k = claimed(first.wait().expect("first claim"));
    assert!(
        matches!(second.wait(), Ok(ClaimOutcome::InFlight { entry_id, .. }) if entry_id == k),
        "a second claim of a key claimed in the same batch is in flight"
    );
    let held = hold();
    let before = filler(2);
    let completed = f.l.complete(completion(T0 + 2));
    let replay = f.l.claim(req("done", "{}", T0 + 2));
    drop(held);
    for t in before {
        claimed(t.wait().expect("filler"));
    }
    completed.wait().expect("completion");
    assert!(
        matches!(replay.wait(), Ok(ClaimOutcome::Replay { entry_id, .. }) if entry_id == done),
        "a claim of a key completed in the same batch is its replay"
    );
    // A job that fails makes the writer run its batch again without reading ahead: alone here.
    assert!(matches!(
        f.l.complete(completion(T0 + 3)).wait(),
        Err(LedgerError::InvalidTransition { .. })
    ));
    let (commits_after, _) = f.l.writer_counters();
    assert!(
        commits_after - commits_before < 24,
        "24 queued jobs took {} commits: no batching",
        commits_after - commits_before
    );
    assert_eq!(kinds(&f.l, done), ["claim", "complete"]);
    verify_ok(&f.l);
}

/// A completion in a batch sees the completions before it in that batch: of two keys that
/// completed the same request in one batch, the second is flagged the first one's duplicate.
fn a_duplicate_completed_in_the_same_batch_is_flagged(b: Backend) {
    let f = fx!(b);
    let body = r#"{"amount":100}"#;
    let first = claim_new(&f.l, "first", body, T0);
    let second = claim_new(&f.l, "second", body, T0);
    let completion = |entry_id, at| CompleteRequest {
        entry_id,
        owner: "proxy-a".into(),
        response: resp(201, "{}"),
        ttl_ms: TTL,
        duplicate_window_ms: Some(600_000),
        at,
    };
    let held = match b {
        Backend::Postgres => Some(testing::hold_write_lock(&f.location)),
        Backend::Sqlite => None,
    };
    let filler: Vec<_> = (0..5)
        .map(|i| {
            f.l.claim(req(&format!("f{i}"), &format!("{{\"n\":{i}}}"), T0 + 1))
        })
        .collect();
    let a = f.l.complete(completion(first, T0 + 1));
    let b2 = f.l.complete(completion(second, T0 + 2));
    drop(held);
    for t in filler {
        claimed(t.wait().expect("filler"));
    }
    assert_eq!(a.wait().expect("first completion").duplicate_of, None);
    assert_eq!(
        b2.wait().expect("second completion").duplicate_of,
        Some(first),
        "the second completion of the same request is the first one's duplicate"
    );
    verify_ok(&f.l);
}

/// On PostgreSQL a batch costs two round trips whatever its size: its `BEGIN` goes out with the
/// one statement that reads its claims' (or its completions') rows, a completion's with the
/// locks of the effects the instance claimed before it (the read then also looks for their
/// duplicates), and its writes go with its `COMMIT` (`ahead.rs`), so 64 first calls at once cost
/// the round trips of one. Its claims' inserts and its completions' updates each go as one
/// statement over arrays, so the statements a batch sends do not grow with it either. SQLite
/// makes none.
fn a_batch_s_round_trips_do_not_grow_with_its_size(b: Backend) {
    let f = fx!(b);
    // Claims, then completions, of `keys` submitted at once: round trips, commits, statements.
    let run = |keys: &[String], at: Millis| {
        let (trips, (commits, _)) = (f.l.writer_round_trips(), f.l.writer_counters());
        let sent = f.l.writer_statements();
        // A body of its own each: no completion is another's duplicate.
        let claims: Vec<_> = keys
            .iter()
            .map(|k| f.l.claim(req(k, &format!(r#"{{"k":"{k}"}}"#), at)))
            .collect();
        let ids: Vec<i64> = claims
            .into_iter()
            .map(|t| claimed(t.wait().expect("claim")))
            .collect();
        let completions: Vec<_> = ids
            .iter()
            .map(|id| {
                f.l.complete(CompleteRequest {
                    entry_id: *id,
                    owner: "proxy-a".into(),
                    response: resp(201, "{}"),
                    ttl_ms: TTL,
                    duplicate_window_ms: Some(600_000),
                    at: at + 1,
                })
            })
            .collect();
        for c in completions {
            c.wait().expect("complete");
        }
        (
            f.l.writer_round_trips() - trips,
            f.l.writer_counters().0 - commits,
            f.l.writer_statements() - sent,
        )
    };
    let keys = |tag: &str, n: usize| (0..n).map(|i| format!("{tag}-{i}")).collect::<Vec<_>>();
    // Every statement prepared once before counting (each on its first use).
    for (i, n) in [64, 64, 1].into_iter().enumerate() {
        run(&keys(&format!("warm{i}"), n), T0);
    }
    let (one, one_commits, one_sent) = run(&keys("one", 1), T0 + 10);
    if matches!(b, Backend::Sqlite) {
        assert_eq!((one, one_sent), (0, 0));
        return;
    }
    assert_eq!(one_commits, 2, "a claim's batch and a completion's");
    assert_eq!(
        one, 4,
        "a claim's batch and a completion's took {one} round trips, not 2 each"
    );
    let (many, commits, sent) = run(&keys("many", 64), T0 + 20);
    assert!(
        commits < 32,
        "64 claims and 64 completions took {commits} batches: not batched"
    );
    // Room for one job beside them that reads more than its rows (the second's sweep).
    assert!(
        many <= 2 * commits + 2,
        "{commits} batches of {:.0} jobs took {many} round trips",
        128.0 / commits as f64
    );
    // A batch of one job sends `one_sent / 2` statements; one of many, no more, but for a few
    // of a job beside them that reads more than its rows.
    assert!(
        sent <= one_sent / 2 * commits + 4,
        "{commits} batches of {:.0} jobs sent {sent} statements, one job's batch {}",
        128.0 / commits as f64,
        one_sent / 2
    );
}

/// On PostgreSQL two instances may complete one effect at once (one call sent under two keys):
/// each batch takes the effect's lock before it looks for a duplicate, and looks once it holds
/// it, so the one that waited sees the other's completion. Both wait here on the lock, held by
/// the test, and are let go together: each completing what it claimed (its batch locks the
/// effect with its read ahead), then what the other claimed (the completion locks it itself).
fn one_effect_completed_on_two_instances_at_once_is_flagged_once(b: Backend) {
    if !matches!(b, Backend::Postgres) {
        return;
    }
    let f = fx!(b);
    let other = b
        .open(&f.location, false, ChainHasher::unkeyed())
        .expect("a second instance");
    for (n, crossed) in [false, true].into_iter().enumerate() {
        let body = format!(r#"{{"amount":{n}}}"#);
        let ids = [
            claim_new(&f.l, &format!("a{n}"), &body, T0),
            claim_new(&other, &format!("b{n}"), &body, T0),
        ];
        let held = idemgate_ledger::testing::hold_effect_lock(&f.location, ids[0]);
        let completing = if crossed {
            [&other, &f.l]
        } else {
            [&f.l, &other]
        };
        let completions: Vec<_> = completing
            .into_iter()
            .zip(ids)
            .map(|(l, id)| {
                l.complete(CompleteRequest {
                    entry_id: id,
                    owner: "proxy-a".into(),
                    response: resp(201, "{}"),
                    ttl_ms: TTL,
                    duplicate_window_ms: Some(600_000),
                    at: T0 + 1,
                })
            })
            .collect();
        let waiting = "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted";
        wait_for(30, || match postgres_i64(&f.location, waiting) {
            Ok(2) => Ok(()),
            n => Err(format!(
                "the two completions never queued on the effect's lock (crossed: {crossed}): {n:?}"
            )),
        });
        drop(held);
        let flagged: Vec<_> = completions
            .into_iter()
            .map(|c| c.wait().expect("complete").duplicate_of)
            .collect();
        assert!(
            flagged == [None, Some(ids[0])] || flagged == [Some(ids[1]), None],
            "each completion's duplicate (crossed: {crossed}): {flagged:?}"
        );
    }
    other.close();
    verify_ok(&f.l);
}

suite!(
    one_effect_completed_on_two_instances_at_once_is_flagged_once,
    replays_waiting_together_are_read_together,
    replay_counts_land_while_the_write_lock_is_held,
    a_batch_s_round_trips_do_not_grow_with_its_size,
    jobs_in_one_batch_decide_after_the_jobs_before_them,
    a_duplicate_completed_in_the_same_batch_is_flagged,
    new_key_is_claimed_durably_then_in_flight_then_replayed,
    different_fingerprint_is_a_collision_and_keeps_the_rejected_request,
    an_entry_fingerprinted_without_its_target_matches_only_its_own_target,
    replays_are_answered_without_waiting_for_the_writer,
    concurrent_claims_are_group_committed,
    two_ledgers_on_one_database_claim_each_key_once,
    a_failing_job_is_undone_alone_and_its_batch_lands,
);
