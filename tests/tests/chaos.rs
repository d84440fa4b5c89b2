//! The chaos harness: many agents retrying the same keys against a proxy that is SIGKILLed and
//! restarted, in front of an upstream that drops answers after performing the effect, answers 503
//! and stalls past the proxy's timeout. Everything is asserted from the upstream's own counts:
//!
//! - no key's effect ever happens twice;
//! - every acknowledged (2xx) answer replays byte for byte after the last restart, without a new
//!   effect;
//! - every effect the client never saw acknowledged is in the ledger, completed or stuck (never
//!   released, which would let it run again).
//!
//! Profiles (environment `IDEMGATE_CHAOS`): `short` (default, CI: 2,000 operations, 5 kills) and
//! `long` (20,000 operations, 12 kills); `IDEMGATE_CHAOS_OPS` / `_KILLS` / `_CLIENTS` override.
//! The figures are printed (`cargo test -p idemgate-tests --test chaos -- --nocapture`).
#![allow(
    clippy::too_many_lines,
    reason = "a test is one scenario told top to bottom, its steps checked in order"
)]

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use idemgate_ledger::{EntryFilter, State};
use idemgate_tests::upstream::{Chaos, Upstream};
use idemgate_tests::*;

const CONFIG: &str = r#"
[server]
listen = "{listen}"
admin_listen = "off"
ledger = "{ledger}"

[defaults]
lease = "2s"
ttl = "1h"

[[routes]]
name = "charges"
method = "POST"
path = "/v1/charges"
upstream = "{upstream}"
effect = "write"
scope.header = "X-Agent-Id"
forward_key = true
timeout = "400ms"
retry = { attempts = 3, base = "10ms", max = "50ms" }
"#;

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// What one logical operation ended with.
#[derive(Debug, Clone)]
struct Outcome {
    acked: Option<(u16, Vec<u8>)>,
    attempts: u32,
}

/// How big a run is: `IDEMGATE_CHAOS=long` (or the `_OPS`, `_KILLS`, `_CLIENTS` variables) for
/// the long profile.
#[derive(Debug, Clone, Copy)]
struct Size {
    ops: usize,
    kills: usize,
    clients: usize,
}

/// The upstream that injects faults, and the proxy in front of it at a fixed address, so clients
/// reach every incarnation of the proxy there.
struct Stack {
    dir: tempfile::TempDir,
    up: Upstream,
    ledger: std::path::PathBuf,
    listen: SocketAddr,
    cfg: String,
    proxy: Arc<Mutex<Proxy>>,
}

/// What the clients saw: each operation's outcome, and the answers by status and code.
struct Seen {
    outcomes: HashMap<usize, Outcome>,
    answers: Arc<Mutex<BTreeMap<String, u64>>>,
    restarts: usize,
}

fn a_faulty_upstream_behind_the_proxy() -> Stack {
    let dir = tempfile::tempdir().expect("tempdir");
    let up = Upstream::start();
    up.counts.set_chaos(Some(Chaos {
        drop_pct: 20,
        unavailable_pct: 10,
        stall_pct: 3,
        stall_ms: 700,
    }));
    let ledger = dir.path().join("ledger.db");
    let listen: SocketAddr = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port");
    let cfg = config(CONFIG, &up.url(), &ledger).replace("{listen}", &listen.to_string());
    let proxy = Arc::new(Mutex::new(Proxy::start(dir.path(), &cfg, &ledger)));
    Stack {
        dir,
        up,
        ledger,
        listen,
        cfg,
        proxy,
    }
}

