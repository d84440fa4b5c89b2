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
//! Once with one instance on SQLite; once with a fleet of four on one PostgreSQL ledger behind a
//! load balancer that sends each retry to the next instance, SIGKILLing instances in turn, the one
//! leading the books every other time: then also the log's tree verifies, every kept checkpoint of
//! it is a prefix of the tree, no head is signed twice, and the history the leaders archived into
//! one S3 bucket as they went verifies with the live log after it.
//!
//! Profiles (environment `IDEMGATE_CHAOS`): `short` (default, CI: 2,000 operations and 5 kills
//! for one instance, 10,000 and 8 for the fleet) and `long` (20,000 operations, 12 kills);
//! `IDEMGATE_CHAOS_OPS` / `_KILLS` / `_CLIENTS` override. The figures are printed (`cargo test -p
//! idemgate-tests --test chaos -- --nocapture`).
#![allow(
    clippy::too_many_lines,
    reason = "a test is one scenario told top to bottom, its steps checked in order"
)]

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use idemgate_ledger::testing::S3;
use idemgate_ledger::{EntryFilter, State};
use idemgate_tests::upstream::{Chaos, Upstream};
use idemgate_tests::*;

const CONFIG: &str = r#"
[server]
listen = "{listen}"
admin_listen = "{admin}"
ledger = "{ledger}"
{books}

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

/// One instance of the proxy, at a fixed address, so clients reach every incarnation of it there.
struct Instance {
    dir: tempfile::TempDir,
    listen: SocketAddr,
    cfg: String,
    /// Where the archive's bucket is (`AWS_*`), for every incarnation.
    env: Vec<(&'static str, String)>,
    proxy: Mutex<Proxy>,
}

/// An address for every incarnation of one instance, on a port below the kernel's range of
/// ephemeral ports. A port in that range (one that binding port 0 gives) may be given, while its
/// instance is down, to any connection made meanwhile (a client's, another instance's to its
/// database) and kept; a port below it is only ever bound by name, and this process hands each
/// out once.
fn instance_addr() -> SocketAddr {
    static GIVEN: Mutex<Vec<u16>> = Mutex::new(Vec::new());
    let low: u16 = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|r| r.split_whitespace().next()?.parse().ok())
        .unwrap_or(32768);
    let span = low / 2;
    let mut given = GIVEN.lock().expect("ports");
    // Another test process picks from a start of its own.
    let start = std::process::id() as u16 ^ (given.len() as u16).wrapping_mul(7919);
    for i in 0..span {
        let port = low - span + (start.wrapping_add(i) % span);
        if !given.contains(&port) && std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            given.push(port);
            return SocketAddr::from(([127, 0, 0, 1], port));
        }
    }
    panic!("no free port below {low}");
}

/// The upstream that injects faults, and the instances in front of it on one ledger (a SQLite
/// file, or a PostgreSQL URL).
struct Stack {
    up: Upstream,
    ledger: String,
    fleet: Arc<Vec<Instance>>,
    /// Holds the SQLite ledger and the signing key.
    _dir: tempfile::TempDir,
}

impl Stack {
    fn listens(&self) -> Vec<SocketAddr> {
        self.fleet.iter().map(|i| i.listen).collect()
    }
}

/// What the clients saw: each operation's outcome, and the answers by status and code.
struct Seen {
    outcomes: HashMap<usize, Outcome>,
    answers: Arc<Mutex<BTreeMap<String, u64>>>,
    restarts: usize,
    /// Restarts of the instance that led the books.
    leaders_killed: usize,
}

