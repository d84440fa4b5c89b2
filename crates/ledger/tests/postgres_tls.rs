//! TLS to PostgreSQL, as the URL's `sslmode` and `sslrootcert` say, against the test cluster of
//! `tests/pg/cluster.sh` (named by IDEMGATE_TEST_PG). It offers TLS with a certificate for
//! `localhost` only, signed by a CA of its own (its `ssl_ca_file`), and takes plain connections.

#![allow(
    clippy::too_many_lines,
    reason = "a test is one scenario told top to bottom, its steps checked in order"
)]

use idemgate_ledger::testing::{charge, fresh_postgres, postgres_text};
use idemgate_ledger::{now_millis, open, ClaimOutcome, OpenOptions};

fn with(url: &str, param: &str) -> String {
    let sep = if url.contains('?') { '&' } else { '?' };
    format!("{url}{sep}{param}")
}

#[test]
fn the_ledger_speaks_tls_to_postgresql_as_sslmode_says() {
    let Some(url) = fresh_postgres("tls") else {
        eprintln!("skipped: IDEMGATE_TEST_PG=skip");
        return;
    };
    assert_eq!(
        postgres_text(&url, "SHOW ssl").as_deref(),
        Ok("on"),
        "the test cluster must offer TLS, as tests/pg/cluster.sh's does"
    );
    let ca = postgres_text(&url, "SHOW ssl_ca_file").expect("ssl_ca_file");
    assert!(url.contains("@127.0.0.1:"), "{url}");
    let localhost = url.replace("@127.0.0.1:", "@localhost:");
    // Of the connections named `app`: how many are encrypted, and how many there are.
    let connections = |app: &str| {
        postgres_text(
            &url,
            &format!(
                "SELECT count(*) FILTER (WHERE s.ssl) || '/' || count(*) FROM pg_stat_ssl s \
                 JOIN pg_stat_activity a USING (pid) WHERE a.application_name = '{app}'"
            ),
        )
        .expect("pg_stat_ssl")
    };
    let cases = [
        (
            with(&localhost, &format!("sslmode=verify-full&sslrootcert={ca}")),
            true,
        ),
        // verify-ca checks the chain and not the name: 127.0.0.1 is not `localhost`.
        (
            with(&url, &format!("sslmode=verify-ca&sslrootcert={ca}")),
            true,
        ),
        (with(&url, "sslmode=require"), true),
        // No sslmode is libpq's `prefer`: TLS, since the server offers it.
        (url.clone(), true),
        (with(&url, "sslmode=disable"), false),
    ];
    for (i, (u, tls)) in cases.iter().enumerate() {
        let app = format!("idemgate-tls-{i}");
        let u = with(u, &format!("application_name={app}"));
        let ledger = open(&u, OpenOptions::create().expect("options"))
            .unwrap_or_else(|e| panic!("{u}: {e}"));
        // A write (the writer's connection) and a read (a reader's).
        let key = format!("k-tls-{i}");
        match ledger.claim(charge(&key, now_millis())).wait() {
            Ok(ClaimOutcome::Claimed { .. }) => {}
            other => panic!("{u}: {other:?}"),
        }
        assert!(ledger.head().expect("head").is_some());
        let (encrypted, all) = connections(&app)
            .split_once('/')
            .map(|(e, a)| (e.to_owned(), a.to_owned()))
            .expect("e/a");
        assert!(
            all.parse::<u32>().expect("count") >= 2,
            "{u}: {all} connections"
        );
        let want = if *tls { all.clone() } else { "0".into() };
        assert_eq!(
            encrypted, want,
            "{u}: {encrypted} of {all} connections encrypted"
        );
    }
    // What does not check out is refused before anything is written.
    for (u, why) in [
        (
            with(&url, &format!("sslmode=verify-full&sslrootcert={ca}")),
            "127.0.0.1 is not the certificate's name",
        ),
        (
            with(&localhost, "sslmode=verify-full"),
            "the system's CAs do not know the cluster's",
        ),
        (
            with(&url, &format!("sslmode=verify-ca&sslrootcert={ca}.missing")),
            "no such file",
        ),
    ] {
        let e = match open(&u, OpenOptions::create().expect("options")) {
            Ok(_) => panic!("{why}: {u} was opened"),
            Err(e) => e.to_string(),
        };
        assert!(
            e.contains("certificate") || e.contains("sslrootcert"),
            "{why}: {e}"
        );
    }
}
