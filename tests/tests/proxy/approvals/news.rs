//! How each request for approval ended is told to the webhook that heard of it: once each, in
//! the log's order, whoever decided and across a server's SIGKILL; and how an approved call's
//! run ended.

use idemgate_tests::upstream::Chaos;

use super::*;

/// The next announcement that is not of a held call: its kind, its entry and its text.
fn next_news(f: &Fx) -> (String, i64, String) {
    loop {
        let (_, body) = f
            .hooks
            .recv_timeout(Duration::from_secs(15))
            .expect("an announcement");
        let v: serde_json::Value = serde_json::from_slice(&body).expect("json");
        let kind = v["kind"].as_str().unwrap_or_default().to_owned();
        if kind != "approval_requested" {
            let text = v["text"].as_str().unwrap_or_default().to_owned();
            return (kind, v["entry"]["id"].as_i64().unwrap_or(0), text);
        }
    }
}

/// The next announcement of a decision (results of approved calls passed over too).
fn next_decision(f: &Fx) -> (String, i64, String) {
    loop {
        let news = next_news(f);
        if news.0 != "result" {
            return news;
        }
    }
}

/// The value the ledger keeps as `name` in its `meta`.
fn meta(ledger: &Path, name: &str) -> String {
    let db = rusqlite::Connection::open(ledger).expect("ledger");
    db.query_row("SELECT value FROM meta WHERE name = ?1", [name], |r| {
        r.get(0)
    })
    .expect(name)
}

/// The newest event of `kind` in the ledger, and the last decision announced.
fn seqs(ledger: &Path, kind: &str) -> (i64, i64) {
    let db = rusqlite::Connection::open(ledger).expect("ledger");
    let newest = db
        .query_row("SELECT max(seq) FROM events WHERE kind = ?1", [kind], |r| {
            r.get(0)
        })
        .expect("newest");
    let told = meta(ledger, "approvals_announced");
    (newest, told.parse().expect("a seq"))
}

/// A refund over the threshold, held: its entry.
fn refund(f: &Fx, key: &str) -> i64 {
    let big = json!({"customer": "c_9", "amount": 70000});
    held(&post(f, "/v1/refunds", key, &big))
}

#[test]
fn each_decision_is_told_once_in_order_across_a_sigkill() {
    let template = APPROVAL_CONFIG.replace("expires = \"1h\"", "expires = \"{expires}\"");
    let mut f = serve_from(&template, 1, "5s", "100ms");
    let (a, b) = (refund(&f, "n-a"), refund(&f, "n-b"));
    assert_eq!(decide(&f, "olga", a, "approve", "checked").status, 200);
    assert_eq!(decide(&f, "oscar", b, "reject", "a duplicate").status, 200);
    let call = |id: i64, key: &str| format!("c_9 · refunds · 700.00 USD (entry {id}, key {key})");
    let (kind, id, text) = next_decision(&f);
    assert_eq!((kind.as_str(), id), ("approved", a));
    let told = format!(
        "idemgate: approved by olga (1 of 1): {}; it runs once now",
        call(a, "n-a")
    );
    assert!(text.starts_with(&told), "{text}");
    assert!(text.ends_with("Why: checked"), "{text}");
    let (kind, id, text) = next_decision(&f);
    assert_eq!((kind.as_str(), id), ("rejected", b));
    let told = format!(
        "idemgate: rejected by oscar: {}; it never runs.",
        call(b, "n-b")
    );
    assert_eq!(text, format!("{told} Why: a duplicate"));
    // Decided through the CLI while no server runs: the next server tells it, and nothing told
    // before again.
    let d = refund(&f, "n-d");
    let ledger = f.dir.path().join("ledger.db");
    eventually(10, "the rejection's announcement recorded", || {
        let (newest, told) = seqs(&ledger, "rejected");
        (told >= newest).then_some(())
    });
    f.proxy.kill();
    approve_by_cli(&ledger, d, "while the server was down");
    let toml = std::fs::read_to_string(&f.proxy.config).expect("config");
    f.proxy = start(f.dir.path(), &toml, &ledger);
    let (kind, id, text) = next_decision(&f);
    assert_eq!((kind.as_str(), id), ("approved", d), "{text}");
    assert!(
        text.starts_with("idemgate: approved by olga (OS user "),
        "{text}"
    );
    // Undecided in its window: it expires, and that is told too.
    let c = refund(&f, "n-c");
    let (kind, id, text) = next_decision(&f);
    assert_eq!((kind.as_str(), id), ("approval_expired", c), "{text}");
    let expired = format!(": {}; it never runs.", call(c, "n-c"));
    assert!(
        text.starts_with("idemgate: expired undecided at ") && text.ends_with(&expired),
        "{text}"
    );
    let kinds: Vec<String> = f
        .hooks
        .try_iter()
        .map(|(_, b)| {
            let v: serde_json::Value = serde_json::from_slice(&b).expect("json");
            v["kind"].as_str().unwrap_or_default().to_owned()
        })
        .collect();
    assert!(kinds.iter().all(|k| k != "approved"), "{kinds:?}");
}

