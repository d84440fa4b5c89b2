//! The ledger's behavioural suite: every transition of the entry state machine, with the log
//! checked after — run on both backends, a real SQLite file and a real PostgreSQL database (the
//! test cluster of `tests/pg/cluster.sh`, named by IDEMGATE_TEST_PG).

use std::sync::Arc;

use idemgate_ledger::testing::{fresh_postgres, postgres_exec};
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
    l.events(
        &EventFilter::default(),
        Page {
            before: None,
            limit: 100_000,
        },
    )
    .expect("events")
}

/// The sequence numbers `filter` finds, newest first, walked `limit` a page with the keyset cursor
/// as the console walks them.
fn walk_events(l: &Ledger, filter: &EventFilter, limit: usize) -> Vec<i64> {
    let mut got = Vec::new();
    let mut before = None;
    loop {
        let page = l.events(filter, Page { before, limit }).expect("events");
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
                Page {
                    limit: 100_000,
                    before: None,
                },
                T0,
            )
            .expect("entries")
            .len();
        assert_eq!(n, listed as i64, "entry count of {state:?}");
    }
}

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

    let at_route = claimed(f.l.claim(req("k-route", "{}", T0)).wait().expect("claim"));
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

fn lease_passing_makes_an_entry_stuck_and_the_sweeper_logs_it_once(b: Backend) {
    let f = fx!(b);
    let id = claimed(f.l.claim(req("k1", "{}", T0)).wait().expect("claim"));
    let stuck = EntryFilter {
        stuck: true,
        ..Default::default()
    };
    assert!(f
        .l
        .entries(&stuck, Page::default(), T0 + LEASE - 1)
        .expect("list")
        .is_empty());
    let listed =
        f.l.entries(&stuck, Page::default(), T0 + LEASE)
            .expect("list");
    assert_eq!(listed.len(), 1);
    assert!(listed[0].stuck);
    assert_eq!(
        f.l.claim(req("k1", "{}", T0 + LEASE + 1))
            .wait()
            .expect("claim"),
        ClaimOutcome::Stuck { entry_id: id }
    );
    let r = f.l.sweep(T0 + LEASE + 5).wait().expect("sweep");
    assert_eq!(
        r,
        SweepReport {
            lease_expired: 1,
            ttl_expired: 0
        }
    );
    let r = f.l.sweep(T0 + LEASE + 6).wait().expect("sweep");
    assert_eq!(r, SweepReport::default(), "logged once");
    assert_eq!(kinds(&f.l, id), ["claim", "lease_expired"]);
    // The original holder can no longer complete once an operator takes over (see resolve tests),
    // but until then a late completion by the owner still lands.
    complete(&f.l, id, T0 + LEASE + 10, "{}");
    assert_eq!(
        f.l.entry(id, T0 + LEASE + 20).expect("entry").summary.state,
        State::Completed
    );
    verify_ok(&f.l);
}

