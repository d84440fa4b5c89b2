//! Two `idemgate serve` processes on one PostgreSQL ledger (the test cluster of
//! `tests/pg/cluster.sh`, named by IDEMGATE_TEST_PG; each test gets a fresh database), in front of
//! one counting upstream:
//!
//! - 32 concurrent requests with one key, split across both → one upstream effect;
//! - 100 keys sent by several clients to both → one effect each;
//! - one instance SIGKILLed mid-flight → the other reports the entry stuck after its lease and never
//!   re-executes it;
//! - the PostgreSQL server restarted during load → no acknowledged entry is lost, none ran twice;
//! - a tool listed through one instance is known to the other: a read passes through it unclaimed;
//! - a loop spread over both instances is caught: the loop guard counts for the fleet;
//! - `idemgate verify` passes on the shared ledger after each.
//!
//! The tests restart the cluster, so they run one at a time (a lock), not beside each other.
#![allow(
    clippy::too_many_lines,
    reason = "a test is one scenario told top to bottom, its steps checked in order"
)]

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use idemgate_ledger::testing::fresh_postgres;
use idemgate_ledger::{EntryFilter, EventFilter, OpenOptions, Page, State, Storage};
use idemgate_tests::upstream::Upstream;
use idemgate_tests::*;

const CONFIG: &str = r#"
[server]
listen = "127.0.0.1:0"
admin_listen = "127.0.0.1:0"
ledger = "{ledger}"

[defaults]
lease = "3s"
ttl = "1h"

[[routes]]
name = "charges"
method = "POST"
path = "/v1/charges"
upstream = "{upstream}"
effect = "write"
scope.header = "X-Agent-Id"
forward_key = true
timeout = "2500ms"
retry = { attempts = 3, base = "10ms", max = "200ms" }

[[routes]]
name = "payouts"
method = "POST"
path = "/v1/payouts"
upstream = "{upstream}"
effect = "write"
scope.header = "X-Agent-Id"
timeout = "1s"
retry = { attempts = 2, base = "10ms", max = "100ms" }
loop_guard = { max = 2, window = "1h", action = "reject" }

[[routes]]
name = "refunds"
method = "POST"
path = "/v1/refunds"
upstream = "{upstream}"
upstream_auth = { secret_env = "PAYMENTS_TOKEN", header = "Authorization" }
effect = "write"
timeout = "1s"
retry = { attempts = 2, base = "10ms", max = "100ms" }
approval = { hold = "200ms" }

[[routes]]
name = "tools"
path = "/mcp"
upstream = "{upstream}"
protocol = "mcp"
scope.header = "X-Agent-Id"
timeout = "2s"
retry = { attempts = 2, base = "10ms", max = "100ms" }
"#;

static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

/// Two instances on one fresh database; `None` when IDEMGATE_TEST_PG=skip.
struct Pair {
    _dir_a: tempfile::TempDir,
    _dir_b: tempfile::TempDir,
    url: String,
    up: Upstream,
    a: Proxy,
    b: Proxy,
}

fn pair(tag: &str) -> Option<Pair> {
    let url = fresh_postgres(tag)?;
    let up = Upstream::start();
    let toml = config(CONFIG, &up.url(), Path::new(&url));
    let (dir_a, dir_b) = (
        tempfile::tempdir().expect("dir"),
        tempfile::tempdir().expect("dir"),
    );
    let a = start(dir_a.path(), &toml, Path::new(&url));
    let b = start(dir_b.path(), &toml, Path::new(&url));
    Some(Pair {
        _dir_a: dir_a,
        _dir_b: dir_b,
        url,
        up,
        a,
        b,
    })
}

/// `idemgate serve` on [`CONFIG`], with the credential its approval route sends upstream.
fn start(dir: &Path, toml: &str, ledger: &Path) -> Proxy {
    Proxy::start_with_env(dir, toml, ledger, &[("PAYMENTS_TOKEN", "Bearer sk_test_1")])
}

