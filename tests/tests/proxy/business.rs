//! Incidents in the business's terms: subjects stored and searched, duplicate suspects by
//! `duplicate_on` values across agents (flagged, or refused before forwarding), incidents reviewed,
//! the loop guard's flag and 429 — and the metrics that count them.

use super::*;

const BUSINESS_CONFIG: &str = r#"
[server]
listen = "127.0.0.1:0"
admin_listen = "127.0.0.1:0"
ledger = "{ledger}"

[defaults]
lease = "30s"
ttl = "1h"
duplicate_window = "10m"

[[routes]]
name = "charges"
method = "POST"
path = "/v1/charges"
upstream = "{upstream}"
effect = "write"
scope.header = "X-Agent-Id"
timeout = "1s"
subject = { customer = "/customer", amount = "/amount", currency = "/currency", agent = "header:X-Agent-Id" }
duplicate_on = ["/customer", "/amount", "/currency"]
duplicate_scope = "any"
loop_guard = { max = 3, window = "1m", action = "flag" }

[[routes]]
name = "payouts"
method = "POST"
path = "/v1/payouts"
upstream = "{upstream}"
effect = "write"
scope.header = "X-Agent-Id"
timeout = "1s"
duplicate_on = ["/account", "/amount"]
on_duplicate_suspect = "reject"
loop_guard = { max = 2, window = "1m", action = "reject" }

[[routes]]
name = "customers"
method = "GET"
path = "/v1/customers"
upstream = "{upstream}"
effect = "read"
cache_ttl = "1m"
"#;

fn post(f: &Fx, path: &str, agent: &str, key: &str, body: &serde_json::Value) -> Resp {
    f.proxy.send(
        "POST",
        path,
        &[
            ("idempotency-key", key),
            ("content-type", "application/json"),
            ("x-agent-id", agent),
        ],
        &serde_json::to_vec(body).expect("json"),
    )
}

/// The value of series `series` (name and labels, as the exposition writes them).
fn series(f: &Fx, series: &str) -> u64 {
    scraped(&f.proxy, series).unwrap_or(0)
}

