//! A real upstream on 127.0.0.1 that counts side effects per idempotency key and injects faults.
//!
//! It is a small HTTP/1.1 server written on raw sockets, so it can do what a well-behaved framework
//! will not: perform the effect and then drop the connection without answering.
//!
//! Faults are chosen per request by the `x-fault` header (the proxy forwards it):
//! - `status:NNN` — 500/502/504: perform the effect, then answer NNN; 429/503: no effect, answer NNN
//!   with `Retry-After: 1`; other codes: no effect, answer NNN. A read (`GET /v1/customers...`)
//!   is answered NNN with the count of reads and an error (429/503: `Retry-After: 7`).
//! - `stall:MS` — a read's answer stops halfway for MS milliseconds (with `x-answer-bytes: N`,
//!   the body is N bytes; with `x-answer-chunked: 1`, a read's body is chunked).
//! - `drop` — perform the effect, then close the connection without a response.
//! - `delay:MS` — perform the effect, wait MS milliseconds, then answer 201 (`delay:MS:NNN`: NNN;
//!   with 429 or 503, wait and answer without the effect and without `Retry-After`).
//! - `fail-first:N:NNN` — the first N requests for this key get NNN (no effect), then normal
//!   (`fail-first:N:NNN:SECS`: with `Retry-After: SECS`; `…:date+SECS`: as the HTTP-date SECS
//!   from now).
//!
//! With [`Counts::set_chaos`], a request without `x-fault` gets a random fault instead (the chaos
//! harness): dropped after the effect, 503 without the effect, or stalled after the effect.
//!
//! `/mcp` is an MCP server (see `mcp_upstream`).
//!
//! Paths: `POST /dedupe/...` dedupes by key itself (effect once per key); `GET /v1/customers...`
//! counts reads (a `HEAD` too, answered with the `GET`'s head and no body);
//! `GET /v1/charges?idempotency_key=K` is a reconcile probe (200 if K's effect happened, 404 if
//! not); anything else performs the effect and answers 201 with a JSON body naming the key, the
//! effect number and whether an `authorization` header arrived (with `x-answer-bytes: N`, an
//! answer of N bytes).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpListener;

#[derive(Debug, Default)]
pub struct Counts {
    effects: Mutex<HashMap<String, u64>>,
    requests: Mutex<HashMap<String, u64>>,
    pub total_effects: AtomicU64,
    pub reads: AtomicU64,
    /// Headers of the last request, lower-cased names.
    pub last_headers: Mutex<Vec<(String, String)>>,
    /// The request target (path and query) of the last request.
    pub last_target: Mutex<String>,
    /// The method of the last request.
    pub last_method: Mutex<String>,
    chaos: Mutex<Option<Chaos>>,
    dice: AtomicU64,
    /// Faults injected by chaos: dropped, unavailable, stalled.
    pub injected: [AtomicU64; 3],
    /// MCP sessions opened and ended at `/mcp`.
    pub mcp_sessions: AtomicU64,
    pub mcp_sessions_ended: AtomicU64,
    /// The JSON-RPC methods `/mcp` was sent, in order.
    pub mcp_methods: Mutex<Vec<String>>,
    /// Each `tools/call` `/mcp` was sent: tool, arguments, headers.
    pub mcp_calls: Mutex<Vec<McpCallSeen>>,
}

/// A `tools/call` the MCP upstream was sent: its tool, its arguments and the request's headers.
pub type McpCallSeen = (String, serde_json::Value, Vec<(String, String)>);

/// Random faults for requests that do not choose one, in percent of requests.
#[derive(Debug, Clone, Copy)]
pub struct Chaos {
    /// Perform the effect, then close the connection without answering.
    pub drop_pct: u64,
    /// Answer 503 with `Retry-After: 1`, no effect.
    pub unavailable_pct: u64,
    /// Perform the effect, then answer only after `stall_ms`.
    pub stall_pct: u64,
    pub stall_ms: u64,
}