macro_rules! pair {
    ($tag:expr) => {
        match pair($tag) {
            Some(p) => p,
            None => {
                eprintln!("skipped: IDEMGATE_TEST_PG=skip");
                return;
            }
        }
    };
}

/// The key the upstream is sent for `key` (`charge` sends as agent-1: a scoped key goes upstream
/// as a UUID of its own, `keys::upstream_key`).
fn upstream_key(key: &str) -> String {
    idemgate_proxy::keys::scoped("agent-1", key)
}

fn charge(addr: std::net::SocketAddr, key: &str, extra: &[(&str, &str)]) -> Option<Resp> {
    let mut headers = vec![
        ("Idempotency-Key", key),
        ("X-Agent-Id", "agent-1"),
        ("Content-Type", "application/json"),
    ];
    headers.extend_from_slice(extra);
    try_request(
        addr,
        "POST",
        "/v1/charges",
        &headers,
        format!(r#"{{"amount":100,"key":"{key}"}}"#).as_bytes(),
    )
}

fn ledger(url: &str) -> Arc<dyn Storage> {
    idemgate_ledger::open(
        url,
        OpenOptions {
            create: false,
            hasher: idemgate_ledger::ChainHasher::unkeyed(),
        },
    )
    .expect("open the shared ledger")
}

fn verify_passes(url: &str) {
    let out = idemgate(&["verify", "--ledger", url]);
    assert!(
        out.status.success(),
        "idemgate verify failed on the shared ledger:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn one_key_sent_32_times_at_once_to_two_instances_runs_once() {
    let _g = serial();
    let p = pair!("onekey");
    let addrs = [p.a.addr, p.b.addr];
    let answers: Vec<Option<Resp>> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..32)
            .map(|i| {
                let addr = addrs[i % 2];
                // The upstream holds the first execution 300 ms, so the others arrive mid-flight.
                s.spawn(move || charge(addr, "order-1", &[("X-Fault", "delay:300")]))
            })
            .collect();
        hs.into_iter().map(|h| h.join().expect("client")).collect()
    });
    assert_eq!(
        p.up.counts.effects(&upstream_key("order-1")),
        1,
        "one key, one effect"
    );
    let ok: Vec<&Resp> = answers
        .iter()
        .flatten()
        .filter(|r| r.status == 201)
        .collect();
    assert!(!ok.is_empty(), "someone got the answer");
    for r in answers.iter().flatten() {
        assert!(
            r.status == 201 || (r.status == 409 && r.code() == "in-flight"),
            "{} {}",
            r.status,
            r.text()
        );
    }
    // Afterwards both instances replay the one recorded answer.
    for addr in addrs {
        let r = charge(addr, "order-1", &[]).expect("replay");
        assert_eq!(r.status, 201);
        assert_eq!(r.body, ok[0].body);
    }
    assert_eq!(p.up.counts.effects(&upstream_key("order-1")), 1);
    verify_passes(&p.url);
}

#[test]
fn a_hundred_keys_from_several_clients_to_both_instances_run_once_each() {
    let _g = serial();
    let p = pair!("hundred");
    let addrs = [p.a.addr, p.b.addr];
    std::thread::scope(|s| {
        for c in 0..6usize {
            s.spawn(move || {
                for i in 0..100usize {
                    // Each client walks the keys in its own order, alternating instances.
                    let k = (i * 7 + c * 13) % 100;
                    let r = charge(addrs[(i + c) % 2], &format!("k{k}"), &[]).expect("answer");
                    assert!(
                        r.status == 201 || r.status == 409,
                        "{} {}",
                        r.status,
                        r.text()
                    );
                }
            });
        }
    });
    for k in 0..100 {
        assert_eq!(
            p.up.counts.effects(&upstream_key(&format!("k{k}"))),
            1,
            "key k{k}"
        );
    }
    assert_eq!(p.up.counts.total(), 100);
    let l = ledger(&p.url);
    let completed = l
        .entries(
            &EntryFilter {
                state: Some(State::Completed),
                ..Default::default()
            },
            Page::newest(None, 1000),
            idemgate_ledger::now_millis(),
        )
        .expect("entries");
    assert_eq!(completed.len(), 100);
    verify_passes(&p.url);
}