#[test]
fn a_customer_charged_twice_by_two_agents_is_one_incident_found_by_the_customer() {
    let f = Fx::with(BUSINESS_CONFIG);
    let charge = |agent, key, rid| {
        let body =
            json!({"customer": "cus_123", "amount": "49.99", "currency": "usd", "request_id": rid});
        post(&f, "/v1/charges", agent, key, &body)
    };
    assert_eq!(charge("billing-01", "k-1", "r-1").status, 201);
    // Another agent, another key, a fresh request_id: the same effect by its duplicate_on values.
    assert_eq!(charge("billing-02", "k-2", "r-2").status, 201);
    let other = json!({"customer": "cus_999", "amount": "5.00", "currency": "usd"});
    assert_eq!(
        post(&f, "/v1/charges", "billing-01", "k-3", &other).status,
        201
    );
    // Found by the customer, in the CLI (by name and value, or the value alone) and the admin API.
    let by = |flag: &str| {
        let e = f.entries(&["--subject", flag]);
        e.iter()
            .map(|e| e["key"].as_str().unwrap_or("").to_owned())
            .collect::<Vec<_>>()
    };
    assert_eq!(by("customer=cus_123"), ["k-2", "k-1"]);
    assert_eq!(by("cus_123"), ["k-2", "k-1"]);
    assert!(by("amount=cus_123").is_empty());
    let shown = &f.entries(&["--subject", "cus_123"])[0];
    assert_eq!(
        shown["subjects"],
        json!({"agent": "billing-02", "amount": "49.99", "currency": "usd", "customer": "cus_123"})
    );
    let api = f
        .proxy
        .admin_get("/admin/v1/entries?subject=customer%3Dcus_123")
        .json();
    assert_eq!(api["entries"].as_array().map(Vec::len), Some(2), "{api}");
    let api = f.proxy.admin_get("/admin/v1/entries?search=cus_999").json();
    assert_eq!(
        api["entries"][0]["subjects"][3],
        json!(["customer", "cus_999"]),
        "{api}"
    );
    let text = idemgate(&["entries", "--ledger", &f.ledger(), "--subject", "cus_123"]);
    assert!(String::from_utf8_lossy(&text.stdout).contains("customer=cus_123"));
    // One incident, flagged across agents, with the customer's subjects.
    let inc = f.proxy.admin_get("/admin/v1/incidents").json();
    assert_eq!(inc.as_array().map(Vec::len), Some(1), "{inc}");
    let first = inc[0]["id"].as_i64().expect("id");
    assert_eq!(inc[0]["entries"].as_array().map(Vec::len), Some(2));
    assert!(inc[0]["subjects"].to_string().contains("cus_123"));
    assert_eq!(inc[0]["open"], true);
    // Titled in the business's terms, alike in the admin API and the CLI.
    let title = inc[0]["title"].as_str().expect("title");
    let head = "cus_123 · charges · 2 × 49.99 USD · agents billing-01, billing-02 · ";
    assert!(
        title.starts_with(head) && title.ends_with(" apart"),
        "{title}"
    );
    let out = idemgate(&["incidents", "--ledger", &f.ledger()]);
    let out = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.contains(&format!("incident {first}  {title} · open")),
        "{out}"
    );
    assert_eq!(
        series(&f, r#"idemgate_duplicate_suspects_total{route="charges"}"#),
        1
    );
    // Reviewed by an operator, with why: no longer open, and logged.
    let r = f.proxy.admin_post(
        &format!("/admin/v1/incidents/{first}/review"),
        &json!({"reason": "refunded the second charge"}),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let inc = f.proxy.admin_get("/admin/v1/incidents").json();
    assert_eq!(
        (inc[0]["open"].clone(), inc[0]["review"]["reason"].clone()),
        (json!(false), json!("refunded the second charge"))
    );
    let out = idemgate(&["incidents", "--ledger", &f.ledger(), "--open"]);
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("(0 incidents)"),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let log = idemgate_json(&["log", "--ledger", &f.ledger(), "--kind", "review", "--json"]);
    assert_eq!(log[0]["reason"], "refunded the second charge");
    // Only an incident's first entry is reviewed.
    let r = idemgate(&[
        "review",
        "--ledger",
        &f.ledger(),
        "999999",
        "--operator",
        "o",
        "--reason",
        "r",
    ]);
    assert_eq!(r.status.code(), Some(1), "no such entry");
}

/// A reviewed incident opens again, by the admin API or `idemgate call`, with who and why in the
/// log; one no one reviewed is refused, and a refused or malformed call changes nothing.
#[test]
fn a_reviewed_incident_reopens_and_the_log_says_who_withdrew_whose_review() {
    let f = Fx::with(BUSINESS_CONFIG);
    let body = json!({"customer": "cus_5", "amount": "10.00", "currency": "usd"});
    assert_eq!(post(&f, "/v1/charges", "a-1", "k-1", &body).status, 201);
    assert_eq!(post(&f, "/v1/charges", "a-2", "k-2", &body).status, 201);
    let first = f.proxy.admin_get("/admin/v1/incidents").json()[0]["id"].clone();
    let path = |what: &str| format!("/admin/v1/incidents/{first}/{what}");
    let r = f.proxy.admin_post(&path("reopen"), &json!({"reason": "r"}));
    assert_eq!((r.status, r.code()), (409, "invalid-transition".to_owned()));
    let reviewed = json!({"reason": "refunded"});
    assert_eq!(f.proxy.admin_post(&path("review"), &reviewed).status, 200);
    let r = f
        .proxy
        .admin_post(&path("reopen"), &json!({"reason": "the refund bounced"}));
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(
        r.json()["reason"],
        "refunded",
        "the answer is the review withdrawn"
    );
    let inc = f.proxy.admin_get("/admin/v1/incidents").json();
    assert_eq!(
        (&inc[0]["open"], &inc[0]["review"]),
        (&json!(true), &json!(null))
    );
    let log = f.proxy.admin_get("/admin/v1/events?kind=reopen").json();
    let ev = &log["events"][0];
    assert_eq!(
        (&ev["entry_id"], &ev["reason"]),
        (&first, &json!("the refund bounced"))
    );
    assert!(
        ev["detail"]
            .as_str()
            .is_some_and(|d| d.contains("\"reviewed_by\"")),
        "{ev}"
    );
    // The CLI runs the same operation from its declaration.
    let ledger = f.ledger();
    let entry = format!("entry_id={first}");
    let call = |op: &str, reason: &str| {
        idemgate(&[
            "call",
            op,
            "--ledger",
            &ledger,
            &entry,
            reason,
            "--operator",
            "erin",
        ])
    };
    assert!(call("review_incident", "reason=looked").status.success());
    let out = call("reopen_incident", "reason=not refunded");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let withdrawn: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    // As the desktop console does, the CLI records the OS account beside the name typed.
    let by = withdrawn["operator"].as_str().unwrap_or_default();
    assert!(by.starts_with("erin (OS user "), "{by}");
    assert_eq!(withdrawn["reason"], "looked");
    let events =
        |f: &Fx| f.proxy.admin_get("/admin/v1/events?kind=reopen").json()["events"].clone();
    let before = events(&f);
    for bad in [
        call("reopen_incident", "reason=again"),
        call("reopen_incident", "reason"),
    ] {
        assert_eq!(
            bad.status.code(),
            Some(1),
            "{}",
            String::from_utf8_lossy(&bad.stderr)
        );
    }
    assert_eq!(events(&f), before, "nothing logged by the refused calls");
    assert_eq!(before.as_array().map(Vec::len), Some(2));
}

#[test]
fn the_reject_policy_refuses_the_same_values_and_the_loop_guard_flags_or_refuses() {
    let f = Fx::with(BUSINESS_CONFIG);
    let payout = |key: &str, rid: &str| {
        let body = json!({"account": "acct_1", "amount": 700, "request_id": rid});
        post(&f, "/v1/payouts", "agent-1", key, &body)
    };
    assert_eq!(payout("p-1", "r-1").status, 201);
    let r = payout("p-2", "r-2");
    assert_eq!(
        (r.status, r.code()),
        (409, "probable-duplicate".to_owned()),
        "{}",
        r.text()
    );
    assert_eq!(f.effects("p-2"), 0, "refused before forwarding");
    // Third call of the same values within the window: past the guard's max, refused with 429.
    let r = payout("p-3", "r-3");
    assert_eq!(
        (r.status, r.code()),
        (429, "loop-suspect".to_owned()),
        "{}",
        r.text()
    );
    assert!(r.header("retry-after").is_some());
    assert_eq!(f.effects("p-3"), 0);
    assert_eq!(
        series(&f, r#"idemgate_loop_suspects_total{route="payouts"}"#),
        1
    );
    // The flag policy: the 4th call of one request from one agent runs, and is logged once.
    let charge = |key: &str| {
        let body = json!({"customer": "cus_loop", "amount": "1.00", "currency": "usd"});
        post(&f, "/v1/charges", "looping-agent", key, &body)
    };
    for i in 0..5 {
        assert_eq!(charge(&format!("c-{i}")).status, 201);
    }
    assert_eq!(
        series(&f, r#"idemgate_loop_suspects_total{route="charges"}"#),
        1
    );
    let loops = eventually(5, "the loop suspects logged", || {
        let l = idemgate_json(&[
            "log",
            "--ledger",
            &f.ledger(),
            "--kind",
            "loop_suspect",
            "--json",
        ]);
        (l.as_array().map(Vec::len) == Some(2)).then_some(l)
    });
    assert_eq!(loops[0]["route"], "charges");
    assert_eq!(loops[0]["scope"], "looping-agent");
    assert_eq!(loops[0]["detail"]["calls"], 4);
    assert_eq!(loops[0]["detail"]["action"], "flag");
    assert_eq!(loops[1]["detail"]["action"], "reject");
}

#[test]
fn replays_collisions_cache_hits_and_upstream_time_are_counted() {
    let f = Fx::with(BUSINESS_CONFIG);
    let body = json!({"customer": "cus_m", "amount": "2.00", "currency": "eur"});
    for _ in 0..3 {
        assert_eq!(post(&f, "/v1/charges", "agent-m", "m-1", &body).status, 201);
    }
    let other = json!({"customer": "cus_m", "amount": "3.00", "currency": "eur"});
    assert_eq!(
        post(&f, "/v1/charges", "agent-m", "m-1", &other).status,
        422
    );
    for _ in 0..2 {
        assert_eq!(
            f.proxy.send("GET", "/v1/customers/cus_m", &[], b"").status,
            200
        );
    }
    assert_eq!(series(&f, r#"idemgate_replays_total{route="charges"}"#), 2);
    assert_eq!(
        series(&f, r#"idemgate_collisions_total{route="charges"}"#),
        1
    );
    assert_eq!(
        series(
            &f,
            r#"idemgate_requests_total{route="customers",outcome="cache_hit"}"#
        ),
        1
    );
    assert_eq!(
        series(
            &f,
            r#"idemgate_requests_total{route="charges",outcome="replayed"}"#
        ),
        2
    );
    assert_eq!(
        series(&f, r#"idemgate_upstream_seconds_count{route="charges"}"#),
        1
    );
}
