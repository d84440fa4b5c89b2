//! The log's proofs against an implementation idemgate shares no code with: Go's
//! `golang.org/x/mod/sumdb/note` and `sumdb/tlog` (Debian's golang-golang-x-mod-dev), built here
//! from `tests/go/tlogkat`. Go checks idemgate's checkpoints and proofs; idemgate checks Go's;
//! and an altered event, a moved index or another key's checkpoint fails on both sides.
#![allow(
    clippy::too_many_lines,
    reason = "a test is one scenario told top to bottom, its steps checked in order"
)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;
use idemgate_tests::*;

mod witness;

/// The Go checker, built once per run.
fn tlogkat() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("go/tlogkat/main.go");
        let tmp = Path::new(env!("CARGO_TARGET_TMPDIR"));
        let bin = tmp.join("tlogkat");
        let out = Command::new("go")
            .args(["build", "-o"])
            .arg(&bin)
            .arg(&root)
            .env("GO111MODULE", "off")
            .env("GOPATH", "/usr/share/gocode")
            .env("GOCACHE", tmp.join("go-cache"))
            .env("GOFLAGS", "")
            .output()
            .expect("go: install golang-go and golang-golang-x-mod-dev (bash .ci/deps)");
        assert!(
            out.status.success(),
            "go build: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        bin
    })
}

/// Runs the Go checker: whether it accepted, and what it said.
fn go(args: &[&Path]) -> (bool, String) {
    let out = Command::new(tlogkat())
        .args(args)
        .output()
        .expect("tlogkat");
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), said)
}

struct Keys {
    key: PathBuf,
    public: PathBuf,
}

fn keys(dir: &Path, name: &str) -> Keys {
    let prefix = dir.join(name.replace('/', "_"));
    let p = prefix.to_str().expect("utf8");
    let made = idemgate(&["keygen", "--out", p, "--name", name]);
    assert!(
        made.status.success(),
        "{}",
        String::from_utf8_lossy(&made.stderr)
    );
    Keys {
        key: PathBuf::from(format!("{p}.key")),
        public: PathBuf::from(format!("{p}.pub")),
    }
}

fn s(p: &Path) -> &str {
    p.to_str().expect("utf8")
}

/// `idemgate verify --proof`: its exit code and what it printed.
fn verify(proof: &Path, public: &Path) -> (i32, String) {
    let out = idemgate(&["verify", "--proof", s(proof), "--public-key", s(public)]);
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.code().unwrap_or(-1), said)
}

