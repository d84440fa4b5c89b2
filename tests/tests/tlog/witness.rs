//! A witness of an idemgate log, as a process: it cosigns what extends what it saw, remembers it
//! across a SIGKILL, and refuses forks, rollbacks and checkpoints of other logs or keys.

use super::*;

/// A log with a key, a witness of it, and the first checkpoint the witness cosigned.
struct Watched {
    dir: tempfile::TempDir,
    ledger: PathBuf,
    log: Keys,
    witness_key: PathBuf,
    witness_pub: PathBuf,
    origin_key: String,
    state: PathBuf,
    witness: WitnessProcess,
    /// An event's proof under the first checkpoint, and that checkpoint's size.
    first: String,
    size: u64,
    cosignature: String,
}

impl Watched {
    fn new() -> Watched {
        let dir = tempfile::tempdir().expect("tempdir");
        let ledger = dir.path().join("l.db");
        assert!(
            idemgate(&["demo", "--ledger", s(&ledger), "--events", "300"])
                .status
                .success()
        );
        let log = keys(dir.path(), "audit.example/idemgate");
        let w = dir.path().join("w");
        let made = idemgate(&[
            "keygen",
            "--witness",
            "--out",
            s(&w),
            "--name",
            "witness.example/w1",
        ]);
        assert!(
            made.status.success(),
            "{}",
            String::from_utf8_lossy(&made.stderr)
        );
        let (witness_key, witness_pub) = (dir.path().join("w.key"), dir.path().join("w.pub"));
        let origin_key = format!("audit.example/idemgate={}", s(&log.public));
        let state = dir.path().join("witness.json");
        let witness = WitnessProcess::start(&witness_key, &origin_key, &state);
        let mut w = Watched {
            first: String::new(),
            size: 0,
            cosignature: String::new(),
            dir,
            ledger,
            log,
            witness_key,
            witness_pub,
            origin_key,
            state,
            witness,
        };
        // The first checkpoint the witness sees: old size 0, no proof.
        w.first = w.prove(&w.ledger.clone(), &["--event", "7"], "first.tlog-proof");
        w.size = after_blank(&w.first)
            .lines()
            .nth(1)
            .expect("size")
            .parse()
            .expect("n");
        let (status, cosig, _) = w
            .witness
            .add(&format!("old 0\n\n{}", after_blank(&w.first)));
        assert_eq!(status, 200, "{cosig}");
        assert!(cosig.starts_with("\u{2014} witness.example/w1 "), "{cosig}");
        w.cosignature = cosig;
        w
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// `idemgate prove` on `ledger` with the log's key: the file it wrote.
    fn prove(&self, ledger: &Path, args: &[&str], out: &str) -> String {
        let out = self.path(out);
        let mut all = vec![
            "prove",
            "--ledger",
            s(ledger),
            "--signing-key",
            s(&self.log.key),
        ];
        all.extend_from_slice(&["-o", s(&out)]);
        all.extend_from_slice(args);
        let o = idemgate(&all);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        std::fs::read_to_string(out).expect("written")
    }
}

#[test]
fn a_witness_cosigns_what_extends_what_it_saw_and_remembers_it() {
    let mut w = Watched::new();
    // The proof with the cosignature appended checks under a policy that needs the witness;
    // without it, the same policy refuses the proof.
    let cosigned = w.path("cosigned.tlog-proof");
    std::fs::write(&cosigned, format!("{}{}", w.first, w.cosignature)).expect("write");
    let check = |proof: &Path| {
        let (key, witness) = (s(&w.log.public), s(&w.witness_pub));
        idemgate(&[
            "verify",
            "--proof",
            s(proof),
            "--public-key",
            key,
            "--witness-key",
            witness,
        ])
    };
    let ok = check(&cosigned);
    let said = String::from_utf8_lossy(&ok.stdout);
    assert!(
        ok.status.success() && said.contains("cosigned by witness.example/w1"),
        "{said}"
    );
    let bare = check(&w.path("first.tlog-proof"));
    assert_eq!(
        bare.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&bare.stdout)
    );
    // The log grows; its consistency proof from that tree is the next request, as written.
    grow(s(&w.ledger), "more");
    let first_file = w.path("first.tlog-proof");
    let next = w.prove(&w.ledger, &["--consistency", s(&first_file)], "next");
    let (status, said, _) = w.witness.add(&next);
    assert_eq!(status, 200, "{said}");
    // A rollback: the older checkpoint again, from what it saw then.
    let back = format!("old {}\n\n{}", w.size, after_blank(&w.first));
    let (status, said, kind) = w.witness.add(&back);
    assert_eq!(
        (status, kind.as_deref()),
        (409, Some("text/x.tlog.size")),
        "{said}"
    );
    assert_eq!(said, format!("{}\n", w.size + 5));
    // What it acknowledged survives its death (SIGKILL).
    drop(std::mem::replace(
        &mut w.witness,
        WitnessProcess::start(&w.witness_key, &w.origin_key, &w.state),
    ));
    let (status, said, _) = w
        .witness
        .add(&format!("old 0\n\n{}", after_blank(&w.first)));
    assert_eq!((status, said), (409, format!("{}\n", w.size + 5)));
}

