//! Access: secrets never reach the ledger, its log, an export or the process log; the admin API
//! refuses every wrong token the same way and answers only problem+json; each role gets exactly
//! its routes, and actions are logged under the token's operator (`roles`); servers bind loopback
//! unless configured otherwise; a long admin call stops when its client goes away.
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
    let c = idemgate_proxy::Config::parse(
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
    assert_eq!(
        info.json(),
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

/// An export through the admin API: a job in a private spool under `server.export_dir`, downloaded
/// (whole, and by range) with its manifest, verified by the CLI against the ledger; the client
/// never names a server path; a deleted export and, at the process's end, the spool are gone.
#[test]
fn an_export_through_the_admin_api_downloads_with_its_manifest_and_leaves_nothing_behind() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ledger = dir.path().join("ledger.db");
    let spool_base = dir.path().join("spool");
    std::fs::create_dir(&spool_base).expect("mkdir");
    idemgate(&["demo", "--ledger", ledger.to_str().expect("utf-8")]);
    let toml = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\nadmin_listen = \"127.0.0.1:0\"\nledger = \"{}\"\nexport_dir = \"{}\"\n",
        ledger.display(),
        spool_base.display()
    );
    let mut proxy = Proxy::start(dir.path(), &toml, &ledger);
    let admin = proxy.admin.expect("admin");
    let auth = format!("Bearer {ADMIN_TOKEN}");
    let call = |method: &str, path: &str, extra: &[(&str, &str)]| {
        let mut h = vec![("authorization", auth.as_str())];
        h.extend_from_slice(extra);
        request(admin, method, path, &h, b"")
    };

    // Bad input: refused, and no job made.
    for body in [
        json!({"format": "ndjson", "path": "/tmp/anywhere.ndjson"}),
        json!({"format": "xml"}),
        json!({"format": "csv", "since": "2026-11-02", "until": "2026-11-01"}),
        json!({"format": "csv", "since": "yesterday"}),
    ] {
        let r = proxy.admin_post("/admin/v1/exports", &body);
        assert_eq!(r.status, 400, "{body}: {}", r.text());
        assert_eq!(r.code(), "invalid-argument");
    }
    assert_eq!(call("GET", "/admin/v1/exports", &[]).json(), json!([]));
    assert_eq!(
        call("GET", "/admin/v1/exports/0123", &[]).code(),
        "export-not-found"
    );

    let r = proxy.admin_post("/admin/v1/exports", &json!({"format": "ndjson"}));
    assert_eq!(r.status, 202, "{}", r.text());
    let id = r.json()["id"].as_str().expect("id").to_owned();
    assert_eq!(
        r.header("location"),
        Some(format!("/admin/v1/exports/{id}").as_str())
    );
    let job = eventually(30, "the export to end", || {
        let j = call("GET", &format!("/admin/v1/exports/{id}"), &[]).json();
        (j["state"] != "running").then_some(j)
    });
    assert_eq!(job["state"], "done", "{job}");
    let name = job["manifest"]["file"].as_str().expect("file").to_owned();
    let count = job["manifest"]["count"].as_u64().expect("count");
    assert!(count > 100, "the demo's whole log: {job}");
    assert_eq!(job["done"].as_u64(), Some(count));

    let file = call("GET", job["file_url"].as_str().expect("file url"), &[]);
    assert_eq!(file.status, 200);
    assert_eq!(file.header("content-type"), Some("application/x-ndjson"));
    assert_eq!(
        file.header("content-disposition"),
        Some(format!("attachment; filename=\"{name}\"").as_str())
    );
    assert_eq!(
        file.body.iter().filter(|b| **b == b'\n').count() as u64,
        count
    );
    let manifest = call(
        "GET",
        job["manifest_url"].as_str().expect("manifest url"),
        &[],
    );
    assert_eq!(manifest.status, 200);
    assert_eq!(
        manifest.json(),
        job["manifest"],
        "the job shows the manifest it serves"
    );
    let part = call(
        "GET",
        &format!("/admin/v1/exports/{id}/file"),
        &[("range", "bytes=10-19")],
    );
    assert_eq!(part.status, 206);
    assert_eq!(part.body, file.body[10..20]);

    // Saved as served, the CLI verifies it, and the ledger still holds its head.
    let saved = dir.path().join(&name);
    std::fs::write(&saved, &file.body).expect("save");
    std::fs::write(
        dir.path().join(format!("{name}.manifest.json")),
        &manifest.body,
    )
    .expect("save");
    let saved_s = saved.to_str().expect("utf-8");
    let out = idemgate(&["verify", "--export", saved_s]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let m = format!("{saved_s}.manifest.json");
    let out = idemgate(&[
        "verify",
        "--ledger",
        ledger.to_str().expect("utf-8"),
        "--against",
        &m,
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    // The same check over the admin API, with the manifest as the body; a head the ledger never
    // had is reported gone.
    let against = proxy.admin_post(
        "/admin/v1/verify/against",
        &serde_json::from_slice(&manifest.body).expect("manifest"),
    );
    assert_eq!(against.status, 200, "{}", against.text());
    assert_eq!(against.json()["ok"], true, "{}", against.text());
    let mut forged = job["manifest"].clone();
    forged["ledger_head"]["hash"] = json!("0".repeat(64));
    let against = proxy.admin_post("/admin/v1/verify/against", &forged);
    assert_eq!(against.json()["ok"], false, "{}", against.text());
    assert_eq!(against.json()["heads"][0][1], false, "{}", against.text());
    let mut edited = file.body.clone();
    let at = edited.iter().position(|b| *b == b'7').expect("a digit");
    edited[at] = b'8';
    std::fs::write(&saved, &edited).expect("edit");
    assert_eq!(
        idemgate(&["verify", "--export", saved_s]).status.code(),
        Some(3)
    );
    // The same checks on an upload (the console in a browser): the server verifies the file and
    // its manifest without the ledger, names them as sent, and keeps nothing.
    let upload = |parts: &[(&str, &str, &[u8])]| {
        let (kind, body) = multipart(parts);
        request(
            admin,
            "POST",
            "/admin/v1/verify/export",
            &[("authorization", auth.as_str()), ("content-type", &kind)],
            &body,
        )
    };
    let manifest_name = format!("{name}.manifest.json");
    let good = upload(&[
        ("file", &name, &file.body),
        ("manifest", &manifest_name, &manifest.body),
    ]);
    assert_eq!(good.status, 200, "{}", good.text());
    let good = good.json();
    assert_eq!(
        (&good["ok"], &good["sha256_matches"], &good["file"]),
        (&json!(true), &json!(true), &json!(name)),
        "{good}"
    );
    let bad = upload(&[
        ("manifest", &manifest_name, &manifest.body),
        ("file", &name, &edited),
    ])
    .json();
    assert_eq!(
        (&bad["ok"], &bad["sha256_matches"]),
        (&json!(false), &json!(false)),
        "{bad}"
    );
    let binary = upload(&[("file", "file.png", b"\x89PNG\r\n\x1a\n\x00\xff\xfe")]);
    assert_eq!(
        (binary.status, binary.code()),
        (400, "bad-export".into()),
        "{}",
        binary.text()
    );
    let none = upload(&[("manifest", &manifest_name, &manifest.body)]);
    assert_eq!((none.status, none.code()), (400, "invalid-argument".into()));
    let not_a_form = proxy.admin_post("/admin/v1/verify/export", &json!({"file": "x"}));
    assert_eq!(
        (not_a_form.status, not_a_form.code()),
        (415, "unsupported-media-type".into())
    );

    // The spool: private, under export_dir; a deleted export's files go at once.
    let spools: Vec<_> = std::fs::read_dir(&spool_base)
        .expect("spool base")
        .flatten()
        .map(|e| e.path())
        .collect();
    assert_eq!(spools.len(), 1, "{spools:?}");
    // Exports, beside the lock its process holds (see the next test).
    let exports_in = |p: &std::path::Path| -> Vec<String> {
        std::fs::read_dir(p)
            .expect("spool")
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n != ".lock")
            .collect()
    };
    assert_eq!(exports_in(&spools[0]).len(), 2, "the file and its manifest");
    let r = proxy.admin_post(
        "/admin/v1/exports",
        &json!({"format": "csv", "since": "7d"}),
    );
    assert_eq!(r.status, 202, "{}", r.text());
    assert_eq!(
        call("DELETE", &format!("/admin/v1/exports/{id}"), &[]).status,
        204
    );
    assert_eq!(
        call("GET", &format!("/admin/v1/exports/{id}/file"), &[]).code(),
        "export-not-found"
    );
    let csv = r.json()["id"].as_str().expect("id").to_owned();
    eventually(30, "the csv export to end", || {
        let j = call("GET", &format!("/admin/v1/exports/{csv}"), &[]).json();
        (j["state"] == "done").then_some(())
    });
    let left = exports_in(&spools[0]);
    assert!(
        left.iter().all(|n| n.contains(&csv)) && left.len() == 2,
        "{left:?}"
    );

    // The entries with their outcomes, the same way: downloaded beside their manifest, and the
    // CLI verifies them.
    let r = proxy.admin_post(
        "/admin/v1/exports",
        &json!({"what": "entries", "format": "ndjson"}),
    );
    assert_eq!(r.status, 202, "{}", r.text());
    let entries = r.json()["id"].as_str().expect("id").to_owned();
    let job = eventually(30, "the entries export to end", || {
        let j = call("GET", &format!("/admin/v1/exports/{entries}"), &[]).json();
        (j["state"] != "running").then_some(j)
    });
    assert_eq!(
        (&job["state"], &job["what"]),
        (&json!("done"), &json!("entries")),
        "{job}"
    );
    assert_eq!(job["manifest"]["kind"], "entries", "{job}");
    let count = job["manifest"]["count"].as_u64().expect("count");
    assert!(count > 10, "the demo's entries: {job}");
    let name = job["manifest"]["file"].as_str().expect("file").to_owned();
    let file = call("GET", job["file_url"].as_str().expect("file url"), &[]);
    assert_eq!(
        file.body.iter().filter(|b| **b == b'\n').count() as u64,
        count
    );
    let manifest = call("GET", job["manifest_url"].as_str().expect("url"), &[]);
    let saved = dir.path().join(&name);
    std::fs::write(&saved, &file.body).expect("save");
    std::fs::write(
        dir.path().join(format!("{name}.manifest.json")),
        &manifest.body,
    )
    .expect("save");
    let out = idemgate(&["verify", "--export", saved.to_str().expect("utf-8")]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(proxy.terminate().success());
    assert!(!spools[0].exists(), "the spool goes with the process");
}

/// A `serve` killed with SIGKILL cannot remove its export spool. The next `serve` that starts on
/// the same `export_dir` removes it, and leaves alone the spool of a `serve` still running there,
/// whose export stays downloadable.
#[test]
fn a_killed_serves_export_spool_is_removed_at_the_next_start_and_a_live_ones_is_not() {
    let dir = tempfile::tempdir().expect("tempdir");
    let spool_base = dir.path().join("spool");
    std::fs::create_dir(&spool_base).expect("mkdir");
    let start = |name: &str| {
        let d = dir.path().join(name);
        std::fs::create_dir(&d).expect("mkdir");
        let ledger = d.join("ledger.db");
        let toml = format!(
            "[server]\nlisten = \"127.0.0.1:0\"\nadmin_listen = \"127.0.0.1:0\"\nledger = \"{}\"\nexport_dir = \"{}\"\n",
            ledger.display(),
            spool_base.display()
        );
        Proxy::start(&d, &toml, &ledger)
    };
    let export = |p: &Proxy| {
        let r = p.admin_post("/admin/v1/exports", &json!({"format": "ndjson"}));
        assert_eq!(r.status, 202, "{}", r.text());
        let id = r.json()["id"].as_str().expect("id").to_owned();
        eventually(30, "the export to end", || {
            let j = p.admin_get(&format!("/admin/v1/exports/{id}")).json();
            (j["state"] == "done").then_some(())
        });
        id
    };
    let spools = || {
        let mut v: Vec<_> = std::fs::read_dir(&spool_base)
            .expect("spool base")
            .flatten()
            .map(|e| e.path())
            .collect();
        v.sort();
        v
    };

    let mut killed = start("killed");
    export(&killed);
    let left = spools();
    assert_eq!(left.len(), 1, "{left:?}");
    killed.kill();
    assert_eq!(spools(), left, "SIGKILL leaves the spool behind");

    let live = start("live");
    assert_eq!(spools(), [] as [std::path::PathBuf; 0], "removed at start");
    assert!(
        live.logs().contains("removed the export spools"),
        "{}",
        live.logs()
    );
    let id = export(&live);
    let live_spool = spools();
    assert_eq!(live_spool.len(), 1, "{live_spool:?}");

    let mut third = start("third");
    assert_eq!(spools(), live_spool, "a live process's spool stays");
    let file = live.admin_get(&format!("/admin/v1/exports/{id}/file"));
    assert_eq!(file.status, 200, "{}", file.text());
    assert!(third.terminate().success());
    assert_eq!(spools(), live_spool);
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
    let proxy = Proxy::start(dir.path(), &toml, &ledger);

    let mut s = TcpStream::connect(proxy.admin.expect("admin")).expect("connect");
    write!(
        s,
        "GET /admin/v1/verify HTTP/1.1\r\nhost: idemgate\r\nauthorization: Bearer {ADMIN_TOKEN}\r\n\r\n"
    )
    .expect("send");
    std::thread::sleep(Duration::from_millis(100));
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

/// A `multipart/form-data` body of `(name, file name, bytes)` parts, and its content type.
fn multipart(parts: &[(&str, &str, &[u8])]) -> (String, Vec<u8>) {
    let boundary = "idemgate-test-boundary-7d1c";
    let mut body = Vec::new();
    for (name, file, bytes) in parts {
        body.extend_from_slice(
            format!(
                "--{boundary}\r\ncontent-disposition: form-data; name=\"{name}\"; filename=\"{file}\"\r\ncontent-type: application/octet-stream\r\n\r\n"
            )
            .as_bytes(),
        );
        body.extend_from_slice(bytes);
        body.extend_from_slice(b"\r\n");
    }
    body.extend_from_slice(format!("--{boundary}--\r\n").as_bytes());
    (format!("multipart/form-data; boundary={boundary}"), body)
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