#[test]
fn go_checks_idemgate_s_inclusion_proofs_and_refuses_altered_ones() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ledger = dir.path().join("l.db");
    let l = s(&ledger);
    let seeded = idemgate(&["demo", "--ledger", l, "--events", "3000"]);
    assert!(
        seeded.status.success(),
        "{}",
        String::from_utf8_lossy(&seeded.stderr)
    );
    let k = keys(dir.path(), "audit.example/idemgate");
    let events = idemgate_json(&["log", "--ledger", l, "--limit", "1", "--json"])[0]["seq"]
        .as_i64()
        .expect("the last seq");
    for seq in [1, 2, events / 2, events] {
        let proof = dir.path().join(format!("{seq}.tlog-proof"));
        let p = idemgate_json(&[
            "prove",
            "--ledger",
            l,
            "--event",
            &seq.to_string(),
            "--signing-key",
            s(&k.key),
            "-o",
            s(&proof),
            "--json",
        ]);
        assert_eq!(
            p["index"],
            seq - 1,
            "leaves in seq order from the first event"
        );
        let (ok, said) = go(&[Path::new("check-proof"), &k.public, &proof]);
        assert!(ok, "Go refused idemgate's proof of {seq}: {said}");
        let (code, said) = verify(&proof, &k.public);
        assert_eq!(code, 0, "{said}");
        assert!(said.contains(&format!("event {seq} ")), "{said}");
    }
    // An altered event: its leaf no longer hashes to the path's start.
    let proof = dir.path().join(format!("{events}.tlog-proof"));
    let text = std::fs::read_to_string(&proof).expect("proof");
    let altered = dir.path().join("altered.tlog-proof");
    let mut lines: Vec<String> = text.split('\n').map(str::to_owned).collect();
    let leaf = lines[1].strip_prefix("extra ").expect("extra").to_owned();
    let event: serde_json::Value = serde_json::from_slice(&B64.decode(leaf).expect("base64"))
        .expect("the leaf is the event's JSON");
    assert_eq!(event["seq"], events);
    let forged = serde_json::to_vec(&serde_json::json!({ "forged": event })).expect("json");
    lines[1] = format!("extra {}", B64.encode(forged));
    std::fs::write(&altered, lines.join("\n")).expect("write");
    assert!(
        !go(&[Path::new("check-proof"), &k.public, &altered]).0,
        "Go accepted an altered event"
    );
    let (code, said) = verify(&altered, &k.public);
    assert_eq!(code, 3, "{said}");
    assert!(said.contains("is not in the tree"), "{said}");
    // Another key's checkpoint is not the log's.
    let other = keys(dir.path(), "other.example/idemgate");
    let (code, said) = verify(&proof, &other.public);
    assert_eq!(code, 3, "{said}");
    assert!(said.contains("not signed by"), "{said}");
    assert!(!go(&[Path::new("check-proof"), &other.public, &proof]).0);
}

#[test]
fn idemgate_checks_go_s_proofs_and_refuses_a_moved_index() {
    let dir = tempfile::tempdir().expect("tempdir");
    let k = keys(dir.path(), "go.example/log");
    let out = dir.path().join("go");
    std::fs::create_dir(&out).expect("mkdir");
    let (ok, said) = go(&[
        Path::new("make"),
        &k.key,
        Path::new("1000"),
        Path::new("337"),
        Path::new("400"),
        &out,
    ]);
    assert!(ok, "{said}");
    let proof = out.join("proof.tlog-proof");
    let (code, said) = verify(&proof, &k.public);
    assert_eq!(code, 0, "idemgate refused Go's proof: {said}");
    assert!(
        said.contains("leaf 337") && said.contains("1000 events"),
        "{said}"
    );
    let text = std::fs::read_to_string(&proof).expect("proof");
    let moved = dir.path().join("moved.tlog-proof");
    std::fs::write(&moved, text.replace("\nindex 337\n", "\nindex 338\n")).expect("write");
    let (code, said) = verify(&moved, &k.public);
    assert_eq!(code, 3, "{said}");
    assert!(said.contains("index 338"), "{said}");
    // Go's consistency proof from its tree of 400 to its tree of 1000, as an add-checkpoint body.
    let body = dir.path().join("go.consistency");
    let hashes = std::fs::read_to_string(out.join("tree.proof")).expect("proof");
    let new = std::fs::read_to_string(out.join("new.cp")).expect("checkpoint");
    std::fs::write(&body, format!("old 400\n{hashes}\n{new}")).expect("write");
    let (code, said) = verify_extension(&out.join("old.cp"), &body, &k.public);
    assert_eq!(code, 0, "idemgate refused Go's consistency proof: {said}");
    assert!(
        said.contains("1000 events") && said.contains("tree of 400"),
        "{said}"
    );
}

