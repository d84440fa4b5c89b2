//! `idemgate serve` as a real process in front of a real upstream that counts side effects and
//! injects faults: one test per row of the proxy table in docs/design.md (the answer *and* the upstream's
//! effect count), concurrency, SIGKILL and SIGTERM, signatures, the admin API, replay, reconcile.

use std::path::PathBuf;
use std::sync::{Arc, Barrier};

use idemgate_tests::upstream::Upstream;
use idemgate_tests::*;
use serde_json::json;

const CONFIG: &str = r#"
[server]
listen = "127.0.0.1:0"
admin_listen = "127.0.0.1:0"
ledger = "{ledger}"

[defaults]
lease = "3s"
ttl = "1h"
max_body = "1MiB"
duplicate_window = "10m"

[[routes]]
name = "charges"
method = "POST"
path = "/v1/charges"
upstream = "{upstream}"
effect = "write"
scope.header = "X-Agent-Id"
timeout = "1s"
retry = { attempts = 3, base = "10ms", max = "50ms" }
secret_headers = ["x-processor-key"]
secret_query = ["Sig"]
reconcile = { url = "{upstream}/v1/charges?idempotency_key={key}" }

[[routes]]
name = "dedupe"
method = "POST"
path = "/dedupe"
upstream = "{upstream}"
effect = "write"
upstream_dedupes = true
timeout = "1s"
retry = { attempts = 3, base = "10ms", max = "50ms" }

[[routes]]
name = "refused"
timeout = "1s"
method = "POST"
path = "/refused"
upstream = "{closed}"
effect = "write"
retry = { attempts = 2, base = "10ms", max = "20ms" }

[[routes]]
name = "webhooks"
timeout = "1s"
method = "POST"
path = "/hooks"
upstream = "{upstream}"
effect = "idempotent"
key.json = "/event_id"
signature = { secret_env = "TEST_WEBHOOK_SECRET", tolerance = "5m" }
retry = { attempts = 3, base = "10ms", max = "50ms" }

[[routes]]
name = "emails"
timeout = "1s"
method = "POST"
path = "/v1/emails"
upstream = "{upstream}"
effect = "write"
key.derive = ["/to", "/template"]
retry = { attempts = 3, base = "10ms", max = "50ms" }

[[routes]]
name = "cancel"
method = "POST"
path = "/v1/cancel"
upstream = "{upstream}"
effect = "destructive"
timeout = "1s"

[[routes]]
name = "customers"
timeout = "1s"
method = "GET"
path = "/v1/customers"
upstream = "{upstream}"
effect = "read"
cache_ttl = "1m"
scope.header = "X-Agent-Id"
secret_headers = ["x-processor-key"]
"#;

const SECRET: &str = "whsec_test_secret";

struct Fx {
    dir: tempfile::TempDir,
    up: Upstream,
    proxy: Proxy,
}

impl Fx {
    fn new() -> Fx {
        Fx::with(CONFIG)
    }

    fn with(template: &str) -> Fx {
        Fx::with_env(template, &[])
    }

    /// [`Fx::with`], `serve` getting `env` too.
    fn with_env(template: &str, env: &[(&str, &str)]) -> Fx {
        let dir = tempfile::tempdir().expect("tempdir");
        let up = Upstream::start();
        let ledger = dir.path().join("ledger.db");
        let mut env = env.to_vec();
        env.push(("TEST_WEBHOOK_SECRET", SECRET));
        let proxy = Proxy::start_with_env(
            dir.path(),
            &Fx::render(template, &up, &ledger),
            &ledger,
            &env,
        );
        Fx { dir, up, proxy }
    }

    fn render(template: &str, up: &Upstream, ledger: &std::path::Path) -> String {
        // A port nothing listens on: bind one, then let it go.
        let closed = std::net::TcpListener::bind("127.0.0.1:0")
            .expect("bind")
            .local_addr()
            .expect("addr");
        config(template, &up.url(), ledger).replace("{closed}", &format!("http://{closed}"))
    }

    fn restart(&mut self) {
        let cfg = std::fs::read_to_string(&self.proxy.config).expect("config");
        let ledger = self.proxy.ledger.clone();
        self.proxy = Proxy::start_with_env(
            self.dir.path(),
            &cfg,
            &ledger,
            &[("TEST_WEBHOOK_SECRET", SECRET)],
        );
    }

    fn ledger(&self) -> String {
        self.proxy.ledger.display().to_string()
    }

    fn charge(&self, key: &str, body: &str, extra: &[(&str, &str)]) -> Resp {
        let mut h = vec![
            ("idempotency-key", key),
            ("content-type", "application/json"),
            ("x-agent-id", "agent-7"),
        ];
        h.extend_from_slice(extra);
        self.proxy.send("POST", "/v1/charges", &h, body.as_bytes())
    }

    /// A charge that the upstream performs and then holds before answering (`fault`:
    /// `delay:MS` or `delay:MS:STATUS`): sent on a thread of its own, returned once the effect has
    /// happened (join it for the answer).
    fn charge_held_upstream(
        &self,
        key: &str,
        body: &str,
        fault: &str,
    ) -> std::thread::JoinHandle<Resp> {
        let (addr, k, b) = (self.proxy.addr, key.to_owned(), body.to_owned());
        let fault = fault.to_owned();
        let client = std::thread::spawn(move || {
            request(
                addr,
                "POST",
                "/v1/charges",
                &[
                    ("idempotency-key", &k),
                    ("x-agent-id", "agent-7"),
                    ("content-type", "application/json"),
                    ("x-fault", &fault),
                ],
                b.as_bytes(),
            )
        });
        eventually(5, "the request upstream", || {
            (self.requests(key) == 1).then_some(())
        });
        client
    }

    /// How many claims this proxy has asked its ledger for so far (`/metrics`).
    fn ledger_claims(&self) -> u64 {
        let metrics = self.proxy.admin_get("/metrics").text();
        metric(&metrics, "idemgate_claim_seconds_count").unwrap_or(0)
    }

    /// The upstream's effects for `key`, sent unscoped or (as `charge` sends) by agent-7, whose
    /// key the upstream is sent as a UUID of its own (`keys::upstream_key`).
    fn effects(&self, key: &str) -> u64 {
        let c = &self.up.counts;
        c.effects(key) + c.effects(&idemgate_proxy::keys::scoped("agent-7", key))
    }

    /// The requests the upstream got for `key`, as [`Fx::effects`] counts.
    fn requests(&self, key: &str) -> u64 {
        let c = &self.up.counts;
        c.requests(key) + c.requests(&idemgate_proxy::keys::scoped("agent-7", key))
    }

    fn entries(&self, flags: &[&str]) -> Vec<serde_json::Value> {
        let l = self.ledger();
        let mut args = vec!["entries", "--ledger", &l, "--json"];
        args.extend_from_slice(flags);
        idemgate_json(&args).as_array().cloned().unwrap_or_default()
    }
}

/// A new ledger at `path`, to seed as an older instance left it.
fn new_ledger(path: &std::path::Path) -> Arc<idemgate_ledger::Ledger> {
    idemgate_ledger::Ledger::sqlite(
        path,
        idemgate_ledger::OpenOptions {
            create: true,
            hasher: idemgate_ledger::ChainHasher::unkeyed(),
        },
    )
    .expect("open")
}

/// The arguments of an operator action (`replay`, `reconcile`) on entry `id`, as JSON.
fn action_args<'a>(what: &'a str, cfg: &'a str, id: &'a str) -> [&'a str; 9] {
    [
        what,
        "--config",
        cfg,
        id,
        "--operator",
        "oncall",
        "--reason",
        "r",
        "--json",
    ]
}

/// The value of an unlabelled series `name` in Prometheus text, if it is there.
fn metric(text: &str, name: &str) -> Option<u64> {
    let value = text
        .lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))?;
    Some(value.trim().parse().expect("a count"))
}

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

