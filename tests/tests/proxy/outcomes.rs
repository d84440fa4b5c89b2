//! Outcomes: requests in flight, unknown outcomes held for an operator, what was not executed retried and released, concurrency.

use super::*;

#[test]
fn a_key_in_flight_gets_409_with_retry_after_and_the_upstream_runs_once() {
    let f = Fx::new();
    let slow = {
        let addr = f.proxy.addr;
        std::thread::spawn(move || {
            request(
                addr,
                "POST",
                "/v1/charges",
                &[("idempotency-key", "k-flight"), ("x-fault", "delay:700")],
                br#"{"amount":1}"#,
            )
        })
    };
    // Wait until the upstream has the first request, then retry.
    eventually(5, "the first request upstream", || {
        (f.requests("k-flight") == 1).then_some(())
    });
    let claims = f.ledger_claims();
    assert_eq!(claims, 1, "the first request's claim");
    let r = f.proxy.send(
        "POST",
        "/v1/charges",
        &[("idempotency-key", "k-flight"), ("x-fault", "delay:700")],
        br#"{"amount":1}"#,
    );
    assert_eq!(r.status, 409);
    assert_eq!(r.code(), "in-flight");
    assert_eq!(
        f.ledger_claims(),
        claims,
        "a duplicate of a request in flight here is answered without the ledger"
    );
    // Another request under the key while it is in flight is still the ledger's: a collision,
    // recorded.
    let other = f.proxy.send(
        "POST",
        "/v1/charges",
        &[("idempotency-key", "k-flight")],
        br#"{"amount":2}"#,
    );
    assert_eq!(other.status, 422, "{}", other.text());
    assert_eq!(other.code(), "key-reuse");
    let ra: u64 = r
        .header("retry-after")
        .expect("Retry-After")
        .parse()
        .expect("seconds");
    assert!((1..=5).contains(&ra));
    assert_eq!(slow.join().expect("join").status, 201);
    assert_eq!(f.effects("k-flight"), 1);
}

#[test]
fn with_in_flight_wait_a_retry_waits_for_the_first_outcome() {
    let f = Fx::with(&CONFIG.replace(
        "duplicate_window = \"10m\"",
        "duplicate_window = \"10m\"\nin_flight = \"wait\"\nwait = \"3s\"",
    ));
    let addr = f.proxy.addr;
    let slow = std::thread::spawn(move || {
        request(
            addr,
            "POST",
            "/v1/charges",
            &[("idempotency-key", "k-wait"), ("x-fault", "delay:500")],
            br#"{"amount":1}"#,
        )
    });
    eventually(5, "the first request upstream", || {
        (f.requests("k-wait") == 1).then_some(())
    });
    let r = f.proxy.send(
        "POST",
        "/v1/charges",
        &[("idempotency-key", "k-wait"), ("x-fault", "delay:500")],
        br#"{"amount":1}"#,
    );
    let first = slow.join().expect("join");
    assert_eq!(first.status, 201);
    assert_eq!(r.status, 201, "{}", r.text());
    assert_eq!(r.header("idempotent-replayed"), Some("true"));
    assert_eq!(r.body, first.body);
    assert_eq!(f.effects("k-wait"), 1);
    // The duplicate waited to be woken by the first request's end, then asked the ledger once
    // (its replay), instead of asking it every 25 ms meanwhile (~20 claims in 500 ms).
    assert_eq!(
        f.ledger_claims(),
        2,
        "the first request's claim and the replay's"
    );
}

