//! The server keeps the audit trail on its own: it applies its retention policy (never to a stuck
//! entry), signs the chain's head at its interval and adds each event to the log's tree, while
//! it serves.

use idemgate_ledger::checkpoint::PublicKey;

use super::*;

const RETAINING: &str = r#"
[server]
listen = "127.0.0.1:0"
admin_listen = "127.0.0.1:0"
ledger = "{ledger}"
signing_key_file = "{key}"
checkpoint_interval = "1s"

[retention]
entries = "1s"
log_hot = "1m"
archive_dir = "{archive}"
interval = "1s"

[[routes]]
name = "charges"
method = "POST"
path = "/v1/charges"
upstream = "{upstream}"
effect = "write"
timeout = "1s"
"#;

fn listed(ledger: &str, filter: &str) -> usize {
    idemgate_json(&["entries", "--ledger", ledger, filter, "--json"])
        .as_array()
        .map_or(0, Vec::len)
}

#[test]
fn the_server_applies_its_retention_policy_and_signs_its_head() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ledger = dir.path().join("ledger.db");
    let l = ledger.display().to_string();
    // Expired entries from two minutes ago, and one stuck entry (its lease passed at once).
    {
        let ops = idemgate_ops::Ops::open_or_create(&l).expect("ledger");
        idemgate_ledger::testing::expired_charges(ops.store().as_ref(), 30);
        ops.store()
            .claim(charge_claim("stuck-1", "gone", 1))
            .wait()
            .expect("claim");
    }
    let archive = dir.path().join("archive");
    std::fs::create_dir(&archive).expect("mkdir");
    let prefix = dir.path().join("signing");
    let made = idemgate(&["keygen", "--out", prefix.to_str().expect("utf8")]);
    assert!(made.status.success());
    let public = PublicKey::from_file(&dir.path().join("signing.pub")).expect("the public key");
    let up = upstream::Upstream::start();
    let cfg = config(RETAINING, &up.url(), &ledger)
        .replace(
            "{key}",
            &dir.path().join("signing.key").display().to_string(),
        )
        .replace("{archive}", &archive.display().to_string());
    let mut proxy = Proxy::start(dir.path(), &cfg, &ledger);

    // The policy runs at start: the expired entries go, the stuck one stays; the old events are
    // archived and leave the live ledger.
    eventually(30, "the expired entries purged", || {
        (listed(&l, "--expired") == 0).then_some(())
    });
    assert_eq!(listed(&l, "--stuck"), 1);
    let purges: Vec<_> = events_of(&l, "purge");
    assert_eq!(purges.len(), 30);
    assert!(purges.iter().all(|p| p["operator"] == "idemgate-retention"
        && p["reason"]
            .as_str()
            .is_some_and(|r| r.contains("entries = 1s"))));
    eventually(30, "a segment archived", || {
        std::fs::read_dir(&archive)
            .expect("dir")
            .flatten()
            .any(|e| e.file_name().to_string_lossy().ends_with(".ndjson.gz"))
            .then_some(())
    });
    assert!(!events_of(&l, "retention").is_empty());

    // A client of the admin API (the console in a browser) lists and verifies the server's own
    // archive, naming no path of the server.
    let listed_segments = proxy.admin_get("/admin/v1/archive");
    assert_eq!(listed_segments.status, 200, "{}", listed_segments.text());
    let segments = listed_segments.json();
    let segments = segments.as_array().expect("a list");
    assert!(!segments.is_empty());
    assert!(
        segments
            .iter()
            .all(|s| s["recorded"] == true && s["checked"] == false),
        "{segments:?}"
    );
    let history = proxy.admin_get("/admin/v1/archive/verify");
    assert_eq!(history.status, 200, "{}", history.text());
    let history = history.json();
    assert_eq!(history["ok"], true, "{history}");
    // The policy may have archived more since the listing; every segment is checked and sound.
    let checked = history["segments"].as_array().expect("segments");
    assert!(checked.len() >= segments.len(), "{history}");
    assert!(checked
        .iter()
        .all(|s| s["checked"] == true && s["ok"] == true));

    // A call through the proxy, and the head it leads to is signed within the interval.
    let r = proxy.send(
        "POST",
        "/v1/charges",
        &[
            ("idempotency-key", "after-1"),
            ("content-type", "application/json"),
        ],
        b"{}",
    );
    assert_eq!(r.status, 201, "{}", r.text());
    let claimed_at = idemgate_json(&["log", "--ledger", &l, "--key", "after-1", "--json"])[0]
        ["seq"]
        .as_i64()
        .expect("seq");
    let signed = eventually(30, "a checkpoint past the call", || {
        events_of(&l, "checkpoint")
            .into_iter()
            .find(|e| e["detail"]["seq"].as_i64().is_some_and(|s| s >= claimed_at))
    });
    // What the log holds is a note the public key verifies, naming a head the log has.
    let d = &signed["detail"];
    let v = public
        .verify(d["note"].as_str().expect("note"))
        .expect("signed by the configured key");
    assert_eq!(v.head.hash, d["hash"].as_str().expect("hash"));
    proxy.terminate();

    // The whole history verifies, with the public key and no secret.
    let out = idemgate(&[
        "verify",
        "--ledger",
        &l,
        "--archive",
        archive.to_str().expect("utf8"),
        "--public-key",
        dir.path().join("signing.pub").to_str().expect("utf8"),
        "--json",
    ]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert!(out.status.success(), "{v}");
    assert_eq!(listed(&l, "--stuck"), 1);
}

