//! How each request for approval ended is told to the webhook that heard of it: once each, in
//! the log's order, whoever decided and across a server's SIGKILL.

use super::*;

/// The next announcement of a decision (held calls' announcements passed over): its kind, its
/// entry and its text.
fn next_decision(f: &Fx) -> (String, i64, String) {
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

/// The newest event of `kind` in the ledger, and the last decision announced.
fn seqs(ledger: &Path, kind: &str) -> (i64, i64) {
    let db = rusqlite::Connection::open(ledger).expect("ledger");
    let newest = db
        .query_row("SELECT max(seq) FROM events WHERE kind = ?1", [kind], |r| {
            r.get(0)
        })
        .expect("newest");
    let told: String = db
        .query_row(
            "SELECT value FROM meta WHERE name = 'approvals_announced'",
            [],
            |r| r.get(0),
        )
        .expect("announced");
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
    assert!(f
        .hooks
        .try_iter()
        .all(|(_, b)| !String::from_utf8_lossy(&b).contains("\"approved\"")));
}
