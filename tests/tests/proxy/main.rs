//! `idemgate serve` as a real process in front of a real upstream that counts side effects and
//! injects faults: one test per row of the proxy table in docs/design.md (the answer *and* the upstream's
//! effect count), concurrency, SIGKILL and SIGTERM, signatures, the admin API, replay, reconcile.
#![allow(
    clippy::too_many_lines,
    reason = "a test is one scenario told top to bottom, its steps checked in order"
)]

use std::path::PathBuf;
use std::sync::{Arc, Barrier};

use idemgate_tests::upstream::Upstream;
use idemgate_tests::*;
use serde_json::json;

mod admin;
mod approvals;
mod business;
mod durability;
mod keys;
mod mcp;
mod operator;
mod outcomes;
mod reads;
mod requests;
mod retention;
mod signals;
mod upstreams;
mod witness;

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
        let closed = refusing_addr();
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

/// The value of series `name` (its labels written as `/metrics` writes them) that `proxy`
/// exports now, if it is there.
fn scraped(proxy: &Proxy, name: &str) -> Option<u64> {
    metric(&proxy.admin_get("/metrics").text(), name)
}

/// The value of an unlabelled series `name` in Prometheus text, if it is there.
fn metric(text: &str, name: &str) -> Option<u64> {
    let value = text
        .lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))?;
    Some(value.trim().parse().expect("a count"))
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