/// `instances` proxies in front of a faulty upstream, on the PostgreSQL ledger at `pg` (they
/// sign the log every second and archive what is two seconds old into `s3`'s bucket `archive`),
/// else one on a SQLite file.
fn a_faulty_upstream_behind(instances: usize, pg: Option<String>, s3: Option<&S3>) -> Stack {
    let dir = tempfile::tempdir().expect("tempdir");
    let up = Upstream::start();
    up.counts.set_chaos(Some(Chaos {
        drop_pct: 20,
        unavailable_pct: 10,
        stall_pct: 3,
        stall_ms: 700,
    }));
    let (ledger, admin, books) = match pg {
        Some(url) => {
            let prefix = dir.path().join("signing");
            let made = idemgate(&["keygen", "--out", prefix.to_str().expect("utf8")]);
            assert!(made.status.success());
            let key = dir.path().join("signing.key");
            let mut books = format!(
                "signing_key_file = \"{}\"\ncheckpoint_interval = \"1s\"",
                key.display()
            );
            if s3.is_some() {
                books.push_str(
                    "\n[retention]\nlog_hot = \"2s\"\narchive_dir = \"s3://archive/fleet\"\n\
                     interval = \"1s\"",
                );
            }
            (url, "127.0.0.1:0", books)
        }
        None => (
            dir.path().join("ledger.db").display().to_string(),
            "off",
            String::new(),
        ),
    };
    let fleet = (0..instances)
        .map(|_| {
            let dir = tempfile::tempdir().expect("tempdir");
            let template = config(CONFIG, &up.url(), Path::new(&ledger))
                .replace("{admin}", admin)
                .replace("{books}", &books);
            let env = s3.map(S3::env).unwrap_or_default();
            let listen = instance_addr();
            let cfg = template.replace("{listen}", &listen.to_string());
            let proxy = start(dir.path(), &cfg, Path::new(&ledger), &env);
            Instance {
                dir,
                listen,
                cfg,
                env,
                proxy: Mutex::new(proxy),
            }
        })
        .collect();
    Stack {
        up,
        ledger,
        fleet: Arc::new(fleet),
        _dir: dir,
    }
}

/// The killer: SIGKILL and restart an instance after every ops/(kills+1) finished operations,
/// until `finished`. Answers how many restarts it made, and how many of the leader.
fn killer(
    st: &Stack,
    size: Size,
    done: &Arc<AtomicUsize>,
    finished: &Arc<AtomicBool>,
) -> std::thread::JoinHandle<(usize, usize)> {
    let (fleet, done, finished) = (st.fleet.clone(), done.clone(), finished.clone());
    std::thread::spawn(move || {
        let (mut killed, mut leaders) = (0, 0);
        while killed < size.kills && !finished.load(Ordering::SeqCst) {
            if done.load(Ordering::SeqCst) >= (killed + 1) * size.ops / (size.kills + 1) {
                let (victim, leads) = victim(&fleet, killed);
                restart(&fleet[victim]);
                killed += 1;
                leaders += usize::from(leads);
            } else {
                std::thread::sleep(Duration::from_millis(5));
            }
        }
        (killed, leaders)
    })
}

/// The instance the `k`-th kill takes, and whether it leads the books: every other time the
/// leader (when a fleet names one), else the next in turn.
fn victim(fleet: &[Instance], k: usize) -> (usize, bool) {
    let leader = (fleet.len() > 1).then(|| leader(fleet)).flatten();
    match leader {
        Some(i) if k.is_multiple_of(2) => (i, true),
        _ => {
            let i = (k * 5 + 1) % fleet.len();
            (i, leader == Some(i))
        }
    }
}