#[test]
fn an_instance_killed_mid_flight_leaves_a_stuck_entry_the_other_never_reruns() {
    let _g = serial();
    let mut p = pair!("killed");
    let a = p.a.addr;
    // A forwards; the upstream performs the effect and holds the answer 5 s; A dies meanwhile.
    let pending = std::thread::spawn(move || charge(a, "order-9", &[("X-Fault", "delay:5000")]));
    eventually(10, "the upstream to perform the effect", || {
        (p.up.counts.effects(&upstream_key("order-9")) == 1).then_some(())
    });
    p.a.kill();
    assert!(
        pending.join().expect("client").is_none(),
        "a killed proxy answers nothing"
    );
    // B, within A's lease: in flight. After it: stuck (outcome unknown), for an operator.
    let r = charge(p.b.addr, "order-9", &[]).expect("answer");
    assert_eq!(
        (r.status, r.code().as_str()),
        (409, "in-flight"),
        "{}",
        r.text()
    );
    let r = eventually(10, "the entry to turn stuck", || {
        let r = charge(p.b.addr, "order-9", &[]).expect("answer");
        (r.code() == "outcome-unknown").then_some(r)
    });
    assert_eq!(r.status, 409);
    assert_eq!(
        p.up.counts.effects(&upstream_key("order-9")),
        1,
        "never re-executed"
    );
    // B's sweeper logs the lease expiry of A's claim, once.
    let l = ledger(&p.url);
    let expired = eventually(10, "the sweeper to log the expired lease", || {
        let evs = l
            .events(
                &EventFilter {
                    kind: Some("lease_expired".into()),
                    ..Default::default()
                },
                Page::default(),
            )
            .expect("events");
        (!evs.is_empty()).then_some(evs)
    });
    assert_eq!(expired.len(), 1);
    assert_eq!(expired[0].key, "order-9");
    let entry = l
        .entries(
            &EntryFilter {
                stuck: true,
                ..Default::default()
            },
            Page::default(),
            idemgate_ledger::now_millis(),
        )
        .expect("stuck entries");
    assert_eq!(entry.len(), 1);
    assert_eq!(entry[0].key, "order-9");
    assert_eq!(p.up.counts.effects(&upstream_key("order-9")), 1);
    verify_passes(&p.url);
}