/// The killer: SIGKILL and restart after every ops/(kills+1) finished operations, until
/// `finished`. Answers how many restarts it made.
fn killer(
    st: &Stack,
    size: Size,
    done: &Arc<AtomicUsize>,
    finished: &Arc<AtomicBool>,
) -> std::thread::JoinHandle<usize> {
    let (proxy, done, finished, dir, cfg, ledger) = (
        st.proxy.clone(),
        done.clone(),
        finished.clone(),
        st.dir.path().to_path_buf(),
        st.cfg.clone(),
        st.ledger.clone(),
    );
    std::thread::spawn(move || {
        let mut killed = 0;
        while killed < size.kills && !finished.load(Ordering::SeqCst) {
            if done.load(Ordering::SeqCst) >= (killed + 1) * size.ops / (size.kills + 1) {
                restart(&proxy, &dir, &cfg, &ledger);
                killed += 1;
            } else {
                std::thread::sleep(Duration::from_millis(5));
            }
        }
        killed
    })
}

/// The clients run every operation, retrying as an agent does, while the killer restarts the
/// proxy; then a last restart, so that only the ledger remains of the run.
fn the_clients_run_every_operation_through_kills(st: &Stack, size: Size) -> Seen {
    let next = Arc::new(AtomicUsize::new(0));
    let done = Arc::new(AtomicUsize::new(0));
    let requests = Arc::new(AtomicU64::new(0));
    let answers: Arc<Mutex<BTreeMap<String, u64>>> = Arc::default();
    let outcomes: Arc<Mutex<HashMap<usize, Outcome>>> = Arc::default();
    let finished = Arc::new(AtomicBool::new(false));
    let killer = killer(st, size, &done, &finished);
    let listen = st.listen;
    let workers: Vec<_> = (0..size.clients)
        .map(|c| {
            let (next, done, requests, answers, outcomes) = (
                next.clone(),
                done.clone(),
                requests.clone(),
                answers.clone(),
                outcomes.clone(),
            );
            std::thread::spawn(move || loop {
                let i = next.fetch_add(1, Ordering::SeqCst);
                if i >= size.ops {
                    return;
                }
                let o = operation(listen, c, i, &requests, &answers);
                outcomes.lock().expect("outcomes").insert(i, o);
                done.fetch_add(1, Ordering::SeqCst);
            })
        })
        .collect();
    for w in workers {
        w.join().expect("client");
    }
    finished.store(true, Ordering::SeqCst);
    let restarts = killer.join().expect("killer");
    assert!(
        restarts >= size.kills.min(5),
        "only {restarts} restarts happened"
    );
    restart(&st.proxy, st.dir.path(), &st.cfg, &st.ledger);
    let outcomes = outcomes.lock().expect("outcomes").clone();
    Seen {
        outcomes,
        answers,
        restarts,
    }
}

fn no_key_ran_twice(st: &Stack) -> HashMap<String, u64> {
    let effects = st.up.counts.keys_with_effects();
    let twice: Vec<_> = effects.iter().filter(|(_, n)| **n > 1).collect();
    assert!(
        twice.is_empty(),
        "{} keys executed more than once, e.g. {:?}",
        twice.len(),
        &twice[..twice.len().min(10)]
    );
    effects
}

/// Every acknowledged answer replays identically, without executing again; its effect happened
/// exactly once. Answers how many were acknowledged.
fn every_acknowledged_answer_replays(st: &Stack, seen: &Seen) -> usize {
    let before = st.up.counts.total();
    let acked: Vec<(usize, (u16, Vec<u8>))> = seen
        .outcomes
        .iter()
        .filter_map(|(i, o)| o.acked.clone().map(|a| (*i, a)))
        .collect();
    let mismatches = Arc::new(AtomicUsize::new(0));
    let acked = Arc::new(acked);
    let listen = st.listen;
    let replayers: Vec<_> = (0..16)
        .map(|t| {
            let (acked, mismatches) = (acked.clone(), mismatches.clone());
            std::thread::spawn(move || {
                for (i, (status, body)) in acked.iter().skip(t).step_by(16) {
                    let r = send(listen, *i).expect("the proxy answers after the last restart");
                    if r.status != *status || r.body != *body {
                        eprintln!(
                            "op {i}: acknowledged {status} {:?}, replayed {} {:?}",
                            String::from_utf8_lossy(body),
                            r.status,
                            r.text()
                        );
                        mismatches.fetch_add(1, Ordering::SeqCst);
                    }
                }
            })
        })
        .collect();
    for r in replayers {
        r.join().expect("replayer");
    }
    assert_eq!(mismatches.load(Ordering::SeqCst), 0, "replays differ");
    assert_eq!(
        st.up.counts.total(),
        before,
        "a replay after the last restart reached the upstream"
    );
    for (i, _) in acked.iter() {
        assert_eq!(
            st.up.counts.effects(&upstream_key(&key(*i))),
            1,
            "op {i} was acknowledged, so its effect happened exactly once"
        );
    }
    acked.len()
}

