//! Requests refused before anything is written: signatures, sizes, encoded paths, a required scope.

use super::*;

#[test]
fn signatures_good_bad_and_stale() {
    let f = Fx::new();
    let body = br#"{"event_id":"evt_1","type":"charge.succeeded"}"#;
    let now = idemgate_ledger::now_millis() / 1000;
    let sign = |t: i64, b: &[u8]| {
        format!(
            "t={t},v1={}",
            idemgate_proxy::signature::sign(SECRET.as_bytes(), t, b)
        )
    };
    let good = sign(now, body);
    let r = f
        .proxy
        .send("POST", "/hooks", &[("x-idemgate-signature", &good)], body);
    assert_eq!(r.status, 201, "{}", r.text());
    // Webhook deduplication by event id: the sender's retry is answered from the ledger.
    let r2 = f.proxy.send(
        "POST",
        "/hooks",
        &[("x-idemgate-signature", &sign(now + 1, body))],
        body,
    );
    assert_eq!(r2.status, 201);
    assert_eq!(r2.header("idempotent-replayed"), Some("true"));
    assert_eq!(r2.header("idempotency-key"), Some("evt_1"));
    for (what, sig) in [
        ("missing", None),
        (
            "wrong secret",
            Some(format!(
                "t={now},v1={}",
                idemgate_proxy::signature::sign(b"nope", now, body)
            )),
        ),
        ("stale", Some(sign(now - 600, body))),
        ("garbage", Some("t=abc,v1=zz".to_owned())),
    ] {
        let b2 = br#"{"event_id":"evt_2","type":"x"}"#;
        let h: Vec<(&str, &str)> = sig
            .as_deref()
            .map(|s| vec![("x-idemgate-signature", s)])
            .unwrap_or_default();
        let r = f.proxy.send("POST", "/hooks", &h, b2);
        assert_eq!(r.status, 401, "{what}");
        assert_eq!(r.code(), "bad-signature");
    }
    // A good signature over another body does not transfer.
    let r = f.proxy.send(
        "POST",
        "/hooks",
        &[("x-idemgate-signature", &good)],
        br#"{"event_id":"evt_3"}"#,
    );
    assert_eq!(r.status, 401);
    assert_eq!(f.up.counts.total(), 1);
    assert_eq!(f.entries(&[]).len(), 1, "refused requests write nothing");
}

/// A client that sends its whole body before it reads (Python's `http.client` and `requests`, as
/// many agent SDKs do) reads the 413, not a connection reset under it; one that asks `Expect:
/// 100-continue` is answered without being asked for the body.
#[test]
fn an_oversized_body_is_refused_with_an_answer_its_client_reads() {
    let f = Fx::new();
    // Debian's interpreter, which .ci/deps gives python3-requests (another first on PATH may
    // lack it).
    let out = std::process::Command::new("/usr/bin/python3")
        .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/clients/oversized.py"))
        .arg(format!("http://{}/v1/charges", f.proxy.addr))
        .arg((2 << 20).to_string())
        .arg("5")
        .output()
        .expect("/usr/bin/python3 (with python3-requests: .ci/deps installs both)");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect();
    assert_eq!(lines.len(), 10, "{lines:?}");
    for l in &lines {
        assert_eq!(
            (&l["status"], &l["code"]),
            (
                &serde_json::json!(413),
                &serde_json::json!("body-too-large")
            ),
            "{l}"
        );
    }

    let mut s = std::net::TcpStream::connect(f.proxy.addr).expect("connect");
    let head = format!(
        "POST /v1/charges HTTP/1.1\r\nhost: x\r\nidempotency-key: k-expect\r\n\
         content-type: application/json\r\nx-agent-id: agent-7\r\n\
         expect: 100-continue\r\ncontent-length: {}\r\n\r\n",
        4 << 20
    );
    std::io::Write::write_all(&mut s, head.as_bytes()).expect("send the head");
    let mut answer = Vec::new();
    std::io::Read::read_to_end(&mut s, &mut answer).expect("the answer");
    assert!(
        answer.starts_with(b"HTTP/1.1 413"),
        "no 100 Continue, at once the 413: {}",
        String::from_utf8_lossy(&answer)
    );
    assert_eq!(parse_response(&answer).code(), "body-too-large");
    assert_eq!(f.up.counts.total(), 0);
    assert!(f.entries(&[]).is_empty(), "refused requests write nothing");
}

