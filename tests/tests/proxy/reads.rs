//! Read routes: no key, the upstream's answer passed on, streamed bodies, HEAD, the shared cache.

use super::*;

#[test]
fn read_routes_need_no_key_and_are_cached() {
    let f = Fx::new();
    let a = f.proxy.send("GET", "/v1/customers/cus_1", &[], b"");
    assert_eq!(a.status, 200);
    assert_eq!(a.header("x-cache"), Some("MISS"));
    let b = f.proxy.send("GET", "/v1/customers/cus_1", &[], b"");
    assert_eq!(b.status, 200);
    assert_eq!(b.header("x-cache"), Some("HIT"));
    assert_eq!(b.body, a.body);
    assert_eq!(
        f.up.counts.reads.load(std::sync::atomic::Ordering::SeqCst),
        1
    );
    assert!(f.entries(&[]).is_empty(), "reads are not ledgered");
}

/// A read does nothing upstream, so the upstream's answer is the caller's, whatever its status: a
/// 500 reaches the agent in the upstream's own words (it was a `502 upstream-error` saying only
/// "upstream 500"), and a 503 with the upstream's Retry-After. Neither is kept by the read cache.
#[test]
fn a_read_passes_on_the_upstreams_error_answer() {
    let f = Fx::new();
    let reads = || f.up.counts.reads.load(std::sync::atomic::Ordering::SeqCst);
    // 429 and 503 come with a Retry-After of 7 s, longer than the route waits: not retried.
    for (code, tries) in [(500, 1), (502, 1), (504, 1), (404, 1), (503, 1), (429, 1)] {
        let before = reads();
        let fault = format!("status:{code}");
        let path = format!("/v1/customers/cus_{code}");
        for _ in 0..2 {
            let r = f.proxy.send("GET", &path, &[("x-fault", &fault)], b"");
            assert_eq!(r.status, code, "{}", r.text());
            let said = r.json();
            assert_eq!(
                said["error"],
                format!("the upstream's own words on {code}"),
                "{said}"
            );
            assert_eq!(r.header("x-cache"), Some("MISS"), "{code} is not kept");
            if matches!(code, 429 | 503) {
                assert_eq!(r.header("retry-after"), Some("7"));
            }
        }
        assert_eq!(reads() - before, 2 * tries, "{code}: tries per read");
    }
    assert_eq!(f.up.counts.total(), 0);
    assert!(f.entries(&[]).is_empty());
}

/// A read is streamed from its upstream: a body larger than the proxy keeps whole (16 MiB, the
/// most a write's response may be) reaches the caller all the same (it was a `502`), and is not
/// kept by the read cache; an upstream that stalls mid-body is cut off.
#[test]
fn a_read_larger_than_the_proxy_keeps_is_streamed_to_the_caller() {
    let f = Fx::new();
    let size = (idemgate_proxy::forward::MAX_RESPONSE_BODY + 1).to_string();
    for _ in 0..2 {
        let r = f.proxy.send(
            "GET",
            "/v1/customers/cus_large/export",
            &[("x-answer-bytes", &size)],
            b"",
        );
        assert_eq!(
            r.status,
            200,
            "{}",
            String::from_utf8_lossy(&r.body[..200.min(r.body.len())])
        );
        assert_eq!(r.body.len().to_string(), size);
        assert!(r.body.iter().all(|&b| b == b'x'));
        assert_eq!(r.header("x-cache"), Some("MISS"));
    }
    assert_eq!(
        f.up.counts.reads.load(std::sync::atomic::Ordering::SeqCst),
        2
    );
    // A chunked body does not tell its length: the cache reads it until it passes the limit, and
    // the caller gets what was read and the rest (it was a `502`). One that fits is kept.
    for (size, cache) in [(size.as_str(), "MISS"), ("100000", "HIT")] {
        for _ in 0..2 {
            let r = f.proxy.send(
                "GET",
                &format!("/v1/customers/cus_chunked_{size}"),
                &[("x-answer-bytes", size), ("x-answer-chunked", "1")],
                b"",
            );
            let shown = String::from_utf8_lossy(&r.body[..200.min(r.body.len())]).into_owned();
            assert_eq!(r.status, 200, "{shown}");
            assert_eq!(r.body.len().to_string(), size, "{shown}");
            assert!(r.body.iter().all(|&b| b == b'x'));
        }
        let again = f.proxy.send(
            "GET",
            &format!("/v1/customers/cus_chunked_{size}"),
            &[("x-answer-bytes", size), ("x-answer-chunked", "1")],
            b"",
        );
        assert_eq!(again.header("x-cache"), Some(cache), "{size} bytes");
    }
    // An upstream that stops sending halfway is cut off after the route's timeout (1 s) without
    // a byte: the caller's answer ends short, and does not wait for the upstream (30 s).
    let started = std::time::Instant::now();
    let cut = try_request(
        f.proxy.addr,
        "GET",
        "/v1/customers/cus_stalled/export",
        &[("x-answer-bytes", &size), ("x-fault", "stall:30000")],
        b"",
    );
    assert!(cut.is_none(), "a whole answer from a stalled upstream");
    assert!(
        started.elapsed() < std::time::Duration::from_secs(15),
        "waited {:?} on a stalled upstream",
        started.elapsed()
    );
}