/// Every effect never acknowledged is visible: completed, or pending and flagged stuck; and the
/// chain verifies. Answers (effects never acknowledged, stuck, completed).
fn every_unacknowledged_effect_is_in_the_ledger(st: &Stack, seen: &Seen) -> (u64, u64, u64) {
    let ops_api = idemgate_ops::Ops::open_existing(&st.ledger.display().to_string()).expect("open");
    let mut in_ledger = HashMap::new();
    ops_api
        .each_entry(&EntryFilter::default(), None, &mut |e| {
            in_ledger.insert(e.key.clone(), e.clone());
            Ok(())
        })
        .expect("entries");
    let (mut unacked_effects, mut unacked_stuck, mut unacked_completed) = (0, 0, 0);
    for (i, o) in &seen.outcomes {
        let k = key(*i);
        if o.acked.is_some() || st.up.counts.effects(&upstream_key(&k)) == 0 {
            continue;
        }
        unacked_effects += 1;
        let e = in_ledger
            .get(&k)
            .unwrap_or_else(|| panic!("op {i}: its effect happened but the ledger has no entry"));
        match e.state {
            State::Completed => unacked_completed += 1,
            State::Pending => {
                // A claim orphaned by a kill is stuck once its lease has passed.
                let e = eventually(10, "an orphaned claim to be reported stuck", || {
                    let e = ops_api.show(e.id).expect("show").entry.summary.clone();
                    (e.stuck || e.outcome_unknown).then_some(e)
                });
                assert_eq!(e.state, State::Pending);
                unacked_stuck += 1;
            }
            s => panic!("op {i}: its effect happened, yet the entry is {s:?}: {e:?}"),
        }
    }
    let v = idemgate_json(&[
        "verify",
        "--ledger",
        &st.ledger.display().to_string(),
        "--json",
    ]);
    assert_eq!(v["ok"], true, "the chain verifies after the kills: {v}");
    (unacked_effects, unacked_stuck, unacked_completed)
}

#[test]
fn chaos_no_key_runs_twice_and_nothing_acknowledged_is_lost() {
    let long = std::env::var("IDEMGATE_CHAOS").as_deref() == Ok("long");
    let size = Size {
        ops: env_usize("IDEMGATE_CHAOS_OPS", if long { 20_000 } else { 2_000 }),
        kills: env_usize("IDEMGATE_CHAOS_KILLS", if long { 12 } else { 5 }),
        clients: env_usize("IDEMGATE_CHAOS_CLIENTS", 64),
    };
    let started = Instant::now();
    let st = a_faulty_upstream_behind_the_proxy();
    let seen = the_clients_run_every_operation_through_kills(&st, size);
    let run_secs = started.elapsed().as_secs_f64();
    let effects = no_key_ran_twice(&st);
    let acked_n = every_acknowledged_answer_replays(&st, &seen);
    let (unacked_effects, unacked_stuck, unacked_completed) =
        every_unacknowledged_effect_is_in_the_ledger(&st, &seen);

    let injected: Vec<u64> = st
        .up
        .counts
        .injected
        .iter()
        .map(|a| a.load(Ordering::Relaxed))
        .collect();
    let attempts: u64 = seen.outcomes.values().map(|o| u64::from(o.attempts)).sum();
    let Size { ops, clients, .. } = size;
    println!(
        "chaos: {ops} operations from {clients} clients in {run_secs:.1}s, {attempts} requests, \
         {}+1 SIGKILL restarts; upstream faults: {} dropped after the effect, {} 503, {} \
         stalled past the timeout; {} effects for {} keys (none twice); {acked_n} acknowledged and \
         replayed identically after the last restart (0 new effects); {unacked_effects} effects \
         never acknowledged, all in the ledger ({unacked_stuck} stuck, {unacked_completed} \
         completed); answers: {:?}",
        seen.restarts,
        injected[0],
        injected[1],
        injected[2],
        st.up.counts.total(),
        effects.len(),
        seen.answers.lock().expect("answers"),
    );
    assert!(acked_n > ops / 2, "most operations should succeed");
    assert!(injected.iter().all(|n| *n > 0), "every fault was injected");
}

