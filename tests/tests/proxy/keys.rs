//! Keys and fingerprints: a key runs once and is replayed after; another request under it is a 422; the key the upstream is sent.

use super::*;

#[test]
fn a_write_without_a_key_is_refused_and_nothing_is_written() {
    let f = Fx::new();
    let r = f.proxy.send(
        "POST",
        "/v1/charges",
        &[("content-type", "application/json")],
        br#"{"amount":100}"#,
    );
    assert_eq!(r.status, 400);
    assert_eq!(r.code(), "missing-key");
    assert_eq!(f.up.counts.total(), 0);
    assert!(f.entries(&[]).is_empty());
}

#[test]
fn a_new_key_executes_once_and_echoes_the_key() {
    let f = Fx::new();
    let r = f.charge("k-new", r#"{"amount":100}"#, &[]);
    assert_eq!(r.status, 201, "{}", r.text());
    assert_eq!(r.header("idempotency-key"), Some("k-new"));
    assert_eq!(r.header("idempotent-replayed"), None);
    assert_eq!(
        r.header("x-upstream"),
        Some("1"),
        "upstream headers are relayed"
    );
    assert_eq!(r.json()["effect"], 1);
    assert_eq!(f.effects("k-new"), 1);
    let e = f.entries(&["--key", "k-new"]);
    assert_eq!(e.len(), 1);
    assert_eq!(e[0]["state"], "completed");
    assert_eq!(e[0]["scope"], "agent-7");
}

#[test]
fn a_completed_key_is_replayed_without_executing_again() {
    let f = Fx::new();
    let first = f.charge("k-replay", r#"{"amount":100,"currency":"usd"}"#, &[]);
    assert_eq!(first.status, 201);
    for _ in 0..3 {
        // Same request, other key order and whitespace: the same fingerprint.
        let again = f.charge("k-replay", r#"{ "currency": "usd", "amount": 100 }"#, &[]);
        assert_eq!(again.status, 201);
        assert_eq!(again.body, first.body, "the stored body, byte for byte");
        assert_eq!(again.header("idempotent-replayed"), Some("true"));
        assert_eq!(again.header("idempotency-key"), Some("k-replay"));
        assert_eq!(
            again.header("x-upstream"),
            Some("1"),
            "stored headers are replayed"
        );
    }
    assert_eq!(f.effects("k-replay"), 1);
    assert_eq!(
        f.requests("k-replay"),
        1,
        "replays never reach the upstream"
    );
    // Replays are answered without waiting for a commit; their count follows with the writer's
    // next batch (within milliseconds).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        let replays = f.entries(&["--key", "k-replay"])[0]["replays"].clone();
        if replays == 3 || std::time::Instant::now() > deadline {
            assert_eq!(replays, 3);
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    // Keys of different scopes never collide: not in the ledger, and not upstream, which is sent
    // each scope's key as a UUID of its own (an upstream that dedupes by key, as payment APIs do,
    // would otherwise answer agent-8 with agent-7's charge). The client gets its key back.
    let sent_key = || {
        let h = f.up.counts.last_headers.lock().expect("lock").clone();
        h.into_iter()
            .find(|(n, _)| n == "idempotency-key")
            .map(|(_, v)| v)
    };
    let agent_7 = idemgate_proxy::keys::scoped("agent-7", "k-replay");
    let agent_8 = idemgate_proxy::keys::scoped("agent-8", "k-replay");
    assert_ne!(agent_7, agent_8);
    assert_eq!(f.up.counts.effects(&agent_7), 1);
    let other = f.proxy.send(
        "POST",
        "/v1/charges",
        &[("idempotency-key", "k-replay"), ("x-agent-id", "agent-8")],
        br#"{"amount":100,"currency":"usd"}"#,
    );
    assert_eq!(other.status, 201);
    assert_eq!(other.header("idempotent-replayed"), None);
    assert_eq!(other.header("idempotency-key"), Some("k-replay"));
    assert_eq!(sent_key().as_deref(), Some(agent_8.as_str()));
    assert_eq!(f.up.counts.effects(&agent_8), 1);
    assert_eq!(f.up.counts.effects(&agent_7), 1);
    assert_eq!(
        f.up.counts.effects("k-replay"),
        0,
        "no scope's key went as it came"
    );
    // Unscoped, a key goes upstream as it came.
    let unscoped = f.proxy.send(
        "POST",
        "/v1/charges",
        &[
            ("idempotency-key", "k-replay"),
            ("content-type", "application/json"),
        ],
        br#"{"amount":100,"currency":"usd"}"#,
    );
    assert_eq!(unscoped.status, 201, "{}", unscoped.text());
    assert_eq!(sent_key().as_deref(), Some("k-replay"));
    assert_eq!(f.up.counts.effects("k-replay"), 1);
}

/// A route that takes its key from a header of its own sends the upstream's key in that header
/// too: the upstream may read it there, and the client's own key in it (sent on as it came) was
/// one key for two agents upstream. An operator's replay sends the same.
#[test]
fn a_key_header_of_the_routes_own_carries_the_upstream_key() {
    let f = Fx::with(&format!(
        "{CONFIG}
[[routes]]
name = \"payouts\"
method = \"POST\"
path = \"/v1/payouts\"
upstream = \"{{upstream}}\"
effect = \"write\"
key.header = \"X-Request-Key\"
scope.header = \"X-Agent-Id\"
timeout = \"1s\"
retry = {{ attempts = 3, base = \"10ms\", max = \"50ms\" }}
"
    ));
    let sent = || {
        let h = f.up.counts.last_headers.lock().expect("lock").clone();
        let get = |name: &str| h.iter().find(|(n, _)| n == name).map(|(_, v)| v.clone());
        (get("x-request-key"), get("idempotency-key"))
    };
    let payout = |agent: &str, fault: Option<&str>| {
        let mut h = vec![("x-request-key", "po-1"), ("x-agent-id", agent)];
        h.extend(fault.map(|f| ("x-fault", f)));
        f.proxy.send("POST", "/v1/payouts", &h, br#"{"amount":5}"#)
    };
    for agent in ["agent-1", "agent-2"] {
        let r = payout(agent, None);
        assert_eq!(r.status, 201, "{}", r.text());
        let key = idemgate_proxy::keys::scoped(agent, "po-1");
        assert_eq!(sent(), (Some(key.clone()), Some(key.clone())), "{agent}");
        assert_eq!(f.up.counts.effects(&key), 1);
    }
    // An operator's replay of a lost response sends it the same way.
    let lost = payout("agent-3", Some("drop"));
    assert_eq!(lost.status, 502, "{}", lost.text());
    let id = lost.json()["entry_id"].as_i64().expect("entry_id");
    let r = f.proxy.admin_post(
        &format!("/admin/v1/entries/{id}/replay"),
        &json!({"operator": "oncall", "reason": "the processor says it did not run"}),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let key = idemgate_proxy::keys::scoped("agent-3", "po-1");
    assert_eq!(sent(), (Some(key.clone()), Some(key)));
}

/// Replays of a key come from memory once read (the ledger's replay cache), but an operator's
/// purge in another process — the CLI here — reaches the very next retry: it runs again.
#[test]
fn a_purge_by_another_process_reaches_the_next_retry() {
    let f = Fx::new();
    let body = r#"{"amount":300}"#;
    assert_eq!(f.charge("k-purged", body, &[]).status, 201);
    for _ in 0..3 {
        let r = f.charge("k-purged", body, &[]);
        assert_eq!(r.header("idempotent-replayed"), Some("true"));
    }
    let id = f.entries(&["--key", "k-purged"])[0]["id"].to_string();
    let l = f.ledger();
    let out = idemgate(&[
        "purge",
        "--ledger",
        &l,
        &id,
        "--reason",
        "refund and re-run",
        "--operator",
        "ops",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r = f.charge("k-purged", body, &[]);
    assert_eq!(r.status, 201, "{}", r.text());
    assert_eq!(
        r.header("idempotent-replayed"),
        None,
        "a purged key was replayed"
    );
    assert_eq!(f.effects("k-purged"), 2);
    let r = f.charge("k-purged", body, &[]);
    assert_eq!(r.header("idempotent-replayed"), Some("true"));
    assert_eq!(f.effects("k-purged"), 2);
}

#[test]
fn the_same_key_with_another_request_is_a_422_and_the_rejected_request_is_kept() {
    let f = Fx::new();
    assert_eq!(f.charge("k-reuse", r#"{"amount":100}"#, &[]).status, 201);
    let r = f.charge("k-reuse", r#"{"amount":999}"#, &[]);
    assert_eq!(r.status, 422);
    assert_eq!(r.code(), "key-reuse");
    assert_eq!(f.effects("k-reuse"), 1);
    let e = f.entries(&["--collisions"]);
    assert_eq!(e.len(), 1);
    let shown = idemgate_json(&[
        "show",
        "--ledger",
        &f.ledger(),
        &e[0]["id"].to_string(),
        "--json",
    ]);
    assert_eq!(
        shown["collision_requests"][0]["request"]["body"],
        r#"{"amount":999}"#
    );
    assert_eq!(shown["request"]["body"], r#"{"amount":100}"#);
}

/// Routes match by path prefix, so one route carries many operations: the refunds of different
/// charges, a dry run and a real one. A key names one of them, and so does a fingerprint.
#[test]
fn a_path_beyond_the_route_and_the_query_are_part_of_the_request() {
    let f = Fx::new();
    let first = post_at(&f.proxy, "/v1/charges/ch_1/refund?b=2&a=1", "k-refund");
    assert_eq!(first.status, 201, "{}", first.text());
    let again = post_at(&f.proxy, "/v1/charges/ch_1/refund?a=1&b=2", "k-refund");
    assert_eq!(
        (again.status, again.header("idempotent-replayed")),
        (201, Some("true")),
        "the query's names in another order are the same request"
    );
    assert_eq!(again.body, first.body);
    for other in [
        "/v1/charges/ch_2/refund?a=1&b=2",
        "/v1/charges/ch_1/refund?a=1&b=3",
        "/v1/charges/ch_1/refund",
        "/v1/charges",
    ] {
        let r = post_at(&f.proxy, other, "k-refund");
        assert_eq!(r.status, 422, "{other}: {}", r.text());
        assert_eq!(r.code(), "key-reuse");
    }
    assert_eq!(f.effects("k-refund"), 1);
    // Under keys of their own, two charges' refunds are not duplicates of each other; the same
    // refund again is.
    for (target, key) in [
        ("/v1/charges/ch_3/refund", "k-refund-3"),
        ("/v1/charges/ch_4/refund", "k-refund-4"),
        ("/v1/charges/ch_3/refund", "k-refund-3-again"),
    ] {
        assert_eq!(post_at(&f.proxy, target, key).status, 201, "{key}");
    }
    let mut pair: Vec<String> = f
        .entries(&["--duplicates"])
        .iter()
        .map(|e| e["key"].as_str().unwrap_or_default().to_owned())
        .collect();
    pair.sort();
    assert_eq!(pair, ["k-refund-3", "k-refund-3-again"]);
    let collided = f.entries(&["--collisions"]);
    let id = collided[0]["id"].to_string();
    let shown = idemgate_json(&["show", "--ledger", &f.ledger(), &id, "--json"]);
    let mut rejected: Vec<&str> = shown["collision_requests"]
        .as_array()
        .expect("collisions")
        .iter()
        .filter_map(|c| c["request"]["path"].as_str())
        .collect();
    rejected.sort_unstable();
    assert_eq!(
        rejected,
        [
            "/v1/charges",
            "/v1/charges/ch_1/refund",
            "/v1/charges/ch_1/refund?a=1&b=3",
            "/v1/charges/ch_2/refund?a=1&b=2",
        ],
        "each rejected request is kept with its path"
    );
}

/// A ledger written before fingerprints covered the path and the query: an entry claimed then
/// beyond its route's path is replayed to the same request after the upgrade, and another
/// request under its key is still refused.
#[test]
fn an_entry_fingerprinted_before_the_path_counted_is_replayed_to_its_own_request() {
    use idemgate_ledger::{
        canon, ClaimOutcome, ClaimRequest, CompleteRequest, RequestRecord, ResponseRecord, Storage,
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let up = Upstream::start();
    let ledger = dir.path().join("ledger.db");
    let target = "/v1/charges/ch_9/refund?reason=duplicate";
    {
        let l = new_ledger(&ledger);
        let claim = ClaimRequest {
            scope: "agent-7".into(),
            fingerprint: canon::fingerprint("POST", "charges", &[], b"{}"),
            request: RequestRecord {
                method: "POST".into(),
                path: target.into(),
                headers: vec![],
                body: b"{}".to_vec(),
            },
            ..charge_claim("k-before", "an-older-instance", 30_000)
        };
        let ClaimOutcome::Claimed { entry_id, .. } = l.claim(claim).wait().expect("claim") else {
            panic!("not claimed")
        };
        l.complete(CompleteRequest {
            entry_id,
            owner: "an-older-instance".into(),
            response: ResponseRecord {
                status: 201,
                headers: vec![],
                body: br#"{"refund":"re_9"}"#.to_vec(),
            },
            ttl_ms: 3_600_000,
            duplicate_window_ms: None,
            at: idemgate_ledger::now_millis(),
        })
        .wait()
        .expect("complete");
        l.close();
    }
    let proxy = Proxy::start_with_env(
        dir.path(),
        &Fx::render(CONFIG, &up, &ledger),
        &ledger,
        &[("TEST_WEBHOOK_SECRET", SECRET)],
    );
    let r = post_at(&proxy, target, "k-before");
    assert_eq!(r.status, 201, "{}", r.text());
    assert_eq!(r.header("idempotent-replayed"), Some("true"));
    assert_eq!(r.body, br#"{"refund":"re_9"}"#);
    let r = post_at(
        &proxy,
        "/v1/charges/ch_8/refund?reason=duplicate",
        "k-before",
    );
    assert_eq!((r.status, r.code()), (422, "key-reuse".to_owned()));
    assert_eq!(up.counts.total(), 0);
}

#[test]
fn derived_keys_make_the_same_arguments_one_operation() {
    let f = Fx::new();
    let r1 = f.proxy.send(
        "POST",
        "/v1/emails",
        &[],
        br#"{"to":"a@example.com","template":"receipt","sent_at":1}"#,
    );
    assert_eq!(r1.status, 201, "{}", r1.text());
    let key = r1
        .header("idempotency-key")
        .expect("derived key echoed")
        .to_owned();
    assert!(key.starts_with("derived:"));
    // The same key arguments with another body are a key reuse; identical requests replay.
    let r2 = f.proxy.send(
        "POST",
        "/v1/emails",
        &[],
        br#"{"template":"receipt","to":"a@example.com","sent_at":1}"#,
    );
    assert_eq!(r2.header("idempotent-replayed"), Some("true"));
    let r3 = f.proxy.send(
        "POST",
        "/v1/emails",
        &[],
        br#"{"to":"a@example.com","template":"receipt","sent_at":2}"#,
    );
    assert_eq!(r3.status, 422);
    let r4 = f.proxy.send(
        "POST",
        "/v1/emails",
        &[],
        br#"{"to":"b@example.com","template":"receipt"}"#,
    );
    assert_eq!(r4.status, 201);
    assert_eq!(f.up.counts.total(), 2);
}

/// `forward_key = false`: the upstream never gets the key, on the first attempt or an operator's
/// replay (which sends the stored request).
#[test]
fn a_route_that_does_not_forward_the_key_never_sends_it() {
    let f = Fx::with(&format!(
        "{CONFIG}\n[[routes]]\nname = \"quiet\"\nmethod = \"POST\"\npath = \"/v1/quiet\"\n\
         upstream = \"{{upstream}}\"\neffect = \"write\"\nforward_key = false\ntimeout = \"1s\"\nretry = {{ attempts = 1 }}\n"
    ));
    let key_sent = || {
        let h = f.up.counts.last_headers.lock().expect("lock").clone();
        h.into_iter().find(|(n, _)| n == "idempotency-key")
    };
    let r = f.proxy.send(
        "POST",
        "/v1/quiet",
        &[("idempotency-key", "k-quiet"), ("x-fault", "status:502")],
        b"{}",
    );
    assert_eq!(r.status, 502, "{}", r.text());
    assert_eq!(key_sent(), None);
    let id = f.entries(&["--key", "k-quiet"])[0]["id"].to_string();
    let cfg = f.proxy.config.display().to_string();
    let v = idemgate_json(&action_args("replay", &cfg, &id));
    assert_eq!(v["status"], 201, "{v}");
    assert_eq!(f.up.counts.total(), 2, "both reached the upstream");
    assert_eq!(key_sent(), None, "the replay sent the key");
}