impl Counts {
    pub fn effects(&self, key: &str) -> u64 {
        self.effects
            .lock()
            .map(|m| m.get(key).copied().unwrap_or(0))
            .unwrap_or(0)
    }

    pub fn requests(&self, key: &str) -> u64 {
        self.requests
            .lock()
            .map(|m| m.get(key).copied().unwrap_or(0))
            .unwrap_or(0)
    }

    pub fn total(&self) -> u64 {
        self.total_effects.load(Ordering::SeqCst)
    }

    pub fn keys_with_effects(&self) -> HashMap<String, u64> {
        self.effects.lock().map(|m| m.clone()).unwrap_or_default()
    }

    pub fn set_chaos(&self, chaos: Option<Chaos>) {
        *self.chaos.lock().unwrap_or_else(|p| p.into_inner()) = chaos;
    }

    /// The fault chaos picks for the next request, as an `x-fault` value ("" for none).
    fn roll(&self) -> String {
        let Some(c) = *self.chaos.lock().unwrap_or_else(|p| p.into_inner()) else {
            return String::new();
        };
        // splitmix64 over a counter: a fixed, well-spread sequence, no dependency.
        let mut z = self
            .dice
            .fetch_add(0x9E37_79B9_7F4A_7C15, Ordering::Relaxed)
            .wrapping_add(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        let d = (z ^ (z >> 31)) % 100;
        let (a, b, s) = (
            c.drop_pct,
            c.drop_pct + c.unavailable_pct,
            c.drop_pct + c.unavailable_pct + c.stall_pct,
        );
        let (fault, i) = if d < a {
            ("drop".to_owned(), 0)
        } else if d < b {
            ("status:503".to_owned(), 1)
        } else if d < s {
            (format!("delay:{}", c.stall_ms), 2)
        } else {
            return String::new();
        };
        self.injected[i].fetch_add(1, Ordering::Relaxed);
        fault
    }

    /// Whether MCP session `id` is open.
    pub(crate) fn has_session(&self, id: &str) -> bool {
        let opened = self.mcp_sessions.load(Ordering::SeqCst);
        id.strip_prefix("s-")
            .and_then(|n| n.parse::<u64>().ok())
            .is_some_and(|n| n >= 1 && n <= opened)
    }

    /// Counts an effect under `key` without counting it in the total (it is counted under
    /// another name already).
    pub(crate) fn note_effect_of(&self, key: &str) {
        let mut m = self.effects.lock().unwrap_or_else(|p| p.into_inner());
        *m.entry(key.to_owned()).or_insert(0) += 1;
    }

    pub(crate) fn effect(&self, key: &str) -> u64 {
        self.total_effects.fetch_add(1, Ordering::SeqCst);
        let mut m = self.effects.lock().unwrap_or_else(|p| p.into_inner());
        let n = m.entry(key.to_owned()).or_insert(0);
        *n += 1;
        *n
    }
}

/// The running upstream. It stops when dropped (its runtime thread ends).
#[derive(Debug)]
pub struct Upstream {
    pub addr: SocketAddr,
    pub counts: Arc<Counts>,
    /// For [`Upstream::start_tls`]: the PEM of the certificate authority that signed its
    /// certificate (for `127.0.0.1`), for a client to trust (`SSL_CERT_FILE`).
    pub ca_pem: Option<String>,
    _stop: tokio::sync::oneshot::Sender<()>,
}

impl Upstream {
    /// Starts on 127.0.0.1 with an ephemeral port, on its own thread and runtime.
    pub fn start() -> Upstream {
        Upstream::serve(None)
    }