fn key(i: usize) -> String {
    format!("chaos-{i}")
}

/// The key the upstream is sent for `key`: the agents' scope makes it a UUID of its own
/// (`keys::upstream_key`).
fn upstream_key(key: &str) -> String {
    idemgate_proxy::keys::scoped("agent-chaos", key)
}

fn send(addr: SocketAddr, i: usize) -> Option<Resp> {
    let k = key(i);
    let body = format!(
        r#"{{"amount":{},"customer":"cus_{}"}}"#,
        100 + i % 900,
        i % 97
    );
    try_request(
        addr,
        "POST",
        "/v1/charges",
        &[
            ("idempotency-key", &k),
            ("content-type", "application/json"),
            ("x-agent-id", "agent-chaos"),
        ],
        body.as_bytes(),
    )
}

/// One logical operation: send, and on anything but a 2xx retry with the same key, as an agent
/// would, up to 8 times.
fn operation(
    addr: SocketAddr,
    client: usize,
    i: usize,
    requests: &AtomicU64,
    answers: &Mutex<BTreeMap<String, u64>>,
) -> Outcome {
    let mut attempts = 0;
    loop {
        attempts += 1;
        requests.fetch_add(1, Ordering::Relaxed);
        let r = send(addr, i);
        let label = match &r {
            None => "no answer".to_owned(),
            Some(r) if r.header("content-type") == Some("application/problem+json") => {
                format!("{} {}", r.status, r.json()["code"].as_str().unwrap_or("?"))
            }
            Some(r) => r.status.to_string(),
        };
        *answers
            .lock()
            .expect("answers")
            .entry(label.clone())
            .or_default() += 1;
        if let Some(r) = &r {
            assert!(
                r.status < 500 || r.status == 502 || r.status == 503 || r.status == 504,
                "op {i}: the proxy failed itself: {} {}",
                r.status,
                r.text()
            );
            if (200..300).contains(&r.status) {
                return Outcome {
                    acked: Some((r.status, r.body.clone())),
                    attempts,
                };
            }
        }
        if attempts >= 8 {
            return Outcome {
                acked: None,
                attempts,
            };
        }
        let jitter = (client as u64 * 7 + u64::from(attempts) * 13) % 50;
        std::thread::sleep(Duration::from_millis(50 * u64::from(attempts) + jitter));
    }
}

fn restart(proxy: &Mutex<Proxy>, dir: &std::path::Path, cfg: &str, ledger: &std::path::Path) {
    let mut p = proxy.lock().expect("proxy");
    p.kill();
    // The port may stay refused for a moment; clients see connection errors and retry.
    let mut tries = 0;
    loop {
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            Proxy::start(dir, cfg, ledger)
        })) {
            Ok(new) => {
                *p = new;
                return;
            }
            Err(e) => {
                tries += 1;
                assert!(tries < 20, "the proxy does not come back: {e:?}");
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    }
}
