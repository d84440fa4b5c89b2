//! The audit trail over years: signing keys, signed exports an auditor verifies with the public key
//! alone, archives verified across segments and the live log, SIGKILL at each step of archival,
//! and the retention policy run by hand.

use std::io::{BufRead, BufReader};
use std::os::unix::fs::PermissionsExt;
use std::process::Stdio;

use super::*;

fn keygen(dir: &Path, prefix: &str) -> (PathBuf, PathBuf) {
    let p = dir.join(prefix);
    ok(&[
        "keygen",
        "--out",
        s(&p),
        "--name",
        "ledger.example/idemgate",
    ]);
    (
        PathBuf::from(format!("{}.key", p.display())),
        PathBuf::from(format!("{}.pub", p.display())),
    )
}

fn mode(p: &Path) -> u32 {
    std::fs::metadata(p).expect("stat").permissions().mode() & 0o777
}

#[test]
fn keygen_writes_a_key_only_its_owner_reads_and_never_replaces_one() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (key, public) = keygen(dir.path(), "signing");
    assert_eq!(mode(&key), 0o600);
    assert_eq!(mode(&public), 0o644);
    let private = std::fs::read_to_string(&key).expect("key");
    assert!(private.starts_with("PRIVATE+KEY+ledger.example/idemgate+"));
    let pubtext = std::fs::read_to_string(&public).expect("pub");
    assert!(pubtext.starts_with("ledger.example/idemgate+"));
    assert!(!pubtext.contains("PRIVATE"));
    // Asked again, it refuses, and both files are as they were.
    let out = idemgate(&["keygen", "--out", s(&dir.path().join("signing"))]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("exists"));
    assert_eq!(std::fs::read_to_string(&key).expect("key"), private);
    // A name with a space is refused before anything is written.
    let out = idemgate(&["keygen", "--out", s(&dir.path().join("x")), "--name", "a b"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(!dir.path().join("x.key").exists());
}

#[test]
fn keygen_lets_the_servers_group_read_the_key_and_a_server_that_cannot_says_why() {
    use std::os::unix::fs::MetadataExt;
    let dir = tempfile::tempdir().expect("tempdir");
    // A group this user may give a file to: its own primary group, by name.
    let gid = std::fs::metadata(dir.path()).expect("stat").gid();
    let groups = std::fs::read_to_string("/etc/group").expect("/etc/group");
    let group = groups
        .lines()
        .map(|l| l.split(':').collect::<Vec<_>>())
        .find(|f| f.len() > 2 && f[2] == gid.to_string())
        .map(|f| f[0].to_owned())
        .expect("the primary group's name");
    let p = dir.path().join("shared");
    ok(&["keygen", "--out", s(&p), "--group", &group]);
    let key = dir.path().join("shared.key");
    assert_eq!(mode(&key), 0o640);
    assert_eq!(std::fs::metadata(&key).expect("stat").gid(), gid);
    // A group that does not exist is refused before anything is written.
    let out = idemgate(&[
        "keygen",
        "--out",
        s(&dir.path().join("y")),
        "--group",
        "no-such-group-x",
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no such group"));
    assert!(!dir.path().join("y.key").exists() && !dir.path().join("y.pub").exists());
    // A key the server cannot read is named as unreadable, not as a bad key.
    let missing = dir.path().join("gone.key");
    let cfg = dir.path().join("idemgate.toml");
    std::fs::write(
        &cfg,
        format!(
            "[server]\nledger = \"{}\"\nsigning_key_file = \"{}\"\n",
            dir.path().join("l.db").display(),
            missing.display()
        ),
    )
    .expect("config");
    let out = idemgate(&["serve", "--config", s(&cfg), "--check"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_ne!(out.status.code(), Some(0), "{err}");
    assert!(err.contains("cannot read the signing key"), "{err}");
    assert!(!err.contains("not a signing key"), "{err}");
}

#[test]
fn a_signed_export_verifies_with_the_public_key_alone_and_not_otherwise() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = demo(dir.path(), 400);
    let (key, public) = keygen(dir.path(), "k");
    let (_, other) = keygen(dir.path(), "other");
    let file = dir.path().join("audit.ndjson");
    ok(&[
        "export",
        "--ledger",
        s(&db),
        "--format",
        "ndjson",
        "-o",
        s(&file),
        "--signing-key",
        s(&key),
    ]);
    let mpath = PathBuf::from(format!("{}.manifest.json", file.display()));
    let m: Value = serde_json::from_slice(&std::fs::read(&mpath).expect("manifest")).expect("json");
    assert_eq!(m["checkpoint"]["seq"], m["chain_head"]["seq"]);
    assert_eq!(m["checkpoint"]["origin"], "ledger.example/idemgate");
    // The signature is in the log too, and nothing secret is.
    let logged = json(&["log", "--ledger", s(&db), "--kind", "checkpoint", "--json"]);
    assert_eq!(logged.as_array().map(Vec::len), Some(1), "{logged}");
    let private = std::fs::read_to_string(&key).expect("key");
    // PRIVATE+KEY+NAME+ID+KEY: the key's base64 may itself hold a '+'.
    let secret = private.trim().splitn(5, '+').nth(4).expect("key part");
    assert!(secret.len() >= 44, "{secret}");
    for f in [&file, &mpath, &db] {
        let text = String::from_utf8_lossy(&std::fs::read(f).expect("read")).into_owned();
        assert!(
            !text.contains(secret),
            "{} holds the signing key",
            f.display()
        );
    }

    let (code, v) = verify_json(&["--export", s(&file), "--public-key", s(&public)]);
    assert_eq!((code, &v["signed"]), (0, &Value::Bool(true)), "{v}");
    // A public key checks checkpoints of something named: alone with a ledger it is refused.
    let out = idemgate(&["verify", "--ledger", s(&db), "--public-key", s(&public)]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("public-key"));
    let (code, v) = verify_json(&["--export", s(&file), "--public-key", s(&other)]);
    assert_eq!(code, 3, "{v}");
    assert!(v["problems"].to_string().contains("not signed"), "{v}");

    // An edited head: the last event cut off, the manifest made to agree with what is left.
    let cut = dir.path().join("cut.ndjson");
    std::fs::copy(&file, &cut).expect("copy");
    std::fs::copy(&mpath, format!("{}.manifest.json", cut.display())).expect("copy");
    rewrite_lines(&cut, |l| {
        l.pop();
    });
    let cm = PathBuf::from(format!("{}.manifest.json", cut.display()));
    let mut mv: Value = serde_json::from_slice(&std::fs::read(&cm).expect("m")).expect("json");
    let last: Value = serde_json::from_str(
        std::fs::read_to_string(&cut)
            .expect("cut")
            .lines()
            .last()
            .expect("a row"),
    )
    .expect("row");
    mv["count"] = (mv["count"].as_u64().expect("count") - 1).into();
    mv["last_seq"] = last["seq"].clone();
    mv["chain_head"] = serde_json::json!({"seq": last["seq"], "hash": last["hash"]});
    mv["checkpoint"]["seq"] = last["seq"].clone();
    mv["checkpoint"]["hash"] = last["hash"].clone();
    // The tree the shorter file ends, which anyone can recompute from the lines left.
    let range: idemgate_ledger::tree::TreeRange =
        serde_json::from_value(mv["tree"].clone()).expect("placed in the tree");
    let mut leaves = range.hasher().expect("hasher");
    for line in std::fs::read_to_string(&cut).expect("cut").lines() {
        leaves.push(&idemgate_ledger::export::leaf_of_line(line).expect("a row"));
    }
    mv["tree"]["size"] = leaves.head().size.into();
    mv["tree"]["root"] = leaves.head().root_base64().into();
    std::fs::write(&cm, serde_json::to_vec_pretty(&mv).expect("json")).expect("write");
    fix_manifest_sha(&cut);
    // Without the key, the edit is consistent; with it, it is caught.
    assert_eq!(verify_json(&["--export", s(&cut)]).0, 0);
    let (code, v) = verify_json(&["--export", s(&cut), "--public-key", s(&public)]);
    assert_eq!(code, 3, "{v}");
    assert!(v["problems"].to_string().contains("edited head"), "{v}");
    // And the note itself edited to name the shorter head: its signature breaks.
    let note = mv["checkpoint"]["note"].as_str().expect("note").to_owned();
    let head_seq = m["chain_head"]["seq"].as_i64().expect("seq");
    mv["checkpoint"]["note"] = note
        .replacen(
            &format!("\n{head_seq}\n"),
            &format!("\n{}\n", head_seq - 1),
            1,
        )
        .into();
    std::fs::write(&cm, serde_json::to_vec_pretty(&mv).expect("json")).expect("write");
    let (code, v) = verify_json(&["--export", s(&cut), "--public-key", s(&public)]);
    assert_eq!(code, 3, "{v}");
    assert!(v["problems"].to_string().contains("not signed"), "{v}");
}

#[test]
fn a_later_log_extends_an_earlier_signed_checkpoint() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = demo(dir.path(), 300);
    let (key, public) = keygen(dir.path(), "k");
    let export = |name: &str| {
        let f = dir.path().join(name);
        ok(&[
            "export",
            "--ledger",
            s(&db),
            "--format",
            "csv",
            "-o",
            s(&f),
            "--signing-key",
            s(&key),
        ]);
        f
    };
    let early = export("early.csv");
    // Exporting logs a checkpoint: the later export is longer.
    let late = export("late.csv");
    let early_m = format!("{}.manifest.json", early.display());
    let (code, v) = verify_json(&[
        "--export",
        s(&late),
        "--against",
        &early_m,
        "--public-key",
        s(&public),
    ]);
    assert_eq!(code, 0, "{v}");
    let (code, v) = verify_json(&[
        "--ledger",
        s(&db),
        "--against",
        &early_m,
        "--public-key",
        s(&public),
    ]);
    assert_eq!((code, &v["signed"]), (0, &Value::Bool(true)), "{v}");
    // The other way round, the earlier export does not hold the later head.
    let late_m = format!("{}.manifest.json", late.display());
    let (code, v) = verify_json(&[
        "--export",
        s(&early),
        "--against",
        &late_m,
        "--public-key",
        s(&public),
    ]);
    assert_eq!(code, 3, "{v}");
    assert!(v["problems"].to_string().contains("does not extend"), "{v}");
    // A ledger whose history was rewritten does not hold the signed head.
    let forked = dir.path().join("forked.db");
    std::fs::copy(&db, &forked).expect("copy");
    tamper(
        &forked,
        "UPDATE events SET hash = 'ab' || substr(hash, 3) WHERE seq = 5",
    );
    let (code, v) = verify_json(&[
        "--ledger",
        s(&forked),
        "--against",
        &early_m,
        "--public-key",
        s(&public),
    ]);
    assert_eq!(code, 3, "{v}");
}

/// The names of the archive's segment files, sorted.
fn segments(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .expect("dir")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".ndjson.gz"))
        .collect();
    v.sort();
    v
}

pub(super) fn head_seq(db: &Path) -> u64 {
    let v = json(&["log", "--ledger", s(db), "--limit", "1", "--json"]);
    v[0]["seq"].as_u64().expect("seq")
}

#[test]
fn archive_prunes_the_ledger_and_verify_names_a_missing_segment() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = demo(dir.path(), 2000);
    let arch = dir.path().join("archive");
    std::fs::create_dir(&arch).expect("mkdir");
    let before_live = count(&db, "SELECT COUNT(*) FROM events");
    let out = ok(&[
        "archive",
        "--ledger",
        s(&db),
        "--before",
        "1h",
        "--to",
        s(&arch),
        "--segment-events",
        "700",
    ]);
    assert!(out.contains("archived through seq"), "{out}");
    let segs = segments(&arch);
    assert!(segs.len() >= 2, "{segs:?}");
    let live = count(&db, "SELECT COUNT(*) FROM events");
    assert!(live < before_live / 2, "{live} of {before_live} left");
    // `verify --ledger` starts at the checkpoint and says so; the whole history verifies.
    let (code, v) = verify_json(&["--ledger", s(&db)]);
    assert_eq!(code, 0, "{v}");
    assert!(v["started_after"]["seq"].as_u64().is_some(), "{v}");
    let (code, v) = verify_json(&["--ledger", s(&db), "--archive", s(&arch)]);
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["count"].as_u64(), Some(head_seq(&db)), "{v}");
    // The same operation by its declaration takes the time as the CLI writes it.
    let again = json(&[
        "call",
        "archive",
        "--ledger",
        s(&db),
        "before=1h",
        &format!("dir={}", s(&arch)),
    ]);
    assert_eq!(again["cancelled"], false, "{again}");
    let bad = idemgate(&[
        "call",
        "archive",
        "--ledger",
        s(&db),
        "before=soon",
        &format!("dir={}", s(&arch)),
    ]);
    assert_eq!(bad.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("\"soon\" is not a time"));

    // A missing segment is named.
    let gone = segs[0].clone();
    std::fs::remove_file(arch.join(&gone)).expect("rm");
    let (code, v) = verify_json(&["--ledger", s(&db), "--archive", s(&arch)]);
    assert_eq!(code, 3, "{v}");
    assert!(v["problems"].to_string().contains(&gone), "{v}");
    let human = idemgate(&["verify", "--ledger", s(&db), "--archive", s(&arch)]);
    assert!(String::from_utf8_lossy(&human.stdout).contains(&gone));
}

