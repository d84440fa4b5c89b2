//! Upstreams: TLS, the route's credential, hop-by-hop headers and secrets.

use super::*;

/// `https://` upstreams (a payment API is one): the proxy speaks TLS to them, verified against
/// the CAs it trusts (the system's; here `SSL_CERT_FILE`). One whose certificate it does not trust
/// is never sent the request: not executed, so the key is released.
#[test]
fn an_https_upstream_is_verified_and_served_once_per_key() {
    let fx = |up: Upstream, trusted: &str| {
        let dir = tempfile::tempdir().expect("tempdir");
        let ca = dir.path().join("ca.pem");
        std::fs::write(&ca, trusted).expect("write ca");
        let ledger = dir.path().join("ledger.db");
        let ca = ca.display().to_string();
        let proxy = Proxy::start_with_env(
            dir.path(),
            &Fx::render(CONFIG, &up, &ledger),
            &ledger,
            &[("TEST_WEBHOOK_SECRET", SECRET), ("SSL_CERT_FILE", &ca)],
        );
        Fx { dir, up, proxy }
    };
    let up = Upstream::start_tls();
    assert!(up.url().starts_with("https://"));
    let ca = up.ca_pem.clone().expect("ca");
    let f = fx(up, &ca);
    let r = f.charge("k-tls", r#"{"amount":7}"#, &[]);
    assert_eq!(r.status, 201, "{}", r.text());
    let again = f.charge("k-tls", r#"{"amount":7}"#, &[]);
    assert_eq!(again.header("idempotent-replayed"), Some("true"));
    assert_eq!(again.body, r.body);
    assert_eq!(f.effects("k-tls"), 1);

    // Trusting another CA only: the handshake fails, nothing is sent, the key is released.
    let stranger = Upstream::start_tls().ca_pem.expect("ca");
    let f = fx(Upstream::start_tls(), &stranger);
    let r = f.charge("k-untrusted", r#"{"amount":7}"#, &[]);
    assert_eq!(r.status, 503, "{}", r.text());
    assert_eq!(r.code(), "upstream-unavailable");
    assert_eq!(f.up.counts.total(), 0);
    assert_eq!(f.entries(&["--key", "k-untrusted"])[0]["state"], "released");
}

/// `upstream_auth`: the proxy holds the upstream's credential and sends it on every request of the
/// route, in place of the client's, and on an operator's replay and reconcile probe, which have no
/// client; the credential is never stored.
#[test]
fn a_route_credential_is_sent_upstream_on_every_request_and_never_stored() {
    const AUTH: &str = "Bearer sk_live_held_by_the_proxy";
    let f = Fx::with_env(
        &CONFIG.replace(
            "secret_query = [\"Sig\"]",
            "secret_query = [\"Sig\"]\nupstream_auth = { secret_env = \"TEST_UPSTREAM_AUTH\" }",
        ),
        &[("TEST_UPSTREAM_AUTH", AUTH)],
    );
    let sent_auth = || {
        let h = f.up.counts.last_headers.lock().expect("lock").clone();
        h.into_iter()
            .find(|(n, _)| n == "authorization")
            .map(|(_, v)| v)
    };
    let r = f.charge(
        "k-auth",
        r#"{"amount":1}"#,
        &[("authorization", "Bearer the-agents-own-token")],
    );
    assert_eq!(r.status, 201, "{}", r.text());
    assert_eq!(sent_auth().as_deref(), Some(AUTH));
    // An operator's replay and probe, from the CLI (which needs the credential too).
    let r = f.charge("k-auth-2", r#"{"amount":2}"#, &[("x-fault", "drop")]);
    assert_eq!(r.status, 502);
    let id = f.entries(&["--key", "k-auth-2"])[0]["id"].to_string();
    let cfg = f.proxy.config.display().to_string();
    let act = |what: &str, cfg: &str, id: &str, with_auth: bool| {
        let mut c = std::process::Command::new(idemgate_bin());
        c.args(action_args(what, cfg, id))
            .env("TEST_WEBHOOK_SECRET", SECRET);
        if with_auth {
            c.env("TEST_UPSTREAM_AUTH", AUTH);
        } else {
            c.env_remove("TEST_UPSTREAM_AUTH");
        }
        c.output().expect("run")
    };
    // The action, with the credential at hand; the authorization the upstream got from it.
    let sent_by = |what: &str, cfg: &str, id: &str| {
        *f.up.counts.last_headers.lock().expect("lock") = Vec::new();
        f.up.counts.last_target.lock().expect("lock").clear();
        let out = act(what, cfg, id, true);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        sent_auth()
    };
    let refused = act("reconcile", &cfg, &id, false);
    assert_eq!(refused.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&refused.stderr).contains("TEST_UPSTREAM_AUTH is not set"));
    assert_eq!(
        sent_by("reconcile", &cfg, &id).as_deref(),
        Some(AUTH),
        "the probe"
    );
    let r = f.charge("k-auth-3", r#"{"amount":3}"#, &[("x-fault", "status:502")]);
    assert_eq!(r.status, 502);
    let id3 = f.entries(&["--key", "k-auth-3"])[0]["id"].to_string();
    assert_eq!(
        sent_by("replay", &cfg, &id3).as_deref(),
        Some(AUTH),
        "the replay"
    );
    // A probe naming another host (here the same server under another name) is not sent it.
    let r = f.charge("k-auth-4", r#"{"amount":4}"#, &[("x-fault", "drop")]);
    assert_eq!(r.status, 502);
    let id4 = f.entries(&["--key", "k-auth-4"])[0]["id"].to_string();
    let elsewhere = f.dir.path().join("elsewhere.toml");
    let text = std::fs::read_to_string(&cfg).expect("config");
    let probe = format!("url = \"http://127.0.0.1:{}/v1/charges", f.up.addr.port());
    assert!(text.contains(&probe), "{text}");
    std::fs::write(
        &elsewhere,
        text.replace(&probe, &probe.replace("127.0.0.1", "localhost")),
    )
    .expect("write");
    let sent = sent_by("reconcile", &elsewhere.display().to_string(), &id4);
    assert!(
        f.up.counts
            .last_target
            .lock()
            .expect("lock")
            .starts_with("/v1/charges?idempotency_key="),
        "the probe arrived"
    );
    assert_eq!(sent, None, "the credential went to another host");
    // Never stored: not the proxy's credential, not the agent's.
    for file in ["ledger.db", "ledger.db-wal"] {
        let bytes = std::fs::read(f.dir.path().join(file)).unwrap_or_default();
        let text = String::from_utf8_lossy(&bytes);
        assert!(!text.contains("sk_live_held_by_the_proxy"), "{file}");
        assert!(!text.contains("the-agents-own-token"), "{file}");
    }
}

#[test]
fn the_upstream_gets_every_hop_and_no_expectation() {
    let f = Fx::new();
    let r = f.charge(
        "k-xff",
        r#"{"amount":1}"#,
        &[
            ("x-forwarded-for", "203.0.113.7"),
            ("x-forwarded-for", "10.0.0.2, 10.0.0.3"),
        ],
    );
    assert_eq!(r.status, 201, "{}", r.text());
    let h = f.up.counts.last_headers.lock().expect("lock").clone();
    let xff: Vec<&str> = h
        .iter()
        .filter(|(n, _)| n == "x-forwarded-for")
        .map(|(_, v)| v.as_str())
        .collect();
    assert_eq!(xff, ["203.0.113.7, 10.0.0.2, 10.0.0.3, 127.0.0.1"]);
    // An expectation is the proxy's to meet, not the upstream's: it has the body.
    let r = f.charge("k-expect", r#"{"amount":2}"#, &[("expect", "100-continue")]);
    assert_eq!(r.status, 201, "{}", r.text());
    let h = f.up.counts.last_headers.lock().expect("lock").clone();
    assert!(h.iter().all(|(n, _)| n != "expect"), "{h:?}");
}

#[test]
fn secrets_are_forwarded_but_never_stored() {
    let f = Fx::new();
    let r = f.charge(
        "k-secret",
        r#"{"amount":1}"#,
        &[
            ("authorization", "Bearer sk_live_TOPSECRET"),
            ("x-processor-key", "pk_TOPSECRET"),
            ("cookie", "s=TOPSECRET"),
        ],
    );
    assert_eq!(r.status, 201);
    assert_eq!(r.json()["saw_authorization"], true, "forwarded upstream");
    let seen = f.up.counts.last_headers.lock().expect("lock").clone();
    assert!(seen
        .iter()
        .any(|(n, v)| n == "x-processor-key" && v == "pk_TOPSECRET"));
    let id = f.entries(&["--key", "k-secret"])[0]["id"].to_string();
    let shown = idemgate(&["show", "--ledger", &f.ledger(), &id, "--json"]);
    let text = String::from_utf8_lossy(&shown.stdout);
    assert!(text.contains("k-secret"));
    assert!(!text.contains("TOPSECRET"), "{text}");

    // Credentials in the query: the ledger's own names and the route's `secret_query`.
    let with_secrets = "/v1/charges/ch_5/capture?api_key=sk_TOPSECRET&mode=live&sig=TOPSECRET";
    let send = |target: &str| {
        f.proxy.send(
            "POST",
            target,
            &[
                ("idempotency-key", "k-secret-query"),
                ("x-agent-id", "agent-7"),
            ],
            b"{}",
        )
    };
    assert_eq!(send(with_secrets).status, 201);
    assert_eq!(
        *f.up.counts.last_target.lock().expect("lock"),
        with_secrets,
        "forwarded upstream as sent"
    );
    // A retry whose credentials changed (rotated, re-signed) is the same request.
    let again = send("/v1/charges/ch_5/capture?SIG=s2&mode=live&API_KEY=sk_rotated");
    assert_eq!(
        again.header("idempotent-replayed"),
        Some("true"),
        "{}",
        again.text()
    );
    let other = send("/v1/charges/ch_5/capture?api_key=sk_TOPSECRET&mode=test");
    assert_eq!(other.status, 422, "the other parameters still count");
    assert_eq!(f.effects("k-secret-query"), 1);
    let id = f.entries(&["--key", "k-secret-query"])[0]["id"].to_string();
    let shown = idemgate_json(&["show", "--ledger", &f.ledger(), &id, "--json"]);
    assert_eq!(
        shown["request"]["path"],
        "/v1/charges/ch_5/capture?mode=live"
    );
    assert_eq!(
        shown["collision_requests"][0]["request"]["path"],
        "/v1/charges/ch_5/capture?mode=test"
    );
    let log = idemgate(&["log", "--ledger", &f.ledger(), "--json"]);
    assert!(log.status.success());
    let log = String::from_utf8_lossy(&log.stdout);
    assert!(
        log.contains("capture?mode=live"),
        "the claim logs the target"
    );

    let raw = std::fs::read(&f.proxy.ledger).expect("read ledger");
    let wal = std::fs::read(PathBuf::from(format!("{}-wal", f.ledger()))).unwrap_or_default();
    for bytes in [raw, wal] {
        assert!(
            !bytes.windows(9).any(|w| w == b"TOPSECRET"),
            "a secret reached the database file"
        );
    }
    assert!(!log.contains("TOPSECRET") && !log.contains("sk_rotated"));
}
