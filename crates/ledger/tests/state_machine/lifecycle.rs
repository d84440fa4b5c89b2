//! An entry's life: leases, unknown outcomes, releases, operator resolutions, expiry, duplicate suspects, purge, redrive.

use super::*;

fn lease_passing_makes_an_entry_stuck_and_the_sweeper_logs_it_once(b: Backend) {
    let f = fx!(b);
    let id = claim_new(&f.l, "k1", "{}", T0);
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
            ttl_expired: 0,
            approvals_expired: 0
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
    let id = claim_new(&f.l, "k1", "{}", T0);
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
    let id = claim_new(&f.l, "k1", "{}", T0);
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
    let id = claim_new(&f.l, "k1", "{}", T0);
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
    let id = claim_new(&f.l, "k1", "{}", T0);
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
    let id = claim_new(&f.l, "k1", "{}", T0);
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
    let id = claim_new(&f.l, "k1", "{}", T0);
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
    let id = claim_new(&f.l, "k1", "{}", T0);
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

/// The overview's expired count (logged expiries kept by triggers, the rest counted) agrees with
/// the expired filter through an expiry, its sweep, a new claim of the key, and a purge.
fn the_expired_count_follows_sweeps_claims_and_purges(b: Backend) {
    let f = fx!(b);
    let ids: Vec<i64> = ["a", "b", "c"]
        .iter()
        .map(|k| {
            let id = claim_new(&f.l, k, "{}", T0);
            complete(&f.l, id, T0 + 1, "{}");
            id
        })
        .collect();
    let expired = EntryFilter {
        expired: true,
        ..Default::default()
    };
    let counted = |at: Millis, want: i64| {
        let listed = f.l.entries(&expired, Page::default(), at).expect("list");
        assert_eq!(listed.len() as i64, want, "listed as expired at {at}");
        assert_eq!(
            f.l.stats(at, 0).expect("stats").expired,
            want,
            "counted at {at}"
        );
    };
    let due = T0 + 1 + TTL;
    counted(due - 1, 0);
    counted(due, 3);
    assert_eq!(f.l.sweep(due).wait().expect("sweep").ttl_expired, 3);
    counted(due, 3);
    // A new claim of an expired key makes its entry pending: no longer expired.
    claimed(
        f.l.claim(req("a", r#"{"n":2}"#, due + 1))
            .wait()
            .expect("claim"),
    );
    counted(due + 1, 2);
    let purged = f.l.purge(PurgeRequest {
        ids: vec![ids[1]],
        expired_by: Some(due + 2),
        actor: actor(),
        at: due + 2,
    });
    assert_eq!(purged.wait().expect("purge"), vec![ids[1]]);
    counted(due + 2, 1);
    complete(&f.l, ids[0], due + 3, "{}");
    counted(due + 3, 1);
    counted(due + 3 + TTL, 2);
    assert_eq!(
        f.l.sweep(due + 3 + TTL).wait().expect("sweep").ttl_expired,
        1
    );
    counted(due + 3 + TTL, 2);
    verify_ok(&f.l);
}

fn same_effect_under_another_key_is_flagged_as_a_duplicate_suspect(b: Backend) {
    let f = fx!(b);
    let body = r#"{"customer":"cus_1","amount":4999}"#;
    let a = claim_new(&f.l, "key-a", body, T0);
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
        inc[0].entries.iter().map(|e| e.id).collect::<Vec<_>>(),
        [a, b],
        "the incident is the first entry and its suspects (not c, outside the window)"
    );
    assert_eq!((inc[0].id, inc[0].open), (a, true));
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
    let a = claim_new(&f.l, "a", "{}", T0);
    let b = claim_new(&f.l, "b", "{}", T0);
    complete(&f.l, a, T0 + 1, "{}");
    let pr = |ids: Vec<i64>, only_expired: bool| PurgeRequest {
        ids,
        expired_by: only_expired.then_some(T0 + 2),
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

suite!(
    lease_passing_makes_an_entry_stuck_and_the_sweeper_logs_it_once,
    outcome_unknown_is_stuck_immediately_until_an_operator_resolves_it,
    release_lets_the_key_run_again_with_the_next_attempt,
    only_the_lease_owner_reports_outcomes,
    operator_failure_is_final_and_returns_the_operator_response,
    operator_release_of_a_stuck_entry_allows_a_new_execution,
    resolving_needs_an_operator_and_a_reason,
    ttl_expiry_is_swept_and_an_expired_key_runs_again,
    the_expired_count_follows_sweeps_claims_and_purges,
    same_effect_under_another_key_is_flagged_as_a_duplicate_suspect,
    purge_removes_entries_but_keeps_the_chain_verifiable,
    redrive_rearms_a_stuck_entry_with_its_stored_request,
);