/// Runs `archive` into `arch` paused at `step`, kills it there with SIGKILL, and returns once it
/// is gone.
fn killed_at(step: &str, db: &Path, arch: &str, env: &[(&str, String)]) {
    let mut child = Command::new(BIN)
        .args([
            "archive",
            "--ledger",
            s(db),
            "--before",
            "1h",
            "--to",
            arch,
            "--segment-events",
            "500",
        ])
        .envs(env.iter().map(|(k, v)| (k, v)))
        .env("IDEMGATE_TEST_PAUSE_AT", step)
        .env_remove("IDEMGATE_LEDGER")
        // The spool a killed run leaves goes with the test's directory, not into /tmp.
        .env("TMPDIR", db.parent().expect("the ledger's directory"))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("archive");
    let mut err = BufReader::new(child.stderr.take().expect("stderr"));
    let mut line = String::new();
    loop {
        line.clear();
        assert!(
            err.read_line(&mut line).expect("stderr") > 0,
            "archive ended before it reached {step}"
        );
        if line.contains(&format!("paused at {step}")) {
            break;
        }
    }
    child.kill().expect("SIGKILL");
    let status = child.wait().expect("wait");
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&status),
        Some(9),
        "{step}"
    );
}

/// SIGKILL at each step of archival, on ledgers `fresh` makes (a demo ledger each), into the
/// archives `place` names (reached with `env`): every event stays in the ledger or a complete
/// segment, and running it again finishes the work.
pub(super) fn sigkill_at_each_step(
    fresh: impl Fn(&str) -> Option<String>,
    place: impl Fn(&str) -> String,
    env: &[(&str, String)],
) {
    for step in ["written", "renamed", "sealed", "recorded", "removing"] {
        let Some(db) = fresh(step) else {
            eprintln!("skipped: IDEMGATE_TEST_PG=skip");
            return;
        };
        ok(&["demo", "--ledger", &db, "--events", "1500"]);
        let total = head_seq(Path::new(&db));
        let arch = place(step);
        killed_at(step, Path::new(&db), &arch, env);
        // Every event is in the ledger or in a complete segment: the whole history verifies,
        // the events there were and those the run logged before it was killed (its archive event).
        let (code, v) = verify_json_env(&["--ledger", &db, "--archive", &arch], env);
        assert_eq!(code, 0, "{step}: {v}");
        let now = head_seq(Path::new(&db));
        assert!(
            now == total || now == total + 1,
            "{step}: {now} after {total}"
        );
        assert_eq!(v["count"].as_u64(), Some(now), "{step}: {v}");
        // Running it again finishes the work.
        ok_env(
            &[
                "archive",
                "--ledger",
                &db,
                "--before",
                "1h",
                "--to",
                &arch,
                "--segment-events",
                "500",
            ],
            env,
        );
        let (code, v) = verify_json_env(&["--ledger", &db, "--archive", &arch], env);
        assert_eq!(code, 0, "{step}: {v}");
        assert_eq!(v["unfinished"], serde_json::json!([]), "{step}: {v}");
        let archived = v["segments"].as_array().map_or(0, Vec::len);
        assert!(archived >= 2, "{step}: {v}");
        // What is archived is gone from the live log, and nothing else is.
        let through = v["live"]["started_after"]["seq"]
            .as_u64()
            .expect("checkpoint");
        assert_eq!(
            v["live"]["first_seq"].as_u64(),
            Some(through + 1),
            "{step}: {v}"
        );
        let (_, live) = verify_json(&["--ledger", &db]);
        assert_eq!(
            live["count"].as_u64(),
            Some(head_seq(Path::new(&db)) - through),
            "{step}"
        );
        assert_eq!(
            v["count"].as_u64(),
            Some(head_seq(Path::new(&db))),
            "{step}"
        );
    }
}