/// A POST to `target` on the charges route, as agent-7, with an empty JSON body.
fn post_at(proxy: &Proxy, target: &str, key: &str) -> Resp {
    proxy.send(
        "POST",
        target,
        &[
            ("idempotency-key", key),
            ("content-type", "application/json"),
            ("x-agent-id", "agent-7"),
        ],
        b"{}",
    )
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

/// Sets the soft file-size limit of the running process `pid` (`None`: unlimited), with
/// util-linux's `prlimit`. On Linux a write at or past the limit fails (`EFBIG`) whatever the
/// file's size, so a limit of 1 byte refuses every write the process makes to a file, as a full
/// disk does; `idemgate serve` catches the SIGXFSZ that comes with it.
fn limit_file_size(pid: u32, bytes: Option<u64>) {
    let limit = bytes.map_or_else(|| "unlimited".to_owned(), |b| b.to_string());
    let out = std::process::Command::new("prlimit")
        .arg(format!("--pid={pid}"))
        .arg(format!("--fsize={limit}:"))
        .output()
        .expect("run prlimit (util-linux)");
    assert!(
        out.status.success(),
        "prlimit: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The names of the threads of process `pid`.
fn threads(pid: u32) -> Vec<String> {
    let dir = std::fs::read_dir(format!("/proc/{pid}/task")).expect("/proc");
    dir.filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .map(|c| c.trim().to_owned())
        .collect()
}

#[test]
fn a_disk_that_refuses_writes_gets_nothing_forwarded_unclaimed_and_serve_recovers_without_a_restart(
) {
    let mut f = Fx::new();
    let pid = f.proxy.pid();
    let body = |i: usize| format!(r#"{{"amount":{i}}}"#);
    let mut acked: Vec<(String, String, Vec<u8>)> = Vec::new();
    for i in 0..5 {
        let key = format!("k-disk-{i}");
        let r = f.charge(&key, &body(i), &[]);
        assert_eq!(r.status, 201, "{}", r.text());
        acked.push((key, body(i), r.body));
    }
    // The disk fills while a request is upstream: its claim is durable, its effect happens, and
    // its outcome cannot be recorded.
    // Another fails upstream after its effect: its unknown outcome cannot be recorded either.
    // A third is refused upstream (503, not executed): neither its retry nor its release can be.
    let held = [
        ("k-disk-mid", r#"{"amount":99}"#),
        ("k-disk-502", r#"{"amount":98}"#),
    ];
    let refused = ("k-disk-503", r#"{"amount":97}"#);
    let upstream = f.charge_held_upstream(held[0].0, held[0].1, "delay:600");
    let failing = f.charge_held_upstream(held[1].0, held[1].1, "delay:600:502");
    let not_run = f.charge_held_upstream(refused.0, refused.1, "delay:600:503");
    limit_file_size(pid, Some(1));
    let unrecorded = upstream.join().expect("client");
    assert_eq!(unrecorded.status, 502, "{}", unrecorded.text());
    assert_eq!(unrecorded.code(), "outcome-unrecorded");
    assert_eq!(unrecorded.json()["upstream_status"], 201);
    assert!(unrecorded.json()["entry_id"].as_i64().is_some());
    // Kept in memory, to be recorded when there is room: worth a retry.
    assert_eq!(unrecorded.header("retry-after"), Some("1"));
    let unknown = failing.join().expect("client");
    assert_eq!(unknown.status, 502, "{}", unknown.text());
    assert_eq!(unknown.code(), "outcome-unknown");
    let not_run = not_run.join().expect("client");
    assert_eq!(not_run.status, 503, "{}", not_run.text());
    assert_eq!(not_run.code(), "upstream-unavailable");
    assert_eq!(f.requests(refused.0), 1, "tried again unrecorded");
    assert_eq!(f.effects(refused.0), 0);
    // While nothing can be written: a new key is refused before it is forwarded, with a hint to
    // retry; what was acknowledged still replays; the unrecorded key is never run again.
    for i in 0..4 {
        let key = format!("k-disk-new-{i}");
        let r = f.charge(&key, &body(100 + i), &[]);
        assert_eq!(r.status, 503, "{}", r.text());
        assert_eq!(r.code(), "ledger-unavailable");
        assert_eq!(r.header("retry-after"), Some("1"));
        assert_eq!(f.effects(&key), 0, "{key} was forwarded unclaimed");
    }
    for (key, b, first) in &acked {
        let r = f.charge(key, b, &[]);
        assert_eq!(r.status, 201, "{}", r.text());
        assert_eq!(r.header("idempotent-replayed"), Some("true"));
        assert_eq!(&r.body, first);
    }
    // Its retry is in flight (409), or refused with the batch its claim shared (503): the claim
    // finds the key without writing, but a batch with other writes in it cannot commit. The same
    // for the refused key, whose release waits for the ledger.
    for (key, b) in held.into_iter().chain([refused]) {
        let again = f.charge(key, b, &[]);
        assert!(
            [409, 503].contains(&again.status),
            "{key}: {} {}",
            again.status,
            again.text()
        );
        assert_eq!(f.requests(key), 1, "{key} forwarded again");
    }
    // The failures are on /metrics (a scrape writes nothing), and the writer is still there: its
    // error lines, to a log file on the same full disk, must not take it down.
    let metrics = f.proxy.admin_get("/metrics").text();
    let failures = metric(&metrics, "idemgate_ledger_commit_failures_total").unwrap_or(0);
    assert!(failures >= 5, "{failures} commit failures:\n{metrics}");
    assert_eq!(metric(&metrics, "idemgate_outcomes_unrecorded"), Some(3));
    assert!(
        threads(pid).iter().any(|t| t == "idemgate-writer"),
        "the writer thread died: {:?}",
        threads(pid)
    );
    // A balancer sees the proxy not ready (no token needed); a supervisor sees it alive, since a
    // restart would not make room.
    let admin = f.proxy.admin.expect("admin");
    let ready = request(admin, "GET", "/readyz", &[], b"");
    assert_eq!(ready.status, 503, "{}", ready.text());
    assert_eq!(ready.code(), "ledger-unavailable");
    assert_eq!(request(admin, "GET", "/healthz", &[], b"").status, 200);
    // Room again: the same process takes writes at once, and the refused keys run, once.
    limit_file_size(pid, None);
    for i in 0..4 {
        let key = format!("k-disk-new-{i}");
        let r = f.charge(&key, &body(100 + i), &[]);
        assert_eq!(r.status, 201, "{}", r.text());
        assert_eq!(f.effects(&key), 1);
        acked.push((key, body(100 + i), r.body));
    }
    // The outcomes kept in memory are recorded: the executed request's response is replayed (the
    // client that sent it saw only the 502), the unknown one is held for an operator with its
    // reason, and the refused one is released and runs, once.
    let mid = eventually(10, "the kept completion recorded", || {
        let r = f.charge(held[0].0, held[0].1, &[]);
        (r.status == 201).then_some(r)
    });
    assert_eq!(mid.header("idempotent-replayed"), Some("true"));
    assert_eq!(mid.json()["delayed"], true, "{}", mid.text());
    let e = &f.entries(&["--key", held[1].0])[0];
    assert_eq!(e["state"], "pending", "{e}");
    assert_eq!(e["outcome_unknown"], true, "{e}");
    assert!(
        e["last_error"].as_str().unwrap_or("").contains("502"),
        "{e}"
    );
    let again = eventually(10, "the kept release recorded", || {
        let r = f.charge(refused.0, refused.1, &[]);
        (r.status == 201).then_some(r)
    });
    assert_eq!(f.effects(refused.0), 1);
    acked.push((refused.0.to_owned(), refused.1.to_owned(), again.body));
    let metrics = f.proxy.admin_get("/metrics").text();
    assert!(metric(&metrics, "idemgate_ledger_commit_seconds_count").unwrap_or(0) >= 8);
    assert_eq!(metric(&metrics, "idemgate_outcomes_unrecorded"), Some(0));
    assert_eq!(
        metric(&metrics, "idemgate_outcomes_recorded_late_total"),
        Some(3)
    );
    eventually(10, "ready again, 5 s after the last failed commit", || {
        (request(admin, "GET", "/readyz", &[], b"").status == 200).then_some(())
    });
    // Nothing acknowledged was lost, and the chain holds, after a SIGKILL.
    f.proxy.kill();
    f.restart();
    for (key, b, first) in &acked {
        let r = f.charge(key, b, &[]);
        assert_eq!(r.status, 201, "{key}: {}", r.text());
        assert_eq!(&r.body, first, "{key}");
    }
    let r = f.charge(held[0].0, held[0].1, &[]);
    assert_eq!(r.status, 201, "{}", r.text());
    assert_eq!(r.body, mid.body);
    let r = f.charge(held[1].0, held[1].1, &[]);
    assert_eq!(r.status, 409, "{}", r.text());
    assert_eq!(r.code(), "outcome-unknown");
    assert_eq!(
        f.up.counts.total(),
        12,
        "{:?}",
        f.up.counts.keys_with_effects()
    );
    let verified = idemgate_json(&["verify", "--ledger", &f.ledger(), "--json"]);
    assert_eq!(verified["ok"], true, "{verified}");
}

#[test]
fn sigkill_mid_flight_then_restart_never_re_executes_and_the_entry_is_stuck() {
    let mut f = Fx::new();
    let victim = f.charge_held_upstream("k-kill", r#"{"amount":9}"#, "delay:900");
    f.proxy.kill();
    let _ = victim.join(); // the client saw the connection die
    f.restart();
    // The claim was durable: a retry is not executed, first in flight (lease live), then stuck.
    let first = f.charge("k-kill", r#"{"amount":9}"#, &[]);
    assert_eq!(first.status, 409, "{}", first.text());
    let stuck = eventually(10, "the entry to become stuck", || {
        let r = f.charge("k-kill", r#"{"amount":9}"#, &[]);
        assert_eq!(r.status, 409);
        (r.code() == "outcome-unknown").then_some(r)
    });
    assert!(stuck.json()["entry_id"].as_i64().is_some());
    assert_eq!(f.effects("k-kill"), 1);
    // The restarted instance's sweeper logs the lapsed lease, once.
    eventually(5, "the sweeper's lease_expired event", || {
        let log = idemgate_json(&[
            "log",
            "--ledger",
            &f.ledger(),
            "--kind",
            "lease_expired",
            "--json",
        ]);
        (log.as_array().map_or(0, Vec::len) == 1).then_some(())
    });
    let listed = f.entries(&["--stuck"]);
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0]["key"], "k-kill");
    // An operator finds the charge upstream and records it: retries get the operator's response.
    let body = f.dir.path().join("resp.json");
    std::fs::write(&body, br#"{"id":"ch_found","status":"succeeded"}"#).expect("write");
    let id = listed[0]["id"].to_string();
    let out = idemgate(&[
        "resolve",
        "--ledger",
        &f.ledger(),
        &id,
        "--as",
        "completed",
        "--response-file",
        body.to_str().expect("utf8"),
        "--status",
        "201",
        "--reason",
        "charge found in processor",
        "--operator",
        "oncall",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r = f.charge("k-kill", r#"{"amount":9}"#, &[]);
    assert_eq!(r.status, 201);
    assert_eq!(r.header("idempotent-replayed"), Some("true"));
    assert_eq!(r.json()["id"], "ch_found");
    assert_eq!(f.effects("k-kill"), 1);
}

/// The response an operator records is what every retry gets, so it is checked first: one that a
/// replay could not send (framing headers that contradict the body broke the connection of every
/// retry), or that would read as a success of a failed entry, is refused and changes nothing; a
/// body without a content type gets one.
#[test]
fn an_operators_response_is_refused_when_a_replay_could_not_send_it() {
    let f = Fx::new();
    let r = f.charge("k-op", r#"{"amount":5}"#, &[("x-fault", "drop")]);
    assert_eq!(r.status, 502, "{}", r.text());
    let id = r.json()["entry_id"].as_i64().expect("entry_id");
    let resolve = |as_: &str, response: serde_json::Value| {
        f.proxy.admin_post(
            &format!("/admin/v1/entries/{id}/resolve"),
            &json!({"as": as_, "response": response, "operator": "oncall", "reason": "found it"}),
        )
    };
    for (as_, response) in [
        (
            "completed",
            json!({"status": 201, "headers": [["content-length", "2"]], "body": "{\"id\":\"ch_9\"}"}),
        ),
        (
            "completed",
            json!({"status": 201, "headers": [["transfer-encoding", "chunked"]], "body": "{}"}),
        ),
        (
            "completed",
            json!({"status": 999, "headers": [], "body": "{}"}),
        ),
        (
            "failed",
            json!({"status": 200, "headers": [], "body": "{\"ok\":true}"}),
        ),
        // Over what a stored response holds (and a replay must send whole).
        (
            "completed",
            json!({"status": 201, "headers": [], "body": "x".repeat(idemgate_ledger::MAX_RESPONSE_BODY + 1)}),
        ),
    ] {
        let r = resolve(as_, response.clone());
        let response = &response.to_string()[..80.min(response.to_string().len())];
        assert_eq!(r.status, 400, "{as_} {response}: {}", r.text());
        assert_eq!(r.code(), "invalid-argument");
        assert_eq!(
            f.entries(&["--stuck"]).len(),
            1,
            "{response} changed nothing"
        );
    }
    let l = f.ledger();
    let cli_resolve = |as_: &str, file: &str| {
        idemgate(&[
            "resolve",
            "--ledger",
            &l,
            &id.to_string(),
            "--as",
            as_,
            "--response-file",
            file,
            "--reason",
            "found it",
            "--operator",
            "oncall",
        ])
    };
    let cli = cli_resolve("failed", "/dev/null");
    assert_eq!(
        cli.status.code(),
        Some(1),
        "a failed entry's default 200 is refused"
    );
    assert_eq!(f.entries(&["--stuck"]).len(), 1);
    let big = f.dir.path().join("big.json");
    std::fs::write(&big, vec![b'x'; idemgate_ledger::MAX_RESPONSE_BODY + 1]).expect("write");
    let cli = cli_resolve("completed", big.to_str().expect("path"));
    let err = String::from_utf8_lossy(&cli.stderr);
    assert_eq!(cli.status.code(), Some(1), "{err}");
    assert!(err.contains("16 MiB"), "{err}");
    assert_eq!(f.entries(&["--stuck"]).len(), 1);

    // A response of several MiB (over the 2 MiB other admin bodies may have) is taken.
    let declined = format!("card declined{}", " ".repeat(3 << 20));
    let r = resolve(
        "failed",
        json!({"status": 402, "headers": [["X-Decline-Code", "insufficient_funds"]], "body": declined}),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let retry = f.charge("k-op", r#"{"amount":5}"#, &[]);
    assert_eq!(retry.status, 402, "{}", &retry.text()[..100]);
    assert!(retry.text() == declined, "the stored response, whole");
    assert_eq!(
        retry.header("content-type"),
        Some("text/plain; charset=utf-8")
    );
    assert_eq!(retry.header("x-decline-code"), Some("insufficient_funds"));
    assert_eq!(retry.header("idempotent-replayed"), Some("true"));
    assert_eq!(f.effects("k-op"), 1);
}

/// A ledger may hold an operator's response recorded before they were checked: the framing headers
/// it carries are left out of its replays, which the body's own length frames.
#[test]
fn a_stored_response_is_replayed_without_framing_headers_it_holds() {
    use idemgate_ledger::{Actor, Resolution, ResolveRequest, ResponseRecord, Storage};
    let f = Fx::new();
    let r = f.charge("k-old", r#"{"amount":6}"#, &[("x-fault", "drop")]);
    let id = r.json()["entry_id"].as_i64().expect("entry_id");
    let l = idemgate_ledger::Ledger::sqlite(
        &f.proxy.ledger,
        idemgate_ledger::OpenOptions {
            create: false,
            hasher: idemgate_ledger::ChainHasher::unkeyed(),
        },
    )
    .expect("open");
    let headers = [
        ("Content-Length", "2"),
        ("transfer-encoding", "chunked"),
        ("connection", "close"),
        ("x-charge", "ch_old"),
    ];
    l.resolve(ResolveRequest {
        entry_id: id,
        resolution: Resolution::Completed {
            response: ResponseRecord {
                status: 201,
                headers: headers
                    .iter()
                    .map(|(n, v)| ((*n).into(), (*v).into()))
                    .collect(),
                body: br#"{"id":"ch_old"}"#.to_vec(),
            },
            external_ref: None,
        },
        actor: Actor {
            operator: "an-older-console".into(),
            reason: "found it".into(),
        },
        ttl_ms: 3_600_000,
        at: idemgate_ledger::now_millis(),
    })
    .wait()
    .expect("resolve");
    l.close();
    for _ in 0..2 {
        let r = f.charge("k-old", r#"{"amount":6}"#, &[]);
        assert_eq!(r.status, 201, "{}", r.text());
        assert_eq!(r.body, br#"{"id":"ch_old"}"#);
        assert_eq!(r.header("content-length"), Some("15"));
        assert_eq!(r.header("x-charge"), Some("ch_old"));
        assert_eq!(r.header("transfer-encoding"), None);
    }
    assert_eq!(f.effects("k-old"), 1);
}

#[test]
fn sigterm_drains_requests_in_flight_before_exiting() {
    let mut f = Fx::new();
    let addr = f.proxy.addr;
    let inflight = std::thread::spawn(move || {
        request(
            addr,
            "POST",
            "/v1/charges",
            &[("idempotency-key", "k-term"), ("x-fault", "delay:600")],
            br#"{"amount":3}"#,
        )
    });
    eventually(5, "the request upstream", || {
        (f.effects("k-term") == 1).then_some(())
    });
    let status = f.proxy.terminate();
    assert!(status.success(), "clean exit: {status:?}");
    let r = inflight.join().expect("join");
    assert_eq!(
        r.status,
        201,
        "the request in flight was answered: {}",
        r.text()
    );
    assert_eq!(f.entries(&["--key", "k-term"])[0]["state"], "completed");
    // New connections are refused once it has stopped.
    assert!(std::net::TcpStream::connect(addr).is_err());
}

/// A stop that comes the moment `serve` says it listens (a supervisor stopping what it just
/// started, a rolling update) drains and exits 0, however soon: SIGTERM is caught from before the
/// listeners open, not from the first time `serve` waits for it, so it never meets the default
/// action, which ends the process at once.
#[test]
fn sigterm_the_moment_serve_listens_is_a_clean_stop() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ledger = dir.path().join("ledger.db");
    let toml = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\nadmin_listen = \"127.0.0.1:0\"\nledger = \"{}\"\n",
        ledger.display()
    );
    for _ in 0..20 {
        let mut p = Proxy::start(dir.path(), &toml, &ledger);
        let status = p.terminate();
        assert!(status.success(), "{status:?}\n{}", p.logs());
        assert!(p
            .logs()
            .contains("stopped; every acknowledged outcome is in the ledger"));
    }
}

/// The commonest lost response: the agent's own timeout closes the connection while the upstream
/// is still answering. The request is finished all the same (forwarded, its outcome recorded), so
/// the agent's retry is a replay, and a SIGTERM right after waits for it too.
#[test]
fn a_write_whose_client_goes_away_is_finished_and_its_retry_replayed() {
    let mut f = Fx::new();
    let gone = |key: &str| {
        let raw = format!(
            "POST /v1/charges HTTP/1.1\r\nhost: x\r\nidempotency-key: {key}\r\n\
             content-type: application/json\r\nx-agent-id: agent-7\r\nx-fault: delay:800\r\n\
             content-length: 12\r\n\r\n{{\"amount\":9}}"
        );
        let mut s = std::net::TcpStream::connect(f.proxy.addr).expect("connect");
        std::io::Write::write_all(&mut s, raw.as_bytes()).expect("send");
        eventually(5, "the request upstream", || {
            (f.effects(key) == 1).then_some(())
        });
        // The agent gives up: its socket closes with the request upstream, unanswered.
        drop(s);
    };
    gone("k-gone");
    let r = eventually(10, "the retry answered from the ledger", || {
        let r = f.charge("k-gone", r#"{"amount":9}"#, &[]);
        (r.status != 409).then_some(r)
    });
    assert_eq!(r.status, 201, "{}", r.text());
    assert_eq!(r.header("idempotent-replayed"), Some("true"));
    assert_eq!(f.effects("k-gone"), 1);

    // Gone, then SIGTERM before the upstream answers: the drain waits for it.
    gone("k-gone-term");
    let status = f.proxy.terminate();
    assert!(status.success(), "clean exit: {status:?}");
    assert_eq!(
        f.entries(&["--key", "k-gone-term"])[0]["state"],
        "completed",
        "the outcome was recorded before the proxy exited"
    );
    assert_eq!(f.effects("k-gone-term"), 1);
}

/// An operator's replay over the admin API is finished like a proxied write when the operator's
/// client goes away while it is upstream: its outcome is recorded, not left pending.
#[test]
fn an_admin_replay_whose_client_goes_away_is_finished() {
    let f = Fx::new();
    let r = f.charge("k-op", r#"{"amount":5}"#, &[("x-fault", "status:502")]);
    assert_eq!(r.status, 502);
    let id = f.entries(&["--key", "k-op"])[0]["id"].to_string();
    // The replay's request (stored without the fault) is held upstream after its effect.
    f.up.counts.set_chaos(Some(idemgate_tests::upstream::Chaos {
        drop_pct: 0,
        unavailable_pct: 0,
        stall_pct: 100,
        stall_ms: 800,
    }));
    let body = r#"{"operator":"oncall","reason":"the processor says it failed"}"#;
    let raw = format!(
        "POST /admin/v1/entries/{id}/replay HTTP/1.1\r\nhost: x\r\n\
         authorization: Bearer {ADMIN_TOKEN}\r\ncontent-type: application/json\r\n\
         content-length: {}\r\n\r\n{body}",
        body.len()
    );
    let mut s = std::net::TcpStream::connect(f.proxy.admin.expect("admin")).expect("connect");
    std::io::Write::write_all(&mut s, raw.as_bytes()).expect("send");
    eventually(5, "the replay upstream", || {
        (f.effects("k-op") == 2).then_some(())
    });
    drop(s);
    eventually(10, "the replay's outcome recorded", || {
        (f.entries(&["--key", "k-op"])[0]["state"] == "completed").then_some(())
    });
    assert_eq!(f.effects("k-op"), 2);
}

/// SIGHUP (`systemctl reload`, a closed terminal) ended `serve` at once, dropping the requests in
/// flight. It cannot reload, so it keeps serving and says so.
#[test]
fn sighup_neither_stops_the_proxy_nor_drops_a_request() {
    let f = Fx::new();
    let inflight = f.charge_held_upstream("k-hup", r#"{"amount":3}"#, "delay:600");
    let hup = std::process::Command::new("kill")
        .args(["-HUP", &f.proxy.pid().to_string()])
        .status()
        .expect("kill");
    assert!(hup.success());
    let r = inflight.join().expect("join");
    assert_eq!(r.status, 201, "the request in flight: {}", r.text());
    assert_eq!(f.charge("k-hup-after", r#"{"amount":1}"#, &[]).status, 201);
    eventually(5, "the warning", || {
        f.proxy.logs().contains("SIGHUP ignored").then_some(())
    });
}

/// `https://` upstreams (a payment API is one): the proxy speaks TLS to them, verified against
/// the CAs it trusts (the system's; here `SSL_CERT_FILE`). One whose certificate it does not trust
/// is never sent the request: not executed, so the key is released.
#[test]
fn an_https_upstream_is_verified_and_served_once_per_key() {
    let fx = |up: Upstream, trusted: &str| {
        let dir = tempfile::tempdir().expect("tempdir");
        let ca = dir.path().join("ca.pem");
        std::fs::write(&ca, trusted).expect("write ca");
        let ledger = dir.path().join("ledger.db");
        let ca = ca.display().to_string();
        let proxy = Proxy::start_with_env(
            dir.path(),
            &Fx::render(CONFIG, &up, &ledger),
            &ledger,
            &[("TEST_WEBHOOK_SECRET", SECRET), ("SSL_CERT_FILE", &ca)],
        );
        Fx { dir, up, proxy }
    };
    let up = Upstream::start_tls();
    assert!(up.url().starts_with("https://"));
    let ca = up.ca_pem.clone().expect("ca");
    let f = fx(up, &ca);
    let r = f.charge("k-tls", r#"{"amount":7}"#, &[]);
    assert_eq!(r.status, 201, "{}", r.text());
    let again = f.charge("k-tls", r#"{"amount":7}"#, &[]);
    assert_eq!(again.header("idempotent-replayed"), Some("true"));
    assert_eq!(again.body, r.body);
    assert_eq!(f.effects("k-tls"), 1);

    // Trusting another CA only: the handshake fails, nothing is sent, the key is released.
    let stranger = Upstream::start_tls().ca_pem.expect("ca");
    let f = fx(Upstream::start_tls(), &stranger);
    let r = f.charge("k-untrusted", r#"{"amount":7}"#, &[]);
    assert_eq!(r.status, 503, "{}", r.text());
    assert_eq!(r.code(), "upstream-unavailable");
    assert_eq!(f.up.counts.total(), 0);
    assert_eq!(f.entries(&["--key", "k-untrusted"])[0]["state"], "released");
}

/// `upstream_auth`: the proxy holds the upstream's credential and sends it on every request of the
/// route, in place of the client's, and on an operator's replay and reconcile probe, which have no
/// client; the credential is never stored.
#[test]
fn a_route_credential_is_sent_upstream_on_every_request_and_never_stored() {
    const AUTH: &str = "Bearer sk_live_held_by_the_proxy";
    let f = Fx::with_env(
        &CONFIG.replace(
            "secret_query = [\"Sig\"]",
            "secret_query = [\"Sig\"]\nupstream_auth = { secret_env = \"TEST_UPSTREAM_AUTH\" }",
        ),
        &[("TEST_UPSTREAM_AUTH", AUTH)],
    );
    let sent_auth = || {
        let h = f.up.counts.last_headers.lock().expect("lock").clone();
        h.into_iter()
            .find(|(n, _)| n == "authorization")
            .map(|(_, v)| v)
    };
    let r = f.charge(
        "k-auth",
        r#"{"amount":1}"#,
        &[("authorization", "Bearer the-agents-own-token")],
    );
    assert_eq!(r.status, 201, "{}", r.text());
    assert_eq!(sent_auth().as_deref(), Some(AUTH));
    // An operator's replay and probe, from the CLI (which needs the credential too).
    let r = f.charge("k-auth-2", r#"{"amount":2}"#, &[("x-fault", "drop")]);
    assert_eq!(r.status, 502);
    let id = f.entries(&["--key", "k-auth-2"])[0]["id"].to_string();
    let cfg = f.proxy.config.display().to_string();
    let act = |what: &str, cfg: &str, id: &str, with_auth: bool| {
        let mut c = std::process::Command::new(idemgate_bin());
        c.args(action_args(what, cfg, id))
            .env("TEST_WEBHOOK_SECRET", SECRET);
        if with_auth {
            c.env("TEST_UPSTREAM_AUTH", AUTH);
        } else {
            c.env_remove("TEST_UPSTREAM_AUTH");
        }
        c.output().expect("run")
    };
    // The action, with the credential at hand; the authorization the upstream got from it.
    let sent_by = |what: &str, cfg: &str, id: &str| {
        *f.up.counts.last_headers.lock().expect("lock") = Vec::new();
        f.up.counts.last_target.lock().expect("lock").clear();
        let out = act(what, cfg, id, true);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        sent_auth()
    };
    let refused = act("reconcile", &cfg, &id, false);
    assert_eq!(refused.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&refused.stderr).contains("TEST_UPSTREAM_AUTH is not set"));
    assert_eq!(
        sent_by("reconcile", &cfg, &id).as_deref(),
        Some(AUTH),
        "the probe"
    );
    let r = f.charge("k-auth-3", r#"{"amount":3}"#, &[("x-fault", "status:502")]);
    assert_eq!(r.status, 502);
    let id3 = f.entries(&["--key", "k-auth-3"])[0]["id"].to_string();
    assert_eq!(
        sent_by("replay", &cfg, &id3).as_deref(),
        Some(AUTH),
        "the replay"
    );
    // A probe naming another host (here the same server under another name) is not sent it.
    let r = f.charge("k-auth-4", r#"{"amount":4}"#, &[("x-fault", "drop")]);
    assert_eq!(r.status, 502);
    let id4 = f.entries(&["--key", "k-auth-4"])[0]["id"].to_string();
    let elsewhere = f.dir.path().join("elsewhere.toml");
    let text = std::fs::read_to_string(&cfg).expect("config");
    let probe = format!("url = \"http://127.0.0.1:{}/v1/charges", f.up.addr.port());
    assert!(text.contains(&probe), "{text}");
    std::fs::write(
        &elsewhere,
        text.replace(&probe, &probe.replace("127.0.0.1", "localhost")),
    )
    .expect("write");
    let sent = sent_by("reconcile", &elsewhere.display().to_string(), &id4);
    assert!(
        f.up.counts
            .last_target
            .lock()
            .expect("lock")
            .starts_with("/v1/charges?idempotency_key="),
        "the probe arrived"
    );
    assert_eq!(sent, None, "the credential went to another host");
    // Never stored: not the proxy's credential, not the agent's.
    for file in ["ledger.db", "ledger.db-wal"] {
        let bytes = std::fs::read(f.dir.path().join(file)).unwrap_or_default();
        let text = String::from_utf8_lossy(&bytes);
        assert!(!text.contains("sk_live_held_by_the_proxy"), "{file}");
        assert!(!text.contains("the-agents-own-token"), "{file}");
    }
}

#[test]
fn signatures_good_bad_and_stale() {
    let f = Fx::new();
    let body = br#"{"event_id":"evt_1","type":"charge.succeeded"}"#;
    let now = idemgate_ledger::now_millis() / 1000;
    let sign = |t: i64, b: &[u8]| {
        format!(
            "t={t},v1={}",
            idemgate_proxy::signature::sign(SECRET.as_bytes(), t, b)
        )
    };
    let good = sign(now, body);
    let r = f
        .proxy
        .send("POST", "/hooks", &[("x-idemgate-signature", &good)], body);
    assert_eq!(r.status, 201, "{}", r.text());
    // Webhook deduplication by event id: the sender's retry is answered from the ledger.
    let r2 = f.proxy.send(
        "POST",
        "/hooks",
        &[("x-idemgate-signature", &sign(now + 1, body))],
        body,
    );
    assert_eq!(r2.status, 201);
    assert_eq!(r2.header("idempotent-replayed"), Some("true"));
    assert_eq!(r2.header("idempotency-key"), Some("evt_1"));
    for (what, sig) in [
        ("missing", None),
        (
            "wrong secret",
            Some(format!(
                "t={now},v1={}",
                idemgate_proxy::signature::sign(b"nope", now, body)
            )),
        ),
        ("stale", Some(sign(now - 600, body))),
        ("garbage", Some("t=abc,v1=zz".to_owned())),
    ] {
        let b2 = br#"{"event_id":"evt_2","type":"x"}"#;
        let h: Vec<(&str, &str)> = sig
            .as_deref()
            .map(|s| vec![("x-idemgate-signature", s)])
            .unwrap_or_default();
        let r = f.proxy.send("POST", "/hooks", &h, b2);
        assert_eq!(r.status, 401, "{what}");
        assert_eq!(r.code(), "bad-signature");
    }
    // A good signature over another body does not transfer.
    let r = f.proxy.send(
        "POST",
        "/hooks",
        &[("x-idemgate-signature", &good)],
        br#"{"event_id":"evt_3"}"#,
    );
    assert_eq!(r.status, 401);
    assert_eq!(f.up.counts.total(), 1);
    assert_eq!(f.entries(&[]).len(), 1, "refused requests write nothing");
}

#[test]
fn oversized_bodies_and_unknown_routes_write_nothing() {
    let f = Fx::new();
    let big = vec![b'x'; (1 << 20) + 1];
    let r = f.charge("k-big", std::str::from_utf8(&big).expect("utf8"), &[]);
    assert_eq!(r.status, 413);
    assert_eq!(r.code(), "body-too-large");
    // Chunked, with no Content-Length to refuse early.
    let mut raw = b"POST /v1/charges HTTP/1.1\r\nhost: x\r\nconnection: close\r\nidempotency-key: k-chunked\r\ntransfer-encoding: chunked\r\n\r\n".to_vec();
    for _ in 0..17 {
        raw.extend_from_slice(format!("{:x}\r\n", 65536).as_bytes());
        raw.extend_from_slice(&vec![b'y'; 65536]);
        raw.extend_from_slice(b"\r\n");
    }
    raw.extend_from_slice(b"0\r\n\r\n");
    let r = raw_request(f.proxy.addr, &raw);
    assert_eq!(r.status, 413);
    let r = f
        .proxy
        .send("POST", "/v2/unknown", &[("idempotency-key", "k")], b"{}");
    assert_eq!(r.status, 404);
    assert_eq!(r.code(), "unknown-route");
    // A path that only shares a prefix with a route is not that route.
    assert_eq!(
        f.proxy
            .send("POST", "/v1/chargesX", &[("idempotency-key", "k")], b"{}")
            .status,
        404
    );
    // A path with a dot segment is refused: the upstream would resolve it to another route's
    // path (here a destructive one, never retried, through a retried route) than the one that
    // took it, which had forwarded it as it came.
    let reads = f.up.counts.reads.load(std::sync::atomic::Ordering::SeqCst);
    for path in [
        "/v1/charges/../cancel",
        "/v1/charges/%2E%2e/cancel",
        "/v1/charges/x%2F..%2F..%2Fcancel",
        "/v1/customers/./cus_1",
        // Tomcat and Jetty drop a segment's parameters before they resolve its dots.
        "/v1/charges/..;/cancel",
        "/v1/customers/.;x=1/cus_1",
    ] {
        let method = if path.contains("customers") {
            "GET"
        } else {
            "POST"
        };
        let r = f
            .proxy
            .send(method, path, &[("idempotency-key", "k-dots")], b"{}");
        assert_eq!(r.status, 400, "{path}: {}", r.text());
        assert_eq!(r.code(), "invalid-path", "{path}");
    }
    assert_eq!(
        f.up.counts.reads.load(std::sync::atomic::Ordering::SeqCst),
        reads
    );
    assert_eq!(f.up.counts.total(), 0);
    assert!(f.entries(&[]).is_empty());
}

/// A route is chosen by the path as the upstream reads it, percent-decoded: `/%68ooks` is the
/// signed webhooks route's, not a catch-all's that checks no signature, and `/v1/%63ancel` the
/// destructive route's, not a broader write route's.
#[test]
fn an_encoded_path_is_routed_as_the_upstream_reads_it() {
    let cfg = format!(
        "{CONFIG}\n[[routes]]\nname = \"v1\"\nmethod = \"POST\"\npath = \"/v1\"\n\
         upstream = \"{{upstream}}\"\neffect = \"write\"\ntimeout = \"500ms\"\n\
         [[routes]]\nname = \"rest\"\nmethod = \"POST\"\npath = \"/\"\n\
         upstream = \"{{upstream}}\"\neffect = \"write\"\ntimeout = \"500ms\"\n"
    );
    let f = Fx::with(&cfg);
    let json = ("content-type", "application/json");
    let r = f.proxy.send(
        "POST",
        "/%68ooks/payments",
        &[json],
        br#"{"event_id":"evt_1"}"#,
    );
    assert_eq!(r.status, 401, "{}", r.text());
    assert_eq!(r.code(), "bad-signature");
    assert_eq!(
        f.up.counts.total(),
        0,
        "nothing unsigned reached the upstream"
    );
    let r = f.proxy.send(
        "POST",
        "/v1/%63ancel",
        &[("idempotency-key", "k-enc"), json],
        b"{}",
    );
    assert!(r.status < 300, "{}", r.text());
    let by_route = |route: &str| f.entries(&["--route", route]).len();
    assert_eq!((by_route("cancel"), by_route("v1")), (1, 0));
    // What no stricter route takes still goes by the broader ones.
    for path in ["/v1/other", "/other", "/v1/%6Fther"] {
        let key = format!("k-{}", path.len());
        let r = f
            .proxy
            .send("POST", path, &[("idempotency-key", &key), json], b"{}");
        assert!(r.status < 300, "{path}: {}", r.text());
    }
    assert_eq!((by_route("v1"), by_route("rest")), (2, 1));
}

#[test]
fn the_upstream_gets_every_hop_and_no_expectation() {
    let f = Fx::new();
    let r = f.charge(
        "k-xff",
        r#"{"amount":1}"#,
        &[
            ("x-forwarded-for", "203.0.113.7"),
            ("x-forwarded-for", "10.0.0.2, 10.0.0.3"),
        ],
    );
    assert_eq!(r.status, 201, "{}", r.text());
    let h = f.up.counts.last_headers.lock().expect("lock").clone();
    let xff: Vec<&str> = h
        .iter()
        .filter(|(n, _)| n == "x-forwarded-for")
        .map(|(_, v)| v.as_str())
        .collect();
    assert_eq!(xff, ["203.0.113.7, 10.0.0.2, 10.0.0.3, 127.0.0.1"]);
    // An expectation is the proxy's to meet, not the upstream's: it has the body.
    let r = f.charge("k-expect", r#"{"amount":2}"#, &[("expect", "100-continue")]);
    assert_eq!(r.status, 201, "{}", r.text());
    let h = f.up.counts.last_headers.lock().expect("lock").clone();
    assert!(h.iter().all(|(n, _)| n != "expect"), "{h:?}");
}

/// `scope.required`: a caller that does not say who it is is refused before anything is claimed
/// or forwarded, instead of sharing the empty scope (and its keys) with every other such caller.
#[test]
fn a_required_scope_is_asked_for_before_anything_is_claimed() {
    // On the charges route and the customers (read) route, both scoped by X-Agent-Id.
    let cfg = CONFIG.replace(
        "scope.header = \"X-Agent-Id\"\n",
        "scope.header = \"X-Agent-Id\"\nscope.required = true\n",
    );
    assert_eq!(cfg.matches("scope.required").count(), 2);
    let f = Fx::with(&cfg);
    let json = ("content-type", "application/json");
    for agent in [None, Some(""), Some("  ")] {
        let mut h = vec![("idempotency-key", "k-anon"), json];
        if let Some(a) = agent {
            h.push(("x-agent-id", a));
        }
        let r = f.proxy.send("POST", "/v1/charges", &h, br#"{"amount":1}"#);
        // (Whitespace around a header's value is not part of it.)
        assert_eq!(r.status, 400, "{agent:?}: {}", r.text());
        assert_eq!(r.code(), "missing-scope", "{agent:?}");
        assert!(r.text().contains("x-agent-id"), "{}", r.text());
    }
    let r = f.proxy.send("GET", "/v1/customers/cus_1", &[], b"");
    assert_eq!(r.status, 400, "{}", r.text());
    assert_eq!(r.code(), "missing-scope");
    assert_eq!(f.up.counts.total(), 0);
    assert_eq!(
        f.up.counts.reads.load(std::sync::atomic::Ordering::SeqCst),
        0
    );
    assert!(f.entries(&[]).is_empty());
    // Named, the same calls go through.
    assert_eq!(f.charge("k-anon", r#"{"amount":1}"#, &[]).status, 201);
    let r = f.proxy.send(
        "GET",
        "/v1/customers/cus_1",
        &[("x-agent-id", "agent-7")],
        b"",
    );
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(f.effects("k-anon"), 1);
    assert_eq!(f.entries(&[]).len(), 1);
}

#[test]
fn read_routes_need_no_key_and_are_cached() {
    let f = Fx::new();
    let a = f.proxy.send("GET", "/v1/customers/cus_1", &[], b"");
    assert_eq!(a.status, 200);
    assert_eq!(a.header("x-cache"), Some("MISS"));
    let b = f.proxy.send("GET", "/v1/customers/cus_1", &[], b"");
    assert_eq!(b.status, 200);
    assert_eq!(b.header("x-cache"), Some("HIT"));
    assert_eq!(b.body, a.body);
    assert_eq!(
        f.up.counts.reads.load(std::sync::atomic::Ordering::SeqCst),
        1
    );
    assert!(f.entries(&[]).is_empty(), "reads are not ledgered");
}

/// A read does nothing upstream, so the upstream's answer is the caller's, whatever its status: a
/// 500 reaches the agent in the upstream's own words (it was a `502 upstream-error` saying only
/// "upstream 500"), and a 503 with the upstream's Retry-After. Neither is kept by the read cache.
#[test]
fn a_read_passes_on_the_upstreams_error_answer() {
    let f = Fx::new();
    let reads = || f.up.counts.reads.load(std::sync::atomic::Ordering::SeqCst);
    // 429 and 503 come with a Retry-After of 7 s, longer than the route waits: not retried.
    for (code, tries) in [(500, 1), (502, 1), (504, 1), (404, 1), (503, 1), (429, 1)] {
        let before = reads();
        let fault = format!("status:{code}");
        let path = format!("/v1/customers/cus_{code}");
        for _ in 0..2 {
            let r = f.proxy.send("GET", &path, &[("x-fault", &fault)], b"");
            assert_eq!(r.status, code, "{}", r.text());
            let said = r.json();
            assert_eq!(
                said["error"],
                format!("the upstream's own words on {code}"),
                "{said}"
            );
            assert_eq!(r.header("x-cache"), Some("MISS"), "{code} is not kept");
            if matches!(code, 429 | 503) {
                assert_eq!(r.header("retry-after"), Some("7"));
            }
        }
        assert_eq!(reads() - before, 2 * tries, "{code}: tries per read");
    }
    assert_eq!(f.up.counts.total(), 0);
    assert!(f.entries(&[]).is_empty());
}

/// A read is streamed from its upstream: a body larger than the proxy keeps whole (16 MiB, the
/// most a write's response may be) reaches the caller all the same (it was a `502`), and is not
/// kept by the read cache; an upstream that stalls mid-body is cut off.
#[test]
fn a_read_larger_than_the_proxy_keeps_is_streamed_to_the_caller() {
    let f = Fx::new();
    let size = (idemgate_proxy::forward::MAX_RESPONSE_BODY + 1).to_string();
    for _ in 0..2 {
        let r = f.proxy.send(
            "GET",
            "/v1/customers/cus_large/export",
            &[("x-answer-bytes", &size)],
            b"",
        );
        assert_eq!(
            r.status,
            200,
            "{}",
            String::from_utf8_lossy(&r.body[..200.min(r.body.len())])
        );
        assert_eq!(r.body.len().to_string(), size);
        assert!(r.body.iter().all(|&b| b == b'x'));
        assert_eq!(r.header("x-cache"), Some("MISS"));
    }
    assert_eq!(
        f.up.counts.reads.load(std::sync::atomic::Ordering::SeqCst),
        2
    );
    // A chunked body does not tell its length: the cache reads it until it passes the limit, and
    // the caller gets what was read and the rest (it was a `502`). One that fits is kept.
    for (size, cache) in [(size.as_str(), "MISS"), ("100000", "HIT")] {
        for _ in 0..2 {
            let r = f.proxy.send(
                "GET",
                &format!("/v1/customers/cus_chunked_{size}"),
                &[("x-answer-bytes", size), ("x-answer-chunked", "1")],
                b"",
            );
            let shown = String::from_utf8_lossy(&r.body[..200.min(r.body.len())]).into_owned();
            assert_eq!(r.status, 200, "{shown}");
            assert_eq!(r.body.len().to_string(), size, "{shown}");
            assert!(r.body.iter().all(|&b| b == b'x'));
        }
        let again = f.proxy.send(
            "GET",
            &format!("/v1/customers/cus_chunked_{size}"),
            &[("x-answer-bytes", size), ("x-answer-chunked", "1")],
            b"",
        );
        assert_eq!(again.header("x-cache"), Some(cache), "{size} bytes");
    }
    // An upstream that stops sending halfway is cut off after the route's timeout (1 s) without
    // a byte: the caller's answer ends short, and does not wait for the upstream (30 s).
    let started = std::time::Instant::now();
    let cut = try_request(
        f.proxy.addr,
        "GET",
        "/v1/customers/cus_stalled/export",
        &[("x-answer-bytes", &size), ("x-fault", "stall:30000")],
        b"",
    );
    assert!(cut.is_none(), "a whole answer from a stalled upstream");
    assert!(
        started.elapsed() < std::time::Duration::from_secs(15),
        "waited {:?} on a stalled upstream",
        started.elapsed()
    );
}

/// A `HEAD` is a `GET` without the body (RFC 9110 §9.3.2): a read route serves it, and its
/// cache answers it from a kept `GET` response but never keeps a body-less answer for a `GET`. A
/// method no route takes at a path that routes do take is a `405` naming the methods they take.
#[test]
fn head_is_a_get_without_the_body_and_other_methods_are_not_allowed() {
    let f = Fx::new();
    let reads = || f.up.counts.reads.load(std::sync::atomic::Ordering::SeqCst);
    let last_method = || f.up.counts.last_method.lock().expect("lock").clone();
    let h = f.proxy.send("HEAD", "/v1/customers/cus_h", &[], b"");
    assert_eq!(h.status, 200, "{}", h.text());
    assert!(h.body.is_empty());
    assert_eq!(h.header("x-cache"), Some("MISS"));
    assert_eq!(
        h.header("content-length"),
        Some("10"),
        "the upstream's GET length"
    );
    assert_eq!((reads(), last_method().as_str()), (1, "HEAD"));
    let g = f.proxy.send("GET", "/v1/customers/cus_h", &[], b"");
    assert_eq!(
        g.header("x-cache"),
        Some("MISS"),
        "a HEAD's answer was kept"
    );
    assert_eq!(g.text(), r#"{"read":2}"#);
    let h = f.proxy.send("HEAD", "/v1/customers/cus_h", &[], b"");
    assert_eq!(h.status, 200);
    assert_eq!(h.header("x-cache"), Some("HIT"));
    assert!(h.body.is_empty());
    assert_eq!(h.header("content-length"), Some("10"), "the GET's length");
    assert_eq!(reads(), 2);

    for (method, path, allow) in [
        ("GET", "/v1/charges", "POST"),
        ("PUT", "/v1/charges/ch_1", "POST"),
        ("DELETE", "/v1/customers/cus_h", "GET, HEAD"),
        ("HEAD", "/v1/charges", "POST"),
    ] {
        let r = f
            .proxy
            .send(method, path, &[("idempotency-key", "k-405")], b"");
        assert_eq!(r.status, 405, "{method} {path}");
        assert_eq!(r.header("allow"), Some(allow), "{method} {path}");
        if method != "HEAD" {
            assert_eq!(r.code(), "method-not-allowed");
        }
    }
    assert_eq!(
        f.proxy.send("GET", "/v2/unknown", &[], b"").status,
        404,
        "no route takes the path"
    );
    assert_eq!(f.up.counts.total(), 0);
    assert_eq!(reads(), 2, "only the reads reached the upstream");
    assert!(f.entries(&[]).is_empty());
}

/// The read cache is shared by every caller of the proxy: it must never answer one caller with
/// what another was allowed to see, nor keep what the upstream says a shared cache may not.
#[test]
fn the_read_cache_keeps_callers_apart_and_obeys_the_upstream() {
    let f = Fx::new();
    let get = |path: &str, headers: &[(&str, &str)]| {
        let r = f.proxy.send("GET", path, headers, b"");
        assert_eq!(r.status, 200, "{}", r.text());
        r.header("x-cache").unwrap_or_default().to_owned()
    };
    let alice = [
        ("authorization", "Bearer sk_alice"),
        ("x-agent-id", "agent-7"),
    ];
    assert_eq!(get("/v1/customers/cus_9", &alice), "MISS");
    assert_eq!(get("/v1/customers/cus_9", &alice), "HIT");
    for other in [
        &[
            ("authorization", "Bearer sk_bob"),
            ("x-agent-id", "agent-7"),
        ][..],
        &[("x-agent-id", "agent-7")],
        &[
            ("authorization", "Bearer sk_alice"),
            ("x-agent-id", "agent-8"),
        ],
        &[
            ("authorization", "Bearer sk_alice"),
            ("x-agent-id", "agent-7"),
            ("x-processor-key", "pk_2"),
        ],
    ] {
        assert_eq!(get("/v1/customers/cus_9", other), "MISS", "{other:?}");
    }
    assert_eq!(get("/v1/customers/cus_9", &alice), "HIT");
    for asks in ["no-cache", "no-store"] {
        assert_eq!(
            get(
                "/v1/customers/cus_9",
                &[alice[0], alice[1], ("cache-control", asks)]
            ),
            "MISS",
            "the caller asked for a fresh answer ({asks})"
        );
    }

    // What the upstream forbids a shared cache to keep is never kept.
    for said in [
        "cache-control: private",
        "cache-control: no-store",
        "cache-control: max-age=0",
        "vary: *",
    ] {
        let path = format!("/v1/customers/{}", said.replace([':', ' ', '*', '='], "_"));
        let h = [("x-answer-header", said)];
        assert_eq!(get(&path, &h), "MISS", "{said}");
        assert_eq!(get(&path, &h), "MISS", "{said} was kept");
    }
    // A response that varies on a header answers only requests with its value.
    let varies = |lang: &str| {
        get(
            "/v1/customers/cus_lang",
            &[
                ("x-answer-header", "vary: Accept-Language"),
                ("accept-language", lang),
            ],
        )
    };
    assert_eq!(varies("en"), "MISS");
    assert_eq!(varies("en"), "HIT");
    assert_eq!(varies("fr"), "MISS");
    assert_eq!(varies("fr"), "HIT");
    assert_eq!(
        varies("en"),
        "MISS",
        "the French answer replaced the English one"
    );
    assert!(f.entries(&[]).is_empty(), "reads are not ledgered");
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

#[test]
fn secrets_are_forwarded_but_never_stored() {
    let f = Fx::new();
    let r = f.charge(
        "k-secret",
        r#"{"amount":1}"#,
        &[
            ("authorization", "Bearer sk_live_TOPSECRET"),
            ("x-processor-key", "pk_TOPSECRET"),
            ("cookie", "s=TOPSECRET"),
        ],
    );
    assert_eq!(r.status, 201);
    assert_eq!(r.json()["saw_authorization"], true, "forwarded upstream");
    let seen = f.up.counts.last_headers.lock().expect("lock").clone();
    assert!(seen
        .iter()
        .any(|(n, v)| n == "x-processor-key" && v == "pk_TOPSECRET"));
    let id = f.entries(&["--key", "k-secret"])[0]["id"].to_string();
    let shown = idemgate(&["show", "--ledger", &f.ledger(), &id, "--json"]);
    let text = String::from_utf8_lossy(&shown.stdout);
    assert!(text.contains("k-secret"));
    assert!(!text.contains("TOPSECRET"), "{text}");

    // Credentials in the query: the ledger's own names and the route's `secret_query`.
    let with_secrets = "/v1/charges/ch_5/capture?api_key=sk_TOPSECRET&mode=live&sig=TOPSECRET";
    let send = |target: &str| {
        f.proxy.send(
            "POST",
            target,
            &[
                ("idempotency-key", "k-secret-query"),
                ("x-agent-id", "agent-7"),
            ],
            b"{}",
        )
    };
    assert_eq!(send(with_secrets).status, 201);
    assert_eq!(
        *f.up.counts.last_target.lock().expect("lock"),
        with_secrets,
        "forwarded upstream as sent"
    );
    // A retry whose credentials changed (rotated, re-signed) is the same request.
    let again = send("/v1/charges/ch_5/capture?SIG=s2&mode=live&API_KEY=sk_rotated");
    assert_eq!(
        again.header("idempotent-replayed"),
        Some("true"),
        "{}",
        again.text()
    );
    let other = send("/v1/charges/ch_5/capture?api_key=sk_TOPSECRET&mode=test");
    assert_eq!(other.status, 422, "the other parameters still count");
    assert_eq!(f.effects("k-secret-query"), 1);
    let id = f.entries(&["--key", "k-secret-query"])[0]["id"].to_string();
    let shown = idemgate_json(&["show", "--ledger", &f.ledger(), &id, "--json"]);
    assert_eq!(
        shown["request"]["path"],
        "/v1/charges/ch_5/capture?mode=live"
    );
    assert_eq!(
        shown["collision_requests"][0]["request"]["path"],
        "/v1/charges/ch_5/capture?mode=test"
    );
    let log = idemgate(&["log", "--ledger", &f.ledger(), "--json"]);
    assert!(log.status.success());
    let log = String::from_utf8_lossy(&log.stdout);
    assert!(
        log.contains("capture?mode=live"),
        "the claim logs the target"
    );

    let raw = std::fs::read(&f.proxy.ledger).expect("read ledger");
    let wal = std::fs::read(PathBuf::from(format!("{}-wal", f.ledger()))).unwrap_or_default();
    for bytes in [raw, wal] {
        assert!(
            !bytes.windows(9).any(|w| w == b"TOPSECRET"),
            "a secret reached the database file"
        );
    }
    assert!(!log.contains("TOPSECRET") && !log.contains("sk_rotated"));
}

#[test]
fn the_admin_api_needs_the_token_and_serves_the_operations() {
    let f = Fx::new();
    assert_eq!(f.charge("k-admin", r#"{"amount":1}"#, &[]).status, 201);
    let admin = f.proxy.admin.expect("admin");
    for auth in [
        None,
        Some("Bearer wrong-token"),
        Some("Basic dGVzdA=="),
        Some("Bearer "),
    ] {
        let h: Vec<(&str, &str)> = auth.map(|a| vec![("authorization", a)]).unwrap_or_default();
        for path in ["/admin/v1/entries", "/metrics", "/admin/v1/openapi.json"] {
            let r = request(admin, "GET", path, &h, b"");
            assert_eq!(r.status, 401, "{path} with {auth:?}");
            assert_eq!(r.code(), "unauthorized");
        }
    }
    assert_eq!(request(admin, "GET", "/healthz", &[], b"").status, 200);
    let page = f.proxy.admin_get("/admin/v1/entries?limit=10").json();
    assert_eq!(page["entries"][0]["key"], "k-admin");
    // A limit out of its range is refused, not quietly changed: 0 had answered one entry.
    for bad in [
        "entries?limit=notanumber",
        "entries?limit=0",
        "entries?limit=10001",
        "events?limit=0",
        "incidents?limit=0",
        "incidents?limit=1001",
        "stats?hours=2161",
    ] {
        let r = f.proxy.admin_get(&format!("/admin/v1/{bad}"));
        assert_eq!(r.status, 400, "{bad}: {}", r.text());
        assert_eq!(r.code(), "invalid-argument", "{bad}");
    }
    assert_eq!(
        f.proxy.admin_get("/admin/v1/entries?limit=10000").status,
        200
    );
    assert_eq!(f.proxy.admin_get("/admin/v1/stats?hours=2160").status, 200);
    assert_eq!(
        f.proxy.admin_get("/admin/v1/incidents?limit=1000").status,
        200
    );
    let id = page["entries"][0]["id"].as_i64().expect("id");
    let shown = f.proxy.admin_get(&format!("/admin/v1/entries/{id}")).json();
    assert_eq!(shown["timeline"][0]["kind"], "claim");
    assert_eq!(f.proxy.admin_get("/admin/v1/entries/999999").status, 404);
    // The log's filters are checked as the CLI's are; its times take the CLI's forms, and refuse
    // what would silently mean 1970.
    let n_events = |query: &str| {
        let r = f.proxy.admin_get(&format!("/admin/v1/events?{query}"));
        assert_eq!(r.status, 200, "{query}: {}", r.text());
        r.json()["events"].as_array().expect("events").len()
    };
    let all = n_events("");
    assert!(all > 0);
    let hour_ago = idemgate_ledger::now_millis() - 3_600_000;
    assert_eq!(n_events("since=1h"), all);
    assert_eq!(n_events(&format!("since={hour_ago}")), all);
    assert_eq!(n_events("since=2100-01-01T00:00:00Z"), 0);
    assert_eq!(n_events("until=2001-09-09"), 0);
    for bad in [
        "since=1795168800",
        "until=last%20tuesday",
        "kind=nonsense",
        "since=1h&until=2h",
    ] {
        let r = f.proxy.admin_get(&format!("/admin/v1/events?{bad}"));
        assert_eq!(r.status, 400, "{bad}");
        assert_eq!(r.code(), "invalid-argument", "{bad}");
    }
    // Mutations need an operator and a reason.
    let r = f.proxy.admin_post(
        &format!("/admin/v1/entries/{id}/replay"),
        &json!({"operator": "", "reason": "x"}),
    );
    assert_eq!(r.status, 400);
    assert_eq!(r.code(), "missing-operator");
    let r = f.proxy.admin_post(
        "/admin/v1/purge",
        &json!({"target": "ids", "ids": [id], "operator": "o", "reason": ""}),
    );
    assert_eq!(r.status, 400);
    assert_eq!(r.code(), "missing-reason");
    // A member or query parameter an action does not know is refused, not acted without:
    // `dry_run` is the CLI's flag, and a misspelt filter member would widen a purge.
    let timeline = |id: i64| {
        let e = f.proxy.admin_get(&format!("/admin/v1/entries/{id}"));
        assert_eq!(e.status, 200, "entry {id} is still there: {}", e.text());
        e.json()["timeline"].as_array().expect("timeline").len()
    };
    let events_before = timeline(id);
    let act = json!({"operator": "o", "reason": "r", "confirm_destructive": true});
    let with = |v: &serde_json::Value, k: &str, x: serde_json::Value| {
        let mut v = v.clone();
        v[k] = x;
        v
    };
    let ids = with(&with(&act, "target", "ids".into()), "ids", json!([id]));
    let expired = with(
        &with(&act, "target", "expired".into()),
        "filter",
        json!({"expired": true, "rout": "no-such-route"}),
    );
    let response = json!({"status": 200, "headers": [], "body": "ok", "content_type": "x"});
    for (path, body) in [
        (
            "/admin/v1/purge".to_owned(),
            with(&ids, "dry_run", true.into()),
        ),
        ("/admin/v1/purge?dry_run=true".to_owned(), ids.clone()),
        ("/admin/v1/purge".to_owned(), expired.clone()),
        ("/admin/v1/purge/preview".to_owned(), expired),
        (
            format!("/admin/v1/entries/{id}/replay"),
            with(&act, "dry_run", true.into()),
        ),
        (
            format!("/admin/v1/entries/{id}/replay?dry_run=1"),
            act.clone(),
        ),
        (
            format!("/admin/v1/entries/{id}/reconcile"),
            with(&act, "preview", true.into()),
        ),
        (
            format!("/admin/v1/entries/{id}/resolve"),
            with(&with(&act, "as", "completed".into()), "response", response),
        ),
    ] {
        let r = f.proxy.admin_post(&path, &body);
        assert_eq!(r.status, 400, "{path} {body}: {}", r.text());
        assert_eq!(r.code(), "invalid-argument", "{path} {body}");
    }
    for path in [
        format!("/admin/v1/entries/{id}?full=1"),
        format!("/admin/v1/entries/{id}/resolve/preview?as=failed"),
        "/admin/v1/verify?against=manifest.json".to_owned(),
        "/admin/v1/entries/x/resolve/preview".to_owned(),
    ] {
        let r = f.proxy.admin_get(&path);
        assert_eq!(r.status, 400, "{path}: {}", r.text());
        assert_eq!(r.code(), "invalid-argument", "{path}");
    }
    assert_eq!(timeline(id), events_before, "nothing was done to the entry");
    // The scheme's name is case-insensitive.
    let lower = format!("bearer {ADMIN_TOKEN}");
    let r = request(
        admin,
        "GET",
        "/admin/v1/stats",
        &[("authorization", &lower)],
        b"",
    );
    assert_eq!(r.status, 200, "{}", r.text());
    // A body that is not JSON is told what it must be, by its status too.
    let auth = format!("Bearer {ADMIN_TOKEN}");
    let admin = f.proxy.admin.expect("admin");
    let url = format!("/admin/v1/entries/{id}/replay");
    let json_ct = ("content-type", "application/json");
    let huge = format!("{{\"reason\": \"{}\"}}", "x".repeat(3 << 20));
    for (headers, body, status, code) in [
        (vec![], &b"{}"[..], 415, "unsupported-media-type"),
        (vec![json_ct], &b"{"[..], 400, "invalid-argument"),
        (vec![json_ct], &b"{\"as\": 7}"[..], 400, "invalid-argument"),
        (vec![json_ct], huge.as_bytes(), 413, "body-too-large"),
    ] {
        let mut h = vec![("authorization", auth.as_str())];
        h.extend(headers);
        let r = request(admin, "POST", &url, &h, body);
        assert_eq!(r.status, status, "{}", r.text());
        assert_eq!(r.code(), code);
    }
    // One that the upstream performs and fails (502: outcome unknown), one that it never gets
    // (connection refused: not executed, 503).
    let unknown = f.charge(
        "k-admin-502",
        r#"{"amount":1}"#,
        &[("x-fault", "status:502")],
    );
    assert_eq!(unknown.code(), "outcome-unknown");
    let refused = f.proxy.send(
        "POST",
        "/refused",
        &[("idempotency-key", "k-admin-r")],
        b"{}",
    );
    assert_eq!(refused.code(), "upstream-unavailable");
    // Both are in the process's log for the people on call, by route and entry, as plain text
    // (no terminal's colour codes in a file).
    let logs = f.proxy.logs();
    for (what, p) in [
        (
            "outcome unknown: the entry is held for an operator",
            &unknown,
        ),
        (
            "upstream unavailable: not executed, the key is released",
            &refused,
        ),
    ] {
        let id = p.json()["entry_id"].as_i64().expect("entry_id");
        assert!(
            logs.lines()
                .any(|l| l.contains(what) && l.contains(&format!("entry_id={id}"))),
            "{what} (entry {id}) in:\n{logs}"
        );
    }
    assert!(!logs.contains('\u{1b}'), "{logs}");
    let metrics = f.proxy.admin_get("/metrics").text();
    // Each proxied request is counted exactly once, under one outcome. (A route's outcomes are
    // exported from the start, at 0, so that rates exist before traffic.)
    let mut counted: Vec<&str> = metrics
        .lines()
        .filter(|l| l.starts_with("idemgate_requests_total{") && !l.ends_with(" 0"))
        .collect();
    counted.sort_unstable();
    assert_eq!(
        counted,
        [
            "idemgate_requests_total{route=\"charges\",outcome=\"executed\"} 1",
            "idemgate_requests_total{route=\"charges\",outcome=\"unknown\"} 1",
            "idemgate_requests_total{route=\"refused\",outcome=\"not_executed\"} 1",
        ],
        "{metrics}"
    );
    assert!(
        metrics.contains("idemgate_requests_total{route=\"charges\",outcome=\"replayed\"} 0"),
        "a route's outcomes are not exported at 0 before they happen:\n{metrics}"
    );
    for m in [
        "idemgate_requests_total",
        "idemgate_claim_seconds_bucket",
        "route=\"charges\"",
    ] {
        assert!(metrics.contains(m), "{m} missing from /metrics:\n{metrics}");
    }
    // The ledger writer's counters. An executed request's claim and its completion are two writes
    // in two commits (the claim commits before the upstream is called); the sweeper writes too,
    // every second, so these are lower bounds.
    let counter = |text: &str, name: &str| -> u64 {
        metric(text, name).unwrap_or_else(|| panic!("{name} missing from /metrics:\n{text}"))
    };
    // Failure counters are exported at 0 before any failure, so a first one shows in increase().
    for name in [
        "idemgate_ledger_commit_failures_total",
        "idemgate_ledger_checkpoint_failures_total",
    ] {
        assert_eq!(counter(&metrics, name), 0, "{name}");
    }
    assert!(
        metrics.contains("# HELP idemgate_ledger_commit_seconds "),
        "{metrics}"
    );
    let commits = counter(&metrics, "idemgate_ledger_commits_total");
    let writes = counter(&metrics, "idemgate_ledger_writes_total");
    assert!(
        commits >= 2 && writes >= commits,
        "{commits} commits, {writes} writes"
    );
    assert_eq!(f.charge("k-admin-2", r#"{"amount":1}"#, &[]).status, 201);
    let after = f.proxy.admin_get("/metrics").text();
    assert!(
        counter(&after, "idemgate_ledger_commits_total") >= commits + 2,
        "{after}"
    );
    assert!(
        counter(&after, "idemgate_ledger_writes_total") >= writes + 2,
        "{after}"
    );
    let openapi = f.proxy.admin_get("/admin/v1/openapi.json").json();
    assert!(openapi["paths"]["/admin/v1/entries"].is_object());
    let kind = openapi["paths"]["/admin/v1/events"]["get"]["parameters"]
        .as_array()
        .expect("parameters")
        .iter()
        .find(|p| p["name"] == "kind")
        .expect("kind")
        .clone();
    let kinds: Vec<&str> = idemgate_ledger::EventKind::ALL
        .iter()
        .map(|k| k.as_str())
        .collect();
    assert_eq!(kind["schema"]["enum"], json!(kinds), "the document's kinds");
}

#[test]
fn serve_refuses_to_start_without_an_admin_token_or_with_a_bad_config() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ledger = dir.path().join("l.db");
    let cfg = dir.path().join("c.toml");
    let good =
        config(CONFIG, "http://127.0.0.1:1", &ledger).replace("{closed}", "http://127.0.0.1:1");
    std::fs::write(&cfg, &good).expect("write");
    let cfg_arg = cfg.to_str().expect("utf8");
    let run = |args: &[&str], token: bool| {
        let mut c = std::process::Command::new(idemgate_bin());
        c.args(args).env("TEST_WEBHOOK_SECRET", SECRET);
        if token {
            c.env("IDEMGATE_ADMIN_TOKEN", ADMIN_TOKEN);
        } else {
            c.env_remove("IDEMGATE_ADMIN_TOKEN");
        }
        let out = c.output().expect("run");
        let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
        (out.status.code(), text(&out.stdout), text(&out.stderr))
    };
    for args in [
        &["serve", "--config", cfg_arg][..],
        &["serve", "--config", cfg_arg, "--check"],
    ] {
        let (code, _, err) = run(args, false);
        assert_eq!(code, Some(1), "{args:?}");
        assert!(err.contains("no-admin-token"), "{args:?}: {err}");
    }
    // `--check` says what `serve` would refuse, and what it would serve, without serving.
    let (code, out, err) = run(&["serve", "--config", cfg_arg, "--check"], true);
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains("ok, 7 routes"), "{out}");
    assert!(out.contains("customers") && out.contains("read"), "{out}");
    assert!(!ledger.exists(), "--check opened the ledger");
    let shadowed = good.replace("path = \"/v1/cancel\"", "path = \"/v1/charges/cancel\"");
    std::fs::write(&cfg, shadowed).expect("write");
    for args in [
        &["serve", "--config", cfg_arg][..],
        &["serve", "--config", cfg_arg, "--check"],
    ] {
        let (code, _, err) = run(args, true);
        assert_eq!(code, Some(1), "{args:?}");
        assert!(err.contains("routes[5] (cancel).path: never used"), "{err}");
    }
    assert!(
        !ledger.exists(),
        "a refused configuration opened the ledger"
    );
    std::fs::write(&cfg, "[server]\nledger = \"x.db\"\n[[routes]]\nname = \"a\"\nmethod = \"POST\"\npath = \"/a\"\nupstream = \"http://127.0.0.1:1\"\neffect = \"write\"\ntimeout = \"forever\"\n").expect("write");
    for args in [
        &["serve", "--config", cfg_arg][..],
        &["serve", "--config", cfg_arg, "--check"],
    ] {
        let (code, _, err) = run(args, true);
        assert_eq!(code, Some(1), "{args:?}");
        assert!(err.contains("routes[0] (a).timeout"), "{err}");
    }
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

#[test]
fn operator_replay_re_drives_a_stuck_entry_and_destructive_routes_need_confirmation() {
    let f = Fx::new();
    assert_eq!(
        f.charge("k-rd", r#"{"amount":4}"#, &[("x-fault", "status:502")])
            .status,
        502
    );
    assert_eq!(f.effects("k-rd"), 1);
    let id = f.entries(&["--key", "k-rd"])[0]["id"].to_string();
    let cfg = f.proxy.config.display().to_string();
    let refused = idemgate(&[
        "replay",
        "--config",
        &cfg,
        &id,
        "--operator",
        "oncall",
        "--reason",
        "",
    ]);
    assert_eq!(refused.status.code(), Some(1));
    let out = idemgate(&[
        "replay",
        "--config",
        &cfg,
        &id,
        "--operator",
        "oncall",
        "--reason",
        "upstream confirmed it failed",
        "--json",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(v["status"], 201);
    assert_eq!(v["entry"]["state"], "completed");
    assert_eq!(f.effects("k-rd"), 2, "the operator chose to run it again");
    assert_eq!(
        f.up.counts
            .effects(&idemgate_proxy::keys::scoped("agent-7", "k-rd")),
        2,
        "a replay sends the key the first attempt sent"
    );
    let r = f.charge("k-rd", r#"{"amount":4}"#, &[]);
    assert_eq!(r.header("idempotent-replayed"), Some("true"));
    let log = idemgate_json(&["log", "--ledger", &f.ledger(), "--kind", "replay", "--json"]);
    assert_eq!(log[0]["operator"], "oncall");

    // Destructive: refused without --confirm-destructive, through the CLI and the admin API.
    let r = f.proxy.send(
        "POST",
        "/v1/cancel",
        &[("idempotency-key", "k-cancel"), ("x-fault", "status:504")],
        br#"{"sub":"s1"}"#,
    );
    assert_eq!(r.status, 504);
    let cid = f.entries(&["--key", "k-cancel"])[0]["id"]
        .as_i64()
        .expect("id");
    let out = idemgate(&[
        "replay",
        "--config",
        &cfg,
        &cid.to_string(),
        "--operator",
        "o",
        "--reason",
        "r",
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("confirmation-required"));
    let r = f.proxy.admin_post(
        &format!("/admin/v1/entries/{cid}/replay"),
        &json!({"operator": "o", "reason": "r"}),
    );
    assert_eq!(r.status, 409);
    assert_eq!(r.code(), "confirmation-required");
    assert_eq!(f.effects("k-cancel"), 1);
    let r = f.proxy.admin_post(
        &format!("/admin/v1/entries/{cid}/replay"),
        &json!({"operator": "o", "reason": "customer asked twice", "confirm_destructive": true}),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(f.effects("k-cancel"), 2);
}

/// A bulk replay previews exactly the entries its filter matches, changes nothing on a dry run,
/// and re-drives each of them once, through the CLI's preview and the admin API's job alike.
#[test]
fn a_bulk_replay_re_drives_each_stuck_entry_of_its_filter_once() {
    let f = Fx::new();
    for key in ["k-bulk-1", "k-bulk-2"] {
        let r = f.charge(key, r#"{"amount":5}"#, &[("x-fault", "status:502")]);
        assert_eq!(r.status, 502);
    }
    assert_eq!(f.charge("k-bulk-done", r#"{"amount":6}"#, &[]).status, 201);
    let cfg = f.proxy.config.display().to_string();
    let dry = idemgate_json(&[
        "bulk",
        "replay",
        "--config",
        &cfg,
        "--stuck",
        "--route",
        "charges",
        "--dry-run",
        "--operator",
        "oncall",
        "--reason",
        "upstream fixed",
        "--json",
    ]);
    assert_eq!(dry["count"], 2, "{dry}");
    assert_eq!(
        f.effects("k-bulk-1") + f.effects("k-bulk-2"),
        2,
        "a dry run sends nothing"
    );
    let target = json!({"filter": {"stuck": true, "route": "charges"}});
    let p = f.proxy.admin_post(
        "/admin/v1/bulk/preview",
        &json!({"action": "replay", "target": target}),
    );
    assert_eq!(p.status, 200, "{}", p.text());
    let preview: serde_json::Value = serde_json::from_str(&p.text()).expect("json");
    assert_eq!(preview["count"], 2);
    let r = f.proxy.admin_post(
        "/admin/v1/bulk",
        &json!({"action": "replay", "target": target, "operator": "oncall", "reason": "upstream fixed"}),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let report: serde_json::Value = serde_json::from_str(&r.text()).expect("json");
    assert_eq!(
        (&report["total"], &report["succeeded"], &report["failed"]),
        (&json!(2), &json!(2), &json!(0)),
        "{report}"
    );
    assert_eq!(f.effects("k-bulk-1"), 2, "each stuck entry re-driven once");
    assert_eq!(f.effects("k-bulk-2"), 2);
    assert_eq!(
        f.effects("k-bulk-done"),
        1,
        "a completed entry is not the filter's"
    );
    let log = idemgate_json(&["log", "--ledger", &f.ledger(), "--kind", "replay", "--json"]);
    assert_eq!(log.as_array().map(Vec::len), Some(2));
    assert!(log
        .as_array()
        .expect("array")
        .iter()
        .all(|e| e["operator"] == "oncall"));
    // A member the command does not know is refused, and nothing runs.
    let r = f.proxy.admin_post(
        "/admin/v1/bulk",
        &json!({"action": "replay", "target": target, "operator": "o", "reason": "r", "dry_run": true}),
    );
    assert_eq!(r.status, 400);
    assert_eq!(r.code(), "invalid-argument");
}

/// An entry claimed before scoped keys went upstream as UUIDs was sent its own key: its probe asks
/// for that key and its replay sends it (a probe for the UUID would find nothing and release an
/// effect that happened, for a second execution).
#[test]
fn an_entry_claimed_before_keys_were_scoped_upstream_keeps_its_own_key() {
    use idemgate_ledger::{ClaimOutcome, ClaimRequest, Storage};
    let dir = tempfile::tempdir().expect("tempdir");
    let up = Upstream::start();
    let ledger = dir.path().join("ledger.db");
    let mut ids = Vec::new();
    {
        let l = new_ledger(&ledger);
        for key in ["k-old-done", "k-old-lost"] {
            let mut claim = ClaimRequest {
                scope: "agent-7".into(),
                ..charge_claim(key, "an-older-instance", 1)
            };
            claim.request.headers = vec![
                ("content-type".into(), "application/json".into()),
                ("idempotency-key".into(), key.into()),
                ("x-agent-id".into(), "agent-7".into()),
            ];
            let ClaimOutcome::Claimed { entry_id, .. } = l.claim(claim).wait().expect("claim")
            else {
                panic!("not claimed")
            };
            ids.push(entry_id.to_string());
        }
        l.close();
    }
    // The older instance sent the first upstream under its own key, then died.
    let sent = request(
        up.addr,
        "POST",
        "/v1/charges",
        &[("idempotency-key", "k-old-done")],
        b"{}",
    );
    assert_eq!(sent.status, 201);
    std::thread::sleep(std::time::Duration::from_millis(50)); // the leases pass: stuck
    let proxy = Proxy::start_with_env(
        dir.path(),
        &Fx::render(CONFIG, &up, &ledger),
        &ledger,
        &[("TEST_WEBHOOK_SECRET", SECRET)],
    );
    let cfg = proxy.config.display().to_string();
    let act = |what: &str, id: &str| {
        idemgate_json(&[
            what,
            "--config",
            &cfg,
            id,
            "--operator",
            "oncall",
            "--reason",
            "after the upgrade",
            "--json",
        ])
    };
    let v = act("reconcile", &ids[0]);
    assert_eq!(v["decision"], "completed", "{v}");
    assert_eq!(up.counts.effects("k-old-done"), 1, "never run again");
    let v = act("replay", &ids[1]);
    assert_eq!(v["status"], 201, "{v}");
    assert_eq!(up.counts.effects("k-old-lost"), 1, "sent under its own key");
    assert_eq!(
        up.counts
            .effects(&idemgate_proxy::keys::scoped("agent-7", "k-old-lost")),
        0
    );
}

#[test]
fn reconcile_resolves_a_stuck_entry_from_the_upstream_probe() {
    let f = Fx::new();
    // The effect happened (then the connection dropped): the probe finds it.
    assert_eq!(
        f.charge("k-rc1", r#"{"amount":1}"#, &[("x-fault", "drop")])
            .status,
        502
    );
    let id = f.entries(&["--key", "k-rc1"])[0]["id"].to_string();
    let cfg = f.proxy.config.display().to_string();
    let v = idemgate_json(&[
        "reconcile",
        "--config",
        &cfg,
        &id,
        "--operator",
        "oncall",
        "--reason",
        "probe the processor",
        "--json",
    ]);
    assert_eq!(v["decision"], "completed");
    assert_eq!(v["probe_status"], 200);
    assert_eq!(v["entry"]["state"], "completed");
    assert_eq!(f.effects("k-rc1"), 1, "reconcile never re-executes");
    let r = f.charge("k-rc1", r#"{"amount":1}"#, &[]);
    assert_eq!(r.header("idempotent-replayed"), Some("true"));
    let log = idemgate_json(&[
        "log",
        "--ledger",
        &f.ledger(),
        "--kind",
        "reconcile",
        "--json",
    ]);
    assert_eq!(log[0]["operator"], "oncall");

    // A 502 that the upstream answered *before* performing anything: the probe finds nothing, the
    // entry is released, and the client's retry runs.
    assert_eq!(
        f.charge(
            "k-rc2",
            r#"{"amount":2}"#,
            &[("x-fault", "fail-first:1:502")]
        )
        .status,
        502
    );
    let id = f.entries(&["--key", "k-rc2"])[0]["id"].to_string();
    let v = idemgate_json(&[
        "reconcile",
        "--config",
        &cfg,
        &id,
        "--operator",
        "oncall",
        "--reason",
        "probe",
        "--json",
    ]);
    assert_eq!(v["decision"], "released");
    assert_eq!(v["probe_status"], 404);
    assert_eq!(f.charge("k-rc2", r#"{"amount":2}"#, &[]).status, 201);
    assert_eq!(f.effects("k-rc2"), 1);
}

#[test]
fn the_admin_listener_serves_the_console_ui_to_browsers() {
    let ui = tempfile::tempdir().expect("tempdir");
    std::fs::create_dir_all(ui.path().join("assets")).expect("mkdir");
    std::fs::write(
        ui.path().join("index.html"),
        "<!doctype html><title>idemgate console</title><script src=\"./assets/app.js\"></script>",
    )
    .expect("write");
    std::fs::write(ui.path().join("assets/app.js"), "console.log('ui')").expect("write");
    let template = CONFIG.replace(
        "ledger = \"{ledger}\"",
        &format!(
            "ledger = \"{{ledger}}\"\nconsole_dir = \"{}\"",
            ui.path().display()
        ),
    );
    let f = Fx::with(&template);
    let admin = f.proxy.admin.expect("admin");
    // The page and its assets need no token (they hold no data) and carry a strict CSP.
    let page = request(admin, "GET", "/console/", &[], b"");
    assert_eq!(page.status, 200);
    assert!(page.text().contains("idemgate console"));
    assert!(page
        .header("content-type")
        .is_some_and(|c| c.starts_with("text/html")));
    assert!(page
        .header("content-security-policy")
        .is_some_and(|c| c.contains("default-src 'self'")));
    let js = request(admin, "GET", "/console/assets/app.js", &[], b"");
    assert_eq!(js.status, 200);
    assert_eq!(
        request(admin, "GET", "/", &[], b"").header("location"),
        Some("/console/")
    );
    // The data still needs the token.
    assert_eq!(
        request(admin, "GET", "/admin/v1/entries", &[], b"").status,
        401
    );
    assert_eq!(f.proxy.admin_get("/admin/v1/entries").status, 200);
    // Nothing outside the UI folder is reachable through it.
    assert_eq!(
        request(admin, "GET", "/console/../../etc/passwd", &[], b"").status,
        404
    );
}