/// The instance that leads the books, as the fleet names it.
fn leader(fleet: &[Instance]) -> Option<usize> {
    let named: Vec<(String, Option<String>)> = fleet
        .iter()
        .map(|inst| {
            let v = inst
                .proxy
                .lock()
                .expect("proxy")
                .admin_get("/admin/v1/server")
                .json();
            let own = v["instance"].as_str().unwrap_or_default().to_owned();
            (own, v["leader"]["instance"].as_str().map(str::to_owned))
        })
        .collect();
    let lead = named.iter().find_map(|(_, l)| l.clone())?;
    named.iter().position(|(own, _)| *own == lead)
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
    let workers: Vec<_> = (0..size.clients)
        .map(|c| {
            let (next, done, requests, answers, outcomes, listen) = (
                next.clone(),
                done.clone(),
                requests.clone(),
                answers.clone(),
                outcomes.clone(),
                st.listens(),
            );
            std::thread::spawn(move || loop {
                let i = next.fetch_add(1, Ordering::SeqCst);
                if i >= size.ops {
                    return;
                }
                let o = operation(&listen, c, i, &requests, &answers);
                outcomes.lock().expect("outcomes").insert(i, o);
                done.fetch_add(1, Ordering::SeqCst);
            })
        })
        .collect();
    for w in workers {
        w.join().expect("client");
    }
    finished.store(true, Ordering::SeqCst);
    let (restarts, leaders_killed) = killer.join().expect("killer");
    assert!(
        restarts >= size.kills.min(5),
        "only {restarts} restarts happened"
    );
    for inst in st.fleet.iter() {
        restart(inst);
    }
    let outcomes = outcomes.lock().expect("outcomes").clone();
    Seen {
        outcomes,
        answers,
        restarts,
        leaders_killed,
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
    let replayers: Vec<_> = (0..16)
        .map(|t| {
            let (acked, mismatches, listen) = (acked.clone(), mismatches.clone(), st.listens());
            std::thread::spawn(move || {
                for (i, (status, body)) in acked.iter().skip(t).step_by(16) {
                    let r = send(listen[i % listen.len()], *i)
                        .expect("the proxy answers after the last restart");
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
    let ops_api = idemgate_ops::Ops::open_existing(&st.ledger).expect("open");
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
                    let e = ops_api
                        .show(e.id, idemgate_ops::op::Host::none())
                        .expect("show")
                        .entry
                        .summary
                        .clone();
                    (e.stuck || e.outcome_unknown).then_some(e)
                });
                assert_eq!(e.state, State::Pending);
                unacked_stuck += 1;
            }
            s => panic!("op {i}: its effect happened, yet the entry is {s:?}: {e:?}"),
        }
    }
    let v = idemgate_json(&["verify", "--ledger", &st.ledger, "--json"]);
    assert_eq!(
        v["ok"], true,
        "the chain and the tree verify after the kills: {v}"
    );
    (unacked_effects, unacked_stuck, unacked_completed)
}

/// The run's size: the profile's for `ops`/`kills` (short, long), or the environment's.
fn size(ops: (usize, usize), kills: (usize, usize)) -> Size {
    let long = std::env::var("IDEMGATE_CHAOS").as_deref() == Ok("long");
    let pick = |(short, long_one): (usize, usize)| if long { long_one } else { short };
    Size {
        ops: env_usize("IDEMGATE_CHAOS_OPS", pick(ops)),
        kills: env_usize("IDEMGATE_CHAOS_KILLS", pick(kills)),
        clients: env_usize("IDEMGATE_CHAOS_CLIENTS", 64),
    }
}

/// Runs the clients through the kills, checks what every run must hold, and prints the figures.
fn run(st: &Stack, size: Size) -> Seen {
    let started = Instant::now();
    let seen = the_clients_run_every_operation_through_kills(st, size);
    let run_secs = started.elapsed().as_secs_f64();
    let effects = no_key_ran_twice(st);
    let acked_n = every_acknowledged_answer_replays(st, &seen);
    let (unacked_effects, unacked_stuck, unacked_completed) =
        every_unacknowledged_effect_is_in_the_ledger(st, &seen);

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
        "chaos: {ops} operations from {clients} clients through {} instance(s) in {run_secs:.1}s, \
         {attempts} requests, {}+1 SIGKILL restarts ({} of the leader); upstream faults: {} \
         dropped after the effect, {} 503, {} stalled past the timeout; {} effects for {} keys \
         (none twice); {acked_n} acknowledged and replayed identically after the last restart (0 \
         new effects); {unacked_effects} effects never acknowledged, all in the ledger \
         ({unacked_stuck} stuck, {unacked_completed} completed); answers: {:?}",
        st.fleet.len(),
        seen.restarts,
        seen.leaders_killed,
        injected[0],
        injected[1],
        injected[2],
        st.up.counts.total(),
        effects.len(),
        seen.answers.lock().expect("answers"),
    );
    assert!(acked_n > ops / 2, "most operations should succeed");
    assert!(injected.iter().all(|n| *n > 0), "every fault was injected");
    seen
}

#[test]
fn chaos_no_key_runs_twice_and_nothing_acknowledged_is_lost() {
    let st = a_faulty_upstream_behind(1, None, None);
    run(&st, size((2_000, 20_000), (5, 12)));
}

