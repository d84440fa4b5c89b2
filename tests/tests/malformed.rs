//! Malformed HTTP against a real `idemgate serve`: every case gets a 4xx problem+json (never a 5xx,
//! never a crash) and writes nothing: no ledger entry, no log event, no upstream effect.
#![allow(
    clippy::too_many_lines,
    reason = "a test is one scenario told top to bottom, its steps checked in order"
)]

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use idemgate_tests::upstream::Upstream;
use idemgate_tests::*;

const CONFIG: &str = r#"
[server]
listen = "127.0.0.1:0"
admin_listen = "off"
ledger = "{ledger}"
body_timeout = "1s"

[defaults]
max_body = "64KiB"

[[routes]]
name = "charges"
method = "POST"
path = "/v1/charges"
upstream = "{upstream}"
effect = "write"
scope.header = "X-Agent-Id"
timeout = "2s"

[[routes]]
name = "emails"
method = "POST"
path = "/v1/emails"
upstream = "{upstream}"
effect = "write"
key.json = "/args/idempotency_key"
timeout = "2s"
"#;

struct Fx {
    _dir: tempfile::TempDir,
    up: Upstream,
    proxy: Proxy,
}

impl Fx {
    fn new() -> Fx {
        let dir = tempfile::tempdir().expect("tempdir");
        let up = Upstream::start();
        let ledger = dir.path().join("ledger.db");
        let proxy = Proxy::start(dir.path(), &config(CONFIG, &up.url(), &ledger), &ledger);
        Fx {
            _dir: dir,
            up,
            proxy,
        }
    }

    /// Entries, the log's head sequence number and the upstream's effects: all must stay put.
    fn written(&self) -> (usize, i64, u64) {
        let ops = idemgate_ops::Ops::open_existing(&self.proxy.ledger.display().to_string())
            .expect("open ledger");
        let entries = ops
            .each_entry(&Default::default(), None, &mut |_| Ok(()))
            .expect("entries");
        let head = ops.store().head().expect("head").map_or(0, |h| h.seq);
        (entries, head, self.up.counts.total())
    }