#[test]
fn an_unknown_outcome_is_held_as_stuck_and_never_run_again() {
    let f = Fx::new();
    // 500 after the effect, a dropped connection after the effect, a timeout after the effect.
    for (key, fault, status) in [
        ("k-500", "status:500", 502),
        ("k-drop", "drop", 502),
        ("k-slow", "delay:2500", 504),
    ] {
        let r = f.charge(key, r#"{"amount":5}"#, &[("x-fault", fault)]);
        assert_eq!(r.status, status, "{key}: {}", r.text());
        assert_eq!(r.code(), "outcome-unknown");
        assert!(r.json()["entry_id"].is_i64());
        // Later tries: 409, not executed again — even once the upstream is healthy.
        for _ in 0..2 {
            let again = f.charge(key, r#"{"amount":5}"#, &[]);
            assert_eq!(again.status, 409, "{key}");
            assert_eq!(again.code(), "outcome-unknown");
        }
        assert_eq!(f.effects(key), 1, "{key}");
        assert_eq!(
            f.requests(key),
            1,
            "{key}: no automatic retry of an unknown outcome"
        );
    }
    // A success whose answer is too long to keep for retries is held too, and says that the
    // upstream acted (it had said only that the body "failed").
    let size = (idemgate_proxy::forward::MAX_RESPONSE_BODY + 1).to_string();
    let r = f.charge("k-huge", r#"{"amount":5}"#, &[("x-answer-bytes", &size)]);
    assert_eq!(r.status, 502, "{}", r.text());
    assert_eq!(r.code(), "outcome-unknown");
    let detail = r.json()["detail"].as_str().unwrap_or_default().to_owned();
    assert!(
        detail.contains("answered 201 (so it acted), with a body over the 16 MiB"),
        "{detail}"
    );
    assert_eq!(f.charge("k-huge", r#"{"amount":5}"#, &[]).status, 409);
    assert_eq!((f.effects("k-huge"), f.requests("k-huge")), (1, 1));
    let stuck = f.entries(&["--stuck"]);
    assert_eq!(stuck.len(), 4);
    assert!(stuck
        .iter()
        .all(|e| e["outcome_unknown"] == true && e["state"] == "pending"));
}

#[test]
fn an_unknown_outcome_is_retried_when_the_upstream_dedupes_the_forwarded_key() {
    let f = Fx::new();
    let r = f.proxy.send(
        "POST",
        "/dedupe/x",
        &[("idempotency-key", "k-dd"), ("x-fault", "fail-first:1:500")],
        br#"{"a":1}"#,
    );
    assert_eq!(r.status, 201, "{}", r.text());
    assert_eq!(f.requests("k-dd"), 2, "retried once");
    assert_eq!(
        f.effects("k-dd"),
        1,
        "the upstream deduped the forwarded key"
    );
    let seen = f.up.counts.last_headers.lock().expect("lock").clone();
    assert!(
        seen.iter()
            .any(|(n, v)| n == "idempotency-key" && v == "k-dd"),
        "the key is forwarded"
    );
}

/// Two routes with the same retry policy as `charges`, whose effect alone decides what is tried
/// again: an idempotent one and a destructive one.
const EFFECT_ROUTES: &str = r#"
[[routes]]
name = "refresh"
method = "POST"
path = "/v1/refresh"
upstream = "{upstream}"
effect = "idempotent"
timeout = "1s"
retry = { attempts = 3, base = "10ms", max = "50ms" }

[[routes]]
name = "refunds"
method = "POST"
path = "/v1/refunds"
upstream = "{upstream}"
effect = "destructive"
timeout = "1s"
retry = { attempts = 3, base = "10ms", max = "50ms" }
"#;

#[test]
fn an_idempotent_call_is_tried_again_after_an_unknown_outcome_and_a_destructive_one_never() {
    let f = Fx::with(&format!("{CONFIG}{EFFECT_ROUTES}"));
    let send = |path: &str, key: &str, fault: &str| {
        f.proxy.send(
            "POST",
            path,
            &[("idempotency-key", key), ("x-fault", fault)],
            br#"{"amount":5}"#,
        )
    };
    // A 500 may have acted: an idempotent call runs again, and its second answer is the outcome.
    let r = send("/v1/refresh", "k-refresh", "fail-first:1:500");
    assert_eq!(r.status, 201, "{}", r.text());
    assert_eq!(
        f.requests("k-refresh"),
        2,
        "tried again after the unknown outcome"
    );
    // A destructive call is held for an operator instead.
    let r = send("/v1/refunds", "k-refund", "fail-first:1:500");
    assert_eq!(r.status, 502, "{}", r.text());
    assert_eq!(r.code(), "outcome-unknown");
    assert_eq!(
        f.requests("k-refund"),
        1,
        "a destructive call is never run twice"
    );
    // Not even when the upstream says it did nothing: its retry policy is one attempt.
    let r = send("/v1/refunds", "k-refund-503", "fail-first:1:503");
    assert_eq!(r.status, 503, "{}", r.text());
    assert_eq!(r.code(), "upstream-unavailable");
    assert_eq!(f.requests("k-refund-503"), 1);
    // The same faults on the write route `charges`: the 503 is tried again, the 500 is not.
    let charge = |key: &str, fault: &str| f.charge(key, r#"{"amount":5}"#, &[("x-fault", fault)]);
    assert_eq!(charge("k-charge-503", "fail-first:1:503").status, 201);
    assert_eq!(f.requests("k-charge-503"), 2);
    assert_eq!(
        charge("k-charge-500", "fail-first:1:500").code(),
        "outcome-unknown"
    );
    assert_eq!(f.requests("k-charge-500"), 1);
}

#[test]
fn not_executed_outcomes_are_retried_with_backoff() {
    let f = Fx::new();
    let r = f.charge(
        "k-503s",
        r#"{"amount":7}"#,
        &[("x-fault", "fail-first:2:503")],
    );
    assert_eq!(r.status, 201, "{}", r.text());
    assert_eq!(f.requests("k-503s"), 3);
    assert_eq!(f.effects("k-503s"), 1);
    let e = &f.entries(&["--key", "k-503s"])[0];
    assert_eq!(e["attempts"], 3);
    let log = idemgate_json(&[
        "log",
        "--ledger",
        &f.ledger(),
        "--entry",
        &e["id"].to_string(),
        "--json",
    ]);
    let kinds: Vec<&str> = log
        .as_array()
        .expect("array")
        .iter()
        .rev()
        .map(|e| e["kind"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(kinds, ["claim", "attempt", "attempt", "complete"]);
    let metrics = f.proxy.admin_get("/metrics").text();
    assert!(
        metrics.contains("idemgate_retries_total{route=\"charges\",class=\"status_503\"} 2"),
        "{metrics}"
    );
}

/// What the upstream did not do is never replayed. A refusal of the caller's credentials or
/// permissions (401, 403, 407) reaches the caller at once, is not stored, and releases the key:
/// once the caller is allowed, the same key runs. 408 and 425 are retried, as 429 and 503 are.
#[test]
fn refusals_and_request_timeouts_release_the_key_instead_of_being_replayed() {
    let f = Fx::new();
    for code in [401u16, 403, 407] {
        let key = format!("k-{code}");
        let fault = format!("status:{code}");
        let r = f.charge(&key, r#"{"amount":9}"#, &[("x-fault", &fault)]);
        assert_eq!(r.status, code, "{}", r.text());
        assert_eq!(r.json()["error"], code, "the upstream's own answer");
        assert_eq!(r.header("idempotency-key"), Some(key.as_str()));
        assert_eq!(f.requests(&key), 1, "{code} is not retried");
        assert_eq!(f.entries(&["--key", &key])[0]["state"], "released");
        let again = f.charge(&key, r#"{"amount":9}"#, &[]);
        assert_eq!(
            (again.status, again.header("idempotent-replayed")),
            (201, None),
            "after {code}, the same key runs"
        );
        assert_eq!(f.effects(&key), 1);
    }
    for code in [408u16, 425] {
        let key = format!("k-{code}");
        let fault = format!("status:{code}");
        let r = f.charge(&key, r#"{"amount":9}"#, &[("x-fault", &fault)]);
        assert_eq!(r.status, 503, "{}", r.text());
        assert_eq!(r.code(), "upstream-unavailable");
        assert_eq!(f.requests(&key), 3, "{code} is retried");
        assert_eq!(f.entries(&["--key", &key])[0]["state"], "released");
    }
    let metrics = f.proxy.admin_get("/metrics").text();
    for series in [
        "idemgate_requests_total{route=\"charges\",outcome=\"not_executed\"} 5",
        "idemgate_retries_total{route=\"charges\",class=\"status_408\"} 2",
        "idemgate_retries_total{route=\"charges\",class=\"status_425\"} 2",
    ] {
        assert!(metrics.contains(series), "{series}\n{metrics}");
    }
}

#[test]
fn exhausted_retries_release_the_key_with_503_and_the_key_may_run_again() {
    let f = Fx::new();
    let r = f.charge(
        "k-429",
        r#"{"amount":8}"#,
        &[("x-fault", "fail-first:9:429")],
    );
    assert_eq!(r.status, 503);
    assert_eq!(r.code(), "upstream-unavailable");
    assert!(r.header("retry-after").is_some());
    assert_eq!(f.requests("k-429"), 3);
    assert_eq!(f.effects("k-429"), 0);
    assert_eq!(f.entries(&["--key", "k-429"])[0]["state"], "released");
    // The client retries later with the same key: it runs now.
    let again = f.charge("k-429", r#"{"amount":8}"#, &[]);
    assert_eq!(again.status, 201);
    assert_eq!(f.effects("k-429"), 1);
    // Connection refused is "not executed" too.
    let refused = f.proxy.send(
        "POST",
        "/refused",
        &[("idempotency-key", "k-refused")],
        b"{}",
    );
    assert_eq!(refused.status, 503);
    assert_eq!(f.entries(&["--key", "k-refused"])[0]["state"], "released");
}

/// An upstream that says when to come back (`Retry-After`) is not asked sooner: the proxy waits
/// that long before its retry when the route waits that long (`retry.max`), and otherwise tells
/// the caller to wait instead of retrying (it retried after its own backoff, sooner than asked).
#[test]
fn an_upstreams_retry_after_is_waited_out_or_handed_to_the_caller() {
    let f = Fx::with(&CONFIG.replacen(
        r#"retry = { attempts = 3, base = "10ms", max = "50ms" }"#,
        r#"retry = { attempts = 3, base = "10ms", max = "1500ms" }"#,
        1,
    ));
    let log = |key: &str| {
        let id = f.entries(&["--key", key])[0]["id"].to_string();
        let events = idemgate_json(&["log", "--ledger", &f.ledger(), "--entry", &id, "--json"]);
        let mut events = events.as_array().expect("array").clone();
        events.reverse();
        events
    };
    // Within retry.max: waited out, then retried.
    let r = f.charge(
        "k-ra-1",
        r#"{"amount":1}"#,
        &[("x-fault", "fail-first:1:503:1")],
    );
    assert_eq!(r.status, 201, "{}", r.text());
    assert_eq!(f.requests("k-ra-1"), 2);
    let events = log("k-ra-1");
    let kinds: Vec<&str> = events
        .iter()
        .map(|e| e["kind"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(kinds, ["claim", "attempt", "complete"]);
    let at = |e: &serde_json::Value| {
        idemgate_ops::parse_time(e["at"].as_str().expect("at")).expect("an RFC 3339 time")
    };
    let waited = at(&events[2]) - at(&events[1]);
    assert!(
        waited >= 1000,
        "retried {waited} ms after a Retry-After of 1 s"
    );
    // Longer than retry.max: not retried; the caller gets the upstream's wait, the key released.
    let r = f.charge(
        "k-ra-2",
        r#"{"amount":2}"#,
        &[("x-fault", "fail-first:1:429:2")],
    );
    assert_eq!(r.status, 503, "{}", r.text());
    assert_eq!(r.code(), "upstream-unavailable");
    assert_eq!(r.header("retry-after"), Some("2"));
    assert_eq!(f.requests("k-ra-2"), 1);
    assert_eq!(f.entries(&["--key", "k-ra-2"])[0]["state"], "released");
    assert_eq!(f.effects("k-ra-2"), 0);
    // As an HTTP-date (which had been ignored: retried after the route's own backoff, so run).
    let r = f.charge(
        "k-ra-3",
        r#"{"amount":3}"#,
        &[("x-fault", "fail-first:1:503:date+5")],
    );
    assert_eq!(r.status, 503, "{}", r.text());
    let secs: u64 = r
        .header("retry-after")
        .and_then(|s| s.parse().ok())
        .expect("Retry-After in seconds");
    assert!((3..=5).contains(&secs), "{secs}");
    assert_eq!(f.requests("k-ra-3"), 1);
    assert_eq!(f.effects("k-ra-3"), 0);
}

#[test]
fn sixty_four_concurrent_requests_with_one_key_execute_once() {
    let f = Fx::new();
    let barrier = Arc::new(Barrier::new(64));
    let addr = f.proxy.addr;
    let threads: Vec<_> = (0..64)
        .map(|_| {
            let b = barrier.clone();
            std::thread::spawn(move || {
                b.wait();
                request(
                    addr,
                    "POST",
                    "/v1/charges",
                    &[("idempotency-key", "k-64"), ("x-fault", "delay:300")],
                    br#"{"amount":64}"#,
                )
            })
        })
        .collect();
    let resps: Vec<Resp> = threads
        .into_iter()
        .map(|t| t.join().expect("join"))
        .collect();
    let executed = resps
        .iter()
        .filter(|r| r.status == 201 && r.header("idempotent-replayed").is_none())
        .count();
    let others_ok = resps
        .iter()
        .all(|r| r.status == 201 || (r.status == 409 && r.code() == "in-flight"));
    assert_eq!(executed, 1);
    assert!(
        others_ok,
        "{:?}",
        resps.iter().map(|r| r.status).collect::<Vec<_>>()
    );
    assert_eq!(f.effects("k-64"), 1);
    assert_eq!(f.up.counts.total(), 1);
}
