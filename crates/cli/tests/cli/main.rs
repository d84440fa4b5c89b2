//! The `idemgate` binary against real ledger files: the demo, `--json`, verification of tampered
//! ledgers and exports, and refused actions that must leave the ledger byte-for-byte unchanged.
#![allow(
    clippy::too_many_lines,
    reason = "a test is one scenario told top to bottom, its steps checked in order"
)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;
use sha2::{Digest, Sha256};

mod actions;
mod archival;
mod audit;
mod bucket;
mod reads;
mod setup;
mod signals;

const BIN: &str = env!("CARGO_BIN_EXE_idemgate");

fn idemgate(args: &[&str]) -> Output {
    idemgate_env(args, &[])
}

/// Runs idemgate with `env` set besides (an S3 server's endpoint and credentials).
fn idemgate_env(args: &[&str], env: &[(&str, String)]) -> Output {
    Command::new(BIN)
        .args(args)
        .env_remove("IDEMGATE_LEDGER")
        .env_remove("IDEMGATE_CONFIG")
        .env_remove("IDEMGATE_CHAIN_KEY")
        .env_remove("IDEMGATE_CHAIN_KEY_FILE")
        .env_remove("IDEMGATE_OPERATOR")
        .envs(env.iter().map(|(k, v)| (k, v)))
        .output()
        .expect("run idemgate")
}

fn ok(args: &[&str]) -> String {
    ok_env(args, &[])
}

fn ok_env(args: &[&str], env: &[(&str, String)]) -> String {
    let out = idemgate_env(args, env);
    assert!(
        out.status.success(),
        "idemgate {args:?} failed ({:?}): {}{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf8")
}

fn json(args: &[&str]) -> Value {
    serde_json::from_str(&ok(args)).expect("json output")
}

fn demo(dir: &Path, events: u64) -> PathBuf {
    let db = dir.join("demo.db");
    ok(&["demo", "--ledger", s(&db), "--events", &events.to_string()]);
    db
}

fn s(p: &Path) -> &str {
    p.to_str().expect("utf8 path")
}

fn file_sha(p: &Path) -> String {
    hex::encode(Sha256::digest(std::fs::read(p).expect("read")))
}

/// Runs SQL on the ledger behind its back, with the append-only triggers dropped.
fn tamper(db: &Path, sql: &str) {
    let c = rusqlite::Connection::open(db).expect("open raw");
    c.execute_batch(
        "DROP TRIGGER IF EXISTS events_append_only_update; DROP TRIGGER IF EXISTS events_append_only_delete;",
    )
    .expect("drop triggers");
    c.execute_batch(sql).expect("tamper");
}

fn verify_json(args: &[&str]) -> (i32, Value) {
    verify_json_env(args, &[])
}

fn verify_json_env(args: &[&str], env: &[(&str, String)]) -> (i32, Value) {
    let mut a = vec!["verify"];
    a.extend_from_slice(args);
    a.push("--json");
    let out = idemgate_env(&a, env);
    let v = serde_json::from_slice(&out.stdout).unwrap_or_else(|_| {
        panic!(
            "verify printed no JSON: {}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (out.status.code().unwrap_or(-1), v)
}

fn rewrite_lines(p: &Path, f: impl FnOnce(&mut Vec<String>)) {
    let text = std::fs::read_to_string(p).expect("read");
    let mut lines: Vec<String> = text.lines().map(str::to_owned).collect();
    f(&mut lines);
    std::fs::write(p, lines.join("\n") + "\n").expect("write");
}

/// What an attacker who edits the export would also do: make the manifest's sha256 match again.
fn fix_manifest_sha(file: &Path) {
    let m = PathBuf::from(format!("{}.manifest.json", file.display()));
    let mut v: Value = serde_json::from_slice(&std::fs::read(&m).expect("manifest")).expect("json");
    v["sha256"] = Value::String(file_sha(file));
    std::fs::write(&m, serde_json::to_vec_pretty(&v).expect("json")).expect("write");
}

fn ledger_fingerprint(db: &Path) -> (String, bool) {
    let wal = PathBuf::from(format!("{}-wal", db.display()));
    let wal_has_frames = wal.exists()
        && std::fs::metadata(&wal)
            .map(|m| m.len() > 0)
            .unwrap_or(false);
    (file_sha(db), wal_has_frames)
}

/// A ledger of `n` expired entries, each claimed and completed: 2n events.
fn expired_ledger(dir: &Path, n: usize) -> PathBuf {
    let db = dir.join("expired.db");
    let ops = idemgate_ops::Ops::open_or_create(s(&db)).expect("ledger");
    idemgate_ledger::testing::expired_charges(ops.store().as_ref(), n);
    db
}

/// Runs idemgate, waits until `ready` holds, sends it `signal` (`INT`, as Ctrl-C does, or `TERM`),
/// and returns what it printed and how it ended.
fn interrupted(signal: &str, args: &[&str], mut ready: impl FnMut() -> bool) -> Output {
    use std::process::Stdio;
    let child = Command::new(BIN)
        .args(args)
        .env_remove("IDEMGATE_LEDGER")
        .env_remove("IDEMGATE_CONFIG")
        .env_remove("IDEMGATE_CHAIN_KEY")
        .env_remove("IDEMGATE_CHAIN_KEY_FILE")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run idemgate");
    let mut child = child;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !ready() {
        assert!(
            child.try_wait().expect("try_wait").is_none(),
            "idemgate {args:?} ended before it could be interrupted"
        );
        assert!(std::time::Instant::now() < deadline, "never ready");
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    let kill = Command::new("kill")
        .args([&format!("-{signal}"), &child.id().to_string()])
        .status()
        .expect("kill");
    assert!(kill.success());
    child.wait_with_output().expect("wait")
}

fn count(db: &Path, sql: &str) -> u64 {
    let c = rusqlite::Connection::open_with_flags(db, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
        .expect("open");
    c.query_row(sql, [], |r| r.get::<_, i64>(0))
        .expect("count")
        .unsigned_abs()
}
