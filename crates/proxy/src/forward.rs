//! Talking to upstreams: header hygiene (hop-by-hop, secrets), one attempt with a timeout, and the
//! classification of its outcome — the heart of "was it executed?".

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::http::{header, HeaderMap, HeaderName, HeaderValue, Method, Request, Response, Uri};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::{Body, Frame, Incoming, SizeHint};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use idemgate_ledger::ResponseRecord;
use tower_http::timeout::TimeoutBody;

use crate::config::Upstream;

pub type HttpClient = Client<hyper_rustls::HttpsConnector<HttpConnector>, Full<Bytes>>;

/// The largest upstream response body stored and relayed (the ledger's limit).
pub const MAX_RESPONSE_BODY: usize = idemgate_ledger::MAX_RESPONSE_BODY;

/// The upstream client: `http://`, and `https://` with rustls, verified against the system's CA
/// certificates (`SSL_CERT_FILE` or `SSL_CERT_DIR` name others). A failed TLS handshake is a
/// failed connect: nothing was sent, so the attempt was not executed.
pub fn client() -> HttpClient {
    let mut c = HttpConnector::new();
    c.set_nodelay(true);
    c.set_connect_timeout(Some(Duration::from_secs(2)));
    c.enforce_http(false);
    let provider = || rustls::crypto::ring::default_provider();
    let tls = match hyper_rustls::HttpsConnectorBuilder::new()
        .with_provider_and_native_roots(provider())
    {
        Ok(b) => b,
        Err(e) => {
            tracing::warn!(error = %e, "no CA certificates: https:// upstreams will be refused (install ca-certificates, or set SSL_CERT_FILE)");
            let none = rustls::ClientConfig::builder_with_provider(provider().into())
                .with_safe_default_protocol_versions()
                .map(|b| {
                    b.with_root_certificates(rustls::RootCertStore::empty())
                        .with_no_client_auth()
                });
            match none {
                Ok(cfg) => hyper_rustls::HttpsConnectorBuilder::new().with_tls_config(cfg),
                // ring offers the default versions; this cannot fail.
                Err(e) => unreachable!("rustls with ring: {e}"),
            }
        }
    };
    Client::builder(TokioExecutor::new())
        .pool_idle_timeout(Duration::from_secs(30))
        .pool_max_idle_per_host(64)
        .build(tls.https_or_http().enable_http1().wrap_connector(c))
}

/// Headers that belong to one connection, never forwarded (RFC 9110 §7.6.1).
const HOP_BY_HOP: &[&str] = &[
    "connection",
    "keep-alive",
    "proxy-connection",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
];

/// Removes hop-by-hop headers, including those the `Connection` header names.
pub fn strip_hop_by_hop(h: &mut HeaderMap) {
    let named: Vec<HeaderName> = h
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|n| HeaderName::from_bytes(n.trim().as_bytes()).ok())
        .collect();
    for n in named {
        h.remove(n);
    }
    for n in HOP_BY_HOP {
        h.remove(*n);
    }
}

/// The upstream URI for a request path and query.
pub fn upstream_uri(up: &Upstream, path_and_query: &str) -> Result<Uri, String> {
    format!("{up}{path_and_query}")
        .parse::<Uri>()
        .map_err(|e| e.to_string())
}

/// An upstream's final answer. `body` is the bytes as they arrived, shared and never copied for
/// the client; the ledger's copy is made once, by [`UpstreamResponse::record`].
#[derive(Debug, Clone)]
pub struct UpstreamResponse {
    pub status: u16,
    /// The headers worth storing and replaying (the same ones a replay gets).
    pub headers: Vec<(String, String)>,
    pub body: Bytes,
}

impl UpstreamResponse {
    /// The response as the ledger stores it.
    pub fn record(&self) -> ResponseRecord {
        ResponseRecord {
            status: self.status,
            headers: self.headers.clone(),
            body: self.body.to_vec(),
        }
    }
}