#[test]
fn a_proof_needs_the_log_s_key_and_a_logged_event() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ledger = dir.path().join("l.db");
    let l = s(&ledger);
    assert!(idemgate(&["demo", "--ledger", l, "--events", "100"])
        .status
        .success());
    let out = dir.path().join("p.tlog-proof");
    let refused = idemgate(&["prove", "--ledger", l, "--event", "5", "-o", s(&out)]);
    assert!(!refused.status.success());
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(said.contains("signing"), "{said}");
    assert!(!out.exists(), "nothing written");
    let k = keys(dir.path(), "audit.example/idemgate");
    let missing = idemgate(&[
        "prove",
        "--ledger",
        l,
        "--event",
        "99999999",
        "--signing-key",
        s(&k.key),
        "-o",
        s(&out),
    ]);
    assert!(!missing.status.success());
    let said = String::from_utf8_lossy(&missing.stderr);
    assert!(
        said.contains("not-found") && said.contains("99999999"),
        "{said}"
    );
    assert!(!out.exists(), "nothing written");
}

/// What follows a file's first blank line: a proof's checkpoint.
fn after_blank(text: &str) -> &str {
    text.split_once("\n\n").expect("a blank line").1
}

/// `idemgate verify --consistency OLD --to NEW`: its exit code and what it printed.
fn verify_extension(old: &Path, new: &Path, public: &Path) -> (i32, String) {
    let out = idemgate(&[
        "verify",
        "--consistency",
        s(old),
        "--to",
        s(new),
        "--public-key",
        s(public),
    ]);
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.code().unwrap_or(-1), said)
}

/// A SQLite ledger's files, copied as they are (no process has it open).
fn copy_ledger(from: &Path, to: &Path) {
    for ext in ["", "-wal", "-shm"] {
        let f = format!("{}{ext}", s(from));
        if Path::new(&f).exists() {
            std::fs::copy(&f, format!("{}{ext}", s(to))).expect("copy");
        }
    }
}

/// Five more claims in the ledger at `l`.
fn grow(l: &str, tag: &str) {
    let ops = idemgate_ops::Ops::open_existing(l).expect("ledger");
    for i in 0..5 {
        ops.store()
            .claim(charge_claim(&format!("{tag}-{i}"), "o", 60_000))
            .wait()
            .expect("claim");
    }
}

