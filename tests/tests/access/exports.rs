//! Exports through the admin API: jobs in a private spool, downloaded with their manifests, and
//! uploaded files verified; what a killed process leaves is reclaimed.

use std::path::{Path, PathBuf};

use serde_json::Value;

use super::*;

/// A demo ledger served with its exports spooled under `spool_base`.
struct Exporting {
    dir: tempfile::TempDir,
    ledger: PathBuf,
    spool_base: PathBuf,
    proxy: Proxy,
}

impl Exporting {
    /// A call to the admin API with the token and `extra` headers.
    fn call(&self, method: &str, path: &str, extra: &[(&str, &str)]) -> Resp {
        let auth = format!("Bearer {ADMIN_TOKEN}");
        let mut h = vec![("authorization", auth.as_str())];
        h.extend_from_slice(extra);
        request(self.proxy.admin.expect("admin"), method, path, &h, b"")
    }

    fn ledger(&self) -> &str {
        self.ledger.to_str().expect("utf-8")
    }

    /// `file` and `manifest` saved side by side under the manifest's name; the file's path.
    fn save(&self, job: &Value, file: &Resp, manifest: &Resp) -> PathBuf {
        let name = job["manifest"]["file"].as_str().expect("file");
        let saved = self.dir.path().join(name);
        std::fs::write(&saved, &file.body).expect("save");
        std::fs::write(
            self.dir.path().join(format!("{name}.manifest.json")),
            &manifest.body,
        )
        .expect("save");
        saved
    }
}

/// Starts an export of `body` and answers its id.
fn started(proxy: &Proxy, body: &Value) -> String {
    let r = proxy.admin_post("/admin/v1/exports", body);
    assert_eq!(r.status, 202, "{body}: {}", r.text());
    let id = r.json()["id"].as_str().expect("id").to_owned();
    assert_eq!(
        r.header("location"),
        Some(format!("/admin/v1/exports/{id}").as_str())
    );
    id
}

/// Export `id` once it has ended.
fn ended(proxy: &Proxy, id: &str) -> Value {
    eventually(30, "the export to end", || {
        let j = proxy.admin_get(&format!("/admin/v1/exports/{id}")).json();
        (j["state"] != "running").then_some(j)
    })
}

/// The lines of a downloaded NDJSON file.
fn lines(r: &Resp) -> u64 {
    r.body.iter().filter(|b| **b == b'\n').count() as u64
}

fn verified_by_the_cli(args: &[&str]) {
    let out = idemgate(args);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}

fn a_demo_ledger_served_with_an_export_dir() -> Exporting {
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
    let proxy = Proxy::start(dir.path(), &toml, &ledger);
    Exporting {
        dir,
        ledger,
        spool_base,
        proxy,
    }
}

/// Bad input is refused, and no job made: a client never names a path of the server.
fn bad_requests_make_no_job(x: &Exporting) {
    for body in [
        json!({"format": "ndjson", "path": "/tmp/anywhere.ndjson"}),
        json!({"format": "xml"}),
        json!({"format": "csv", "since": "2026-11-02", "until": "2026-11-01"}),
        json!({"format": "csv", "since": "yesterday"}),
    ] {
        let r = x.proxy.admin_post("/admin/v1/exports", &body);
        assert_eq!(r.status, 400, "{body}: {}", r.text());
        assert_eq!(r.code(), "invalid-argument");
    }
    assert_eq!(x.call("GET", "/admin/v1/exports", &[]).json(), json!([]));
    assert_eq!(
        x.call("GET", "/admin/v1/exports/0123", &[]).code(),
        "export-not-found"
    );
}

/// The whole log, exported: its file (whole, and by range) and its manifest download, and the
/// job shows the manifest it serves. Answers the job, the file and the manifest.
fn the_log_exports_and_downloads(x: &Exporting) -> (Value, Resp, Resp) {
    let id = started(&x.proxy, &json!({"format": "ndjson"}));
    let job = ended(&x.proxy, &id);
    assert_eq!(job["state"], "done", "{job}");
    let name = job["manifest"]["file"].as_str().expect("file");
    let count = job["manifest"]["count"].as_u64().expect("count");
    assert!(count > 100, "the demo's whole log: {job}");
    assert_eq!(job["done"].as_u64(), Some(count));
    let file = x.call("GET", job["file_url"].as_str().expect("file url"), &[]);
    assert_eq!(file.status, 200);
    assert_eq!(file.header("content-type"), Some("application/x-ndjson"));
    assert_eq!(
        file.header("content-disposition"),
        Some(format!("attachment; filename=\"{name}\"").as_str())
    );
    assert_eq!(lines(&file), count);
    let manifest = x.call("GET", job["manifest_url"].as_str().expect("url"), &[]);
    assert_eq!(manifest.status, 200);
    assert_eq!(
        manifest.json(),
        job["manifest"],
        "the job shows the manifest it serves"
    );
    let part = x.call(
        "GET",
        &format!("/admin/v1/exports/{id}/file"),
        &[("range", "bytes=10-19")],
    );
    assert_eq!(part.status, 206);
    assert_eq!(part.body, file.body[10..20]);
    (job, file, manifest)
}