/// The outcome of one attempt.
#[derive(Debug)]
pub enum Attempt {
    /// The upstream answered with a final status: the effect happened (2xx) or was refused for good
    /// (a permanent 4xx). Stored and replayed.
    Executed(UpstreamResponse),
    /// The upstream did not act on the request, and says a retry would not change that until the
    /// caller does something (401, 403, 407: its credentials or permissions). Passed to the
    /// caller as it is, not stored: the key is released, so the same request runs once the
    /// caller may make it.
    Refused(UpstreamResponse),
    /// Definitely not executed: connection refused, 408, 425, 429 or 503. Safe to retry.
    NotExecuted {
        why: String,
        retry_after: Option<u64>,
        class: &'static str,
    },
    /// May or may not have happened: a timeout or reset after the request was sent, or 500/502/504.
    Unknown { why: String, timed_out: bool },
}

/// Response headers worth storing and replaying: not those the proxy sets when it answers, nor a
/// stale date and server, nor credentials.
fn keep_response_header(name: &str) -> bool {
    !idemgate_ledger::ANSWER_HEADERS.contains(&name)
        && !matches!(
            name,
            "date" | "server" | "set-cookie" | "proxy-authorization"
        )
}

pub fn upstream_response(status: u16, headers: &HeaderMap, body: Bytes) -> UpstreamResponse {
    UpstreamResponse {
        status,
        headers: kept_headers(headers),
        body,
    }
}

pub(crate) fn kept_headers(headers: &HeaderMap) -> Vec<(String, String)> {
    headers
        .iter()
        .filter(|(n, _)| keep_response_header(n.as_str()))
        .filter_map(|(n, v)| {
            v.to_str()
                .ok()
                .map(|v| (n.as_str().to_owned(), v.to_owned()))
        })
        .collect()
}

/// The upstream's `Retry-After` in seconds from now (RFC 9110 §10.2.3): as it gives it, or until
/// the HTTP-date it gives (rounded up; a date already past is 0).
pub fn retry_after_secs(headers: &[(String, String)]) -> Option<u64> {
    let v = headers.iter().find(|(n, _)| n == "retry-after")?.1.trim();
    if let Ok(secs) = v.parse() {
        return Some(secs);
    }
    let at = httpdate::parse_http_date(v).ok()?;
    let left = at
        .duration_since(std::time::SystemTime::now())
        .unwrap_or_default();
    Some(left.as_secs() + u64::from(left.subsec_nanos() > 0))
}

/// Why an exchange brought no answer to pass on.
#[derive(Debug)]
pub enum NoAnswer {
    /// The connection (or its TLS) could not be made: nothing was sent.
    Connect(String),
    /// No answer within the route's timeout, after the request was sent.
    Timeout(String),
    /// The connection failed after the request was sent, or the answer's body did.
    Broken(String),
    /// The answer's body is longer than [`MAX_RESPONSE_BODY`], so it could not be kept.
    TooLarge { status: u16 },
}

/// One request to an upstream, and how long it may take (`timeout`: the whole exchange for a
/// write; for a read, its head and then each wait for more of its body).
#[derive(Debug)]
pub struct Outgoing<'a> {
    pub method: &'a Method,
    pub uri: Uri,
    pub headers: &'a HeaderMap,
    pub body: Bytes,
    pub timeout: Duration,
}

/// Sends one request and returns the upstream's answer, whatever its status, within the
/// request's `timeout`. [`attempt`] says what the answer means for a write.
pub async fn exchange(
    client: &HttpClient,
    out: Outgoing<'_>,
) -> Result<UpstreamResponse, NoAnswer> {
    let deadline = Deadline::after(out.timeout);
    let resp = send(client, out, deadline).await?;
    collect(resp, deadline).await
}

/// A read's answer: whole, or its head with the body still on its way, to stream to the caller.
pub enum ReadAnswer {
    Whole(UpstreamResponse),
    Streamed {
        status: u16,
        /// As [`UpstreamResponse::headers`].
        headers: Vec<(String, String)>,
        body: StreamedBody,
    },
}