#[test]
fn a_witness_refuses_a_fork_and_a_checkpoint_of_another_log_or_key() {
    let w = Watched::new();
    let fork = w.path("fork.db");
    copy_ledger(&w.ledger, &fork);
    let first_file = w.path("first.tlog-proof");
    grow(s(&w.ledger), "more");
    let next = w.prove(&w.ledger, &["--consistency", s(&first_file)], "next");
    assert_eq!(w.witness.add(&next).0, 200);
    // The copy grows other events to the same size: a second tree of one size.
    grow(s(&fork), "other");
    let other = w.prove(&fork, &["--consistency", s(&first_file)], "other");
    let same_size = format!("old {}\n\n{}", w.size + 5, after_blank(&other));
    let (status, said, _) = w.witness.add(&same_size);
    assert_eq!(status, 409, "{said}");
    // One more event on the fork, proved from the fork's own tree: inconsistent with the one seen.
    let ops = idemgate_ops::Ops::open_existing(s(&fork)).expect("ledger");
    ops.store()
        .claim(charge_claim("one-more", "o", 60_000))
        .wait()
        .expect("claim");
    drop(ops);
    let onward = w.prove(&fork, &["--consistency", s(&w.path("other"))], "onward");
    let (status, said, _) = w.witness.add(&onward);
    assert_eq!(status, 422, "{said}");
    // Another log's checkpoint; and one naming this log, signed by another key.
    let stranger = keys(w.dir.path(), "stranger.example/log");
    let theirs = w.path("theirs");
    let made = idemgate(&[
        "prove",
        "--ledger",
        s(&w.ledger),
        "--signing-key",
        s(&stranger.key),
        "--event",
        "1",
        "-o",
        s(&theirs),
    ]);
    assert!(made.status.success());
    let theirs = std::fs::read_to_string(theirs).expect("theirs");
    assert_eq!(
        w.witness
            .add(&format!("old 0\n\n{}", after_blank(&theirs)))
            .0,
        404
    );
    std::fs::create_dir(w.path("forger")).expect("mkdir");
    let forger = keys(&w.path("forger"), "audit.example/idemgate");
    let forged = w.path("forged");
    let made = idemgate(&[
        "prove",
        "--ledger",
        s(&w.ledger),
        "--signing-key",
        s(&forger.key),
        "--event",
        "1",
        "-o",
        s(&forged),
    ]);
    assert!(made.status.success());
    let forged = std::fs::read_to_string(forged).expect("forged");
    let body = format!("old {}\n\n{}", w.size + 5, after_blank(&forged));
    assert_eq!(w.witness.add(&body).0, 403);
}