/// A directory `archive-STEP` made in `dir`, for [`sigkill_at_each_step`].
fn archive_dir_in(dir: &Path) -> impl Fn(&str) -> String + '_ {
    move |step| {
        let arch = dir.join(format!("archive-{step}"));
        std::fs::create_dir(&arch).expect("mkdir");
        arch.display().to_string()
    }
}

#[test]
fn sigkill_at_each_step_of_archival_loses_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().to_path_buf();
    sigkill_at_each_step(
        |step| Some(root.join(format!("{step}.db")).display().to_string()),
        archive_dir_in(dir.path()),
        &[],
    );
}

#[test]
fn sigkill_at_each_step_of_archival_loses_nothing_on_postgresql() {
    let dir = tempfile::tempdir().expect("tempdir");
    sigkill_at_each_step(
        |step| idemgate_ledger::testing::fresh_postgres(&format!("archive{step}")),
        archive_dir_in(dir.path()),
        &[],
    );
}

#[test]
fn the_retention_policy_purges_long_expired_entries_but_never_a_stuck_one() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = demo(dir.path(), 1500);
    let stats = |db: &Path| json(&["entries", "--ledger", s(db), "--json"]);
    let before = stats(&db);
    let stuck_before = json(&["entries", "--ledger", s(&db), "--stuck", "--json"]);
    let expired_before = json(&["entries", "--ledger", s(&db), "--expired", "--json"]);
    assert!(expired_before.as_array().map_or(0, Vec::len) > 0);
    assert!(stuck_before.as_array().map_or(0, Vec::len) > 0);
    let arch = dir.path().join("archive");
    std::fs::create_dir(&arch).expect("mkdir");
    let cfg = dir.path().join("idemgate.toml");
    std::fs::write(
        &cfg,
        format!(
            "[server]\nledger = {:?}\nadmin_listen = \"off\"\n\n[retention]\nentries = \"1s\"\n\
             log_hot = \"2h\"\narchive_dir = {:?}\n",
            s(&db),
            s(&arch)
        ),
    )
    .expect("config");
    let checked = ok(&["serve", "--config", s(&cfg), "--check"]);
    assert!(
        checked.contains("retention policy: entries = 1s, log_hot = 2h")
            && checked.contains("(every 1h)"),
        "{checked}"
    );
    let r = json(&["retention", "run", "--config", s(&cfg), "--json"]);
    let purged = r["purged"].as_u64().expect("purged");
    assert_eq!(
        purged as usize,
        expired_before.as_array().map_or(0, Vec::len),
        "{r}"
    );
    assert!(
        r["archive"]["segments"]
            .as_array()
            .is_some_and(|a| !a.is_empty()),
        "{r}"
    );
    // Every stuck entry is still there; no expired one is.
    assert_eq!(
        json(&["entries", "--ledger", s(&db), "--stuck", "--json"]),
        stuck_before
    );
    assert_eq!(
        json(&["entries", "--ledger", s(&db), "--expired", "--json"]),
        serde_json::json!([])
    );
    assert_eq!(
        stats(&db).as_array().map(Vec::len),
        before.as_array().map(|a| a.len() - purged as usize)
    );
    // The purges name the policy's operator and the policy; the run is logged.
    let purges = json(&[
        "log",
        "--ledger",
        s(&db),
        "--kind",
        "purge",
        "--operator",
        "idemgate-retention",
        "--limit",
        "10000",
        "--json",
    ]);
    assert_eq!(purges.as_array().map_or(0, Vec::len) as u64, purged);
    assert!(
        purges[0]["reason"]
            .as_str()
            .is_some_and(|r| r.contains("entries = 1s")),
        "{purges}"
    );
    let runs = json(&["log", "--ledger", s(&db), "--kind", "retention", "--json"]);
    assert_eq!(runs.as_array().map(Vec::len), Some(1));
    let (code, v) = verify_json(&["--ledger", s(&db), "--archive", s(&arch)]);
    assert_eq!(code, 0, "{v}");
    // A configuration without a policy is refused.
    let bare = dir.path().join("bare.toml");
    std::fs::write(
        &bare,
        format!("[server]\nledger = {:?}\nadmin_listen = \"off\"\n", s(&db)),
    )
    .expect("config");
    let out = idemgate(&["retention", "run", "--config", s(&bare)]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no [retention]"));
    // The same operation by its declaration: refused without a policy, run with one.
    let out = idemgate(&["call", "run_retention", "--ledger", s(&db)]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("no [retention] policy is configured"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let again = [
        "call",
        "run_retention",
        "--ledger",
        s(&db),
        "--config",
        s(&cfg),
    ];
    assert_eq!(json(&again)["purged"], 0);
    let runs = json(&["log", "--ledger", s(&db), "--kind", "retention", "--json"]);
    assert_eq!(runs.as_array().map(Vec::len), Some(2), "{runs}");
}

/// A run killed after sealing a segment it never recorded, then a run that would cut segments
/// elsewhere (a policy's `before` moves on; here `--segment-events`): the leftover's range is
/// taken, so no two segments start at one seq and the history verifies.
#[test]
fn a_segment_left_by_a_killed_run_keeps_its_range() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = demo(dir.path(), 1500);
    let arch = dir.path().join("archive");
    std::fs::create_dir(&arch).expect("mkdir");
    killed_at("sealed", &db, s(&arch), &[]);
    let left = segments(&arch);
    assert_eq!(left.len(), 1, "{left:?}");
    ok(&[
        "archive",
        "--ledger",
        s(&db),
        "--before",
        "1h",
        "--to",
        s(&arch),
        "--segment-events",
        "700",
    ]);
    let now = segments(&arch);
    assert_eq!(now[0], left[0], "{now:?}");
    assert!(
        now.iter()
            .filter(|n| n.starts_with("events-000000000001-"))
            .count()
            == 1
    );
    let (code, v) = verify_json(&["--ledger", s(&db), "--archive", s(&arch)]);
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["unfinished"], serde_json::json!([]), "{v}");
}
