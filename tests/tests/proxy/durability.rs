//! Durability: a disk that refuses writes, and SIGKILL mid-flight.

use super::*;

/// Held upstream while the disk fills: one that runs (its outcome cannot be recorded), one that
/// fails after its effect (an unknown outcome, unrecorded too).
const HELD: [(&str, &str); 2] = [
    ("k-disk-mid", r#"{"amount":99}"#),
    ("k-disk-502", r#"{"amount":98}"#),
];
/// Refused upstream while the disk fills (503, not executed): neither its retry nor its release
/// can be recorded.
const REFUSED: (&str, &str) = ("k-disk-503", r#"{"amount":97}"#);

/// A key's body, its order's amount.
fn amount(i: usize) -> String {
    format!(r#"{{"amount":{i}}}"#)
}

/// Calls acknowledged: their key, their body, and the answer they got.
type Acked = Vec<(String, String, Vec<u8>)>;

fn five_calls_acknowledged(f: &Fx) -> Acked {
    (0..5)
        .map(|i| {
            let key = format!("k-disk-{i}");
            let r = f.charge(&key, &amount(i), &[]);
            assert_eq!(r.status, 201, "{}", r.text());
            (key, amount(i), r.body)
        })
        .collect()
}

fn the_disk_fills_with_three_calls_upstream(f: &Fx, pid: u32) {
    // The disk fills while a request is upstream: its claim is durable, its effect happens, and
    // its outcome cannot be recorded.
    // Another fails upstream after its effect: its unknown outcome cannot be recorded either.
    // A third is refused upstream (503, not executed): neither its retry nor its release can be.
    let upstream = f.charge_held_upstream(HELD[0].0, HELD[0].1, "delay:600");
    let failing = f.charge_held_upstream(HELD[1].0, HELD[1].1, "delay:600:502");
    let not_run = f.charge_held_upstream(REFUSED.0, REFUSED.1, "delay:600:503");
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
    assert_eq!(f.requests(REFUSED.0), 1, "tried again unrecorded");
    assert_eq!(f.effects(REFUSED.0), 0);
}

fn while_full_nothing_runs_unclaimed_and_acknowledged_calls_replay(f: &Fx, acked: &Acked) {
    // While nothing can be written: a new key is refused before it is forwarded, with a hint to
    // retry; what was acknowledged still replays; the unrecorded key is never run again.
    for i in 0..4 {
        let key = format!("k-disk-new-{i}");
        let r = f.charge(&key, &amount(100 + i), &[]);
        assert_eq!(r.status, 503, "{}", r.text());
        assert_eq!(r.code(), "ledger-unavailable");
        assert_eq!(r.header("retry-after"), Some("1"));
        assert_eq!(f.effects(&key), 0, "{key} was forwarded unclaimed");
    }
    for (key, b, first) in acked {
        let r = f.charge(key, b, &[]);
        assert_eq!(r.status, 201, "{}", r.text());
        assert_eq!(r.header("idempotent-replayed"), Some("true"));
        assert_eq!(&r.body, first);
    }
    // Its retry is in flight (409), or refused with the batch its claim shared (503): the claim
    // finds the key without writing, but a batch with other writes in it cannot commit. The same
    // for the refused key, whose release waits for the ledger.
    for (key, b) in HELD.into_iter().chain([REFUSED]) {
        let again = f.charge(key, b, &[]);
        assert!(
            [409, 503].contains(&again.status),
            "{key}: {} {}",
            again.status,
            again.text()
        );
        assert_eq!(f.requests(key), 1, "{key} forwarded again");
    }
}

fn the_failures_show_on_metrics_and_readiness(f: &Fx, pid: u32) {
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
}

/// Answers the held call's replay once its kept outcome is recorded.
fn with_room_again_the_kept_outcomes_are_recorded(f: &Fx, pid: u32, acked: &mut Acked) -> Resp {
    let admin = f.proxy.admin.expect("admin");
    // Room again: the same process takes writes at once, and the refused keys run, once.
    limit_file_size(pid, None);
    for i in 0..4 {
        let key = format!("k-disk-new-{i}");
        let r = f.charge(&key, &amount(100 + i), &[]);
        assert_eq!(r.status, 201, "{}", r.text());
        assert_eq!(f.effects(&key), 1);
        acked.push((key, amount(100 + i), r.body));
    }
    // The outcomes kept in memory are recorded: the executed request's response is replayed (the
    // client that sent it saw only the 502), the unknown one is held for an operator with its
    // reason, and the refused one is released and runs, once.
    let mid = eventually(10, "the kept completion recorded", || {
        let r = f.charge(HELD[0].0, HELD[0].1, &[]);
        (r.status == 201).then_some(r)
    });
    assert_eq!(mid.header("idempotent-replayed"), Some("true"));
    assert_eq!(mid.json()["delayed"], true, "{}", mid.text());
    let e = &f.entries(&["--key", HELD[1].0])[0];
    assert_eq!(e["state"], "pending", "{e}");
    assert_eq!(e["outcome_unknown"], true, "{e}");
    assert!(
        e["last_error"].as_str().unwrap_or("").contains("502"),
        "{e}"
    );
    let again = eventually(10, "the kept release recorded", || {
        let r = f.charge(REFUSED.0, REFUSED.1, &[]);
        (r.status == 201).then_some(r)
    });
    assert_eq!(f.effects(REFUSED.0), 1);
    acked.push((REFUSED.0.to_owned(), REFUSED.1.to_owned(), again.body));
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
    mid
}

fn after_a_sigkill_nothing_acknowledged_is_lost(f: &mut Fx, acked: &Acked, mid: &Resp) {
    // Nothing acknowledged was lost, and the chain holds, after a SIGKILL.
    f.proxy.kill();
    f.restart();
    for (key, b, first) in acked {
        let r = f.charge(key, b, &[]);
        assert_eq!(r.status, 201, "{key}: {}", r.text());
        assert_eq!(&r.body, first, "{key}");
    }
    let r = f.charge(HELD[0].0, HELD[0].1, &[]);
    assert_eq!(r.status, 201, "{}", r.text());
    assert_eq!(r.body, mid.body);
    let r = f.charge(HELD[1].0, HELD[1].1, &[]);
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
fn a_disk_that_refuses_writes_gets_nothing_forwarded_unclaimed_and_serve_recovers_without_a_restart(
) {
    let mut f = Fx::new();
    let pid = f.proxy.pid();
    let mut acked = five_calls_acknowledged(&f);
    the_disk_fills_with_three_calls_upstream(&f, pid);
    while_full_nothing_runs_unclaimed_and_acknowledged_calls_replay(&f, &acked);
    the_failures_show_on_metrics_and_readiness(&f, pid);
    let mid = with_room_again_the_kept_outcomes_are_recorded(&f, pid, &mut acked);
    after_a_sigkill_nothing_acknowledged_is_lost(&mut f, &acked, &mid);
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
