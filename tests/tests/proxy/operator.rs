//! Operator actions through the CLI and the admin API: resolve's response, replay, bulk replay, reconcile.

use super::*;

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
    // The route has no probe: the entry's view, under the server's routes, offers a replay but
    // not a reconcile, and says why, as the reconcile would.
    let shown = f
        .proxy
        .admin_get(&format!("/admin/v1/entries/{cid}"))
        .json();
    let refused = |action: &str| {
        let a = shown["actions"].as_array().expect("actions").iter();
        let mut a = a.filter(|a| a["action"] == action);
        a.next().expect("listed")["refused"].clone()
    };
    assert_eq!(refused("replay"), serde_json::Value::Null, "{shown}");
    assert_eq!(
        refused("reconcile"),
        "route cancel has no reconcile probe configured"
    );
    // The CLI judges it by the configuration it is given, as the server does.
    let entry = format!("entry_id={cid}");
    let shown = idemgate_json(&["call", "show", "--config", &cfg, &entry]);
    let reconcile = &shown["actions"][3];
    assert_eq!(reconcile["action"], "reconcile");
    assert_eq!(
        reconcile["refused"],
        "route cancel has no reconcile probe configured"
    );
    // `IDEMGATE_CONFIG` names the configuration as `--config` does.
    let by_env = std::process::Command::new(idemgate_bin())
        .args(["show", &cid.to_string()])
        .env_remove("IDEMGATE_LEDGER")
        .env("IDEMGATE_CONFIG", &cfg)
        .output()
        .expect("run idemgate");
    for shown in [
        idemgate(&["show", "--config", &cfg, &cid.to_string()]),
        by_env,
    ] {
        let text = String::from_utf8_lossy(&shown.stdout);
        assert!(
            text.contains("\n  actions      resolve, release, replay\n"),
            "{text}"
        );
    }
    let r = f.proxy.admin_post(
        &format!("/admin/v1/entries/{cid}/reconcile"),
        &json!({"operator": "o", "reason": "r", "confirm_destructive": true}),
    );
    assert_eq!(
        (r.status, r.code()),
        (409, "no-probe".into()),
        "{}",
        r.text()
    );
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
        .all(|e| e["operator"] == "oncall (shared admin token)"));
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
