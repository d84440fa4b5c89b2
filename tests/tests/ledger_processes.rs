//! Exactly one winner per key across threads and across processes; a claim survives SIGKILL.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use idemgate_ledger::*;

const HELPER: &str = env!("CARGO_BIN_EXE_ledger-helper");

fn claim_req(key: &str, owner: &str) -> ClaimRequest {
    idemgate_tests::charge_claim(key, owner, 30_000)
}

#[test]
fn sixteen_threads_claiming_one_key_have_exactly_one_winner() {
    let dir = tempfile::tempdir().expect("tempdir");
    let l = Ledger::sqlite(
        dir.path().join("l.db"),
        OpenOptions {
            create: true,
            hasher: ChainHasher::unkeyed(),
        },
    )
    .expect("open");
    for round in 0..20 {
        let barrier = Arc::new(Barrier::new(16));
        let handles: Vec<_> = (0..16)
            .map(|t| {
                let l = l.clone();
                let b = barrier.clone();
                std::thread::spawn(move || {
                    b.wait();
                    l.claim(claim_req(&format!("key-{round}"), &format!("t{t}")))
                        .wait()
                        .expect("claim")
                })
            })
            .collect();
        let outcomes: Vec<ClaimOutcome> = handles
            .into_iter()
            .map(|h| h.join().expect("join"))
            .collect();
        let winners = outcomes
            .iter()
            .filter(|o| matches!(o, ClaimOutcome::Claimed { .. }))
            .count();
        let in_flight = outcomes
            .iter()
            .filter(|o| matches!(o, ClaimOutcome::InFlight { .. }))
            .count();
        assert_eq!((winners, in_flight), (1, 15), "round {round}: {outcomes:?}");
    }
    assert!(l.verify(&mut |_| true).expect("verify").ok);
}

#[test]
fn separate_processes_claiming_one_key_have_exactly_one_winner() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("l.db");
    // Create the schema first so the processes race on the claim, not on the migration.
    drop(
        Ledger::sqlite(
            &db,
            OpenOptions {
                create: true,
                hasher: ChainHasher::unkeyed(),
            },
        )
        .expect("open"),
    );
    for round in 0..3 {
        let go = dir.path().join(format!("go-{round}"));
        let mut children: Vec<_> = (0..8)
            .map(|_| {
                Command::new(HELPER)
                    .args([
                        "claim",
                        db.to_str().expect("utf8"),
                        &format!("k{round}"),
                        "30000",
                    ])
                    .arg(&go)
                    .stdout(Stdio::piped())
                    .spawn()
                    .expect("spawn helper")
            })
            .collect();
        // Every process has its ledger open and waits: the claims race.
        let mut outs: Vec<_> = children
            .iter_mut()
            .map(|c| {
                let mut out = BufReader::new(c.stdout.take().expect("stdout"));
                let mut line = String::new();
                out.read_line(&mut line).expect("read");
                assert_eq!(line.trim(), "ready");
                out
            })
            .collect();
        std::fs::write(&go, b"go").expect("go");
        let lines: Vec<String> = children
            .into_iter()
            .zip(&mut outs)
            .map(|(mut c, out)| {
                let mut line = String::new();
                out.read_line(&mut line).expect("read");
                assert!(c.wait().expect("wait").success());
                line.trim().to_owned()
            })
            .collect();
        let winners = lines.iter().filter(|l| l.starts_with("claimed ")).count();
        let in_flight = lines.iter().filter(|l| l.starts_with("in-flight ")).count();
        assert_eq!((winners, in_flight), (1, 7), "round {round}: {lines:?}");
    }
    let l = Ledger::sqlite(
        &db,
        OpenOptions {
            create: false,
            hasher: ChainHasher::unkeyed(),
        },
    )
    .expect("open");
    assert_eq!(
        l.entries(&EntryFilter::default(), Page::default(), now_millis())
            .expect("list")
            .len(),
        3
    );
    assert!(
        l.verify(&mut |_| true).expect("verify").ok,
        "one chain across processes"
    );
}

#[test]
fn a_claim_acknowledged_before_sigkill_survives_and_becomes_stuck_after_its_lease() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("l.db");
    let mut child = Command::new(HELPER)
        .args([
            "claim",
            db.to_str().expect("utf8"),
            "doomed",
            "1500",
            "--hang",
        ])
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn helper");
    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("stdout"))
        .read_line(&mut line)
        .expect("read");
    assert!(line.starts_with("claimed "), "{line}");
    let id: i64 = line.trim()["claimed ".len()..].parse().expect("id");
    child.kill().expect("SIGKILL"); // std's kill is SIGKILL on Unix
    let status = child.wait().expect("wait");
    assert!(!status.success());

    let l = Ledger::sqlite(
        &db,
        OpenOptions {
            create: false,
            hasher: ChainHasher::unkeyed(),
        },
    )
    .expect("reopen");
    let e = l
        .entry(id, now_millis())
        .expect("the acknowledged claim is there");
    assert_eq!(e.summary.key, "doomed");
    assert_eq!(e.summary.state, State::Pending);
    // A retry from another instance is not executed: in flight, then stuck once the lease passes.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match l
            .claim(claim_req("doomed", "survivor"))
            .wait()
            .expect("claim")
        {
            ClaimOutcome::InFlight { .. } => {}
            ClaimOutcome::Stuck { entry_id } => {
                assert_eq!(entry_id, id);
                break;
            }
            other => panic!("a dead instance's claim must never run again: {other:?}"),
        }
        assert!(Instant::now() < deadline, "never became stuck");
        std::thread::sleep(Duration::from_millis(100));
    }
    let stuck = l
        .entries(
            &EntryFilter {
                stuck: true,
                ..Default::default()
            },
            Page::default(),
            now_millis(),
        )
        .expect("list");
    assert_eq!(stuck.iter().map(|e| e.id).collect::<Vec<_>>(), [id]);
    assert!(l.verify(&mut |_| true).expect("verify").ok);
}