#[test]
fn chaos_on_a_fleet_no_key_runs_twice_and_the_books_stay_whole() {
    let Some(url) = idemgate_ledger::testing::fresh_postgres("fleet_chaos") else {
        eprintln!("skipped: IDEMGATE_TEST_PG=skip");
        return;
    };
    // Without an S3 server (IDEMGATE_TEST_S3=skip) the fleet keeps its whole log live.
    let s3 = S3::start("archive");
    let st = a_faulty_upstream_behind(4, Some(url.clone()), s3.as_ref());
    let seen = run(&st, size((10_000, 20_000), (8, 12)));
    assert!(
        seen.leaders_killed >= 2,
        "the leader was killed {} times",
        seen.leaders_killed
    );
    // The books: `verify` (above) recomputed the tree and checked every kept checkpoint's root
    // against it, so each is a prefix of the tree and consistent with the next; there are some,
    // and no periodic checkpoint signed a head twice, in the archived log or the live one.
    let ops = idemgate_ops::Ops::open_existing(&url).expect("open");
    let kept = ops.store().tree_checkpoint(0).expect("read");
    assert!(
        kept.is_some_and(|(size, _)| size > 0),
        "no checkpoint of the tree was kept"
    );
    // By the event that logged each: a segment's events stay live until its removal is done.
    let periodic: BTreeMap<i64, i64> = events_of(&url, "checkpoint")
        .into_iter()
        .chain(s3.as_ref().map(archived_checkpoints).unwrap_or_default())
        .filter(|e| e["detail"]["periodic"] == true)
        .map(|e| {
            let logged = e["seq"].as_i64().expect("seq");
            (logged, e["detail"]["seq"].as_i64().expect("signed seq"))
        })
        .collect();
    let mut signed: Vec<i64> = periodic.into_values().collect();
    let n = signed.len();
    signed.sort_unstable();
    signed.dedup();
    assert!(
        n > 0 && signed.len() == n,
        "{n} periodic checkpoints, {} heads",
        signed.len()
    );
    // The leaders archived as they went, into the one bucket: every segment the ledger recorded
    // is there, sealed once, and the history verifies from them through the live log.
    let Some(s3) = s3 else {
        eprintln!("the archive's part skipped: IDEMGATE_TEST_S3=skip");
        return;
    };
    let out = Command::new(idemgate_bin())
        .args([
            "verify",
            "--ledger",
            &url,
            "--archive",
            "s3://archive/fleet",
            "--json",
        ])
        .envs(s3.env())
        .output()
        .expect("verify");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(v["ok"], true, "{v}");
    let recorded = v["segments"]
        .as_array()
        .expect("segments")
        .iter()
        .filter(|s| s["recorded"] == true)
        .count();
    assert!(recorded > 0, "nothing was archived: {v}");
}

/// The `checkpoint` events in the sealed segments of the bucket `s3://archive/fleet` (those with
/// their manifest beside them: the fleet may be uploading one), read from the server's own files,
/// with their detail parsed as the CLI's `log` prints it.
fn archived_checkpoints(s3: &S3) -> Vec<serde_json::Value> {
    use std::io::BufRead;
    let mut found = Vec::new();
    for f in std::fs::read_dir(s3.object("archive", "fleet")).expect("the bucket's prefix") {
        let path = f.expect("entry").path();
        let manifest = format!("{}.manifest.json", path.display());
        if !path.to_string_lossy().ends_with(".ndjson.gz") || !Path::new(&manifest).exists() {
            continue;
        }
        let gz = flate2::read::GzDecoder::new(std::fs::File::open(&path).expect("segment"));
        for line in std::io::BufReader::new(gz).lines() {
            let mut e: serde_json::Value =
                serde_json::from_str(&line.expect("line")).expect("an event");
            if e["kind"] == "checkpoint" {
                let detail = e["detail"].as_str().expect("detail").to_owned();
                e["detail"] = serde_json::from_str(&detail).expect("the detail's JSON");
                found.push(e);
            }
        }
    }
    found
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
/// would, up to 8 times; each try to the next instance, as a load balancer would send it.
fn operation(
    listen: &[SocketAddr],
    client: usize,
    i: usize,
    requests: &AtomicU64,
    answers: &Mutex<BTreeMap<String, u64>>,
) -> Outcome {
    let mut attempts = 0;
    loop {
        attempts += 1;
        requests.fetch_add(1, Ordering::Relaxed);
        let r = send(listen[(i + attempts as usize) % listen.len()], i);
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

fn start(dir: &Path, cfg: &str, ledger: &Path, env: &[(&'static str, String)]) -> Proxy {
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    Proxy::start_with_env(dir, cfg, ledger, &env)
}

fn restart(inst: &Instance) {
    let mut p = inst.proxy.lock().expect("proxy");
    p.kill();
    // The port may stay refused for a moment; clients see connection errors and retry.
    let mut tries = 0;
    loop {
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            start(inst.dir.path(), &inst.cfg, &p.ledger, &inst.env)
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
