//! The admin API: the token, the operations over HTTP, start-up refusals, the console for browsers.

use super::*;

#[test]
fn the_admin_api_needs_the_token_and_serves_the_operations() {
    let f = Fx::new();
    assert_eq!(f.charge("k-admin", r#"{"amount":1}"#, &[]).status, 201);
    only_its_token_opens_it(&f);
    let id = reads_check_their_limits_and_filters(&f);
    actions_refuse_what_they_do_not_know(&f, id);
    a_body_must_be_json_within_its_limit(&f, id);
    failed_calls_are_logged_and_counted_once(&f);
    the_ledger_writer_counts_its_commits(&f);
    the_document_names_every_event_kind(&f);
}

/// Every route but health needs the token, under a scheme named in any case.
fn only_its_token_opens_it(f: &Fx) {
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
}

/// Lists, an entry and the log: limits out of range and bad filters are refused. Answers the
/// entry's id.
fn reads_check_their_limits_and_filters(f: &Fx) -> i64 {
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
    // Completed: a purge takes it, a release does not, and its preview says so.
    let purge = &shown["actions"][4];
    assert_eq!(
        (purge["action"].as_str(), purge["refused"].is_null()),
        (Some("purge"), true)
    );
    assert!(!shown["actions"][1]["refused"].is_null(), "{shown}");
    let p = f
        .proxy
        .admin_get(&format!(
            "/admin/v1/entries/{id}/resolve/preview?as=released"
        ))
        .json();
    assert_eq!(p["count"], 0, "{p}");
    assert_eq!(
        p["skipped"][0][1],
        "entry is completed; release needs a stuck or failed entry"
    );
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
    id
}

/// An action needs an operator and a reason, and refuses a member or parameter it does not know.
fn actions_refuse_what_they_do_not_know(f: &Fx, id: i64) {
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
        format!("/admin/v1/entries/{id}/resolve/preview?as=maybe"),
        "/admin/v1/verify?against=manifest.json".to_owned(),
        "/admin/v1/entries/x/resolve/preview".to_owned(),
    ] {
        let r = f.proxy.admin_get(&path);
        assert_eq!(r.status, 400, "{path}: {}", r.text());
        assert_eq!(r.code(), "invalid-argument", "{path}");
    }
    assert_eq!(timeline(id), events_before, "nothing was done to the entry");
}

/// A body that is not JSON, or too large, is told what it must be, by its status too.
fn a_body_must_be_json_within_its_limit(f: &Fx, id: i64) {
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
}

/// A call the upstream failed and one it never got: logged for the people on call, and each
/// proxied request counted once.
fn failed_calls_are_logged_and_counted_once(f: &Fx) {
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
    // Each metric says what it measures, as Prometheus's tools expect of it.
    let of = |tag: &str| -> std::collections::BTreeSet<String> {
        metrics
            .lines()
            .filter_map(|l| l.strip_prefix(tag)?.split(' ').next().map(str::to_owned))
            .collect()
    };
    let (typed, helped) = (of("# TYPE "), of("# HELP "));
    assert!(typed.len() >= 20, "{typed:?}");
    let bare: Vec<_> = typed.difference(&helped).collect();
    assert!(bare.is_empty(), "no # HELP for {bare:?}");
}

/// The ledger writer's commits, writes and lock use, as /metrics exports them.
fn the_ledger_writer_counts_its_commits(f: &Fx) {
    let metrics = f.proxy.admin_get("/metrics").text();
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
    // Exported from the start too (a failed job, which some steps cause, makes one).
    counter(&metrics, "idemgate_ledger_batch_reruns_total");
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
    // Every commit asked for the write lock and held it: one observation of each per commit.
    for name in [
        "idemgate_ledger_write_lock_held_seconds_count",
        "idemgate_ledger_write_lock_wait_seconds_count",
    ] {
        assert!(counter(&after, name) >= commits + 2, "{name}: {after}");
    }
}

/// The OpenAPI document served names every event kind the log filter takes.
fn the_document_names_every_event_kind(f: &Fx) {
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
    // The parameter names the EventKind schema: every kind, each a one-value enum or a list.
    let schema = &openapi["components"]["schemas"]["EventKind"];
    assert_eq!(
        kind["schema"]["$ref"], "#/components/schemas/EventKind",
        "{kind}"
    );
    let documented: Vec<&str> = schema["oneOf"]
        .as_array()
        .expect("oneOf")
        .iter()
        .flat_map(|s| s["enum"].as_array().expect("enum"))
        .filter_map(|k| k.as_str())
        .collect();
    assert_eq!(documented, kinds, "the document's kinds");
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
    assert!(
        out.contains("admin API on 127.0.0.1:0, for admin (the shared admin token)"),
        "{out}"
    );
    // Operators are credentials enough, without the shared token; `--check` names them.
    let made = idemgate_json(&[
        "token", "new", "--name", "olga", "--role", "operator", "--json",
    ]);
    let with_ops = format!(
        "{good}\n[[operators]]\nname = \"olga\"\nrole = \"operator\"\ntoken_hash = \"{}\"\n",
        made["token_hash"].as_str().expect("hash")
    );
    std::fs::write(&cfg, with_ops).expect("write");
    let (code, out, err) = run(&["serve", "--config", cfg_arg, "--check"], false);
    assert_eq!(code, Some(0), "{err}");
    assert!(
        out.contains("admin API on 127.0.0.1:0, for olga (operator)"),
        "{out}"
    );
    let text = idemgate(&["token", "new", "--name", "vic", "--role", "viewer"]);
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.starts_with("token: igt_")
            && text.contains(
                "[[operators]]\nname = \"vic\"\nrole = \"viewer\"\ntoken_hash = \"sha256:"
            ),
        "{text}"
    );
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

/// The path from an installed binary to a first protected call: `init` writes a configuration
/// and its admin token, `serve` runs on it as written, and a retried charge runs once.
#[test]
fn a_configuration_from_init_serves_a_first_protected_call() {
    let dir = tempfile::tempdir().expect("tempdir");
    let up = Upstream::start();
    let written = dir.path().join("init.toml");
    let out = idemgate(&[
        "init",
        "--config",
        written.to_str().expect("utf-8"),
        "--listen",
        "127.0.0.1:0",
        "--admin-listen",
        "127.0.0.1:0",
        "--upstream",
        &up.url(),
        "--route",
        "charges=POST:/v1/charges:write",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = std::fs::read_to_string(&written).expect("config");
    let ledger = dir.path().join("idemgate.db");
    assert!(
        text.contains(&format!("ledger = \"{}\"", ledger.display())),
        "{text}"
    );
    // The admin token is the file's: none in the environment.
    let proxy = Proxy::start_with_env(dir.path(), &text, &ledger, &[("IDEMGATE_ADMIN_TOKEN", "")]);
    let charge = || {
        proxy.send(
            "POST",
            "/v1/charges",
            &[
                ("idempotency-key", "first-call"),
                ("content-type", "application/json"),
            ],
            br#"{"amount":100}"#,
        )
    };
    let first = charge();
    assert_eq!(first.status, 201, "{}", first.text());
    let again = charge();
    assert_eq!(again.status, 201);
    assert_eq!(again.header("idempotent-replayed"), Some("true"));
    assert_eq!(again.body, first.body);
    assert_eq!(up.counts.effects("first-call"), 1, "charged once");
    let token = std::fs::read_to_string(dir.path().join("admin-token")).expect("token");
    let auth = format!("Bearer {}", token.trim());
    let me = request(
        proxy.admin.expect("admin"),
        "GET",
        "/admin/v1/whoami",
        &[("authorization", &auth)],
        b"",
    );
    assert_eq!(me.status, 200, "{}", me.text());
    assert_eq!(me.json()["name"], "admin");
}

#[test]
fn the_stuck_and_expired_gauges_count_what_the_overview_counts() {
    // Entries that expire a second after their outcome, so one is expired within the test.
    let f = Fx::with(&CONFIG.replace(r#"ttl = "1h""#, r#"ttl = "1s""#));
    let held = f.charge("k-held", r#"{"amount":1}"#, &[("x-fault", "status:502")]);
    assert_eq!(held.code(), "outcome-unknown");
    assert_eq!(f.charge("k-done", r#"{"amount":1}"#, &[]).status, 201);
    // The server sets both gauges from the ledger's counts every few seconds.
    let gauges = || {
        let text = f.proxy.admin_get("/metrics").text();
        (
            metric(&text, "idemgate_stuck_entries"),
            metric(&text, "idemgate_expired_entries"),
        )
    };
    eventually(30, "one stuck and one expired in the gauges", || {
        (gauges() == (Some(1), Some(1))).then_some(())
    });
    let stats = f.proxy.admin_get("/admin/v1/stats?hours=0").json();
    assert_eq!(
        (stats["stuck"].as_u64(), stats["expired"].as_u64()),
        (Some(1), Some(1))
    );
}