    /// Like [`Upstream::start`], speaking HTTPS with a certificate for `127.0.0.1` signed by a new
    /// certificate authority ([`Upstream::ca_pem`]).
    pub fn start_tls() -> Upstream {
        let ca_key = rcgen::KeyPair::generate().expect("ca key");
        let mut ca = rcgen::CertificateParams::new(Vec::<String>::new()).expect("ca params");
        ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let ca_cert = ca.self_signed(&ca_key).expect("ca cert");
        let key = rcgen::KeyPair::generate().expect("key");
        let cert = rcgen::CertificateParams::new(vec!["127.0.0.1".to_owned()])
            .expect("params")
            .signed_by(&key, &ca_cert, &ca_key)
            .expect("cert");
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .expect("versions")
            .with_no_client_auth()
            .with_single_cert(
                vec![cert.der().clone()],
                rustls::pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into()),
            )
            .expect("server config");
        let mut up = Upstream::serve(Some(tokio_rustls::TlsAcceptor::from(Arc::new(config))));
        up.ca_pem = Some(ca_cert.pem());
        up
    }

    fn serve(tls: Option<tokio_rustls::TlsAcceptor>) -> Upstream {
        let counts = Arc::new(Counts::default());
        let (addr_tx, addr_rx) = std::sync::mpsc::channel();
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let c = counts.clone();
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .expect("runtime");
            rt.block_on(async move {
                let l = TcpListener::bind("127.0.0.1:0")
                    .await
                    .expect("bind upstream");
                addr_tx
                    .send(l.local_addr().expect("addr"))
                    .expect("send addr");
                let accept = async {
                    loop {
                        let Ok((s, _)) = l.accept().await else {
                            continue;
                        };
                        let c = c.clone();
                        let tls = tls.clone();
                        tokio::spawn(async move {
                            let _ = match tls {
                                None => conn(s, c).await,
                                Some(tls) => match tls.accept(s).await {
                                    Ok(s) => conn(s, c).await,
                                    Err(e) => Err(e),
                                },
                            };
                        });
                    }
                };
                tokio::select! {
                    _ = accept => {}
                    _ = stop_rx => {}
                }
            });
        });
        let addr = addr_rx.recv().expect("upstream address");
        Upstream {
            addr,
            counts,
            ca_pem: None,
            _stop: stop_tx,
        }
    }

    pub fn url(&self) -> String {
        let scheme = if self.ca_pem.is_some() {
            "https"
        } else {
            "http"
        };
        format!("{scheme}://{}", self.addr)
    }
}

pub(crate) struct Req {
    pub(crate) method: String,
    pub(crate) target: String,
    pub(crate) headers: Vec<(String, String)>,
    pub(crate) body: Vec<u8>,
}