fn outcome_unknown_is_stuck_immediately_until_an_operator_resolves_it(b: Backend) {
    let f = fx!(b);
    let id = claimed(f.l.claim(req("k1", "{}", T0)).wait().expect("claim"));
    f.l.mark_unknown(OwnerReport {
        entry_id: id,
        owner: "proxy-a".into(),
        error: "timeout".into(),
        at: T0 + 10,
    })
    .wait()
    .expect("unknown");
    assert_eq!(
        f.l.claim(req("k1", "{}", T0 + 20)).wait().expect("claim"),
        ClaimOutcome::Stuck { entry_id: id }
    );
    let e = f.l.entry(id, T0 + 20).expect("entry").summary;
    assert!(e.stuck && e.outcome_unknown);
    assert_eq!(e.last_error.as_deref(), Some("timeout"));

    let s =
        f.l.resolve(ResolveRequest {
            entry_id: id,
            resolution: Resolution::Completed {
                response: resp(200, r#"{"id":"ch_found"}"#),
                external_ref: Some("ch_found".into()),
            },
            actor: actor(),
            ttl_ms: TTL,
            at: T0 + 30,
        })
        .wait()
        .expect("resolve");
    assert_eq!(s.state, State::Completed);
    assert!(!s.stuck);
    // Retries now get the operator's recorded response.
    match f.l.claim(req("k1", "{}", T0 + 40)).wait().expect("claim") {
        ClaimOutcome::Replay { response, .. } => assert_eq!(response.body, br#"{"id":"ch_found"}"#),
        o => panic!("expected Replay, got {o:?}"),
    }
    // The original holder lost its claim.
    let late = f.l.complete(CompleteRequest {
        entry_id: id,
        owner: "proxy-a".into(),
        response: resp(201, "{}"),
        ttl_ms: TTL,
        duplicate_window_ms: None,
        at: T0 + 50,
    });
    assert!(matches!(
        late.wait(),
        Err(LedgerError::InvalidTransition { .. })
    ));
    let ev =
        f.l.events(
            &EventFilter {
                kind: Some("resolve".into()),
                ..Default::default()
            },
            Page::default(),
        )
        .expect("events");
    assert_eq!(ev.len(), 1);
    assert_eq!(ev[0].operator.as_deref(), Some("alice"));
    assert_eq!(ev[0].reason.as_deref(), Some("checked upstream"));
    assert_eq!(kinds(&f.l, id), ["claim", "outcome_unknown", "resolve"]);
    verify_ok(&f.l);
}

fn release_lets_the_key_run_again_with_the_next_attempt(b: Backend) {
    let f = fx!(b);
    let id = claimed(f.l.claim(req("k1", "{}", T0)).wait().expect("claim"));
    f.l.record_attempt(
        OwnerReport {
            entry_id: id,
            owner: "proxy-a".into(),
            error: "503".into(),
            at: T0 + 1,
        },
        2,
        LEASE,
    )
    .wait()
    .expect("attempt");
    assert_eq!(
        f.l.entry(id, T0 + 1)
            .expect("entry")
            .summary
            .lease_expires_at,
        Some(T0 + 1 + LEASE),
        "a retry renews the lease"
    );
    f.l.release(OwnerReport {
        entry_id: id,
        owner: "proxy-a".into(),
        error: "503 x3".into(),
        at: T0 + 2,
    })
    .wait()
    .expect("release");
    assert_eq!(
        f.l.entry(id, T0 + 3).expect("entry").summary.state,
        State::Released
    );
    match f.l.claim(req("k1", "{}", T0 + 4)).wait().expect("claim") {
        ClaimOutcome::Claimed { entry_id, attempt } => {
            assert_eq!(entry_id, id);
            assert_eq!(attempt, 3);
        }
        o => panic!("expected Claimed, got {o:?}"),
    }
    assert_eq!(kinds(&f.l, id), ["claim", "attempt", "release", "claim"]);
    verify_ok(&f.l);
}

fn only_the_lease_owner_reports_outcomes(b: Backend) {
    let f = fx!(b);
    let id = claimed(f.l.claim(req("k1", "{}", T0)).wait().expect("claim"));
    let r =
        f.l.release(OwnerReport {
            entry_id: id,
            owner: "proxy-b".into(),
            error: "x".into(),
            at: T0 + 1,
        })
        .wait();
    assert!(matches!(r, Err(LedgerError::LeaseLost(i)) if i == id));
    assert_eq!(
        kinds(&f.l, id),
        ["claim"],
        "a refused write appends nothing"
    );
    verify_ok(&f.l);
}

fn operator_failure_is_final_and_returns_the_operator_response(b: Backend) {
    let f = fx!(b);
    let id = claimed(f.l.claim(req("k1", "{}", T0)).wait().expect("claim"));
    f.l.mark_unknown(OwnerReport {
        entry_id: id,
        owner: "proxy-a".into(),
        error: "reset".into(),
        at: T0 + 1,
    })
    .wait()
    .expect("unknown");
    f.l.resolve(ResolveRequest {
        entry_id: id,
        resolution: Resolution::Failed {
            response: Some(resp(410, r#"{"error":"order cancelled"}"#)),
        },
        actor: actor(),
        ttl_ms: TTL,
        at: T0 + 2,
    })
    .wait()
    .expect("resolve");
    match f.l.claim(req("k1", "{}", T0 + 3)).wait().expect("claim") {
        ClaimOutcome::Failed { entry_id, response } => {
            assert_eq!(entry_id, id);
            assert_eq!(response.expect("response").status, 410);
        }
        o => panic!("expected Failed, got {o:?}"),
    }
    verify_ok(&f.l);
}

fn operator_release_of_a_stuck_entry_allows_a_new_execution(b: Backend) {
    let f = fx!(b);
    let id = claimed(f.l.claim(req("k1", "{}", T0)).wait().expect("claim"));
    let rr = |at| ResolveRequest {
        entry_id: id,
        resolution: Resolution::Released,
        actor: actor(),
        ttl_ms: TTL,
        at,
    };
    // In flight: refused, nothing logged.
    assert!(matches!(
        f.l.resolve(rr(T0 + 1)).wait(),
        Err(LedgerError::InvalidTransition { .. })
    ));
    f.l.resolve(rr(T0 + LEASE + 1))
        .wait()
        .expect("resolve stuck");
    assert!(matches!(
        f.l.claim(req("k1", "{}", T0 + LEASE + 2)).wait(),
        Ok(ClaimOutcome::Claimed { attempt: 2, .. })
    ));
    assert_eq!(kinds(&f.l, id), ["claim", "resolve", "claim"]);
    verify_ok(&f.l);
}

fn resolving_needs_an_operator_and_a_reason(b: Backend) {
    let f = fx!(b);
    let id = claimed(f.l.claim(req("k1", "{}", T0)).wait().expect("claim"));
    let r = f.l.resolve(ResolveRequest {
        entry_id: id,
        resolution: Resolution::Released,
        actor: Actor {
            operator: "alice".into(),
            reason: "  ".into(),
        },
        ttl_ms: TTL,
        at: T0 + LEASE + 1,
    });
    assert!(matches!(r.wait(), Err(LedgerError::MissingActor)));
    assert_eq!(kinds(&f.l, id), ["claim"]);
    verify_ok(&f.l);
}

fn ttl_expiry_is_swept_and_an_expired_key_runs_again(b: Backend) {
    let f = fx!(b);
    let id = claimed(f.l.claim(req("k1", "{}", T0)).wait().expect("claim"));
    complete(&f.l, id, T0 + 10, r#"{"v":1}"#);
    let exp = EntryFilter {
        expired: true,
        ..Default::default()
    };
    assert!(f
        .l
        .entries(&exp, Page::default(), T0 + 10 + TTL - 1)
        .expect("list")
        .is_empty());
    assert_eq!(
        f.l.entries(&exp, Page::default(), T0 + 10 + TTL)
            .expect("list")
            .len(),
        1
    );
    let soon = EntryFilter {
        expiring_within: Some(60_000),
        ..Default::default()
    };
    assert_eq!(
        f.l.entries(&soon, Page::default(), T0 + TTL - 30_000)
            .expect("list")
            .len(),
        1
    );
    // The overview counts it from the moment its TTL passes, before and after the sweep.
    let expired = |at| f.l.stats(at, 0).expect("stats").expired;
    assert_eq!(expired(T0 + 10 + TTL - 1), 0);
    assert_eq!(expired(T0 + 10 + TTL), 1);
    assert_eq!(
        f.l.sweep(T0 + 10 + TTL).wait().expect("sweep").ttl_expired,
        1
    );
    assert_eq!(expired(T0 + 10 + TTL), 1);
    // A new request with the expired key (even with another body) executes again.
    assert!(matches!(
        f.l.claim(req("k1", r#"{"new":true}"#, T0 + 20 + TTL)).wait().expect("claim"),
        ClaimOutcome::Claimed { entry_id, attempt: 1 } if entry_id == id
    ));
    assert_eq!(kinds(&f.l, id), ["claim", "complete", "expired", "claim"]);
    verify_ok(&f.l);
}

fn same_effect_under_another_key_is_flagged_as_a_duplicate_suspect(b: Backend) {
    let f = fx!(b);
    let body = r#"{"customer":"cus_1","amount":4999}"#;
    let a = claimed(f.l.claim(req("key-a", body, T0)).wait().expect("claim"));
    complete(&f.l, a, T0 + 10, "{}");
    let b = claimed(
        f.l.claim(req("key-b", body, T0 + 60_000))
            .wait()
            .expect("claim"),
    );
    assert_eq!(complete(&f.l, b, T0 + 60_010, "{}").duplicate_of, Some(a));
    // Outside the window: not a suspect.
    let c = claimed(
        f.l.claim(req("key-c", body, T0 + 3_000_000))
            .wait()
            .expect("claim"),
    );
    assert_eq!(complete(&f.l, c, T0 + 3_000_010, "{}").duplicate_of, None);
    let dups =
        f.l.entries(
            &EntryFilter {
                duplicates: true,
                ..Default::default()
            },
            Page::default(),
            T0,
        )
        .expect("list");
    assert_eq!(dups.iter().map(|e| e.id).collect::<Vec<_>>(), [b, a]);
    let inc = f.l.incidents(Page::default(), T0).expect("incidents");
    assert_eq!(inc.len(), 1);
    assert_eq!(
        inc[0].entries.len(),
        3,
        "the incident lists every completion of that effect"
    );
    // With the reject policy the second key is refused before it executes.
    let mut r = req("key-d", body, T0 + 3_000_100);
    r.reject_duplicates_within_ms = Some(600_000);
    assert_eq!(
        f.l.claim(r).wait().expect("claim"),
        ClaimOutcome::ProbableDuplicate {
            entry_id: c,
            key: "key-c".into()
        }
    );
    assert!(f
        .l
        .entries(
            &EntryFilter {
                key: Some("key-d".into()),
                ..Default::default()
            },
            Page::default(),
            T0
        )
        .expect("list")
        .is_empty());
    // The policy refuses other keys, not the key that did the effect: its retry is a replay.
    let mut r = req("key-c", body, T0 + 3_000_200);
    r.reject_duplicates_within_ms = Some(600_000);
    assert!(matches!(
        f.l.claim(r).wait().expect("claim"),
        ClaimOutcome::Replay { entry_id, .. } if entry_id == c
    ));
    // Nor a new key with another effect.
    let mut r = req(
        "key-e",
        r#"{"customer":"cus_2","amount":1}"#,
        T0 + 3_000_300,
    );
    r.reject_duplicates_within_ms = Some(600_000);
    claimed(f.l.claim(r).wait().expect("claim"));
    verify_ok(&f.l);
}

fn purge_removes_entries_but_keeps_the_chain_verifiable(b: Backend) {
    let f = fx!(b);
    let a = claimed(f.l.claim(req("a", "{}", T0)).wait().expect("claim"));
    let b = claimed(f.l.claim(req("b", "{}", T0)).wait().expect("claim"));
    complete(&f.l, a, T0 + 1, "{}");
    let pr = |ids: Vec<i64>, only_expired| PurgeRequest {
        ids,
        only_expired,
        actor: actor(),
        at: T0 + 2,
    };
    // A pending entry cannot be purged; the whole request is refused.
    assert!(matches!(
        f.l.purge(pr(vec![a, b], false)).wait(),
        Err(LedgerError::InvalidTransition { .. })
    ));
    assert!(f.l.entry(a, T0).is_ok());
    // Only-expired skips what has not expired.
    assert_eq!(
        f.l.purge(pr(vec![a], true)).wait().expect("purge"),
        Vec::<i64>::new()
    );
    assert_eq!(
        f.l.purge(pr(vec![a], false)).wait().expect("purge"),
        vec![a]
    );
    assert!(matches!(
        f.l.entry(a, T0),
        Err(LedgerError::EntryNotFound(_))
    ));
    let ev =
        f.l.events(
            &EventFilter {
                kind: Some("purge".into()),
                ..Default::default()
            },
            Page::default(),
        )
        .expect("events");
    assert_eq!(ev.len(), 1);
    assert_eq!(ev[0].operator.as_deref(), Some("alice"));
    verify_ok(&f.l);
}

/// A key filter finds exactly the events and entries under that key, though the log's key index
/// holds no claim and no completion (SQLite migration 8): checked against every event read
/// unfiltered, with a refused duplicate's event (it names another key's entry), a purged entry,
/// one key in two scopes, and a key that ran twice.
fn a_key_finds_exactly_its_entries_and_events(b: Backend) {
    let f = fx!(b);
    let a = claimed(
        f.l.claim(req("k-a", r#"{"n":1}"#, T0))
            .wait()
            .expect("claim"),
    );
    complete(&f.l, a, T0 + 1, "{}");
    let mut d = req("k-d", r#"{"n":1}"#, T0 + 2);
    d.reject_duplicates_within_ms = Some(600_000);
    assert!(matches!(
        f.l.claim(d).wait().expect("claim"),
        ClaimOutcome::ProbableDuplicate { entry_id, .. } if entry_id == a
    ));
    let purged = claimed(
        f.l.claim(req("k-b", r#"{"n":2}"#, T0 + 3))
            .wait()
            .expect("claim"),
    );
    complete(&f.l, purged, T0 + 4, "{}");
    let pr = PurgeRequest {
        ids: vec![purged],
        only_expired: false,
        actor: actor(),
        at: T0 + 5,
    };
    f.l.purge(pr).wait().expect("purge");
    let mut other_scope = req("k-a", r#"{"n":3}"#, T0 + 6);
    other_scope.scope = "agent-2".into();
    let c = claimed(f.l.claim(other_scope).wait().expect("claim"));
    complete(&f.l, c, T0 + 7, "{}");
    let r = claimed(
        f.l.claim(req("k-r", r#"{"n":4}"#, T0 + 8))
            .wait()
            .expect("claim"),
    );
    let report = OwnerReport {
        entry_id: r,
        owner: "proxy-a".into(),
        error: "503".into(),
        at: T0 + 9,
    };
    f.l.release(report).wait().expect("release");
    claimed(
        f.l.claim(req("k-r", r#"{"n":4}"#, T0 + 10))
            .wait()
            .expect("claim"),
    );
    complete(&f.l, r, T0 + 11, "{}");

    let all = all_events(&f.l);
    let page = |key: &str, kind: Option<&str>, limit: usize| {
        let filter = EventFilter {
            key: Some(key.into()),
            kind: kind.map(Into::into),
            ..Default::default()
        };
        walk_events(&f.l, &filter, limit)
    };
    for key in ["k-a", "k-b", "k-d", "k-r", "k-none"] {
        for kind in [None, Some("complete"), Some("claim")] {
            let truth: Vec<i64> = all
                .iter()
                .filter(|e| e.key == key && kind.is_none_or(|k| e.kind == k))
                .map(|e| e.seq)
                .collect();
            assert_eq!(page(key, kind, 100), truth, "{key} {kind:?}");
            assert_eq!(page(key, kind, 1), truth, "{key} {kind:?}, one a page");
        }
    }
    assert_eq!(
        all.iter()
            .filter(|e| e.key == "k-a" && e.kind == "complete")
            .count(),
        2,
        "both completions under k-a are in the truth the filter is checked against"
    );
    let entries = |key: &str| {
        let filter = EntryFilter {
            key: Some(key.into()),
            ..Default::default()
        };
        let got = f.l.entries(&filter, Page::default(), T0).expect("entries");
        got.iter().map(|e| e.id).collect::<Vec<_>>()
    };
    assert_eq!(entries("k-a"), [c, a]);
    assert_eq!(
        entries("k-d"),
        Vec::<i64>::new(),
        "the refused duplicate made no entry"
    );
    assert_eq!(entries("k-b"), Vec::<i64>::new(), "purged");
    assert_eq!(entries("k-r"), [r]);
    verify_ok(&f.l);
}

/// On SQLite a replay of a completed key is answered from a read, not by the writer: 200 replays
/// from 8 threads take far fewer than 200 writer jobs (only the jobs that write their counts), and
/// the counts still add up. A changed body, or an expired key, still goes to the writer.
fn replays_are_answered_without_waiting_for_the_writer(b: Backend) {
    let f = fx!(b);
    let id = claimed(f.l.claim(req("r", r#"{"n":1}"#, T0)).wait().expect("claim"));
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
    match b {
        Backend::Sqlite => assert!(jobs < 100, "200 replays took {jobs} writer jobs"),
        Backend::Postgres => assert_eq!(jobs, 201, "PostgreSQL replays go through the writer"),
    }
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

/// The log search (a case-insensitive substring of key, route, scope, reason, detail or operator)
/// finds exactly what a plain filter over every event finds, newest first, page by page — on
/// SQLite through the skip index of blocks of 1024 events (old blocks, the unindexed tail, and
/// events added after the index was built), on PostgreSQL by a scan.
fn log_search_finds_exactly_the_matching_events(b: Backend) {
    let f = fx!(b);
    let claim_all = |from: usize, to: usize| {
        let tickets: Vec<_> = (from..to)
            .map(|i| {
                let mut r = req(
                    &format!("Order-{i:05}-{:08x}", i * 2_654_435_761 % (1 << 32)),
                    "{}",
                    T0 + i as i64,
                );
                r.route = if i % 3 == 0 {
                    "refunds".into()
                } else {
                    "charges".into()
                };
                r
            })
            .map(|r| f.l.claim(r))
            .collect();
        for t in tickets {
            claimed(t.wait().expect("claim"));
        }
    };
    claim_all(0, 2_500);
    let check = |term: &str, limit: usize| {
        let want: Vec<i64> = all_events(&f.l)
            .into_iter()
            .filter(|e| {
                let t = term.to_ascii_lowercase();
                [
                    Some(&e.key),
                    Some(&e.route),
                    Some(&e.scope),
                    e.reason.as_ref(),
                    Some(&e.detail),
                    e.operator.as_ref(),
                ]
                .into_iter()
                .flatten()
                .any(|v| v.to_ascii_lowercase().contains(&t))
            })
            .map(|e| e.seq)
            .collect();
        let filter = EventFilter {
            search: Some(term.into()),
            ..Default::default()
        };
        let got = walk_events(&f.l, &filter, limit);
        assert_eq!(got, want, "search {term:?}");
        got.len()
    };
    // One key in the first block, any case; a route (a third of the log); part of the detail;
    // under 3 characters (no narrowing); nothing.
    assert_eq!(check("order-00007-", 10), 1);
    assert_eq!(check("ORDER-00007-", 10), 1);
    assert_eq!(check("refunds", 100), 834);
    assert_eq!(check("\"attempt\":1", 1000), 2_500);
    assert!(check("7-", 50) > 0);
    assert_eq!(check("no-such-thing", 10), 0);
    // Events after the index was built: found, in the tail and in blocks added later.
    claim_all(2_500, 3_200);
    assert_eq!(check("order-03111-", 10), 1);
    assert_eq!(check("order-02001-", 10), 1);
    assert_eq!(check("refunds", 1000), 1_067);
    verify_ok(&f.l);
}

/// A batch runs without savepoints first; a job that fails after changing something (this purge
/// deletes `a`, then refuses the pending `b`) makes the writer roll the batch back and run it
/// again with a savepoint per job: the failure is undone alone, every other job in the batch lands.
fn a_failing_job_is_undone_alone_and_its_batch_lands(b: Backend) {
    let f = fx!(b);
    let a = claimed(f.l.claim(req("a", "{}", T0)).wait().expect("claim"));
    let b = claimed(f.l.claim(req("b", "{}", T0)).wait().expect("claim"));
    complete(&f.l, a, T0 + 1, "{}");
    let (commits_before, _) = f.l.writer_counters();
    // Queued without waiting, so they share batches with the purge.
    let before: Vec<_> = (0..40)
        .map(|i| f.l.claim(req(&format!("x{i}"), "{}", T0 + 2)))
        .collect();
    let purge = f.l.purge(PurgeRequest {
        ids: vec![a, b],
        only_expired: false,
        actor: actor(),
        at: T0 + 2,
    });
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

fn redrive_rearms_a_stuck_entry_with_its_stored_request(b: Backend) {
    let f = fx!(b);
    let id = claimed(
        f.l.claim(req("k1", r#"{"amount":1}"#, T0))
            .wait()
            .expect("claim"),
    );
    let rd = |at| RedriveRequest {
        entry_id: id,
        owner: "proxy-b".into(),
        lease_ms: LEASE,
        actor: actor(),
        at,
    };
    assert!(matches!(
        f.l.redrive(rd(T0 + 1)).wait(),
        Err(LedgerError::InvalidTransition { .. })
    ));
    let r = f.l.redrive(rd(T0 + LEASE + 1)).wait().expect("redrive");
    assert_eq!(r.attempt, 2);
    assert_eq!(r.request.body, br#"{"amount":1}"#);
    // It is now leased by the re-driver, who completes it.
    f.l.complete(CompleteRequest {
        entry_id: id,
        owner: "proxy-b".into(),
        response: resp(201, "{}"),
        ttl_ms: TTL,
        duplicate_window_ms: None,
        at: T0 + LEASE + 2,
    })
    .wait()
    .expect("complete");
    assert_eq!(kinds(&f.l, id), ["claim", "replay", "complete"]);
    verify_ok(&f.l);
}

fn keyset_paging_walks_every_entry_once(b: Backend) {
    let f = fx!(b);
    let tickets: Vec<_> = (0..250)
        .map(|i| f.l.claim(req(&format!("k{i}"), "{}", T0 + i)))
        .collect();
    for t in tickets {
        claimed(t.wait().expect("claim"));
    }
    let mut seen = Vec::new();
    let mut before = None;
    loop {
        let page =
            f.l.entries(&EntryFilter::default(), Page { before, limit: 100 }, T0)
                .expect("page");
        if page.is_empty() {
            break;
        }
        before = page.last().map(|e| e.id);
        seen.extend(page.into_iter().map(|e| e.id));
    }
    let mut sorted = seen.clone();
    sorted.sort_unstable_by(|a, b| b.cmp(a));
    sorted.dedup();
    assert_eq!(seen, sorted);
    assert_eq!(seen.len(), 250);
    let stats = f.l.stats(T0, 24).expect("stats");
    assert_eq!(
        stats
            .entries_by_state
            .iter()
            .find(|(s, _)| *s == State::Pending)
            .map(|x| x.1),
        Some(250)
    );
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
    claimed(f.l.claim(req("k1", "{}", T0)).wait().expect("claim"));
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
    }
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

fn a_keyed_log_refuses_writes_without_its_key_and_detects_plain_forgeries(b: Backend) {
    let dir = tempfile::tempdir().expect("tempdir");
    let Some(path) = b.fresh(&dir, "keyed") else {
        return;
    };
    let keyed = ChainHasher::keyed(b"s3cret".to_vec());
    let l = b.open(&path, true, keyed.clone()).expect("open");
    claimed(l.claim(req("k1", "{}", T0)).wait().expect("claim"));
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
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while size() < before + 2_000_000 {
        assert!(
            std::time::Instant::now() < deadline,
            "the database file stayed at {} bytes (was {before}): no checkpoint",
            size()
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    verify_ok(&f.l);
}

suite!(
    new_key_is_claimed_durably_then_in_flight_then_replayed,
    different_fingerprint_is_a_collision_and_keeps_the_rejected_request,
    an_entry_fingerprinted_without_its_target_matches_only_its_own_target,
    lease_passing_makes_an_entry_stuck_and_the_sweeper_logs_it_once,
    outcome_unknown_is_stuck_immediately_until_an_operator_resolves_it,
    release_lets_the_key_run_again_with_the_next_attempt,
    only_the_lease_owner_reports_outcomes,
    operator_failure_is_final_and_returns_the_operator_response,
    operator_release_of_a_stuck_entry_allows_a_new_execution,
    resolving_needs_an_operator_and_a_reason,
    ttl_expiry_is_swept_and_an_expired_key_runs_again,
    same_effect_under_another_key_is_flagged_as_a_duplicate_suspect,
    purge_removes_entries_but_keeps_the_chain_verifiable,
    a_key_finds_exactly_its_entries_and_events,
    a_failing_job_is_undone_alone_and_its_batch_lands,
    replays_are_answered_without_waiting_for_the_writer,
    log_search_finds_exactly_the_matching_events,
    redrive_rearms_a_stuck_entry_with_its_stored_request,
    keyset_paging_walks_every_entry_once,
    concurrent_claims_are_group_committed,
    a_database_newer_than_the_binary_is_refused,
    a_keyed_log_refuses_writes_without_its_key_and_detects_plain_forgeries,
    a_missing_ledger_is_not_created_by_readers,
    the_log_is_append_only_in_the_database_itself,
    two_ledgers_on_one_database_claim_each_key_once,
);
