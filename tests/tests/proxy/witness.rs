//! The server sends each checkpoint of the log's tree it keeps to its witnesses, with the proof
//! that it extends the tree each last cosigned, and proofs carry their cosignatures.

use super::*;

const WITNESSED: &str = r#"
[server]
listen = "127.0.0.1:0"
admin_listen = "127.0.0.1:0"
ledger = "{ledger}"
signing_key_file = "{key}"
checkpoint_interval = "1s"
witnesses = [{ url = "http://{witness}", key = "{witness_key}" }]

[[routes]]
name = "charges"
method = "POST"
path = "/v1/charges"
upstream = "{upstream}"
effect = "write"
timeout = "1s"
"#;

fn charge(proxy: &Proxy, key: &str) {
    let r = proxy.send(
        "POST",
        "/v1/charges",
        &[
            ("idempotency-key", key),
            ("content-type", "application/json"),
        ],
        b"{}",
    );
    assert_eq!(r.status, 201, "{}", r.text());
}

/// The newest kept checkpoint of the tree that a witness cosigned, once it covers `seq`: its
/// size.
fn cosigned_past(db: &rusqlite::Connection, seq: i64) -> Option<i64> {
    db.query_row(
        "SELECT size, note FROM tree_checkpoints ORDER BY size DESC LIMIT 1",
        [],
        |r| Ok((r.get::<_, i64>(0)?, r.get::<_, String>(1)?)),
    )
    .ok()
    .filter(|(size, note)| *size >= seq && note.contains("\n\u{2014} witness.example/w1 "))
    .map(|(size, _)| size)
}

#[test]
fn the_server_s_tree_checkpoints_are_cosigned_by_its_witnesses() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = |name: &str| dir.path().join(name);
    let p = |name: &str| path(name).display().to_string();
    let ledger = path("ledger.db");
    let l = ledger.display().to_string();
    let made = idemgate(&[
        "keygen",
        "--out",
        &p("log"),
        "--name",
        "ledger.example/idemgate",
    ]);
    assert!(made.status.success());
    let made = idemgate(&[
        "keygen",
        "--witness",
        "--out",
        &p("w"),
        "--name",
        "witness.example/w1",
    ]);
    assert!(made.status.success());
    let witness = WitnessProcess::start(
        &path("w.key"),
        &format!("ledger.example/idemgate={}", p("log.pub")),
        &path("witness.json"),
    );
    let up = upstream::Upstream::start();
    let cfg = config(WITNESSED, &up.url(), &ledger)
        .replace("{key}", &p("log.key"))
        .replace("{witness}", &witness.addr.to_string())
        .replace("{witness_key}", &p("w.pub"));
    let mut proxy = Proxy::start(dir.path(), &cfg, &ledger);
    charge(&proxy, "w-1");
    let seq_of = |key: &str| {
        idemgate_json(&["log", "--ledger", &l, "--key", key, "--json"])[0]["seq"]
            .as_i64()
            .expect("seq")
    };
    let first = seq_of("w-1");
    let db = rusqlite::Connection::open(&ledger).expect("open");
    eventually(30, "a cosigned checkpoint past the call", || {
        cosigned_past(&db, first)
    });
    // The proof the admin API serves carries the cosignature: a policy that needs the witness
    // accepts it.
    let r = proxy.admin_get(&format!("/admin/v1/events/{first}/proof"));
    assert_eq!(r.status, 200, "{}", r.text());
    std::fs::write(
        path("first.tlog-proof"),
        r.json()["proof"].as_str().expect("proof"),
    )
    .expect("write");
    let out = idemgate(&[
        "verify",
        "--proof",
        &p("first.tlog-proof"),
        "--public-key",
        &p("log.pub"),
        "--witness-key",
        &p("w.pub"),
    ]);
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && said.contains("cosigned by witness.example/w1"),
        "{said}"
    );
    // A new leader (here, the restarted server) does not know what the witness holds: told by
    // its 409, it sends the proof from there, and the witness cosigns again.
    proxy.terminate();
    proxy = Proxy::start(dir.path(), &cfg, &ledger);
    charge(&proxy, "w-2");
    let second = seq_of("w-2");
    eventually(30, "a later cosigned checkpoint", || {
        cosigned_past(&db, second)
    });
    proxy.terminate();
}
