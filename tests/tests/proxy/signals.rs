//! Signals and clients that go away: SIGTERM drains, SIGHUP reloads, a write or an admin replay runs to its end.

use super::*;

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

/// SIGHUP (`systemctl reload`) reloads the configuration for new requests: a moved route serves at
/// its new path while the request in flight on the old one finishes under the configuration it
/// started with, a call held on a removed route stays for the operators, and an operator added
/// signs in. A file that does not parse, or that changes what
/// a running process cannot (its listener), is refused whole, with a log line, and the
/// configuration loaded before keeps serving.
#[test]
fn sighup_reloads_routes_and_operators_and_a_bad_file_changes_nothing() {
    let f = Fx::new();
    let original = std::fs::read_to_string(&f.proxy.config).expect("config");
    let pid = f.proxy.pid().to_string();
    let hup = || {
        let sent = std::process::Command::new("kill")
            .args(["-HUP", &pid])
            .status()
            .expect("kill");
        assert!(sent.success());
    };
    let reloads = |result: &str| {
        let text = f.proxy.admin_get("/metrics").text();
        metric(
            &text,
            &format!("idemgate_config_reloads_total{{result=\"{result}\"}}"),
        )
        .unwrap_or(0)
    };
    let charge_at = |path: &str, key: &str| {
        request(
            f.proxy.addr,
            "POST",
            path,
            &[
                ("idempotency-key", key),
                ("content-type", "application/json"),
            ],
            br#"{"amount":1}"#,
        )
    };
    let alice = idemgate_json(&[
        "token", "new", "--name", "alice", "--role", "viewer", "--json",
    ]);
    let alice_token = alice["token"].as_str().expect("token").to_owned();
    let whoami = |token: &str| {
        request(
            f.proxy.admin.expect("admin"),
            "GET",
            "/admin/v1/whoami",
            &[("authorization", &format!("Bearer {token}"))],
            b"",
        )
    };
    assert_eq!(whoami(&alice_token).status, 401);

    // A call held for an operator (its outcome unknown) on the route the reload removes.
    let held = f.charge("k-held", r#"{"amount":1}"#, &[("x-fault", "status:502")]);
    assert_eq!(held.code(), "outcome-unknown");
    let held_id = f.entries(&["--key", "k-held"])[0]["id"]
        .as_i64()
        .expect("id");
    let inflight = f.charge_held_upstream("k-hup", r#"{"amount":3}"#, "delay:600");
    // The charges route goes; payments takes its upstream at another path.
    let moved = format!(
        "{}\n[[operators]]\nname = \"alice\"\nrole = \"viewer\"\ntoken_hash = \"{}\"\n",
        original
            .replace("name = \"charges\"", "name = \"payments\"")
            .replace("path = \"/v1/charges\"", "path = \"/v2/charges\""),
        alice["token_hash"].as_str().expect("hash")
    );
    std::fs::write(&f.proxy.config, &moved).expect("write");
    hup();
    eventually(10, "the reload applied", || {
        (reloads("applied") == 1).then_some(())
    });
    let r = inflight.join().expect("join");
    assert_eq!(r.status, 201, "the request in flight: {}", r.text());
    assert_eq!(charge_at("/v2/charges", "k-hup-v2").status, 201);
    let old = charge_at("/v1/charges", "k-hup-v1");
    assert_eq!((old.status, old.code()), (404, "unknown-route".into()));
    let me = whoami(&alice_token);
    assert_eq!(me.status, 200, "{}", me.text());
    assert_eq!(me.json()["name"], "alice");
    // The held call of the removed route stays for the operators: still stuck, not replayable
    // without its route, and resolved by hand.
    let act = |what: &str, body: serde_json::Value| {
        f.proxy
            .admin_post(&format!("/admin/v1/entries/{held_id}/{what}"), &body)
    };
    let stuck = f.proxy.admin_get("/admin/v1/entries?stuck=true").json();
    assert!(
        stuck["entries"]
            .as_array()
            .expect("entries")
            .iter()
            .any(|e| e["id"] == held_id),
        "{stuck}"
    );
    let replay = act(
        "replay",
        json!({"operator": "oncall", "reason": "retry it"}),
    );
    assert_eq!(
        (replay.status, replay.code()),
        (409, "route-not-configured".into()),
        "{}",
        replay.text()
    );
    let resolved = act(
        "resolve",
        json!({"operator": "oncall", "reason": "the route is gone; charged by hand", "as": "failed"}),
    );
    assert_eq!(resolved.status, 200, "{}", resolved.text());

    // Not TOML: refused, said, and nothing changes.
    std::fs::write(&f.proxy.config, "[server\nlisten = ").expect("write");
    hup();
    eventually(10, "the bad file refused", || {
        (reloads("refused") == 1).then_some(())
    });
    assert!(f
        .proxy
        .logs()
        .contains("refused to reload the configuration"));
    assert_eq!(charge_at("/v2/charges", "k-hup-v2b").status, 201);
    assert_eq!(whoami(&alice_token).status, 200);

    // A new listener needs a restart: the whole file is refused, its route change with it.
    let relisten = moved
        .replace("\nlisten = \"127.0.0.1:0\"", "\nlisten = \"127.0.0.1:1\"")
        .replace("/v2/charges", "/v3/charges");
    assert_ne!(relisten, moved);
    std::fs::write(&f.proxy.config, &relisten).expect("write");
    hup();
    eventually(10, "the new listener refused", || {
        (reloads("refused") == 2).then_some(())
    });
    assert!(
        f.proxy.logs().contains("server.listen changed"),
        "{}",
        f.proxy.logs()
    );
    assert_eq!(charge_at("/v3/charges", "k-hup-v3").status, 404);
    assert_eq!(charge_at("/v2/charges", "k-hup-v2c").status, 201);
    assert_eq!(reloads("applied"), 1);
}
