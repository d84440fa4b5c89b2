//! Reads: a key's entries and events, the log search, keyset paging.

use super::*;

/// A key filter finds exactly the events and entries under that key, though the log's key index
/// holds none of an entry's lifecycle events (SQLite migrations 8 and 18): checked against every
/// event read unfiltered, with a refused duplicate's event (it names another key's entry), purged
/// entries, one key in two scopes, a key that ran twice, an attempt, a release, a lease expiry
/// and TTL expiries.
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
    let pr = purge_of(vec![purged], T0 + 5);
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
    // The lifecycle events the log's key index leaves out (SQLite migration 18): each is logged
    // under its entry, so a key finds it through its entry, or through the purge of an entry
    // that is gone.
    let s = claimed(
        f.l.claim(req("k-s", r#"{"n":5}"#, T0 + 12))
            .wait()
            .expect("claim"),
    );
    let attempt = OwnerReport {
        entry_id: s,
        owner: "proxy-a".into(),
        error: "timeout".into(),
        at: T0 + 13,
    };
    f.l.record_attempt(attempt, 2, LEASE)
        .wait()
        .expect("attempt");
    let e = claimed(
        f.l.claim(req("k-e", r#"{"n":6}"#, T0 + 14))
            .wait()
            .expect("claim"),
    );
    complete(&f.l, e, T0 + 15, "{}");
    let later = T0 + 16 + TTL + LEASE;
    let swept = f.l.sweep(later).wait().expect("sweep");
    assert!(
        swept.lease_expired == 1 && swept.ttl_expired >= 3,
        "{swept:?}"
    );
    let pr = purge_of(vec![e], later + 1);
    f.l.purge(pr).wait().expect("purge");

    let all = all_events(&f.l);
    for (key, kind) in [
        ("k-s", "attempt"),
        ("k-s", "lease_expired"),
        ("k-e", "expired"),
        ("k-a", "expired"),
        ("k-r", "release"),
    ] {
        assert!(
            all.iter().any(|ev| ev.key == key && ev.kind == kind),
            "no {kind} under {key} to be found"
        );
    }
    let page = |key: &str, kind: Option<&str>, limit: usize| {
        let filter = EventFilter {
            key: Some(key.into()),
            kind: kind.map(Into::into),
            ..Default::default()
        };
        walk_events(&f.l, &filter, limit)
    };
    for key in ["k-a", "k-b", "k-d", "k-r", "k-s", "k-e", "k-none"] {
        let lifecycle = [
            "complete",
            "claim",
            "attempt",
            "release",
            "lease_expired",
            "expired",
        ];
        for kind in std::iter::once(None).chain(lifecycle.map(Some)) {
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

/// Keyset paging walks every entry once, newest first or oldest first.
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
            f.l.entries(&EntryFilter::default(), Page::newest(before, 100), T0)
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
    // Oldest first: the same entries, the other way round, each once.
    let mut ascending = Vec::new();
    let mut after = None;
    loop {
        let page = Page {
            after,
            oldest_first: true,
            ..Page::newest(None, 100)
        };
        let page =
            f.l.entries(&EntryFilter::default(), page, T0)
                .expect("page");
        if page.is_empty() {
            break;
        }
        after = page.last().map(|e| e.id);
        ascending.extend(page.into_iter().map(|e| e.id));
    }
    sorted.reverse();
    assert_eq!(ascending, sorted);
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

/// An operator filter finds the name alone and the name with what vouches for it ("alice (OS
/// user ada)", "alice (shared admin token)"), and no other name that starts like it.
fn an_operator_filter_finds_the_name_and_its_qualified_forms(b: Backend) {
    let f = fx!(b);
    let names = [
        "alice",
        "alice (OS user ada)",
        "alice (shared admin token)",
        "alicent",
        "alice(x)",
        "Alice",
        "bob (OS user alice)",
    ];
    let mut seq_of = Vec::new();
    for (i, name) in names.iter().enumerate() {
        let id = claimed(
            f.l.claim(req(&format!("op-{i}"), "{}", T0))
                .wait()
                .expect("claim"),
        );
        complete(&f.l, id, T0 + 1, "{}");
        f.l.purge(PurgeRequest {
            ids: vec![id],
            expired_by: None,
            actor: Actor {
                operator: (*name).into(),
                reason: "r".into(),
            },
            at: T0 + 2,
        })
        .wait()
        .expect("purge");
        let last = all_events(&f.l)
            .into_iter()
            .map(|e| e.seq)
            .max()
            .expect("events");
        seq_of.push(last);
    }
    let found = |who: &str| {
        let filter = EventFilter {
            operator: Some(who.into()),
            ..Default::default()
        };
        let mut got = walk_events(&f.l, &filter, 100);
        got.sort_unstable();
        got
    };
    assert_eq!(found("alice"), seq_of[..3].to_vec());
    assert_eq!(found("alice (OS user ada)"), [seq_of[1]]);
    assert_eq!(found("bob"), [seq_of[6]]);
    assert_eq!(found("ali"), Vec::<i64>::new());
    verify_ok(&f.l);
}

/// An MCP call's entry keeps its tool, through a re-arm too, and the tool filter finds exactly
/// the tool's entries.
fn a_tool_filter_finds_exactly_the_tool_s_entries(b: Backend) {
    let f = fx!(b);
    let mut charge = req("k-c", r#"{"n":1}"#, T0);
    charge.tool = Some("charge".into());
    let c = claimed(f.l.claim(charge.clone()).wait().expect("claim"));
    let mut refund = req("k-r", r#"{"n":2}"#, T0 + 1);
    refund.tool = Some("refund".into());
    let r = claimed(f.l.claim(refund).wait().expect("claim"));
    let plain = claimed(
        f.l.claim(req("k-p", r#"{"n":3}"#, T0 + 2))
            .wait()
            .expect("claim"),
    );
    let report = OwnerReport {
        entry_id: c,
        owner: "proxy-a".into(),
        error: "503".into(),
        at: T0 + 3,
    };
    f.l.release(report).wait().expect("release");
    charge.at = T0 + 4;
    claimed(f.l.claim(charge).wait().expect("re-arm"));
    let tool = |t: &str| {
        let filter = EntryFilter {
            tool: Some(t.into()),
            ..EntryFilter::default()
        };
        let found =
            f.l.entries(&filter, Page::default(), T0 + 5)
                .expect("entries");
        found
            .iter()
            .map(|e| (e.id, e.tool.clone()))
            .collect::<Vec<_>>()
    };
    assert_eq!(tool("charge"), [(c, Some("charge".to_owned()))]);
    assert_eq!(tool("refund"), [(r, Some("refund".to_owned()))]);
    assert!(tool("lookup").is_empty());
    let e = f.l.entry(plain, T0 + 5).expect("entry");
    assert_eq!(e.summary.tool, None);
}

/// A claim's subjects are stored with its entry and searched by value, by name and value, or
/// with the key; a purge takes them away.
fn subjects_are_kept_searched_and_purged_with_their_entry(b: Backend) {
    let f = fx!(b);
    let charge = |key: &str, customer: &str, amount: &str, at| {
        let mut r = req(key, &format!(r#"{{"c":"{customer}","a":{amount}}}"#), at);
        r.subjects = vec![
            ("amount".into(), amount.into()),
            ("customer".into(), customer.into()),
        ];
        claimed(f.l.claim(r).wait().expect("claim"))
    };
    let a = charge("k-1", "cus_123", "4999", T0);
    let b2 = charge("k-2", "cus_123", "100", T0 + 1);
    let c = charge("k-3", "cus_999", "4999", T0 + 2);
    complete(&f.l, a, T0 + 3, "{}");
    let find = |filter: EntryFilter| {
        let found =
            f.l.entries(&filter, Page::default(), T0 + 5)
                .expect("entries");
        found.iter().map(|e| e.id).collect::<Vec<_>>()
    };
    let subject = |s: &str| EntryFilter {
        subject: Some(s.into()),
        ..EntryFilter::default()
    };
    assert_eq!(find(subject("cus_123")), [b2, a]);
    assert_eq!(find(subject("customer=cus_123")), [b2, a]);
    assert_eq!(find(subject("amount=cus_123")), Vec::<i64>::new());
    assert_eq!(find(subject("4999")), [c, a], "a value under any name");
    let search = |t: &str| EntryFilter {
        search: Some(t.into()),
        ..EntryFilter::default()
    };
    assert_eq!(find(search("cus_999")), [c]);
    assert_eq!(find(search("k-2")), [b2], "or a key");
    let e = f.l.entry(a, T0 + 5).expect("entry");
    assert_eq!(
        e.summary.subjects,
        [
            ("amount".to_owned(), "4999".to_owned()),
            ("customer".to_owned(), "cus_123".to_owned())
        ]
    );
    // The claim's event carries them, and so does every export of the log.
    let claim =
        f.l.events(
            &EventFilter {
                entry_id: Some(a),
                kind: Some("claim".into()),
                ..EventFilter::default()
            },
            Page::default(),
        )
        .expect("events");
    assert!(
        claim[0]
            .detail
            .contains(r#""subjects":{"amount":"4999","customer":"cus_123"}"#),
        "{}",
        claim[0].detail
    );
    let pr = purge_of(vec![a], T0 + 6);
    f.l.purge(pr).wait().expect("purge");
    assert_eq!(find(subject("cus_123")), [b2]);
}

/// With `duplicate_on` values, two completed calls are the same effect though their requests
/// differ (a fresh `request_id`); in one scope, or in any (`any:`); the reject policy refuses the
/// second before it runs; an incident is reviewed until a new suspect joins it.
fn duplicate_values_make_the_same_effect_and_incidents_are_reviewed(b: Backend) {
    let f = fx!(b);
    let call = |key: &str, scope: &str, rid: u32, dup: &str, at| {
        let mut r = req(
            key,
            &format!(r#"{{"customer":"cus_1","amount":4999,"request_id":{rid}}}"#),
            at,
        );
        r.scope = scope.into();
        r.dup_fp = Some(dup.into());
        r
    };
    let a = claimed(
        f.l.claim(call("k-a", "billing-01", 1, "v:1", T0))
            .wait()
            .expect("claim"),
    );
    complete(&f.l, a, T0 + 10, "{}");
    // Same values, another body and key, the same scope: a suspect.
    let b2 = claimed(
        f.l.claim(call("k-b", "billing-01", 2, "v:1", T0 + 20))
            .wait()
            .expect("claim"),
    );
    assert_eq!(complete(&f.l, b2, T0 + 30, "{}").duplicate_of, Some(a));
    // Another scope: not, unless the values are compared in any scope.
    let c = claimed(
        f.l.claim(call("k-c", "billing-02", 3, "v:1", T0 + 40))
            .wait()
            .expect("claim"),
    );
    assert_eq!(complete(&f.l, c, T0 + 50, "{}").duplicate_of, None);
    let x = claimed(
        f.l.claim(call("k-x", "billing-01", 4, "any:9", T0 + 60))
            .wait()
            .expect("claim"),
    );
    complete(&f.l, x, T0 + 70, "{}");
    let y = claimed(
        f.l.claim(call("k-y", "billing-02", 5, "any:9", T0 + 80))
            .wait()
            .expect("claim"),
    );
    assert_eq!(complete(&f.l, y, T0 + 90, "{}").duplicate_of, Some(x));
    // The reject policy: refused before it runs, in any scope.
    let mut z = call("k-z", "billing-03", 6, "any:9", T0 + 100);
    z.reject_duplicates_within_ms = Some(600_000);
    assert!(matches!(
        f.l.claim(z).wait().expect("claim"),
        ClaimOutcome::ProbableDuplicate { entry_id, .. } if entry_id == x
    ));
    // Incidents: newest first, reviewed, opened again by a new suspect.
    let inc = f.l.incidents(Page::default(), T0 + 200).expect("incidents");
    assert_eq!(
        inc.iter().map(|i| (i.id, i.open)).collect::<Vec<_>>(),
        [(x, true), (a, true)]
    );
    let through =
        f.l.review(ReviewRequest {
            entry_id: a,
            actor: actor(),
            at: T0 + 210,
        })
        .wait()
        .expect("review");
    assert_eq!(through, b2);
    let inc = f.l.incidents(Page::default(), T0 + 220).expect("incidents");
    let reviewed = inc.iter().find(|i| i.id == a).expect("incident");
    assert!(!reviewed.open);
    assert_eq!(
        reviewed.review.as_ref().map(|r| r.operator.as_str()),
        Some("alice")
    );
    assert!(matches!(
        f.l.review(ReviewRequest {
            entry_id: c,
            actor: actor(),
            at: T0 + 230
        })
        .wait(),
        Err(LedgerError::InvalidTransition { .. })
    ));
    let d = claimed(
        f.l.claim(call("k-d", "billing-01", 7, "v:1", T0 + 240))
            .wait()
            .expect("claim"),
    );
    assert_eq!(complete(&f.l, d, T0 + 250, "{}").duplicate_of, Some(a));
    let inc = f.l.incidents(Page::default(), T0 + 260).expect("incidents");
    assert!(
        inc.iter().find(|i| i.id == a).is_some_and(|i| i.open),
        "a new suspect reopens it"
    );
    // A loop suspect is logged without an entry.
    f.l.note_loop(LoopNote {
        route: "charges".into(),
        scope: "agent-9".into(),
        key: "k-loop".into(),
        detail: serde_json::json!({"calls": 21, "window_ms": 60_000, "action": "flag"}),
        at: T0 + 270,
    })
    .wait()
    .expect("note");
    let kind = |k: &str| EventFilter {
        kind: Some(k.into()),
        ..EventFilter::default()
    };
    let loops =
        f.l.events(&kind("loop_suspect"), Page::default())
            .expect("events");
    assert_eq!((loops.len(), loops[0].entry_id), (1, None));
    assert_eq!(
        f.l.events(&kind("review"), Page::default())
            .expect("events")
            .len(),
        1
    );
    verify_ok(&f.l);
}

/// An incident whose first entry was purged keeps its suspects (they were charges too): listed,
/// titled from the oldest left, its review kept, reviewable again, joined by a new suspect, gone
/// with its last entry.
fn an_incident_whose_first_entry_was_purged_stays_and_takes_new_suspects(b: Backend) {
    let f = fx!(b);
    let suspect = |key: &str, rid: u32, at| {
        let mut r = req(key, &format!(r#"{{"amount":4999,"request_id":{rid}}}"#), at);
        r.dup_fp = Some("v:1".into());
        let id = claimed(f.l.claim(r).wait().expect("claim"));
        (id, complete(&f.l, id, at + 1, "{}").duplicate_of)
    };
    let (first, _) = suspect("k-1", 1, T0);
    let (second, of) = suspect("k-2", 2, T0 + 10);
    assert_eq!(of, Some(first));
    let review = |at| {
        f.l.review(ReviewRequest {
            entry_id: first,
            actor: actor(),
            at,
        })
        .wait()
    };
    assert_eq!(review(T0 + 20).expect("review"), second);
    let purge = |ids: Vec<i64>, at| f.l.purge(purge_of(ids, at)).wait().expect("purge");
    purge(vec![first], T0 + 30);
    let inc = f.l.incidents(Page::default(), T0 + 40).expect("incidents");
    assert_eq!(inc.len(), 1, "{inc:?}");
    assert_eq!((inc[0].id, inc[0].first_purged), (first, true));
    assert_eq!(
        inc[0].entries.iter().map(|e| e.id).collect::<Vec<_>>(),
        [second]
    );
    assert_eq!(inc[0].route, "charges");
    assert!(!inc[0].open, "the review outlives the first entry");
    // It can be reviewed again, logged under its oldest entry left.
    assert_eq!(review(T0 + 70).expect("review"), second);
    let logged =
        f.l.events(
            &EventFilter {
                kind: Some("review".into()),
                ..EventFilter::default()
            },
            Page::default(),
        )
        .expect("events");
    assert_eq!(
        logged[0].entry_id,
        Some(second),
        "under the oldest suspect left"
    );
    assert!(logged[0].detail.contains(&format!("\"incident\":{first}")));
    // Opened again by an operator: the review withdrawn, logged beside it; then reviewed again.
    let reopen = |at| {
        let req = ReviewRequest {
            entry_id: first,
            actor: actor(),
            at,
        };
        f.l.reopen(req).wait()
    };
    assert_eq!(reopen(T0 + 72).expect("reopen").through, second);
    assert!(f.l.incidents(Page::default(), T0 + 73).expect("incidents")[0].open);
    assert!(matches!(
        reopen(T0 + 74),
        Err(LedgerError::InvalidTransition { .. })
    ));
    let reopened = EventFilter {
        kind: Some("reopen".into()),
        ..EventFilter::default()
    };
    let logged = f.l.events(&reopened, Page::default()).expect("events");
    assert_eq!((logged.len(), logged[0].entry_id), (1, Some(second)));
    assert_eq!(review(T0 + 76).expect("review"), second);
    // The effect repeated again: it joins the same incident (and reopens it), not a second one
    // under the oldest suspect.
    let (third, of) = suspect("k-3", 3, T0 + 80);
    assert_eq!(of, Some(first));
    let inc = f.l.incidents(Page::default(), T0 + 85).expect("incidents");
    assert_eq!(inc.len(), 1, "{inc:?}");
    assert_eq!(
        inc[0].entries.iter().map(|e| e.id).collect::<Vec<_>>(),
        [second, third]
    );
    assert!(inc[0].open, "a new suspect reopens it");
    purge(vec![second, third], T0 + 90);
    assert!(f
        .l
        .incidents(Page::default(), T0 + 100)
        .expect("incidents")
        .is_empty());
    verify_ok(&f.l);
}

suite!(
    subjects_are_kept_searched_and_purged_with_their_entry,
    an_incident_whose_first_entry_was_purged_stays_and_takes_new_suspects,
    duplicate_values_make_the_same_effect_and_incidents_are_reviewed,
    a_tool_filter_finds_exactly_the_tool_s_entries,
    an_operator_filter_finds_the_name_and_its_qualified_forms,
    a_key_finds_exactly_its_entries_and_events,
    log_search_finds_exactly_the_matching_events,
    keyset_paging_walks_every_entry_once,
);
