//! Calls held for approval: they run only once enough distinct operators approve, each approved
//! call is taken to be forwarded once, and a rejected or lapsed one never runs.

use super::*;

fn ask(needed: u32, expires_ms: i64, approvers: Option<&[&str]>) -> ApprovalAsk {
    ApprovalAsk {
        policy: "charges".into(),
        policy_hash: "hash-1".into(),
        needed,
        expires_ms,
        approvers: approvers.map(|a| a.iter().map(|s| (*s).to_owned()).collect()),
        unevaluated: None,
    }
}

fn held(l: &Ledger, key: &str, a: ApprovalAsk, at: Millis) -> i64 {
    let r = ClaimRequest {
        approval: Some(a),
        ..req(key, r#"{"amount":60000}"#, at)
    };
    match l.claim(r).wait().expect("claim") {
        ClaimOutcome::AwaitingApproval { entry_id, .. } => entry_id,
        other => panic!("expected AwaitingApproval, got {other:?}"),
    }
}

fn decide(l: &Ledger, id: i64, approve: bool, who: &str, at: Millis) -> Result<Approval> {
    l.decide(DecideRequest {
        entry_id: id,
        approve,
        actor: Actor {
            operator: who.into(),
            reason: "looked at it".into(),
        },
        fingerprint: None,
        at,
    })
    .wait()
}

fn refused(r: Result<Approval>) -> String {
    match r {
        Err(e @ (LedgerError::ApprovalRefused(_) | LedgerError::InvalidTransition { .. })) => {
            e.to_string()
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
}

fn a_held_call_runs_once_after_distinct_approvers(b: Backend) {
    let f = fx!(b);
    let id = held(&f.l, "k1", ask(2, 60_000, None), T0);
    let e = f.l.entry(id, T0).expect("entry");
    assert_eq!(e.summary.state, State::AwaitingApproval);
    assert_eq!(e.lease_owner, None, "nothing runs, so no lease");
    let a = e.approval.expect("approval");
    assert_eq!((a.needed, a.expires_at, a.end), (2, T0 + 60_000, None));
    // A retry attaches to the same entry; nothing is approved, so nothing is taken.
    assert_eq!(
        f.l.claim(req("k1", r#"{"amount":60000}"#, T0 + 1))
            .wait()
            .expect("claim"),
        ClaimOutcome::AwaitingApproval {
            entry_id: id,
            expires_at: T0 + 60_000,
            requested: false
        }
    );
    let take = |owner: &str, at| {
        f.l.take_approved(owner.into(), LEASE, at, 16)
            .wait()
            .expect("take")
    };
    assert!(take("proxy-b", T0 + 2).is_empty());
    // One OS account is one operator, whatever name is typed; the same name twice is refused.
    let a = decide(&f.l, id, true, "alice (OS user ada)", T0 + 3).expect("approve");
    assert_eq!((a.approved_by.len(), a.end), (1, None));
    assert!(refused(decide(&f.l, id, true, "bob (OS user ada)", T0 + 4))
        .contains("ada already approved"));
    assert!(
        refused(decide(&f.l, id, true, "alice (OS user ada)", T0 + 4)).contains("already approved")
    );
    let wrong = f.l.decide(DecideRequest {
        entry_id: id,
        approve: true,
        actor: actor(),
        fingerprint: Some("another request".into()),
        at: T0 + 4,
    });
    assert!(refused(wrong.wait()).contains("another request than the one decided on"));
    let a = decide(&f.l, id, true, "carol", T0 + 5).expect("approve");
    assert_eq!(a.end, Some(ApprovalEnd::Approved));
    assert_eq!(a.approved_by, ["alice (OS user ada)", "carol"]);
    assert!(refused(decide(&f.l, id, true, "dan", T0 + 6)).contains("approved already"));
    // Approved, not yet taken: a retry still waits. Taken once, by whichever instance asks.
    assert!(matches!(
        f.l.claim(req("k1", r#"{"amount":60000}"#, T0 + 6))
            .wait()
            .expect("claim"),
        ClaimOutcome::AwaitingApproval { .. }
    ));
    let taken = take("proxy-b", T0 + 7);
    assert_eq!(taken.len(), 1);
    assert_eq!(taken[0].entry.id, id);
    assert_eq!(taken[0].request.body, br#"{"amount":60000}"#);
    assert!(take("proxy-a", T0 + 8).is_empty(), "taken once");
    let e = f.l.entry(id, T0 + 8).expect("entry");
    assert_eq!(e.summary.state, State::Pending);
    assert_eq!(
        e.summary.lease_expires_at,
        Some(T0 + 7 + LEASE),
        "the lease counts from the release"
    );
    f.l.complete(CompleteRequest {
        owner: "proxy-b".into(),
        ..complete_req(id, T0 + 9)
    })
    .wait()
    .expect("complete");
    assert!(matches!(
        f.l.claim(req("k1", r#"{"amount":60000}"#, T0 + 10)).wait().expect("claim"),
        ClaimOutcome::Replay { entry_id, .. } if entry_id == id
    ));
    assert_eq!(
        kinds(&f.l, id),
        [
            "claim",
            "approval_requested",
            "approved",
            "approved",
            "claim",
            "complete"
        ]
    );
    let approved = all_events(&f.l)
        .into_iter()
        .filter(|e| e.kind == "approved");
    let who: Vec<_> = approved.map(|e| e.operator.unwrap_or_default()).collect();
    assert_eq!(who, ["carol", "alice (OS user ada)"]);
    verify_ok(&f.l);
}

fn complete_req(id: i64, at: Millis) -> CompleteRequest {
    CompleteRequest {
        entry_id: id,
        owner: "proxy-a".into(),
        response: resp(201, r#"{"id":"re_1"}"#),
        ttl_ms: TTL,
        duplicate_window_ms: None,
        at,
    }
}

fn a_rejected_or_lapsed_call_never_runs(b: Backend) {
    let f = fx!(b);
    let again = |key: &str, at| {
        f.l.claim(req(key, r#"{"amount":60000}"#, at))
            .wait()
            .expect("claim")
    };
    // Only the policy's approvers decide; a rejection is final, and says why.
    let id = held(&f.l, "k1", ask(1, 60_000, Some(&["alice", "bob"])), T0);
    assert!(refused(decide(&f.l, id, true, "mallory", T0 + 1)).contains("may not decide"));
    decide(&f.l, id, false, "bob (OS user root)", T0 + 2).expect("reject");
    assert_eq!(
        again("k1", T0 + 3),
        ClaimOutcome::NotApproved {
            entry_id: id,
            end: ApprovalEnd::Rejected,
            reason: Some("looked at it".into())
        }
    );
    assert!(refused(decide(&f.l, id, true, "alice", T0 + 4)).contains("rejected"));
    // Undecided past its window: the sweeper ends it; an approval after that is refused.
    let lapsing = held(&f.l, "k2", ask(1, 1_000, None), T0);
    assert_eq!(
        f.l.sweep(T0 + 999).wait().expect("sweep").approvals_expired,
        0
    );
    assert!(refused(decide(&f.l, lapsing, true, "alice", T0 + 1_000)).contains("expired at"));
    assert_eq!(
        f.l.sweep(T0 + 1_000)
            .wait()
            .expect("sweep")
            .approvals_expired,
        1
    );
    assert!(matches!(
        again("k2", T0 + 1_001),
        ClaimOutcome::NotApproved {
            end: ApprovalEnd::Expired,
            ..
        }
    ));
    // A retry past the window ends it itself when the sweeper has not yet.
    let unswept = held(&f.l, "k3", ask(1, 1_000, None), T0 + 2_000);
    assert!(matches!(
        again("k3", T0 + 3_000),
        ClaimOutcome::NotApproved {
            end: ApprovalEnd::Expired,
            ..
        }
    ));
    assert_eq!(
        kinds(&f.l, unswept),
        ["claim", "approval_requested", "approval_expired"]
    );
    assert_eq!(
        f.l.sweep(T0 + 3_001)
            .wait()
            .expect("sweep")
            .approvals_expired,
        0
    );
    // Nothing rejected or lapsed is ever taken to run; a held call is not an operator's to
    // resolve, replay or purge before it is decided.
    assert!(f
        .l
        .take_approved("proxy-a".into(), LEASE, T0 + 4_000, 16)
        .wait()
        .expect("take")
        .is_empty());
    let open = held(&f.l, "k4", ask(1, 60_000, None), T0 + 4_000);
    let listed = |open| {
        f.l.approvals(open, Page::default(), T0 + 4_001)
            .expect("approvals")
            .iter()
            .map(|e| e.summary.id)
            .collect::<Vec<_>>()
    };
    assert_eq!(listed(true), [open]);
    assert_eq!(listed(false), [open, unswept, lapsing, id]);
    let purge = f.l.purge(purge_of(vec![open], T0 + 4_002));
    assert!(matches!(
        purge.wait(),
        Err(LedgerError::InvalidTransition { .. })
    ));
    let redrive = f.l.redrive(RedriveRequest {
        entry_id: open,
        owner: "proxy-a".into(),
        lease_ms: LEASE,
        actor: actor(),
        at: T0 + 4_002,
    });
    assert!(matches!(
        redrive.wait(),
        Err(LedgerError::InvalidTransition { .. })
    ));
    assert_eq!(
        f.l.entry(open, T0 + 4_003).expect("entry").summary.state,
        State::AwaitingApproval
    );
    verify_ok(&f.l);
}

fn how_far_the_webhooks_were_told_is_kept_and_never_moves_back(b: Backend) {
    let f = fx!(b);
    assert_eq!(f.l.announced().expect("announced"), None);
    let book = |seq, running: &[i64]| Announced {
        seq,
        running: running.to_vec(),
    };
    f.l.note_announced(book(7, &[3, 5])).wait().expect("noted");
    assert_eq!(f.l.announced().expect("read"), Some(book(7, &[3, 5])));
    // The same decision, a result told since: the calls still awaited change.
    f.l.note_announced(book(7, &[5])).wait().expect("noted");
    assert_eq!(f.l.announced().expect("read"), Some(book(7, &[5])));
    // A round behind the one recorded (a former leader's) changes nothing.
    f.l.note_announced(book(6, &[])).wait().expect("ignored");
    assert_eq!(f.l.announced().expect("read"), Some(book(7, &[5])));
    f.l.note_announced(book(9, &[])).wait().expect("noted");
    assert_eq!(f.l.announced().expect("read"), Some(book(9, &[])));
}

suite!(
    a_held_call_runs_once_after_distinct_approvers,
    a_rejected_or_lapsed_call_never_runs,
    how_far_the_webhooks_were_told_is_kept_and_never_moves_back,
);