pin_project_lite::pin_project! {
    /// A read's body, streamed to the caller as it arrives from the upstream: first what was
    /// already read of it (a body meant for the read cache that turned out longer than
    /// [`MAX_RESPONSE_BODY`]), then the rest. Cut off (an error, so the caller's connection ends
    /// short) when the upstream sends nothing for the route's `timeout`.
    pub struct StreamedBody {
        read: std::vec::IntoIter<Bytes>,
        #[pin]
        rest: TimeoutBody<Incoming>,
    }
}

impl Body for StreamedBody {
    type Data = Bytes;
    type Error = <TimeoutBody<Incoming> as Body>::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = self.project();
        match this.read.next() {
            Some(b) => Poll::Ready(Some(Ok(Frame::data(b)))),
            None => this.rest.poll_frame(cx),
        }
    }

    fn is_end_stream(&self) -> bool {
        self.read.len() == 0 && self.rest.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        let read: usize = self.read.as_slice().iter().map(Bytes::len).sum();
        let rest = self.rest.size_hint();
        let mut hint = SizeHint::new();
        hint.set_lower(rest.lower() + read as u64);
        if let Some(upper) = rest.upper() {
            hint.set_upper(upper + read as u64);
        }
        hint
    }
}

impl std::fmt::Debug for ReadAnswer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReadAnswer::Whole(r) => f.debug_tuple("Whole").field(r).finish(),
            ReadAnswer::Streamed {
                status, headers, ..
            } => f
                .debug_struct("Streamed")
                .field("status", status)
                .field("headers", headers)
                .finish_non_exhaustive(),
        }
    }
}

impl ReadAnswer {
    pub fn status(&self) -> u16 {
        match self {
            ReadAnswer::Whole(r) => r.status,
            ReadAnswer::Streamed { status, .. } => *status,
        }
    }

    pub fn headers(&self) -> &[(String, String)] {
        match self {
            ReadAnswer::Whole(r) => &r.headers,
            ReadAnswer::Streamed { headers, .. } => headers,
        }
    }
}

/// Sends a read and returns the upstream's answer, whatever its status. A `HEAD`'s comes whole,
/// with the upstream's `content-length`. With `whole` (to keep it in the read cache), its body is
/// collected as [`exchange`] does, unless its length says it is
/// over [`MAX_RESPONSE_BODY`]; otherwise the body is streamed, however large: `timeout` covers the
/// head, and then each wait for more of the body.
pub async fn read(
    client: &HttpClient,
    out: Outgoing<'_>,
    whole: bool,
) -> Result<ReadAnswer, NoAnswer> {
    let idle = out.timeout;
    read_idle(client, out, whole, idle).await
}

/// [`read`], a streamed body cut off after `idle` without data (rather than the request's
/// `timeout`, which still covers the head): for streams that are quiet by nature, such as an MCP
/// server's event stream.
pub async fn read_idle(
    client: &HttpClient,
    out: Outgoing<'_>,
    whole: bool,
    idle: Duration,
) -> Result<ReadAnswer, NoAnswer> {
    let (timeout, head) = (out.timeout, out.method == Method::HEAD);
    let deadline = Deadline::after(timeout);
    let resp = send(client, out, deadline).await?;
    // The caller is told the upstream's length: for a HEAD, the length a GET's body would have;
    // for a streamed body, its own (which the body's timeout hides from hyper).
    let length = resp
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|l| l.to_str().ok())
        .map(|l| (header::CONTENT_LENGTH.as_str().to_owned(), l.to_owned()));
    if head {
        let mut r = collect(resp, deadline).await?;
        r.headers.extend(length);
        return Ok(ReadAnswer::Whole(r));
    }
    let fits = resp
        .body()
        .size_hint()
        .upper()
        .is_none_or(|n| n <= MAX_RESPONSE_BODY as u64);
    let (parts, body) = resp.into_parts();
    let status = parts.status.as_u16();
    // A body of unknown length is read for the cache until it passes the limit; then what was
    // read, and the rest, are streamed.
    let (read, rest) = if whole && fits {
        match gather(status, body, deadline).await? {
            Gathered::Whole(b) => {
                let r = upstream_response(status, &parts.headers, b);
                return Ok(ReadAnswer::Whole(r));
            }
            Gathered::Over { read, rest } => (read, rest),
        }
    } else {
        (Vec::new(), body)
    };
    let mut headers = kept_headers(&parts.headers);
    headers.extend(length);
    Ok(ReadAnswer::Streamed {
        status,
        headers,
        body: StreamedBody {
            read: read.into_iter(),
            rest: TimeoutBody::new(idle, rest),
        },
    })
}