#[test]
fn a_later_tree_extends_an_earlier_one_and_a_fork_or_rollback_is_named() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = |name: &str| dir.path().join(name);
    let ledger = path("l.db");
    let l = s(&ledger);
    assert!(idemgate(&["demo", "--ledger", l, "--events", "500"])
        .status
        .success());
    let k = keys(dir.path(), "audit.example/idemgate");
    let prove = |args: &[&str], out: &Path| {
        let mut all = vec![
            "prove",
            "--ledger",
            l,
            "--signing-key",
            s(&k.key),
            "-o",
            s(out),
            "--json",
        ];
        all.extend_from_slice(args);
        idemgate_json(&all)
    };
    // March: a proof of event 1 carries the tree then.
    let march = path("march.tlog-proof");
    let size = prove(&["--event", "1"], &march)["size"]
        .as_u64()
        .expect("size");
    // A copy of the log as it was in March, which will be rewritten.
    copy_ledger(&ledger, &path("fork.db"));
    grow(l, "april");
    // April extends March.
    let april = path("april.consistency");
    let e = prove(&["--consistency", s(&march)], &april);
    assert_eq!(
        (e["old"].as_u64(), e["size"].as_u64()),
        (Some(size), Some(size + 5))
    );
    let (code, said) = verify_extension(&march, &april, &k.public);
    assert_eq!(code, 0, "{said}");
    assert!(said.contains(&format!("{} events", size + 5)), "{said}");
    // Go agrees, from the two checkpoints and the proof's hashes alone.
    let text = std::fs::read_to_string(&april).expect("april");
    let (proof_lines, new_cp) = text.split_once("\n\n").expect("body");
    let (old_cp, new_cp_file, hashes) = (path("old.cp"), path("new.cp"), path("hashes"));
    std::fs::write(
        &old_cp,
        after_blank(&std::fs::read_to_string(&march).expect("march")),
    )
    .expect("w");
    std::fs::write(&new_cp_file, new_cp).expect("write");
    let lines: Vec<&str> = proof_lines.lines().skip(1).collect();
    std::fs::write(&hashes, lines.join("\n")).expect("write");
    let (ok, said) = go(&[
        Path::new("check-tree"),
        &k.public,
        &old_cp,
        &new_cp_file,
        &hashes,
    ]);
    assert!(ok, "Go refused idemgate's consistency proof: {said}");
    // A rollback: offered as "newer", March's tree is older than April's.
    let back = path("back.consistency");
    std::fs::write(
        &back,
        format!(
            "old {}\n\n{}",
            size + 5,
            after_blank(&std::fs::read_to_string(&march).expect("m"))
        ),
    )
    .expect("w");
    let (code, said) = verify_extension(&april, &back, &k.public);
    assert_eq!(code, 3, "{said}");
    assert!(said.contains("rollback"), "{said}");
    let (ok, _) = go(&[
        Path::new("check-tree"),
        &k.public,
        &new_cp_file,
        &old_cp,
        &hashes,
    ]);
    assert!(!ok, "Go accepted a rollback");
    // A fork: the copy grows other events to the same size; its tree is not April's.
    let forked = path("fork.db");
    grow(s(&forked), "rewritten");
    let other = path("other.consistency");
    let f = idemgate_json(&[
        "prove",
        "--ledger",
        s(&forked),
        "--signing-key",
        s(&k.key),
        "-o",
        s(&other),
        "--consistency",
        s(&march),
        "--json",
    ]);
    assert_eq!(f["size"], e["size"]);
    let fork = path("fork.consistency");
    let other_text = std::fs::read_to_string(&other).expect("other");
    std::fs::write(
        &fork,
        format!("old {}\n\n{}", size + 5, after_blank(&other_text)),
    )
    .expect("w");
    let (code, said) = verify_extension(&april, &fork, &k.public);
    assert_eq!(code, 3, "{said}");
    assert!(said.contains("fork"), "{said}");
    // The log itself refuses to prove an extension of a tree it no longer has.
    let refused = idemgate(&[
        "prove",
        "--ledger",
        s(&forked),
        "--signing-key",
        s(&k.key),
        "-o",
        s(&path("x")),
        "--consistency",
        s(&april),
    ]);
    assert!(!refused.status.success());
    assert!(String::from_utf8_lossy(&refused.stderr).contains("rewritten"));
}

