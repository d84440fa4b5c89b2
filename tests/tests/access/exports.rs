//! Exports through the admin API: jobs in a private spool, downloaded with their manifests, and
//! uploaded files verified; what a killed process leaves is reclaimed.

use super::*;

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
