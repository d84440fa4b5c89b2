//! Access: secrets never reach the ledger, its log, an export or the process log; the admin API
//! refuses every wrong token the same way and answers only problem+json; each role gets exactly
//! its routes, and actions are logged under the token's operator (`roles`); exports and uploads
//! through the admin API (`exports`); servers bind loopback unless configured otherwise; a long
//! admin call stops when its client goes away.
#![allow(
    clippy::too_many_lines,
    reason = "a test is one scenario told top to bottom, its steps checked in order"
)]

use std::io::Write;
use std::net::TcpStream;
use std::time::Duration;

use idemgate_tests::upstream::Upstream;
use idemgate_tests::*;
use serde_json::json;

mod exports;
mod roles;

const CONFIG: &str = r#"
[server]
listen = "127.0.0.1:0"
admin_listen = "127.0.0.1:0"
ledger = "{ledger}"

[defaults]
lease = "1s"

[[routes]]
name = "charges"
method = "POST"
path = "/v1/charges"
upstream = "{upstream}"
effect = "write"
scope.header = "X-Agent-Id"
secret_headers = ["X-Processor-Key"]
secret_query = ["sig"]
timeout = "500ms"
retry = { attempts = 3, base = "10ms", max = "100ms" }

[[routes]]
name = "webhooks"
method = "POST"
path = "/hooks"
upstream = "{upstream}"
effect = "idempotent"
key.json = "/event_id"
signature = { secret_env = "ACCESS_WEBHOOK_SECRET", tolerance = "5m" }
timeout = "500ms"
retry = { attempts = 3, base = "10ms", max = "100ms" }
"#;

/// Every secret this test sends or configures; none may be found anywhere idemgate writes.
const SECRETS: [&str; 7] = [
    "sk_live_AUTHZSECRET",
    "pk_PROCESSORSECRET",
    "COOKIESECRET",
    "whsec_SIGNINGSECRET",
    "PROXYAUTHSECRET",
    "QUERYAPIKEYSECRET",
    "QUERYSIGSECRET",
];

/// Charges carry credentials in the query too: one the ledger always leaves out (`api_key`), one
/// the route names (`sig`).
const CHARGES: &str = "/v1/charges?api_key=QUERYAPIKEYSECRET&mode=live&sig=QUERYSIGSECRET";

fn contains(hay: &[u8], needle: &str) -> bool {
    hay.windows(needle.len()).any(|w| w == needle.as_bytes())
}

/// `idemgate serve` on this file's config, with `env`; the temp dir and upstream live as long as it.
fn serve(env: &[(&str, &str)]) -> (tempfile::TempDir, Upstream, Proxy) {
    let dir = tempfile::tempdir().expect("tempdir");
    let up = Upstream::start();
    let ledger = dir.path().join("ledger.db");
    let proxy = Proxy::start_with_env(
        dir.path(),
        &config(CONFIG, &up.url(), &ledger),
        &ledger,
        env,
    );
    (dir, up, proxy)
}