#[test]
fn restarting_postgres_under_load_loses_nothing_acknowledged() {
    let _g = serial();
    let p = pair!("restart");
    let addrs = [p.a.addr, p.b.addr];
    let stop = AtomicBool::new(false);
    // key → the acknowledged answer's body.
    let acked: Mutex<HashMap<String, Vec<u8>>> = Mutex::new(HashMap::new());
    // Every key sent.
    let sent: Mutex<Vec<String>> = Mutex::new(Vec::new());
    let unavailable = std::sync::atomic::AtomicU64::new(0);
    let unrecorded = std::sync::atomic::AtomicU64::new(0);
    std::thread::scope(|s| {
        for c in 0..8usize {
            let (stop, acked, sent, unavailable, unrecorded) =
                (&stop, &acked, &sent, &unavailable, &unrecorded);
            s.spawn(move || {
                let mut n = 0usize;
                while !stop.load(Ordering::Relaxed) {
                    let key = format!("c{c}-{n}");
                    sent.lock().expect("sent").push(key.clone());
                    n += 1;
                    // An agent: retries its key (on either instance) until it gets an answer.
                    let deadline = Instant::now() + Duration::from_secs(20);
                    let mut i = c;
                    while Instant::now() < deadline {
                        i += 1;
                        match charge(addrs[i % 2], &key, &[]) {
                            Some(r) if r.status == 201 => {
                                acked.lock().expect("acked").insert(key.clone(), r.body);
                                break;
                            }
                            // Maybe executed, and held for an operator: retrying gets 409.
                            // (Executed and not recorded yet, `outcome-unrecorded`, is retried:
                            // the instance records it once the database is back, and the retry
                            // then gets the response.)
                            Some(r) if r.code() == "outcome-unknown" => break,
                            Some(r) if r.code() == "outcome-unrecorded" => {
                                unrecorded.fetch_add(1, Ordering::Relaxed);
                            }
                            Some(r) if r.status == 503 => {
                                unavailable.fetch_add(1, Ordering::Relaxed);
                            }
                            _ => {}
                        }
                        std::thread::sleep(Duration::from_millis(50));
                    }
                }
            });
        }
        // A failure below stops the agents as it unwinds, and so does the closure's end.
        let _stop = RaiseOnDrop(&stop);
        let acked_reach = |n: usize| {
            eventually(60, &format!("{n} calls acknowledged"), || {
                (acked.lock().expect("acked").len() >= n).then_some(())
            });
        };
        acked_reach(100); // the restart lands under load
        let out = std::process::Command::new("bash")
            .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/pg/cluster.sh"))
            .arg("restart")
            .output()
            .expect("cluster.sh restart");
        assert!(
            out.status.success(),
            "restart failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        // And the instances serve again once the database is back: fifty more calls through.
        let restarted = acked.lock().expect("acked").len();
        acked_reach(restarted + 50);
    });
    let acked = acked.into_inner().expect("acked");
    // Nothing ran twice.
    for (k, n) in p.up.counts.keys_with_effects() {
        assert!(n <= 1, "key {k} executed {n} times");
    }
    // Every acknowledged answer is in the ledger: replayed byte for byte, by both instances.
    for (k, body) in &acked {
        for addr in addrs {
            let r = charge(addr, k, &[]).expect("replay");
            assert_eq!(r.status, 201, "{k}: {}", r.text());
            assert_eq!(&r.body, body, "{k}");
        }
    }
    // Every effect the client never saw acknowledged is in the ledger too: completed, or held for
    // an operator as of unknown outcome — never released, which would let it run again, nor
    // pending without a reason: an outcome the database could not take while it was down was
    // kept by its instance and recorded once it was back.
    let l = ledger(&p.url);
    let mut unacked = 0;
    let sent: HashMap<String, String> = sent
        .into_inner()
        .expect("sent")
        .into_iter()
        .map(|k| (upstream_key(&k), k))
        .collect();
    for k in p.up.counts.keys_with_effects().keys() {
        let k = sent
            .get(k)
            .unwrap_or_else(|| panic!("an effect under {k}, a key no agent sent"));
        if acked.contains_key(k) {
            continue;
        }
        unacked += 1;
        let e = l
            .entries(
                &EntryFilter {
                    key: Some(k.clone()),
                    ..Default::default()
                },
                Page::default(),
                idemgate_ledger::now_millis(),
            )
            .expect("entries");
        assert_eq!(e.len(), 1, "unacknowledged effect {k} is not in the ledger");
        assert!(
            e[0].state == State::Completed
                || (e[0].state == State::Pending && e[0].outcome_unknown),
            "{k}: {:?}",
            e[0]
        );
    }
    println!("{unacked} effects were never acknowledged; each is in the ledger");
    println!(
        "postgres restart under load: {} acknowledged, {} effects, {} answers 503 while it was down, {} outcome-unrecorded",
        acked.len(),
        p.up.counts.total(),
        unavailable.load(Ordering::Relaxed),
        unrecorded.load(Ordering::Relaxed)
    );
    verify_passes(&p.url);
}

#[test]
fn a_sqlite_ledger_copied_to_postgres_keeps_its_chain_and_replays_its_keys() {
    let _g = serial();
    let Some(url) = fresh_postgres("copy") else {
        return;
    };
    let dir = tempfile::tempdir().expect("dir");
    let sqlite = dir.path().join("ledger.db");
    let up = Upstream::start();
    // A key executed through a proxy on SQLite, on top of demo traffic.
    let demo = idemgate(&[
        "demo",
        "--ledger",
        sqlite.to_str().expect("path"),
        "--events",
        "3000",
    ]);
    assert!(
        demo.status.success(),
        "{}",
        String::from_utf8_lossy(&demo.stderr)
    );
    let mut p = start(dir.path(), &config(CONFIG, &up.url(), &sqlite), &sqlite);
    let first = charge(p.addr, "before-the-move", &[]).expect("answer");
    assert_eq!(first.status, 201, "{}", first.text());
    assert!(p.terminate().success());

    let head = |ledger: &str| -> String {
        let log = idemgate_json(&["log", "--ledger", ledger, "--limit", "1", "--json"]);
        let hash = log[0]["hash"]
            .as_str()
            .unwrap_or_else(|| panic!("no head in {log}"));
        assert_eq!(hash.len(), 64, "{log}");
        hash.to_owned()
    };
    let out = idemgate(&[
        "copy",
        "--ledger",
        sqlite.to_str().expect("path"),
        "--to",
        &url,
        "--json",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("report");
    assert!(
        report["events"].as_u64().expect("events") >= 3000,
        "{report}"
    );
    assert_eq!(
        report["head"]["hash"].as_str(),
        Some(head(sqlite.to_str().expect("path")).as_str())
    );
    assert_eq!(head(&url), head(sqlite.to_str().expect("path")));
    verify_passes(&url);

    // The destination must be new: a second copy is refused and changes nothing.
    let again = idemgate(&[
        "copy",
        "--ledger",
        sqlite.to_str().expect("path"),
        "--to",
        &url,
    ]);
    assert!(!again.status.success());
    assert!(String::from_utf8_lossy(&again.stderr).contains("ledger-not-empty"));
    assert_eq!(head(&url), head(sqlite.to_str().expect("path")));

    // A proxy on PostgreSQL replays the key completed on SQLite, and new keys get new ids.
    let pdir = tempfile::tempdir().expect("dir");
    let p = start(
        pdir.path(),
        &config(CONFIG, &up.url(), Path::new(&url)),
        Path::new(&url),
    );
    let replay = charge(p.addr, "before-the-move", &[]).expect("answer");
    assert_eq!(replay.status, 201);
    assert_eq!(replay.body, first.body);
    assert_eq!(
        up.counts.effects(&upstream_key("before-the-move")),
        1,
        "not run again after the move"
    );
    let fresh = charge(p.addr, "after-the-move", &[]).expect("answer");
    assert_eq!(fresh.status, 201, "{}", fresh.text());
    verify_passes(&url);

    // And back: PostgreSQL to a new SQLite file, same chain.
    let back = dir.path().join("back.db");
    let out = idemgate(&[
        "copy",
        "--ledger",
        &url,
        "--to",
        back.to_str().expect("path"),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(head(back.to_str().expect("path")), head(&url));
    verify_passes(back.to_str().expect("path"));
}

/// A JSON-RPC message POSTed to the MCP route at `addr`, as agent-1.
fn mcp(addr: std::net::SocketAddr, msg: &serde_json::Value) -> Resp {
    let headers = [
        ("content-type", "application/json"),
        ("accept", "application/json, text/event-stream"),
        ("x-agent-id", "agent-1"),
        ("mcp-protocol-version", "2025-11-25"),
    ];
    let body = serde_json::to_vec(msg).expect("json");
    request(addr, "POST", "/mcp", &headers, &body)
}

#[test]
fn a_tool_listed_through_one_instance_is_known_to_the_other() {
    let _serial = serial();
    let p = pair!("tools_listed");
    let lookup = |addr, id: i64| {
        let msg = serde_json::json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": "lookup", "arguments": {"q": id}}});
        let r = mcp(addr, &msg);
        assert_eq!(r.json()["id"], id, "{}", r.text());
    };
    let claimed = || {
        let filter = EntryFilter {
            tool: Some("lookup".into()),
            ..EntryFilter::default()
        };
        let l = ledger(&p.url);
        l.entries(
            &filter,
            Page::newest(None, 100),
            idemgate_ledger::now_millis(),
        )
        .expect("entries")
        .len()
    };
    // Before any list, B cannot know lookup is a read: it is claimed, held to once.
    lookup(p.b.addr, 1);
    assert_eq!(claimed(), 1);
    let list = mcp(
        p.a.addr,
        &serde_json::json!({"jsonrpc": "2.0", "id": 0, "method": "tools/list"}),
    );
    assert_eq!(list.status, 200, "{}", list.text());
    // Listed through A, it is a read on B too: each call runs, none is claimed.
    for id in [2, 3] {
        lookup(p.b.addr, id);
    }
    assert_eq!(p.up.counts.reads.load(Ordering::SeqCst), 3);
    assert_eq!(claimed(), 1, "only the call before the list");
}

#[test]
fn a_loop_spread_over_two_instances_is_caught() {
    let _serial = serial();
    let p = pair!("fleet_loop");
    // An agent in a loop sends one payout again and again under fresh keys, and a load balancer
    // spreads the calls over both instances: the guard allows two in its window, counted
    // across the fleet.
    let payout = |addr, n: u32| {
        let key = format!("loop-{n}");
        let headers = [
            ("Idempotency-Key", key.as_str()),
            ("X-Agent-Id", "agent-1"),
            ("Content-Type", "application/json"),
        ];
        let body = br#"{"account":"acct_1","amount":500}"#;
        request(addr, "POST", "/v1/payouts", &headers, body)
    };
    let statuses: Vec<u16> = [p.a.addr, p.b.addr, p.a.addr, p.b.addr]
        .into_iter()
        .zip(1..)
        .map(|(addr, n)| payout(addr, n).status)
        .collect();
    assert_eq!(statuses[..2], [201, 201], "{statuses:?}");
    assert_eq!(statuses[2..], [429, 429], "{statuses:?}");
    let refused = payout(p.b.addr, 5);
    assert_eq!(refused.status, 429);
    assert_eq!(refused.json()["code"], "loop-suspect", "{}", refused.text());
    assert!(refused.header("retry-after").is_some());
    // Logged once, by whichever instance counted the first call past the limit.
    let suspects = ledger(&p.url)
        .events(
            &EventFilter {
                kind: Some("loop_suspect".into()),
                ..EventFilter::default()
            },
            Page::newest(None, 10),
        )
        .expect("events");
    assert_eq!(suspects.len(), 1, "{suspects:?}");
}

#[test]
fn a_call_held_on_one_instance_and_approved_through_the_other_runs_once() {
    let _serial = serial();
    let p = pair!("fleet_approval");
    let headers = [
        ("Idempotency-Key", "refund-1"),
        ("Content-Type", "application/json"),
    ];
    let refund = |addr| request(addr, "POST", "/v1/refunds", &headers, br#"{"amount":6}"#);
    let held = refund(p.a.addr);
    assert_eq!(held.status, 202, "{}", held.text());
    let id = held.json()["entry_id"].as_i64().expect("entry id");
    let approved = p.b.admin_post(
        &format!("/admin/v1/approvals/{id}/approve"),
        &serde_json::json!({"operator": "ops-lead", "reason": "checked"}),
    );
    assert_eq!(approved.status, 200, "{}", approved.text());
    // Both instances look for approved calls; one takes it and records its outcome (the upstream
    // counts the call before that instance has its answer: a retry then is still in flight).
    let l = ledger(&p.url);
    eventually(10, "the approved call's outcome", || {
        let e = l.entry(id, idemgate_ledger::now_millis()).expect("entry");
        (e.summary.state == State::Completed).then_some(())
    });
    assert_eq!(p.up.counts.effects("refund-1"), 1);
    let r = refund(p.b.addr);
    assert_eq!(r.status, 201, "{}", r.text());
    let r = refund(p.a.addr);
    assert_eq!(r.status, 201, "{}", r.text());
    assert_eq!(p.up.counts.effects("refund-1"), 1, "once, across the fleet");
}