/// Saved as served, the CLI verifies it, and the ledger still holds its head; the admin API says
/// so of the manifest too, and that a head the ledger never had is gone. Answers the file edited.
fn the_cli_and_the_admin_api_verify_it(
    x: &Exporting,
    job: &Value,
    file: &Resp,
    manifest: &Resp,
) -> Vec<u8> {
    let saved = x.save(job, file, manifest);
    let saved_s = saved.to_str().expect("utf-8");
    verified_by_the_cli(&["verify", "--export", saved_s]);
    let m = format!("{saved_s}.manifest.json");
    verified_by_the_cli(&["verify", "--ledger", x.ledger(), "--against", &m]);
    let against = x.proxy.admin_post(
        "/admin/v1/verify/against",
        &serde_json::from_slice(&manifest.body).expect("manifest"),
    );
    assert_eq!(against.status, 200, "{}", against.text());
    assert_eq!(against.json()["ok"], true, "{}", against.text());
    let mut forged = job["manifest"].clone();
    forged["ledger_head"]["hash"] = json!("0".repeat(64));
    let against = x.proxy.admin_post("/admin/v1/verify/against", &forged);
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
    edited
}

/// The same checks on an upload (the console in a browser): the server verifies the file and its
/// manifest without the ledger, names them as sent, and keeps nothing.
fn an_upload_is_verified(x: &Exporting, job: &Value, file: &Resp, manifest: &Resp, edited: &[u8]) {
    let upload = |parts: &[(&str, &str, &[u8])]| {
        let (kind, body) = multipart(parts);
        let auth = format!("Bearer {ADMIN_TOKEN}");
        let h = [("authorization", auth.as_str()), ("content-type", &kind)];
        let admin = x.proxy.admin.expect("admin");
        request(admin, "POST", "/admin/v1/verify/export", &h, &body)
    };
    let name = job["manifest"]["file"].as_str().expect("file");
    let manifest_name = format!("{name}.manifest.json");
    let good = upload(&[
        ("file", name, &file.body),
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
        ("file", name, edited),
    ]);
    let bad = bad.json();
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
    let not_a_form = x
        .proxy
        .admin_post("/admin/v1/verify/export", &json!({"file": "x"}));
    assert_eq!(
        (not_a_form.status, not_a_form.code()),
        (415, "unsupported-media-type".into())
    );
}

/// The exports in a spool, beside the lock its process holds (see the next test).
fn exports_in(spool: &Path) -> Vec<String> {
    std::fs::read_dir(spool)
        .expect("spool")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n != ".lock")
        .collect()
}

/// The spool: one, private, under export_dir; a deleted export's files go at once. Answers it.
fn a_deleted_export_leaves_its_spool_at_once(x: &Exporting, job: &Value) -> PathBuf {
    let spools: Vec<_> = std::fs::read_dir(&x.spool_base)
        .expect("spool base")
        .flatten()
        .map(|e| e.path())
        .collect();
    assert_eq!(spools.len(), 1, "{spools:?}");
    let spool = spools[0].clone();
    assert_eq!(exports_in(&spool).len(), 2, "the file and its manifest");
    let csv = started(&x.proxy, &json!({"format": "csv", "since": "7d"}));
    let id = job["id"].as_str().expect("id");
    assert_eq!(
        x.call("DELETE", &format!("/admin/v1/exports/{id}"), &[])
            .status,
        204
    );
    assert_eq!(
        x.call("GET", &format!("/admin/v1/exports/{id}/file"), &[])
            .code(),
        "export-not-found"
    );
    assert_eq!(ended(&x.proxy, &csv)["state"], "done");
    let left = exports_in(&spool);
    assert!(
        left.iter().all(|n| n.contains(&csv)) && left.len() == 2,
        "{left:?}"
    );
    spool
}

/// The entries with their outcomes, the same way: downloaded beside their manifest, and the CLI
/// verifies them.
fn the_entries_export_the_same_way(x: &Exporting) {
    let id = started(&x.proxy, &json!({"what": "entries", "format": "ndjson"}));
    let job = ended(&x.proxy, &id);
    assert_eq!(
        (&job["state"], &job["what"]),
        (&json!("done"), &json!("entries")),
        "{job}"
    );
    assert_eq!(job["manifest"]["kind"], "entries", "{job}");
    let count = job["manifest"]["count"].as_u64().expect("count");
    assert!(count > 10, "the demo's entries: {job}");
    let file = x.call("GET", job["file_url"].as_str().expect("file url"), &[]);
    assert_eq!(lines(&file), count);
    let manifest = x.call("GET", job["manifest_url"].as_str().expect("url"), &[]);
    let saved = x.save(&job, &file, &manifest);
    verified_by_the_cli(&["verify", "--export", saved.to_str().expect("utf-8")]);
}

/// An export through the admin API: a job in a private spool under `server.export_dir`, downloaded
/// (whole, and by range) with its manifest, verified by the CLI against the ledger; the client
/// never names a server path; a deleted export and, at the process's end, the spool are gone.
#[test]
fn an_export_through_the_admin_api_downloads_with_its_manifest_and_leaves_nothing_behind() {
    let mut x = a_demo_ledger_served_with_an_export_dir();
    bad_requests_make_no_job(&x);
    let (job, file, manifest) = the_log_exports_and_downloads(&x);
    let edited = the_cli_and_the_admin_api_verify_it(&x, &job, &file, &manifest);
    an_upload_is_verified(&x, &job, &file, &manifest, &edited);
    let spool = a_deleted_export_leaves_its_spool_at_once(&x, &job);
    the_entries_export_the_same_way(&x);
    assert!(x.proxy.terminate().success());
    assert!(!spool.exists(), "the spool goes with the process");
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
        let id = started(p, &json!({"format": "ndjson"}));
        assert_eq!(ended(p, &id)["state"], "done");
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