#[test]
fn secrets_never_reach_the_ledger_the_log_an_export_or_the_process_log() {
    let (dir, up, proxy) = serve(&[
        ("ACCESS_WEBHOOK_SECRET", SECRETS[3]),
        ("IDEMGATE_LOG", "debug"),
    ]);
    let ledger = proxy.ledger.clone();
    let secret_headers = [
        ("authorization", "Bearer sk_live_AUTHZSECRET"),
        ("x-processor-key", "pk_PROCESSORSECRET"),
        ("cookie", "session=COOKIESECRET"),
        ("proxy-authorization", "Basic PROXYAUTHSECRET"),
    ];
    let charge = |key: &str, body: &str, fault: Option<&str>| {
        let mut h = vec![
            ("idempotency-key", key),
            ("content-type", "application/json"),
            ("x-agent-id", "agent-1"),
        ];
        h.extend_from_slice(&secret_headers);
        if let Some(f) = fault {
            h.push(("x-fault", f));
        }
        proxy.send("POST", CHARGES, &h, body.as_bytes())
    };
    // Every path that stores a request or a response: executed, replayed, rejected as key reuse
    // (the rejected request is kept), outcome unknown (stuck), signed webhooks good and bad.
    assert_eq!(charge("k-1", r#"{"amount":1}"#, None).status, 201);
    // The upstream does get them: they are forwarded, just never kept.
    let seen = up.counts.last_headers.lock().expect("lock").clone();
    assert!(seen
        .iter()
        .any(|(n, v)| n == "x-processor-key" && v == SECRETS[1]));
    assert_eq!(*up.counts.last_target.lock().expect("lock"), CHARGES);
    assert_eq!(charge("k-1", r#"{"amount":1}"#, None).status, 201);
    assert_eq!(charge("k-1", r#"{"amount":2}"#, None).status, 422);
    assert_eq!(charge("k-2", r#"{"amount":3}"#, Some("drop")).status, 502);
    let body = br#"{"event_id":"evt_1"}"#;
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_secs() as i64;
    let sig = format!(
        "t={t},v1={}",
        idemgate_proxy::signature::sign(SECRETS[3].as_bytes(), t, body)
    );
    let hook = |s: &str| {
        proxy.send(
            "POST",
            "/hooks",
            &[
                ("x-idemgate-signature", s),
                ("content-type", "application/json"),
            ],
            body,
        )
    };
    assert_eq!(hook(&sig).status, 201);
    assert_eq!(hook("t=1,v1=00").status, 401);
    // An operator action through the admin API, with the stuck entry.
    let l = ledger.display().to_string();
    let stuck = eventually(10, "k-2 stuck", || {
        let e = idemgate_json(&["entries", "--ledger", &l, "--stuck", "--json"]);
        e.as_array()
            .and_then(|a| a.iter().find(|e| e["key"] == "k-2"))
            .map(|e| e["id"].as_i64().expect("id"))
    });
    let r = proxy.admin_post(
        &format!("/admin/v1/entries/{stuck}/resolve"),
        &json!({"as": "failed", "operator": "ops", "reason": "checked with the processor"}),
    );
    assert_eq!(r.status, 200, "{}", r.text());

    // 1. The ledger file (and its WAL).
    let mut files = vec![std::fs::read(&ledger).expect("ledger")];
    files.push(std::fs::read(format!("{l}-wal")).unwrap_or_default());
    // 2. The log, as the CLI and the admin API show it.
    files.push(idemgate(&["log", "--ledger", &l, "--json"]).stdout);
    files.push(proxy.admin_get("/admin/v1/events?limit=1000").body);
    for id in 1..=4 {
        files.push(idemgate(&["show", "--ledger", &l, &id.to_string(), "--json"]).stdout);
    }
    // 3. Exports, both formats, with their manifests.
    for format in ["ndjson", "csv"] {
        let out = dir.path().join(format!("export.{format}"));
        let o = out.display().to_string();
        let r = idemgate(&["export", "--ledger", &l, "--format", format, "-o", &o]);
        assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
        let bytes = std::fs::read(&out).expect("export");
        assert!(contains(&bytes, "k-1"), "the export holds the entries");
        files.push(bytes);
        files.push(std::fs::read(format!("{o}.manifest.json")).expect("manifest"));
    }
    // 4. The process log, at debug level.
    files.push(proxy.logs().into_bytes());
    assert!(
        contains(files.last().expect("log"), "k-1"),
        "the process log is written"
    );
    assert!(
        files.iter().any(|f| contains(f, "agent-1")),
        "request headers are stored (the scope header), just not the secret ones"
    );
    for (i, f) in files.iter().enumerate() {
        for s in SECRETS {
            assert!(!contains(f, s), "{s} found in output #{i}");
        }
    }
}

#[test]
fn the_admin_api_refuses_every_wrong_token_alike_and_speaks_only_problem_json() {
    let (_dir, _up, proxy) = serve(&[("ACCESS_WEBHOOK_SECRET", "x")]);
    let admin = proxy.admin.expect("admin");
    let mut longer = ADMIN_TOKEN.to_owned();
    longer.push('x');
    let mut last_differs = ADMIN_TOKEN.to_owned();
    last_differs.pop();
    last_differs.push('!');
    let prefix = &ADMIN_TOKEN[..ADMIN_TOKEN.len() / 2];
    let wrong = [
        String::new(),
        "x".into(),
        prefix.into(),
        longer,
        last_differs,
        ADMIN_TOKEN.to_ascii_uppercase(),
        "x".repeat(10_000),
    ];
    let mut answers = Vec::new();
    for (i, t) in wrong.iter().enumerate() {
        for (j, (method, path)) in [
            ("GET", "/admin/v1/entries"),
            ("GET", "/admin/v1/events"),
            ("POST", "/admin/v1/purge"),
            ("POST", "/admin/v1/entries/1/replay"),
            ("POST", "/admin/v1/bulk"),
            ("POST", "/admin/v1/bulk/preview"),
            ("GET", "/metrics"),
        ]
        .into_iter()
        .enumerate()
        {
            let auth = format!("Bearer {t}");
            // Each guess from an address of its own: the backoff after repeated bad tokens from
            // one address is tested on its own.
            let from = std::net::IpAddr::from([127, 0, 10 + i as u8, 10 + j as u8]);
            let r = request_from(
                from,
                admin,
                method,
                path,
                &[("authorization", &auth)],
                b"{}",
            );
            assert_eq!(r.status, 401, "{method} {path} with {t:?}");
            assert_eq!(r.header("www-authenticate"), Some("Bearer"));
            answers.push(r.body);
        }
    }
    // The same answer whatever was wrong: nothing tells how close a guess was.
    assert!(answers.windows(2).all(|w| w[0] == w[1]));
    // The framework's own rejections are problems too.
    for (method, path, body, status) in [
        ("GET", "/admin/v1/entries/not-a-number", "", 400),
        ("GET", "/admin/v1/entries/99999999999999999999", "", 400),
        ("POST", "/admin/v1/purge", "{not json", 400),
        ("DELETE", "/admin/v1/entries", "", 405),
        ("GET", "/admin/v1/nothing-here", "", 404),
    ] {
        let auth = format!("Bearer {ADMIN_TOKEN}");
        let r = request(
            admin,
            method,
            path,
            &[
                ("authorization", &auth),
                ("content-type", "application/json"),
            ],
            body.as_bytes(),
        );
        assert_eq!(r.status, status, "{method} {path}: {}", r.text());
        assert!(!r.code().is_empty(), "{method} {path}");
    }
    // Replay, purge and bulk actions need a reason, also when nothing matches; an operator named
    // blank is refused, not taken for the token's.
    for (path, body) in [
        (
            "/admin/v1/entries/1/replay",
            json!({"operator": " ", "reason": "r"}),
        ),
        ("/admin/v1/entries/1/replay", json!({"operator": "o"})),
        (
            "/admin/v1/purge",
            json!({"target": "expired", "operator": " ", "reason": "r"}),
        ),
        (
            "/admin/v1/bulk",
            json!({"action": "resolve", "as": "released", "target": {"filter": {}},
                   "operator": "o", "reason": " "}),
        ),
    ] {
        let r = proxy.admin_post(path, &body);
        assert_eq!(r.status, 400, "{path} {body}: {}", r.text());
    }
}

#[test]
fn servers_bind_loopback_unless_configured_otherwise() {
    let c = idemgate_config::Config::parse(
        "[server]\nledger = \"x.db\"\n[[routes]]\nname = \"a\"\nmethod = \"POST\"\npath = \"/a\"\nupstream = \"http://127.0.0.1:1\"\neffect = \"write\"\n",
    )
    .expect("config");
    assert!(c.listen.ip().is_loopback(), "{}", c.listen);
    assert!(
        c.admin_listen.expect("admin").ip().is_loopback(),
        "{:?}",
        c.admin_listen
    );
    // A running proxy reports where it listens: loopback.
    let (_dir, _up, proxy) = serve(&[("ACCESS_WEBHOOK_SECRET", "x")]);
    assert!(proxy.addr.ip().is_loopback());
    assert!(proxy.admin.expect("admin").ip().is_loopback());
    // So does the admin API, to its clients (the console in a browser), behind the token.
    let admin = proxy.admin.expect("admin");
    let info = proxy.admin_get("/admin/v1/server");
    assert_eq!(info.status, 200, "{}", info.text());
    let mut info = info.json();
    // On a SQLite ledger the server keeps its own books, from its start.
    let instance = info["instance"].as_str().expect("instance").to_owned();
    assert!(instance.contains(&format!(":{}:", proxy.pid())), "{info}");
    assert_eq!(info["leader"]["instance"], instance.as_str());
    assert!(info["leader"]["since"].as_i64().is_some_and(|t| t > 0));
    let obj = info.as_object_mut().expect("an object");
    obj.remove("instance");
    obj.remove("leader");
    assert_eq!(
        info,
        json!({
            "version": env!("CARGO_PKG_VERSION"),
            "proxy_addr": proxy.addr.to_string(),
            "admin_addr": admin.to_string(),
            "ledger": proxy.ledger.display().to_string(),
        })
    );
    assert_eq!(
        request(admin, "GET", "/admin/v1/server", &[], b"").status,
        401
    );
}

/// A verify through the admin API reads the whole log. When its client goes away (a closed tab, the
/// console's Cancel, curl's Ctrl-C) it stops, rather than read on for nobody; the log says where.
#[test]
fn a_verify_stops_when_its_client_goes_away() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ledger = dir.path().join("ledger.db");
    let ledger_s = ledger.to_str().expect("utf-8");
    // About a second of verifying in a debug build: long enough to leave part-way, many times over.
    let demo = idemgate(&["demo", "--ledger", ledger_s, "--events", "100000"]);
    assert!(demo.status.success(), "{demo:?}");
    let toml = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\nadmin_listen = \"127.0.0.1:0\"\nledger = \"{ledger_s}\"\n"
    );
    let log = [("IDEMGATE_LOG", "info,idemgate_ops=debug")];
    let proxy = Proxy::start_with_env(dir.path(), &toml, &ledger, &log);

    let mut s = TcpStream::connect(proxy.admin.expect("admin")).expect("connect");
    write!(
        s,
        "GET /admin/v1/verify HTTP/1.1\r\nhost: idemgate\r\nauthorization: Bearer {ADMIN_TOKEN}\r\n\r\n"
    )
    .expect("send");
    eventually(30, "the verify to begin", || {
        proxy.logs().contains("a verify began").then_some(())
    });
    drop(s);
    let stopped = eventually(30, "the verify to stop", || {
        let logs = proxy.logs();
        let line = logs
            .lines()
            .find(|l| l.contains("a verify stopped after"))?;
        let n = line.split("stopped after ").nth(1)?.split(' ').next()?;
        n.parse::<u64>().ok()
    });

    // The server is none the worse: a verify that is waited for reads the whole log, further.
    let whole = proxy.admin_get("/admin/v1/verify");
    assert_eq!(whole.status, 200, "{}", whole.text());
    let whole = whole.json();
    assert_eq!(whole["ok"], true, "{whole}");
    let all = whole["count"].as_u64().expect("count");
    assert!(stopped < all, "stopped after {stopped} of {all} events");
    assert_eq!(
        proxy.logs().matches("a verify stopped after").count(),
        1,
        "{}",
        proxy.logs()
    );
}

/// The lines of an `application/x-ndjson` answer, each parsed.
fn ndjson(r: &Resp) -> Vec<serde_json::Value> {
    assert_eq!(
        (r.status, r.header("content-type")),
        (200, Some("application/x-ndjson")),
        "{}",
        r.text()
    );
    r.text()
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect()
}

/// Asked for `application/x-ndjson`, a verify and a purge answer as they go: a line per report
/// (what the browser console shows as "N of M"), then the result, the document the default answer
/// holds. A purge refused before its first report is an ordinary problem. And a purge whose reader
/// goes away stops between two of its chunks: what is purged stays purged, and the log says so.
#[test]
fn long_work_answers_as_it_goes_when_asked_and_stops_when_its_reader_goes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ledger = dir.path().join("ledger.db");
    let ledger_s = ledger.to_str().expect("utf-8");
    let n = 30 * idemgate_ops::PURGE_CHUNK;
    {
        let ops = idemgate_ops::Ops::open_or_create(ledger_s).expect("ledger");
        idemgate_ledger::testing::expired_charges(ops.store().as_ref(), n);
        // The expiries logged now, not by serve's sweeper (1,000 a second): the log then stays as
        // it is while the test reads it, and two verifies a second apart see one chain.
        while ops.sweep().expect("sweep").ttl_expired > 0 {}
    }
    let toml = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\nadmin_listen = \"127.0.0.1:0\"\nledger = \"{ledger_s}\"\n"
    );
    let proxy = Proxy::start(dir.path(), &toml, &ledger);
    let admin = proxy.admin.expect("admin");
    let auth = format!("Bearer {ADMIN_TOKEN}");
    let lines = [
        ("authorization", auth.as_str()),
        ("accept", "application/x-ndjson"),
    ];
    let json_lines = [lines[0], lines[1], ("content-type", "application/json")];

    // A verify: its count as it goes, then its report.
    let v = ndjson(&request(admin, "GET", "/admin/v1/verify", &lines, b""));
    let (result, progress) = v.split_last().expect("lines");
    let counts: Vec<u64> = progress
        .iter()
        .map(|l| l["progress"].as_u64().expect("a progress line"))
        .collect();
    assert!(counts.len() > 2 && counts.is_sorted(), "{counts:?}");
    assert_eq!(result["result"]["ok"], true, "{result}");
    assert_eq!(result["result"]["count"].as_u64(), counts.last().copied());
    // A claim, a completion and a TTL expiry each.
    assert_eq!(result["result"]["count"].as_u64(), Some(3 * n as u64));
    // Without the header, the same report as one document.
    let plain = proxy.admin_get("/admin/v1/verify");
    assert_eq!(plain.header("content-type"), Some("application/json"));
    assert_eq!(plain.json(), result["result"]);

    // This server keeps no archive: there is none to list or verify, and it says why.
    for path in ["/admin/v1/archive", "/admin/v1/archive/verify"] {
        let none = proxy.admin_get(path);
        assert_eq!(
            (none.status, none.code()),
            (409, "no-archive".into()),
            "{path}"
        );
        assert!(none.text().contains("archive_dir"), "{}", none.text());
    }

    // Refused before it began: a problem, with its status.
    let refused = request(
        admin,
        "POST",
        "/admin/v1/purge",
        &json_lines,
        br#"{"target":"expired","filter":{},"operator":"","reason":"r"}"#,
    );
    assert_eq!(
        (refused.status, refused.code()),
        (400, "missing-operator".into())
    );

    // A purge whose reader leaves after its first line.
    let body = br#"{"target":"expired","filter":{},"operator":"ci","reason":"reader leaves"}"#;
    let mut s = TcpStream::connect(admin).expect("connect");
    write!(
        s,
        "POST /admin/v1/purge HTTP/1.1\r\nhost: idemgate\r\nauthorization: {auth}\r\naccept: application/x-ndjson\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
        body.len()
    )
    .expect("send");
    s.write_all(body).expect("send body");
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while !String::from_utf8_lossy(&got).contains("{\"progress\":") {
        use std::io::Read;
        let k = s.read(&mut buf).expect("read");
        assert!(k > 0, "closed: {}", String::from_utf8_lossy(&got));
        got.extend_from_slice(&buf[..k]);
    }
    drop(s);
    let stopped = eventually(30, "the purge to stop", || {
        let logs = proxy.logs();
        let line = logs.lines().find(|l| l.contains("a purge stopped after"))?;
        line.split("stopped after ")
            .nth(1)?
            .split(' ')
            .next()?
            .parse::<usize>()
            .ok()
    });
    assert!(stopped > 0 && stopped < n, "stopped after {stopped} of {n}");
    assert_eq!(stopped % idemgate_ops::PURGE_CHUNK, 0, "whole chunks");

    // What is left is what the purge did not reach; a purge read to its end takes it.
    let rest = ndjson(&request(
        admin,
        "POST",
        "/admin/v1/purge",
        &json_lines,
        br#"{"target":"expired","filter":{},"operator":"ci","reason":"the rest"}"#,
    ));
    let report = &rest.last().expect("lines")["result"];
    assert_eq!(report["cancelled"], false, "{report}");
    assert_eq!(
        report["purged"].as_array().expect("purged").len(),
        n - stopped
    );
}