/// Sends one request and waits, until `deadline`, for the head of its answer.
pub(crate) async fn send(
    client: &HttpClient,
    out: Outgoing<'_>,
    deadline: Deadline,
) -> Result<Response<Incoming>, NoAnswer> {
    let mut req = Request::new(Full::new(out.body));
    *req.method_mut() = out.method.clone();
    *req.uri_mut() = out.uri;
    *req.headers_mut() = out.headers.clone();
    match tokio::time::timeout_at(deadline.at, client.request(req)).await {
        Err(_) => Err(deadline.passed()),
        Ok(Err(e)) if e.is_connect() => Err(NoAnswer::Connect(format!(
            "connect failed: {}",
            root_cause(&e)
        ))),
        Ok(Err(e)) => Err(NoAnswer::Broken(format!(
            "connection failed after the request was sent: {}",
            root_cause(&e)
        ))),
        Ok(Ok(resp)) => Ok(resp),
    }
}

/// Reads an answer's body, within [`MAX_RESPONSE_BODY`] and until `deadline`.
pub(crate) async fn collect(
    resp: Response<Incoming>,
    deadline: Deadline,
) -> Result<UpstreamResponse, NoAnswer> {
    let (parts, body) = resp.into_parts();
    let status = parts.status.as_u16();
    match gather(status, body, deadline).await? {
        Gathered::Whole(b) => Ok(upstream_response(status, &parts.headers, b)),
        Gathered::Over { .. } => Err(NoAnswer::TooLarge { status }),
    }
}

/// A body read whole, or read until it passed [`MAX_RESPONSE_BODY`]: what was read, and the rest.
enum Gathered {
    Whole(Bytes),
    Over { read: Vec<Bytes>, rest: Incoming },
}

/// Reads a body until its end or until it passes [`MAX_RESPONSE_BODY`], by `deadline`. A body
/// that comes in one piece (most do) is kept as it came, not copied.
async fn gather(status: u16, body: Incoming, deadline: Deadline) -> Result<Gathered, NoAnswer> {
    match tokio::time::timeout_at(deadline.at, gather_all(status, body)).await {
        Err(_) => Err(deadline.passed()),
        Ok(r) => r,
    }
}

async fn gather_all(status: u16, mut body: Incoming) -> Result<Gathered, NoAnswer> {
    let mut read: Vec<Bytes> = Vec::new();
    let mut len = 0usize;
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| {
            NoAnswer::Broken(format!("upstream {status}, then its body failed: {e}"))
        })?;
        // Trailers are not kept: a stored answer has none.
        let Ok(data) = frame.into_data() else {
            continue;
        };
        if data.is_empty() {
            continue;
        }
        len += data.len();
        read.push(data);
        if len > MAX_RESPONSE_BODY {
            return Ok(Gathered::Over { read, rest: body });
        }
    }
    Ok(Gathered::Whole(match read.len() {
        0 => Bytes::new(),
        1 => read.pop().unwrap_or_default(),
        _ => {
            let mut all = bytes::BytesMut::with_capacity(len);
            for b in read {
                all.extend_from_slice(&b);
            }
            all.freeze()
        }
    }))
}