#[test]
fn an_archived_event_is_proved_from_its_sealed_segment() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = |name: &str| dir.path().join(name);
    let ledger = path("l.db");
    let l = s(&ledger);
    assert!(idemgate(&["demo", "--ledger", l, "--events", "500"])
        .status
        .success());
    let k = keys(dir.path(), "audit.example/idemgate");
    let archive = path("archive");
    std::fs::create_dir(&archive).expect("mkdir");
    // The events logged before event 20 leave the live log.
    let all = idemgate_json(&["log", "--ledger", l, "--limit", "10000", "--json"]);
    let twentieth = all
        .as_array()
        .expect("events")
        .iter()
        .find(|e| e["seq"] == 20)
        .expect("event 20");
    let now = twentieth["at"].as_str().expect("its time").to_owned();
    let out = idemgate(&[
        "archive",
        "--ledger",
        l,
        "--before",
        &now,
        "--to",
        s(&archive),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let live = idemgate_json(&["log", "--ledger", l, "--limit", "1000", "--json"]);
    assert!(
        live.as_array()
            .expect("events")
            .iter()
            .all(|e| e["seq"].as_i64() > Some(5)),
        "event 5 is archived"
    );
    let proof = path("5.tlog-proof");
    let prove = |extra: &[&str]| {
        let mut args = vec![
            "prove",
            "--ledger",
            l,
            "--event",
            "5",
            "--signing-key",
            s(&k.key),
        ];
        args.extend_from_slice(&["-o", s(&proof)]);
        args.extend_from_slice(extra);
        idemgate(&args)
    };
    let refused = prove(&[]);
    assert!(!refused.status.success());
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(
        said.contains("archived") && said.contains("--archive"),
        "{said}"
    );
    let made = prove(&["--archive", s(&archive)]);
    assert!(
        made.status.success(),
        "{}",
        String::from_utf8_lossy(&made.stderr)
    );
    let (code, said) = verify(&proof, &k.public);
    assert_eq!(code, 0, "{said}");
    assert!(said.contains("event 5 (leaf 4)"), "{said}");
    let (ok, said) = go(&[Path::new("check-proof"), &k.public, &proof]);
    assert!(ok, "{said}");
}

/// An export's manifest places its events in the tree: Go stores the hashes left of the first
/// leaf where `sumdb/tlog` keeps them, adds the exported events' leaves, and gets the root of the
/// tree the manifest's checkpoint signs; a reordered file does not. The manifest is also the
/// older tree a later consistency proof starts from.
#[test]
fn go_recomputes_an_export_s_signed_tree_from_its_lines() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = |name: &str| dir.path().join(name);
    let ledger = path("l.db");
    let l = s(&ledger);
    assert!(idemgate(&["demo", "--ledger", l, "--events", "500"])
        .status
        .success());
    let k = keys(dir.path(), "audit.example/idemgate");
    let since = idemgate_ledger::now_millis().to_string();
    grow(l, "may");
    let out = path("may.ndjson");
    let m = idemgate_json(&[
        "export",
        "--ledger",
        l,
        "--format",
        "ndjson",
        "--since",
        &since,
        "-o",
        s(&out),
        "--signing-key",
        s(&k.key),
        "--json",
    ]);
    let tree = &m["tree"];
    let first = tree["first_leaf"].as_u64().expect("placed in the tree");
    assert!(
        first > 0 && first.count_ones() > 1,
        "a range after several subtrees: {first}"
    );
    let text = std::fs::read_to_string(&out).expect("export");
    let leaves: Vec<String> = text
        .lines()
        .map(|line| B64.encode(idemgate_ledger::export::leaf_of_line(line).expect("a line")))
        .collect();
    assert_eq!(tree["size"].as_u64(), Some(first + leaves.len() as u64));
    let (cp, left, leaf_file) = (path("may.cp"), path("left"), path("leaves"));
    std::fs::write(&cp, tree["checkpoint"].as_str().expect("signed")).expect("write");
    let left_lines: Vec<&str> = tree["left"]
        .as_array()
        .expect("left")
        .iter()
        .map(|h| h.as_str().expect("hash"))
        .collect();
    std::fs::write(&left, left_lines.join("\n")).expect("write");
    let first_arg = PathBuf::from(first.to_string());
    let check = |leaves: &[String]| {
        std::fs::write(&leaf_file, leaves.join("\n")).expect("write");
        go(&[
            Path::new("check-range"),
            &k.public,
            &cp,
            &first_arg,
            &left,
            &leaf_file,
        ])
    };
    let (ok, said) = check(&leaves);
    assert!(ok, "Go refused the export's place in the tree: {said}");
    let mut swapped = leaves.clone();
    swapped.swap(1, 2);
    let (ok, said) = check(&swapped);
    assert!(!ok, "Go took a reordered export: {said}");
    // Later, the log proves its tree extends the one the export's manifest signs.
    grow(l, "june");
    let june = path("june.consistency");
    let manifest = PathBuf::from(format!("{}.manifest.json", s(&out)));
    let e = idemgate_json(&[
        "prove",
        "--ledger",
        l,
        "--signing-key",
        s(&k.key),
        "-o",
        s(&june),
        "--consistency",
        s(&manifest),
        "--json",
    ]);
    assert_eq!(e["old"], tree["size"]);
    let (code, said) = verify_extension(&manifest, &june, &k.public);
    assert_eq!(code, 0, "{said}");
}