/// The leader adds each call's events to the log's Merkle tree on its own (no proof asked for),
/// and the admin API serves an event's proof that the public key alone checks.
#[test]
fn the_server_adds_its_calls_to_the_log_s_tree_and_proves_them() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ledger = dir.path().join("ledger.db");
    let l = ledger.display().to_string();
    let prefix = dir.path().join("signing");
    assert!(
        idemgate(&["keygen", "--out", prefix.to_str().expect("utf8")])
            .status
            .success()
    );
    let up = upstream::Upstream::start();
    // Signing, and no retention policy: the tree is the server's own work.
    let (signing, routes) = RETAINING.split_once("[retention]").expect("a policy");
    let template = format!(
        "{signing}[[routes]]{}",
        routes.split_once("[[routes]]").expect("routes").1
    );
    let cfg = config(&template, &up.url(), &ledger).replace(
        "{key}",
        &dir.path().join("signing.key").display().to_string(),
    );
    let mut proxy = Proxy::start(dir.path(), &cfg, &ledger);
    for key in ["tree-1", "tree-2", "tree-3"] {
        let r = proxy.send(
            "POST",
            "/v1/charges",
            &[
                ("idempotency-key", key),
                ("content-type", "application/json"),
            ],
            b"{}",
        );
        assert_eq!(r.status, 201, "{}", r.text());
    }
    let last = idemgate_json(&["log", "--ledger", &l, "--key", "tree-3", "--json"])[0]["seq"]
        .as_i64()
        .expect("seq");
    // Read straight from the file: nothing here asks the server to integrate.
    let db = rusqlite::Connection::open(&ledger).expect("open");
    eventually(30, "the calls' events in the tree", || {
        let leaves: i64 = db
            .query_row(
                "SELECT COUNT(*) FROM tree_leaves WHERE seq <= ?1",
                [last],
                |r| r.get(0),
            )
            .expect("count");
        let events: i64 = db
            .query_row("SELECT COUNT(*) FROM events WHERE seq <= ?1", [last], |r| {
                r.get(0)
            })
            .expect("count");
        (leaves == events).then_some(())
    });
    // How long events wait for the tree is on /metrics.
    let metrics = proxy.admin_get("/metrics").text();
    let lag = metrics
        .lines()
        .find_map(|l| l.strip_prefix("idemgate_tree_lag_seconds "))
        .and_then(|v| v.trim().parse::<f64>().ok());
    assert!(lag.is_some_and(|s| s >= 0.0), "{metrics}");
    // At its checkpoint interval it signs the tree, and keeps the checkpoint.
    let signed: i64 = eventually(30, "a signed tree past the calls", || {
        db.query_row("SELECT MAX(size) FROM tree_checkpoints", [], |r| {
            r.get::<_, Option<i64>>(0)
        })
        .expect("max")
        .filter(|&size| size >= last)
    });
    let r = proxy.admin_get(&format!("/admin/v1/events/{last}/proof"));
    assert_eq!(r.status, 200, "{}", r.text());
    let p = r.json();
    assert_eq!(p["seq"], last);
    let file = dir.path().join("call.tlog-proof");
    std::fs::write(&file, p["proof"].as_str().expect("proof")).expect("write");
    proxy.terminate();
    // A proof with no key at hand: under the newest checkpoint the server kept.
    let kept = dir.path().join("kept.tlog-proof");
    let p = idemgate_json(&[
        "prove",
        "--ledger",
        &l,
        "--event",
        &last.to_string(),
        "-o",
        kept.to_str().expect("utf8"),
        "--json",
    ]);
    assert!(p["size"].as_i64().is_some_and(|s| s >= signed), "{p}");
    let public = dir.path().join("signing.pub");
    for proof in [&file, &kept] {
        let out = idemgate(&[
            "verify",
            "--proof",
            proof.to_str().expect("utf8"),
            "--public-key",
            public.to_str().expect("utf8"),
        ]);
        let said = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{said}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(said.contains(&format!("event {last} ")), "{said}");
    }
}