/// When an exchange must be over: its route's `timeout` from when it began.
#[derive(Clone, Copy)]
pub(crate) struct Deadline {
    pub(crate) at: tokio::time::Instant,
    timeout: Duration,
}

impl Deadline {
    pub(crate) fn after(timeout: Duration) -> Deadline {
        Deadline {
            at: tokio::time::Instant::now() + timeout,
            timeout,
        }
    }

    pub(crate) fn passed(self) -> NoAnswer {
        NoAnswer::Timeout(format!("upstream timeout after {:?}", self.timeout))
    }
}

/// Whether an upstream that answered `status` says it did not act and a retry may succeed
/// (408, 425, 429, 503).
pub fn not_executed(status: u16) -> bool {
    matches!(status, 408 | 425 | 429 | 503)
}

/// Whether an upstream that answered `status` may or may not have acted (500, 502, 504): a
/// gateway or server failure, after the request reached it.
pub fn outcome_unknown(status: u16) -> bool {
    matches!(status, 500 | 502 | 504)
}

/// The `class` label of a retry after a [`not_executed`] status.
pub fn retry_class(status: u16) -> &'static str {
    match status {
        408 => "status_408",
        425 => "status_425",
        429 => "status_429",
        _ => "status_503",
    }
}

/// Sends one request and classifies what happened, within the request's `timeout`.
pub async fn attempt(client: &HttpClient, out: Outgoing<'_>) -> Attempt {
    classify(exchange(client, out).await)
}

/// What an exchange's result means for a write.
pub(crate) fn classify(r: Result<UpstreamResponse, NoAnswer>) -> Attempt {
    match r {
        Err(NoAnswer::Connect(why)) => Attempt::NotExecuted {
            why,
            retry_after: None,
            class: "connect",
        },
        Err(NoAnswer::Timeout(why)) => Attempt::Unknown {
            why,
            timed_out: true,
        },
        Err(NoAnswer::Broken(why)) => Attempt::Unknown {
            why,
            timed_out: false,
        },
        // The status says what happened; the body cannot be kept, so it cannot be replayed.
        Err(NoAnswer::TooLarge { status }) if not_executed(status) => Attempt::NotExecuted {
            why: format!("upstream {status}"),
            retry_after: None,
            class: retry_class(status),
        },
        Err(NoAnswer::TooLarge { status }) => Attempt::Unknown {
            why: too_large(status),
            timed_out: false,
        },
        Ok(r) if not_executed(r.status) => Attempt::NotExecuted {
            why: format!("upstream {}", r.status),
            retry_after: retry_after_secs(&r.headers),
            class: retry_class(r.status),
        },
        Ok(r) if outcome_unknown(r.status) => Attempt::Unknown {
            why: format!("upstream {}", r.status),
            timed_out: r.status == 504,
        },
        Ok(r) => match r.status {
            401 | 403 | 407 => Attempt::Refused(r),
            _ => Attempt::Executed(r),
        },
    }
}

/// Why an answer too long to keep is held: for a success, the effect happened, yet no retry could
/// be given the answer.
pub fn too_large(status: u16) -> String {
    let acted = if (200..300).contains(&status) {
        " (so it acted)"
    } else {
        ""
    };
    format!(
        "the upstream answered {status}{acted}, with a body over the {} MiB idemgate keeps to \
         answer retries",
        MAX_RESPONSE_BODY >> 20
    )
}