#[test]
fn how_an_approved_call_ended_is_told_after_its_approval_across_a_sigkill() {
    // Long enough that a call the upstream holds is still running when the server is killed.
    let template = APPROVAL_CONFIG
        .replace("lease = \"3s\"", "lease = \"10s\"")
        .replacen("timeout = \"1s\"", "timeout = \"8s\"", 1);
    let mut f = serve_from(&template, 1, "1h", "100ms");
    let call = |id: i64, key: &str| format!("c_9 · refunds · 700.00 USD (entry {id}, key {key})");
    let ran = refund(&f, "r-ran");
    assert_eq!(decide(&f, "olga", ran, "approve", "checked").status, 200);
    let (kind, id, _) = next_news(&f);
    assert_eq!((kind.as_str(), id), ("approved", ran));
    let (kind, id, text) = next_news(&f);
    assert_eq!((kind.as_str(), id), ("result", ran), "{text}");
    let told = format!(
        "idemgate: ran once after approval: {}; the upstream answered 201.",
        call(ran, "r-ran")
    );
    assert_eq!(text, told);
    // Approved and told, then the server dies while the upstream, which has run the call,
    // holds its answer: the next server tells how it ended, which nobody knows.
    let lost = refund(&f, "r-lost");
    f.upstream.counts.set_chaos(Some(Chaos {
        drop_pct: 0,
        unavailable_pct: 0,
        stall_pct: 100,
        stall_ms: 60_000,
    }));
    assert_eq!(decide(&f, "olga", lost, "approve", "checked").status, 200);
    let (kind, id, _) = next_news(&f);
    assert_eq!((kind.as_str(), id), ("approved", lost));
    let ledger = f.dir.path().join("ledger.db");
    eventually(10, "the approved call sent, and awaited", || {
        let awaited = meta(&ledger, "approvals_running") == lost.to_string();
        (awaited && f.upstream.counts.effects("r-lost") == 1).then_some(())
    });
    f.proxy.kill();
    let toml = std::fs::read_to_string(&f.proxy.config).expect("config");
    f.proxy = start(f.dir.path(), &toml, &ledger);
    let (kind, id, text) = next_news(&f);
    assert_eq!((kind.as_str(), id), ("result", lost), "{text}");
    let told = format!(
        "idemgate: outcome unknown after approval: {}; it may have run: reconcile or resolve it.",
        call(lost, "r-lost")
    );
    assert_eq!(text, told);
    eventually(10, "nothing left to tell", || {
        meta(&ledger, "approvals_running").is_empty().then_some(())
    });
    assert_eq!(f.upstream.counts.effects("r-lost"), 1);
    assert_eq!(f.upstream.counts.effects("r-ran"), 1);
    assert!(f.hooks.try_iter().next().is_none());
}
