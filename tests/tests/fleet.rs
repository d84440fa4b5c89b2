//! A fleet on one PostgreSQL ledger (the test cluster of `tests/pg/cluster.sh`, named by
//! IDEMGATE_TEST_PG) keeps one set of books: one instance at a time signs the log's head; every
//! instance names it in `GET /admin/v1/server`; SIGKILL it and another leads within 10 s; nothing
//! is signed twice.
#![allow(
    clippy::too_many_lines,
    reason = "a test is one scenario told top to bottom, its steps checked in order"
)]

use std::path::Path;
use std::time::Instant;

use idemgate_ledger::testing::fresh_postgres;
use idemgate_tests::upstream::Upstream;
use idemgate_tests::*;

const FLEET: &str = r#"
[server]
listen = "127.0.0.1:0"
admin_listen = "127.0.0.1:0"
ledger = "{ledger}"
signing_key_file = "{key}"
checkpoint_interval = "1s"

[defaults]
lease = "3s"

[[routes]]
name = "charges"
method = "POST"
path = "/v1/charges"
upstream = "{upstream}"
effect = "write"
timeout = "1s"
retry = { attempts = 2, base = "10ms", max = "100ms" }
"#;

/// This instance's id, and the leader it names (`None`: no one leads right now).
fn server(p: &Proxy) -> (String, Option<String>) {
    let r = p.admin_get("/admin/v1/server");
    assert_eq!(r.status, 200, "{}", r.text());
    let v = r.json();
    let instance = v["instance"].as_str().expect("instance").to_owned();
    (
        instance,
        v["leader"]["instance"].as_str().map(str::to_owned),
    )
}

/// A call through `p`; the seq of its last event.
fn charge(p: &Proxy, url: &str, key: &str) -> i64 {
    let r = p.send(
        "POST",
        "/v1/charges",
        &[
            ("idempotency-key", key),
            ("content-type", "application/json"),
        ],
        b"{}",
    );
    assert_eq!(r.status, 201, "{}", r.text());
    let at = idemgate_json(&["log", "--ledger", url, "--key", key, "--json"]);
    at.as_array()
        .and_then(|a| a.iter().filter_map(|e| e["seq"].as_i64()).max())
        .expect("the call's events")
}

/// The periodic checkpoints: the seq each signed, and its own event's seq.
fn checkpoints(url: &str) -> Vec<(i64, i64)> {
    events_of(url, "checkpoint")
        .iter()
        .map(|e| {
            (
                e["detail"]["seq"].as_i64().expect("signed seq"),
                e["seq"].as_i64().expect("seq"),
            )
        })
        .collect()
}

#[test]
fn one_instance_keeps_the_books_and_another_takes_over_when_it_is_killed() {
    let Some(url) = fresh_postgres("fleet_books") else {
        eprintln!("skipped: IDEMGATE_TEST_PG=skip");
        return;
    };
    let dir = tempfile::tempdir().expect("dir");
    let prefix = dir.path().join("signing");
    let made = idemgate(&["keygen", "--out", prefix.to_str().expect("utf8")]);
    assert!(made.status.success());
    let up = Upstream::start();
    let toml = config(FLEET, &up.url(), Path::new(&url)).replace(
        "{key}",
        &dir.path().join("signing.key").display().to_string(),
    );
    let dirs: Vec<_> = (0..3).map(|_| tempfile::tempdir().expect("dir")).collect();
    let mut fleet: Vec<Proxy> = dirs
        .iter()
        .map(|d| Proxy::start(d.path(), &toml, Path::new(&url)))
        .collect();
    let ids: Vec<String> = fleet.iter().map(|p| server(p).0).collect();

    // Every instance names the same leader, one of them.
    let leader = eventually(30, "one leader named by all", || {
        let named: Vec<_> = fleet.iter().map(|p| server(p).1).collect();
        let first = named[0].clone()?;
        named
            .iter()
            .all(|n| n.as_deref() == Some(&first))
            .then_some(first)
    });
    let li = ids
        .iter()
        .position(|i| *i == leader)
        .expect("a member leads");
    let metrics = fleet[li].admin_get("/metrics").text();
    assert!(metrics.contains("idemgate_leader 1"), "{metrics}");
    let other = (li + 1) % fleet.len();
    assert!(fleet[other]
        .admin_get("/metrics")
        .text()
        .contains("idemgate_leader 0"));

    // A call through a follower: the leader signs the head it led to.
    let before = charge(&fleet[other], &url, "before-1");
    eventually(30, "a checkpoint past the first call", || {
        checkpoints(&url)
            .iter()
            .any(|(signed, _)| *signed >= before)
            .then_some(())
    });

    // SIGKILL the leader: another leads within 10 s, and signs what was logged after.
    fleet[li].kill();
    let killed = Instant::now();
    let survivor = (li + 1) % fleet.len();
    let next = eventually(10, "another instance leading", || {
        let (_, named) = server(&fleet[survivor]);
        named.filter(|n| *n != leader)
    });
    assert!(killed.elapsed().as_secs() < 10);
    assert!(ids.contains(&next) && next != leader);
    for (i, p) in fleet.iter().enumerate() {
        if i != li {
            assert_eq!(server(p).1.as_deref(), Some(next.as_str()));
        }
    }
    let after = charge(&fleet[survivor], &url, "after-1");
    eventually(30, "a checkpoint past the call after the failover", || {
        checkpoints(&url)
            .iter()
            .any(|(signed, _)| *signed >= after)
            .then_some(())
    });

    // Nothing signed twice: each periodic checkpoint signs a later head than the one before it,
    // and never a head that is itself a checkpoint (nothing happened since).
    let cps = checkpoints(&url);
    let mut signed: Vec<i64> = cps.iter().map(|c| c.0).collect();
    signed.sort_unstable();
    let n = signed.len();
    signed.dedup();
    assert_eq!(signed.len(), n, "a head signed twice: {cps:?}");
    let own: Vec<i64> = cps.iter().map(|c| c.1).collect();
    assert!(
        cps.iter().all(|(s, _)| !own.contains(s)),
        "a checkpoint of a checkpoint: {cps:?}"
    );
    let out = idemgate(&["verify", "--ledger", &url]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    for p in &mut fleet {
        p.kill();
    }
}