fn root_cause(e: &(dyn std::error::Error + 'static)) -> String {
    let mut cur = e;
    while let Some(next) = cur.source() {
        cur = next;
    }
    cur.to_string()
}

/// How long to wait before retry `n` (1-based) of a request the upstream did not act on: as long as
/// its `Retry-After` asks, when that is within `max` (sooner would only be refused again), else
/// [`backoff`]. `None` when it asks for longer than `max`: the route does not wait that long, so
/// the caller is told to wait instead.
pub fn retry_wait(
    base: Duration,
    max: Duration,
    n: u32,
    retry_after: Option<u64>,
) -> Option<Duration> {
    match retry_after.map(Duration::from_secs) {
        Some(asked) if asked > max => None,
        Some(asked) => Some(asked),
        None => Some(backoff(base, max, n)),
    }
}

/// Full-jitter exponential backoff for retry `n` (1-based): uniform in `[0, min(max, base·2^(n-1))]`.
pub fn backoff(base: Duration, max: Duration, n: u32) -> Duration {
    let cap = base
        .saturating_mul(1u32 << n.saturating_sub(1).min(20))
        .min(max);
    let ms = cap.as_millis() as u64;
    Duration::from_millis(if ms == 0 {
        0
    } else {
        rand::random_range(0..=ms)
    })
}

pub fn header_value(s: &str) -> Option<HeaderValue> {
    HeaderValue::from_str(s).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_answer_too_long_to_keep_is_classified_by_its_status() {
        match classify(Err(NoAnswer::TooLarge { status: 503 })) {
            Attempt::NotExecuted { class, .. } => assert_eq!(class, "status_503"),
            other => panic!("a 503 is not executed, whatever its body: {other:?}"),
        }
        match classify(Err(NoAnswer::TooLarge { status: 201 })) {
            Attempt::Unknown { why, timed_out } => {
                assert!(why.contains("201 (so it acted)"), "{why}");
                assert!(!timed_out);
            }
            other => panic!("a success that cannot be replayed is held: {other:?}"),
        }
    }

    #[test]
    fn retry_after_is_seconds_or_an_http_date() {
        let ra = |v: &str| retry_after_secs(&[("retry-after".into(), v.into())]);
        assert_eq!(ra("7"), Some(7));
        assert_eq!(ra(" 0 "), Some(0));
        assert_eq!(ra("soon"), None);
        assert_eq!(ra("-1"), None);
        let in_10s = std::time::SystemTime::now() + Duration::from_secs(10);
        let secs = ra(&httpdate::fmt_http_date(in_10s)).expect("an HTTP-date");
        assert!((9..=10).contains(&secs), "{secs}");
        assert_eq!(ra("Sun, 06 Nov 1994 08:49:37 GMT"), Some(0), "past");
        assert_eq!(retry_after_secs(&[]), None);
    }

    #[test]
    fn backoff_is_capped_and_jittered() {
        let base = Duration::from_millis(100);
        let max = Duration::from_secs(2);
        for n in 1..10 {
            let cap = (100u64 << (n - 1)).min(2000);
            for _ in 0..50 {
                assert!(backoff(base, max, n).as_millis() as u64 <= cap);
            }
        }
        let spread: std::collections::BTreeSet<_> =
            (0..50).map(|_| backoff(base, max, 5)).collect();
        assert!(spread.len() > 5, "full jitter spreads retries");
    }

    #[test]
    fn a_retry_waits_as_long_as_the_upstream_asks_within_max() {
        let (base, max) = (Duration::from_millis(100), Duration::from_secs(2));
        assert_eq!(
            retry_wait(base, max, 1, Some(2)),
            Some(Duration::from_secs(2))
        );
        assert_eq!(retry_wait(base, max, 3, Some(0)), Some(Duration::ZERO));
        assert_eq!(retry_wait(base, max, 1, Some(3)), None, "longer than max");
        assert!(retry_wait(base, max, 1, None).is_some_and(|w| w <= base));
    }

    #[test]
    fn hop_by_hop_headers_are_removed_including_connection_named_ones() {
        let mut h = HeaderMap::new();
        h.insert(
            "connection",
            HeaderValue::from_static("keep-alive, x-secret-hop"),
        );
        h.insert("x-secret-hop", HeaderValue::from_static("1"));
        h.insert("transfer-encoding", HeaderValue::from_static("chunked"));
        h.insert("content-type", HeaderValue::from_static("application/json"));
        strip_hop_by_hop(&mut h);
        assert_eq!(h.len(), 1);
        assert!(h.contains_key("content-type"));
    }
}