impl Req {
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

async fn read_req<S: AsyncRead + Unpin>(
    s: &mut S,
    buf: &mut Vec<u8>,
) -> std::io::Result<Option<Req>> {
    loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]).into_owned();
            let mut lines = head.split("\r\n");
            let mut first = lines.next().unwrap_or("").split(' ');
            let method = first.next().unwrap_or("").to_owned();
            let target = first.next().unwrap_or("").to_owned();
            let headers: Vec<(String, String)> = lines
                .filter_map(|l| l.split_once(':'))
                .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_owned()))
                .collect();
            let len: usize = headers
                .iter()
                .find(|(n, _)| n == "content-length")
                .and_then(|(_, v)| v.parse().ok())
                .unwrap_or(0);
            let total = end + 4 + len;
            while buf.len() < total {
                let mut chunk = [0u8; 8192];
                let n = s.read(&mut chunk).await?;
                if n == 0 {
                    return Ok(None);
                }
                buf.extend_from_slice(&chunk[..n]);
            }
            let body = buf[end + 4..total].to_vec();
            buf.drain(..total);
            return Ok(Some(Req {
                method,
                target,
                headers,
                body,
            }));
        }
        let mut chunk = [0u8; 8192];
        let n = s.read(&mut chunk).await?;
        if n == 0 {
            return Ok(None);
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

async fn write_resp<S: AsyncWrite + Unpin>(
    s: &mut S,
    status: u16,
    extra: &[(&str, String)],
    body: &str,
) -> std::io::Result<()> {
    let mut out = head(status, extra, body);
    out.push_str(body);
    s.write_all(out.as_bytes()).await
}

/// The head of the response [`write_resp`] writes: the whole answer to a `HEAD`.
fn head(status: u16, extra: &[(&str, String)], body: &str) -> String {
    let mut out = format!(
        "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\n",
        body.len()
    );
    for (n, v) in extra {
        out.push_str(&format!("{n}: {v}\r\n"));
    }
    out.push_str("\r\n");
    out
}

/// A GET or HEAD: a reconcile probe of `/v1/charges?idempotency_key=K` (found or not), or a read
/// shaped by the request's `x-answer-*` and `x-fault` headers.
async fn answer_read<S: AsyncWrite + Unpin>(
    s: &mut S,
    c: &Counts,
    req: &Req,
    fault: &str,
) -> std::io::Result<()> {
    if let Some(q) = req.target.strip_prefix("/v1/charges?idempotency_key=") {
        let q = percent_encoding::percent_decode_str(q).decode_utf8_lossy();
        let found = c.effects(&q) > 0;
        write_resp(
            s,
            if found { 200 } else { 404 },
            &[],
            &format!(r#"{{"found":{found},"key":"{q}"}}"#),
        )
        .await?;
    } else {
        let n = c.reads.fetch_add(1, Ordering::SeqCst) + 1;
        // `x-answer-header: NAME: VALUE` asks for that header on the answer.
        let mut extra: Vec<(&str, String)> = req
            .header("x-answer-header")
            .and_then(|h| h.split_once(':'))
            .map(|(n, v)| (n.trim(), v.trim().to_owned()))
            .into_iter()
            .collect();
        // `x-fault: status:NNN` answers a read NNN, in the upstream's own words.
        let code = fault
            .strip_prefix("status:")
            .and_then(|c| c.parse().ok())
            .unwrap_or(200);
        // `x-answer-bytes: N` asks for a body of N bytes.
        let size = req.header("x-answer-bytes").and_then(|b| b.parse().ok());
        let body = if let Some(size) = size {
            "x".repeat(size)
        } else if code == 200 {
            format!(r#"{{"read":{n}}}"#)
        } else {
            format!(r#"{{"read":{n},"error":"the upstream's own words on {code}"}}"#)
        };
        if matches!(code, 429 | 503) {
            extra.push(("retry-after", "7".to_owned()));
        }
        // `x-answer-chunked: 1`: the body comes chunked, its length not told up front.
        if req.header("x-answer-chunked").is_some() {
            let mut out = format!(
                "HTTP/1.1 {code} X\r\ncontent-type: text/plain\r\n\
                 transfer-encoding: chunked\r\n\r\n"
            );
            for piece in body.as_bytes().chunks(64 << 10) {
                out.push_str(&format!("{:x}\r\n", piece.len()));
                out.push_str(std::str::from_utf8(piece).unwrap_or_default());
                out.push_str("\r\n");
            }
            out.push_str("0\r\n\r\n");
            s.write_all(out.as_bytes()).await?;
            return Ok(());
        }
        let mut out = head(code, &extra, &body);
        if req.method != "HEAD" {
            out.push_str(&body);
        }
        if let Some(ms) = fault.strip_prefix("stall:") {
            // Half the body, then nothing for MS milliseconds, then the rest.
            let (first, rest) = out.split_at(out.len() - body.len() / 2);
            s.write_all(first.as_bytes()).await?;
            tokio::time::sleep(Duration::from_millis(ms.parse().unwrap_or(30_000))).await;
            s.write_all(rest.as_bytes()).await?;
            return Ok(());
        }
        s.write_all(out.as_bytes()).await?;
    }
    Ok(())
}

/// Keeps what a request asked (its headers, target and method, for the tests to look at) and
/// counts it under its key: returns the key and how many requests have carried it.
fn note(c: &Counts, req: &Req) -> (String, u64) {
    if let Ok(mut h) = c.last_headers.lock() {
        *h = req.headers.clone();
    }
    if let Ok(mut t) = c.last_target.lock() {
        t.clone_from(&req.target);
    }
    if let Ok(mut m) = c.last_method.lock() {
        m.clone_from(&req.method);
    }
    let key = req.header("idempotency-key").unwrap_or("").to_owned();
    let mut m = c.requests.lock().unwrap_or_else(|p| p.into_inner());
    let n = m.entry(key.clone()).or_insert(0);
    *n += 1;
    (key, *n)
}

#[allow(
    clippy::too_many_lines,
    reason = "one fault per arm: the fake upstream's behaviour read in one place"
)]
async fn conn<S: AsyncRead + AsyncWrite + Unpin>(mut s: S, c: Arc<Counts>) -> std::io::Result<()> {
    let mut buf = Vec::new();
    while let Some(req) = read_req(&mut s, &mut buf).await? {
        let (key, n_req) = note(&c, &req);
        if req.target.starts_with("/mcp") {
            if crate::mcp_upstream::answer(&mut s, &c, &req).await? {
                continue;
            }
            return Ok(());
        }
        let fault = match req.header("x-fault") {
            Some(f) => f.to_owned(),
            None if req.method == "POST" => c.roll(),
            None => String::new(),
        };
        if req.method == "GET" || req.method == "HEAD" {
            answer_read(&mut s, &c, &req, &fault).await?;
            continue;
        }
        let mut parts = fault.split(':');
        match (parts.next().unwrap_or(""), parts.next(), parts.next()) {
            ("status", Some(code), _) => {
                let code: u16 = code.parse().unwrap_or(500);
                if matches!(code, 500 | 502 | 504) {
                    c.effect(&key);
                }
                let extra = if matches!(code, 429 | 503) {
                    vec![("retry-after", "1".to_owned())]
                } else {
                    vec![]
                };
                write_resp(&mut s, code, &extra, &format!(r#"{{"error":{code}}}"#)).await?;
                continue;
            }
            ("drop", _, _) => {
                c.effect(&key);
                return Ok(()); // the connection closes without an answer
            }
            ("delay", Some(ms), code) => {
                let code: u16 = code.and_then(|c| c.parse().ok()).unwrap_or(201);
                if !matches!(code, 429 | 503) {
                    c.effect(&key);
                }
                tokio::time::sleep(Duration::from_millis(ms.parse().unwrap_or(1000))).await;
                write_resp(
                    &mut s,
                    code,
                    &[],
                    &format!(r#"{{"key":"{key}","delayed":true,"status":{code}}}"#),
                )
                .await?;
                continue;
            }
            ("fail-first", Some(n), Some(code)) if n_req <= n.parse().unwrap_or(0) => {
                let code: u16 = code.parse().unwrap_or(503);
                let extra: Vec<(&str, String)> = parts
                    .next()
                    .map(|secs| match secs.strip_prefix("date+") {
                        // As an HTTP-date, SECS from now.
                        Some(s) => {
                            let after = Duration::from_secs(s.parse().unwrap_or(0));
                            let at = std::time::SystemTime::now() + after;
                            ("retry-after", httpdate::fmt_http_date(at))
                        }
                        None => ("retry-after", secs.to_owned()),
                    })
                    .into_iter()
                    .collect();
                write_resp(&mut s, code, &extra, r#"{"error":"try again"}"#).await?;
                continue;
            }
            _ => {}
        }
        let effect_no = if req.target.starts_with("/dedupe") && c.effects(&key) > 0 {
            c.effects(&key)
        } else {
            c.effect(&key)
        };
        let auth = req.header("authorization").is_some();
        // `x-answer-bytes: N` asks for an answer of N bytes.
        if let Some(size) = req.header("x-answer-bytes").and_then(|b| b.parse().ok()) {
            write_resp(&mut s, 201, &[], &"x".repeat(size)).await?;
            continue;
        }
        let body = format!(
            r#"{{"id":"ch_{}","key":"{key}","effect":{effect_no},"saw_authorization":{auth},"bytes":{}}}"#,
            c.total(),
            req.body.len()
        );
        write_resp(&mut s, 201, &[("x-upstream", "1".to_owned())], &body).await?;
        if req.header("connection") == Some("close") {
            return Ok(());
        }
    }
    Ok(())
}