    /// Asserts `r` is a 4xx problem+json with `code`, that the proxy still answers, and that
    /// nothing was written.
    fn refused(&self, case: &str, r: &Resp, status: u16, code: &str, before: (usize, i64, u64)) {
        assert_eq!(
            (r.status, r.header("content-type")),
            (status, Some("application/problem+json")),
            "{case}: {}",
            r.text()
        );
        let p = r.json();
        assert_eq!(p["code"], code, "{case}: {p}");
        assert_eq!(p["status"], status, "{case}: {p}");
        assert_eq!(
            p["type"],
            format!("urn:idemgate:problem:{code}"),
            "{case}: {p}"
        );
        assert_eq!(self.written(), before, "{case} wrote something");
        assert_eq!(
            self.charge("alive-check", br#"{"amount":1}"#).status,
            201,
            "{case}: the proxy no longer answers"
        );
        // (the alive check itself wrote one entry; callers take a fresh `before`)
    }

    fn charge(&self, key: &str, body: &[u8]) -> Resp {
        self.proxy.send(
            "POST",
            "/v1/charges",
            &[
                ("idempotency-key", key),
                ("content-type", "application/json"),
            ],
            body,
        )
    }

    fn raw(&self, head: &[u8], body: &[u8]) -> Resp {
        raw_request(self.proxy.addr, &[head, body].concat())
    }
}

/// The head of a JSON POST to /v1/charges with `headers` (lines ending in `\n`, any bytes) and a
/// Content-Length of `len`, with CRLF line ends.
fn post_head(headers: &[u8], len: usize) -> Vec<u8> {
    let lf = [
        b"POST /v1/charges HTTP/1.1\nhost: x\nconnection: close\ncontent-type: application/json\n",
        headers,
        format!("content-length: {len}\n\n").as_bytes(),
    ]
    .concat();
    let mut out = Vec::with_capacity(lf.len() + 16);
    for b in lf {
        if b == b'\n' {
            out.push(b'\r');
        }
        out.push(b);
    }
    out
}

/// Sends one malformed request: it gets `status` with `code`, and nothing is written.
fn case(f: &Fx, name: &str, status: u16, code: &str, send: &dyn Fn(&Fx) -> Resp) {
    let before = f.written();
    let r = send(f);
    f.refused(name, &r, status, code, before);
}

/// Bodies that are not JSON, or JSON read two ways, or coded: refused before a key is made.
fn bodies_that_cannot_be_read_as_sent(f: &Fx) {
    case(f, "bad JSON", 400, "invalid-body", &|f| {
        f.charge("k-badjson", br#"{"amount":"#)
    });
    case(f, "JSON with invalid UTF-8", 400, "invalid-body", &|f| {
        f.charge("k-utf8", b"{\"amount\":\"\xff\xfe\"}")
    });
    // serde_json would read the last member and many upstreams the first: refused, so no fingerprint
    // or key is made from a guess.
    let twice = |f: &Fx, key: &str, body: &[u8]| {
        let r = f.charge(key, body);
        assert!(r.json()["detail"]
            .as_str()
            .is_some_and(|d| d.contains(r#"the member "amount" appears twice"#)));
        r
    };
    case(
        f,
        "JSON with a member named twice",
        400,
        "invalid-body",
        &|f| twice(f, "k-twice", br#"{"amount":100,"amount":1}"#),
    );
    case(
        f,
        "JSON with a member named twice, deeper",
        400,
        "invalid-body",
        &|f| {
            twice(
                f,
                "k-twice-2",
                br#"{"meta":[{"amount":1,"x":2,"amount":1}]}"#,
            )
        },
    );
    case(
        f,
        "JSON key source, the key named twice",
        400,
        "invalid-body",
        &|f| {
            f.proxy.send(
                "POST",
                "/v1/emails",
                &[("content-type", "text/plain")],
                br#"{"args":{"idempotency_key":"a","idempotency_key":"b"}}"#,
            )
        },
    );
    case(f, "JSON key source, bad JSON", 400, "invalid-body", &|f| {
        f.proxy.send(
            "POST",
            "/v1/emails",
            &[("content-type", "text/plain")],
            b"not json at all",
        )
    });
    for coding in ["gzip", "identity, br"] {
        case(
            f,
            &format!("content encoding {coding}"),
            415,
            "unsupported-encoding",
            &|f| {
                f.proxy.send(
                    "POST",
                    "/v1/charges",
                    &[
                        ("idempotency-key", "k-gzip"),
                        ("content-type", "application/json"),
                        ("content-encoding", coding),
                    ],
                    b"\x1f\x8b\x08\x00",
                )
            },
        );
    }
    let gzipped = f.proxy.send(
        "POST",
        "/v1/charges",
        &[("idempotency-key", "k-gzip"), ("content-encoding", "gzip")],
        b"\x1f\x8b\x08\x00",
    );
    assert_eq!(
        gzipped.header("accept-encoding"),
        Some("identity"),
        "RFC 7694: what a body may be coded with"
    );
}

/// Keys and scopes that are missing, empty, too long, not ASCII, or sent twice.
fn keys_and_scopes_out_of_their_form(f: &Fx) {
    let body = br#"{"amount":100}"#;
    case(f, "key not ASCII", 400, "invalid-key", &|f| {
        f.raw(
            &post_head(b"idempotency-key: k\xff\xfe\n", body.len()),
            body,
        )
    });
    case(f, "scope not visible ASCII", 400, "invalid-scope", &|f| {
        f.raw(
            &post_head(b"idempotency-key: k-scope\nx-agent-id: a\tb\n", body.len()),
            body,
        )
    });
    case(f, "scope not ASCII", 400, "invalid-scope", &|f| {
        f.raw(
            &post_head(
                b"idempotency-key: k-scope\nx-agent-id: a\xffb\n",
                body.len(),
            ),
            body,
        )
    });
    case(f, "empty key", 400, "invalid-key", &|f| {
        f.raw(&post_head(b"idempotency-key: \n", body.len()), body)
    });
    case(f, "256-character key", 400, "invalid-key", &|f| {
        f.charge(&"k".repeat(256), body)
    });
    case(f, "4096-character key", 400, "invalid-key", &|f| {
        f.charge(&"k".repeat(4096), body)
    });
    case(f, "missing key", 400, "missing-key", &|f| {
        f.proxy.send(
            "POST",
            "/v1/charges",
            &[("content-type", "application/json")],
            body,
        )
    });
    case(
        f,
        "duplicate Idempotency-Key headers",
        400,
        "duplicate-header",
        &|f| {
            f.raw(
                &post_head(b"idempotency-key: k-a\nIdempotency-Key: k-b\n", body.len()),
                body,
            )
        },
    );
    case(
        f,
        "duplicate headers, same value",
        400,
        "duplicate-header",
        &|f| {
            f.raw(
                &post_head(b"idempotency-key: k-a\nidempotency-key: k-a\n", body.len()),
                body,
            )
        },
    );
}

/// Headers past their limits: one too large, too many.
fn headers_past_their_limits(f: &Fx) {
    let body = br#"{"amount":100}"#;
    case(f, "one 40 KiB header", 431, "headers-too-large", &|f| {
        let junk = format!("x-junk: {}\n", "j".repeat(40 * 1024));
        f.raw(
            &post_head(
                format!("idempotency-key: k-big\n{junk}").as_bytes(),
                body.len(),
            ),
            body,
        )
    });
    case(f, "300 headers", 431, "headers-too-large", &|f| {
        let many: String = (0..300).map(|i| format!("x-h{i}: v\n")).collect();
        f.raw(
            &post_head(
                format!("idempotency-key: k-many\n{many}").as_bytes(),
                body.len(),
            ),
            body,
        )
    });
}

/// Bodies past the route's limit, badly chunked, or too slow.
fn bodies_past_their_limits_or_too_slow(f: &Fx) {
    case(
        f,
        "Content-Length over the limit",
        413,
        "body-too-large",
        &|f| f.charge("k-big-body", &vec![b' '; 65 * 1024]),
    );
    case(
        f,
        "chunked body over the limit",
        413,
        "body-too-large",
        &|f| {
            let mut raw = "POST /v1/charges HTTP/1.1\r\nhost: x\r\nconnection: close\r\nidempotency-key: k-chunked\r\ntransfer-encoding: chunked\r\n\r\n".as_bytes().to_vec();
            for _ in 0..80 {
                raw.extend_from_slice(format!("{:x}\r\n", 1024).as_bytes());
                raw.extend_from_slice(&[b'a'; 1024]);
                raw.extend_from_slice(b"\r\n");
            }
            raw.extend_from_slice(b"0\r\n\r\n");
            raw_request(f.proxy.addr, &raw)
        },
    );
    case(f, "malformed chunked body", 400, "bad-body", &|f| {
        let raw = "POST /v1/charges HTTP/1.1\r\nhost: x\r\nconnection: close\r\nidempotency-key: k-badchunk\r\ntransfer-encoding: chunked\r\n\r\nzz\r\nabc\r\n0\r\n\r\n";
        raw_request(f.proxy.addr, raw.as_bytes())
    });
    case(f, "slow body (slowloris)", 408, "body-timeout", &|f| {
        let mut s = TcpStream::connect(f.proxy.addr).expect("connect");
        s.set_read_timeout(Some(Duration::from_secs(20)))
            .expect("timeout");
        s.write_all(&post_head(b"idempotency-key: k-slow\n", 100))
            .expect("head");
        let started = Instant::now();
        let mut buf = Vec::new();
        // One byte every 200 ms: 100 bytes would take 20 s; body_timeout is 1 s.
        for _ in 0..100 {
            if s.write_all(b" ").is_err() {
                break;
            }
            let mut chunk = [0u8; 4096];
            s.set_nonblocking(true).expect("nonblocking");
            if let Ok(n) = s.read(&mut chunk) {
                buf.extend_from_slice(&chunk[..n]);
                if n > 0 {
                    break;
                }
            }
            s.set_nonblocking(false).expect("blocking");
            std::thread::sleep(Duration::from_millis(200));
        }
        s.set_nonblocking(false).expect("blocking");
        let _ = s.read_to_end(&mut buf);
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "a slow body is cut off"
        );
        parse_response(&buf)
    });
}

#[test]
fn malformed_requests_get_a_problem_and_write_nothing() {
    let f = Fx::new();
    bodies_that_cannot_be_read_as_sent(&f);
    keys_and_scopes_out_of_their_form(&f);
    headers_past_their_limits(&f);
    bodies_past_their_limits_or_too_slow(&f);
}
#[test]
fn a_slow_header_is_cut_off_without_a_write() {
    // Headers that never finish: the connection is closed after the header timeout; nothing is
    // written and other clients are served meanwhile.
    let f = Fx::new();
    let before = f.written();
    let mut s = TcpStream::connect(f.proxy.addr).expect("connect");
    s.write_all(b"POST /v1/charges HTTP/1.1\r\nhost: x\r\nidempotency-key: k-slowhead\r\n")
        .expect("partial head");
    assert_eq!(f.charge("k-other", br#"{"amount":1}"#).status, 201);
    s.set_read_timeout(Some(Duration::from_secs(30)))
        .expect("timeout");
    let started = Instant::now();
    let mut buf = Vec::new();
    let _ = s.read_to_end(&mut buf);
    assert!(
        started.elapsed() < Duration::from_secs(25),
        "the connection was closed by the proxy"
    );
    let (entries, head, effects) = f.written();
    assert_eq!(
        (entries, effects),
        (before.0 + 1, before.2 + 1),
        "only k-other was written"
    );
    assert!(head > before.1);
}

#[test]
fn the_write_check_sees_writes() {
    // The harness's "nothing written" check is not blind: a good request changes all three.
    let f = Fx::new();
    let before = f.written();
    assert_eq!(f.charge("k-good", br#"{"amount":1}"#).status, 201);
    let after = f.written();
    assert!(after.0 > before.0 && after.1 > before.1 && after.2 > before.2);
}