#[test]
fn oversized_bodies_and_unknown_routes_write_nothing() {
    let f = Fx::new();
    let big = vec![b'x'; (1 << 20) + 1];
    let r = f.charge("k-big", std::str::from_utf8(&big).expect("utf8"), &[]);
    assert_eq!(r.status, 413);
    assert_eq!(r.code(), "body-too-large");
    // Chunked, with no Content-Length to refuse early.
    let mut raw = b"POST /v1/charges HTTP/1.1\r\nhost: x\r\nconnection: close\r\nidempotency-key: k-chunked\r\ntransfer-encoding: chunked\r\n\r\n".to_vec();
    for _ in 0..17 {
        raw.extend_from_slice(format!("{:x}\r\n", 65536).as_bytes());
        raw.extend_from_slice(&vec![b'y'; 65536]);
        raw.extend_from_slice(b"\r\n");
    }
    raw.extend_from_slice(b"0\r\n\r\n");
    let r = raw_request(f.proxy.addr, &raw);
    assert_eq!(r.status, 413);
    let r = f
        .proxy
        .send("POST", "/v2/unknown", &[("idempotency-key", "k")], b"{}");
    assert_eq!(r.status, 404);
    assert_eq!(r.code(), "unknown-route");
    // A path that only shares a prefix with a route is not that route.
    assert_eq!(
        f.proxy
            .send("POST", "/v1/chargesX", &[("idempotency-key", "k")], b"{}")
            .status,
        404
    );
    // A path with a dot segment is refused: the upstream would resolve it to another route's
    // path (here a destructive one, never retried, through a retried route) than the one that
    // took it, which had forwarded it as it came.
    let reads = f.up.counts.reads.load(std::sync::atomic::Ordering::SeqCst);
    for path in [
        "/v1/charges/../cancel",
        "/v1/charges/%2E%2e/cancel",
        "/v1/charges/x%2F..%2F..%2Fcancel",
        "/v1/customers/./cus_1",
        // Tomcat and Jetty drop a segment's parameters before they resolve its dots.
        "/v1/charges/..;/cancel",
        "/v1/customers/.;x=1/cus_1",
    ] {
        let method = if path.contains("customers") {
            "GET"
        } else {
            "POST"
        };
        let r = f
            .proxy
            .send(method, path, &[("idempotency-key", "k-dots")], b"{}");
        assert_eq!(r.status, 400, "{path}: {}", r.text());
        assert_eq!(r.code(), "invalid-path", "{path}");
    }
    assert_eq!(
        f.up.counts.reads.load(std::sync::atomic::Ordering::SeqCst),
        reads
    );
    assert_eq!(f.up.counts.total(), 0);
    assert!(f.entries(&[]).is_empty());
}

/// A route is chosen by the path as the upstream reads it, percent-decoded: `/%68ooks` is the
/// signed webhooks route's, not a catch-all's that checks no signature, and `/v1/%63ancel` the
/// destructive route's, not a broader write route's.
#[test]
fn an_encoded_path_is_routed_as_the_upstream_reads_it() {
    let cfg = format!(
        "{CONFIG}\n[[routes]]\nname = \"v1\"\nmethod = \"POST\"\npath = \"/v1\"\n\
         upstream = \"{{upstream}}\"\neffect = \"write\"\ntimeout = \"500ms\"\n\
         [[routes]]\nname = \"rest\"\nmethod = \"POST\"\npath = \"/\"\n\
         upstream = \"{{upstream}}\"\neffect = \"write\"\ntimeout = \"500ms\"\n"
    );
    let f = Fx::with(&cfg);
    let json = ("content-type", "application/json");
    let r = f.proxy.send(
        "POST",
        "/%68ooks/payments",
        &[json],
        br#"{"event_id":"evt_1"}"#,
    );
    assert_eq!(r.status, 401, "{}", r.text());
    assert_eq!(r.code(), "bad-signature");
    assert_eq!(
        f.up.counts.total(),
        0,
        "nothing unsigned reached the upstream"
    );
    let r = f.proxy.send(
        "POST",
        "/v1/%63ancel",
        &[("idempotency-key", "k-enc"), json],
        b"{}",
    );
    assert!(r.status < 300, "{}", r.text());
    let by_route = |route: &str| f.entries(&["--route", route]).len();
    assert_eq!((by_route("cancel"), by_route("v1")), (1, 0));
    // What no stricter route takes still goes by the broader ones.
    for path in ["/v1/other", "/other", "/v1/%6Fther"] {
        let key = format!("k-{}", path.len());
        let r = f
            .proxy
            .send("POST", path, &[("idempotency-key", &key), json], b"{}");
        assert!(r.status < 300, "{path}: {}", r.text());
    }
    assert_eq!((by_route("v1"), by_route("rest")), (2, 1));
}

/// `scope.required`: a caller that does not say who it is is refused before anything is claimed
/// or forwarded, instead of sharing the empty scope (and its keys) with every other such caller.
#[test]
fn a_required_scope_is_asked_for_before_anything_is_claimed() {
    // On the charges route and the customers (read) route, both scoped by X-Agent-Id.
    let cfg = CONFIG.replace(
        "scope.header = \"X-Agent-Id\"\n",
        "scope.header = \"X-Agent-Id\"\nscope.required = true\n",
    );
    assert_eq!(cfg.matches("scope.required").count(), 2);
    let f = Fx::with(&cfg);
    let json = ("content-type", "application/json");
    for agent in [None, Some(""), Some("  ")] {
        let mut h = vec![("idempotency-key", "k-anon"), json];
        if let Some(a) = agent {
            h.push(("x-agent-id", a));
        }
        let r = f.proxy.send("POST", "/v1/charges", &h, br#"{"amount":1}"#);
        // (Whitespace around a header's value is not part of it.)
        assert_eq!(r.status, 400, "{agent:?}: {}", r.text());
        assert_eq!(r.code(), "missing-scope", "{agent:?}");
        assert!(r.text().contains("x-agent-id"), "{}", r.text());
    }
    let r = f.proxy.send("GET", "/v1/customers/cus_1", &[], b"");
    assert_eq!(r.status, 400, "{}", r.text());
    assert_eq!(r.code(), "missing-scope");
    assert_eq!(f.up.counts.total(), 0);
    assert_eq!(
        f.up.counts.reads.load(std::sync::atomic::Ordering::SeqCst),
        0
    );
    assert!(f.entries(&[]).is_empty());
    // Named, the same calls go through.
    assert_eq!(f.charge("k-anon", r#"{"amount":1}"#, &[]).status, 201);
    let r = f.proxy.send(
        "GET",
        "/v1/customers/cus_1",
        &[("x-agent-id", "agent-7")],
        b"",
    );
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(f.effects("k-anon"), 1);
    assert_eq!(f.entries(&[]).len(), 1);
}