/// A `HEAD` is a `GET` without the body (RFC 9110 §9.3.2): a read route serves it, and its
/// cache answers it from a kept `GET` response but never keeps a body-less answer for a `GET`. A
/// method no route takes at a path that routes do take is a `405` naming the methods they take.
#[test]
fn head_is_a_get_without_the_body_and_other_methods_are_not_allowed() {
    let f = Fx::new();
    let reads = || f.up.counts.reads.load(std::sync::atomic::Ordering::SeqCst);
    let last_method = || f.up.counts.last_method.lock().expect("lock").clone();
    let h = f.proxy.send("HEAD", "/v1/customers/cus_h", &[], b"");
    assert_eq!(h.status, 200, "{}", h.text());
    assert!(h.body.is_empty());
    assert_eq!(h.header("x-cache"), Some("MISS"));
    assert_eq!(
        h.header("content-length"),
        Some("10"),
        "the upstream's GET length"
    );
    assert_eq!((reads(), last_method().as_str()), (1, "HEAD"));
    let g = f.proxy.send("GET", "/v1/customers/cus_h", &[], b"");
    assert_eq!(
        g.header("x-cache"),
        Some("MISS"),
        "a HEAD's answer was kept"
    );
    assert_eq!(g.text(), r#"{"read":2}"#);
    let h = f.proxy.send("HEAD", "/v1/customers/cus_h", &[], b"");
    assert_eq!(h.status, 200);
    assert_eq!(h.header("x-cache"), Some("HIT"));
    assert!(h.body.is_empty());
    assert_eq!(h.header("content-length"), Some("10"), "the GET's length");
    assert_eq!(reads(), 2);

    for (method, path, allow) in [
        ("GET", "/v1/charges", "POST"),
        ("PUT", "/v1/charges/ch_1", "POST"),
        ("DELETE", "/v1/customers/cus_h", "GET, HEAD"),
        ("HEAD", "/v1/charges", "POST"),
    ] {
        let r = f
            .proxy
            .send(method, path, &[("idempotency-key", "k-405")], b"");
        assert_eq!(r.status, 405, "{method} {path}");
        assert_eq!(r.header("allow"), Some(allow), "{method} {path}");
        if method != "HEAD" {
            assert_eq!(r.code(), "method-not-allowed");
        }
    }
    assert_eq!(
        f.proxy.send("GET", "/v2/unknown", &[], b"").status,
        404,
        "no route takes the path"
    );
    assert_eq!(f.up.counts.total(), 0);
    assert_eq!(reads(), 2, "only the reads reached the upstream");
    assert!(f.entries(&[]).is_empty());
}

/// The read cache is shared by every caller of the proxy: it must never answer one caller with
/// what another was allowed to see, nor keep what the upstream says a shared cache may not.
#[test]
fn the_read_cache_keeps_callers_apart_and_obeys_the_upstream() {
    let f = Fx::new();
    let get = |path: &str, headers: &[(&str, &str)]| {
        let r = f.proxy.send("GET", path, headers, b"");
        assert_eq!(r.status, 200, "{}", r.text());
        r.header("x-cache").unwrap_or_default().to_owned()
    };
    let alice = [
        ("authorization", "Bearer sk_alice"),
        ("x-agent-id", "agent-7"),
    ];
    assert_eq!(get("/v1/customers/cus_9", &alice), "MISS");
    assert_eq!(get("/v1/customers/cus_9", &alice), "HIT");
    for other in [
        &[
            ("authorization", "Bearer sk_bob"),
            ("x-agent-id", "agent-7"),
        ][..],
        &[("x-agent-id", "agent-7")],
        &[
            ("authorization", "Bearer sk_alice"),
            ("x-agent-id", "agent-8"),
        ],
        &[
            ("authorization", "Bearer sk_alice"),
            ("x-agent-id", "agent-7"),
            ("x-processor-key", "pk_2"),
        ],
    ] {
        assert_eq!(get("/v1/customers/cus_9", other), "MISS", "{other:?}");
    }
    assert_eq!(get("/v1/customers/cus_9", &alice), "HIT");
    for asks in ["no-cache", "no-store"] {
        assert_eq!(
            get(
                "/v1/customers/cus_9",
                &[alice[0], alice[1], ("cache-control", asks)]
            ),
            "MISS",
            "the caller asked for a fresh answer ({asks})"
        );
    }

    // What the upstream forbids a shared cache to keep is never kept.
    for said in [
        "cache-control: private",
        "cache-control: no-store",
        "cache-control: max-age=0",
        "vary: *",
    ] {
        let path = format!("/v1/customers/{}", said.replace([':', ' ', '*', '='], "_"));
        let h = [("x-answer-header", said)];
        assert_eq!(get(&path, &h), "MISS", "{said}");
        assert_eq!(get(&path, &h), "MISS", "{said} was kept");
    }
    // A response that varies on a header answers only requests with its value.
    let varies = |lang: &str| {
        get(
            "/v1/customers/cus_lang",
            &[
                ("x-answer-header", "vary: Accept-Language"),
                ("accept-language", lang),
            ],
        )
    };
    assert_eq!(varies("en"), "MISS");
    assert_eq!(varies("en"), "HIT");
    assert_eq!(varies("fr"), "MISS");
    assert_eq!(varies("fr"), "HIT");
    assert_eq!(
        varies("en"),
        "MISS",
        "the French answer replaced the English one"
    );
    assert!(f.entries(&[]).is_empty(), "reads are not ledgered");
}
