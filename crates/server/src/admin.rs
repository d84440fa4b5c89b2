//! The admin listener: the `ops` operations as JSON under `/admin/v1/`, `/metrics` in Prometheus
//! text, `/healthz` and `/readyz`. Everything but the last two needs `Authorization: Bearer
//! <token>` of an operator whose role the route allows ([`crate::access`]); an action is logged
//! under that operator's name. Errors are problem+json with the operation's stable code.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use axum::extract::rejection::JsonRejection;
use axum::extract::{DefaultBodyLimit, FromRequestParts, Path, Request, State};
use axum::http::{header, request, HeaderMap, HeaderValue, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Extension, Json, Router};
use idemgate_ops::ledger::{now_millis, Leader, Progress};
use idemgate_ops::Ops;
use idemgate_proxy::problem::{Code, Problem};
use serde::Serialize;

pub(crate) mod audit;
mod call;

use crate::access::{self, Identity};
use crate::books::Books;
use crate::live::Live;
use crate::Bound;

#[derive(Debug, Clone)]
pub struct AdminState {
    /// The engine and the operators, as the last reload left them.
    pub live: Arc<Live>,
    pub ops: Ops,
    pub metrics: metrics_exporter_prometheus::PrometheusHandle,
    /// Where this process listens, as `GET /admin/v1/server` tells.
    pub listening: Bound,
    /// Whether this instance leads the books, and which does.
    books: Books,
}

/// `GET /admin/v1/server`: which process the admin API is, and where its proxy listens (a client
/// of the admin listener, the console in a browser, has no other way to know).
#[cfg_attr(feature = "ts", derive(ts_rs::TS, schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ServerInfo {
    /// idemgate's version.
    pub version: String,
    /// The proxy listener's bound address (`127.0.0.1:8700`; `0.0.0.0:…` when it listens on every
    /// interface).
    pub proxy_addr: String,
    pub admin_addr: String,
    /// The ledger: a SQLite path, or a PostgreSQL URL without its password.
    pub ledger: String,
    /// This instance's id (host, process id, a random suffix), as its leases and the lead name it.
    pub instance: String,
    /// The instance that keeps the books (retention, archival, signing): this one on a ledger it
    /// alone writes; on a shared PostgreSQL ledger whichever holds the lead. `null` between one
    /// leader's end and the next one's start (a few seconds), or when the ledger cannot be read.
    pub leader: Option<Leader>,
}

pub(crate) fn router(
    live: Arc<Live>,
    ops: Ops,
    books: Books,
    metrics: metrics_exporter_prometheus::PrometheusHandle,
    listening: Bound,
) -> Router {
    let console_dir = live.engine().cfg.console_dir.clone();
    let state = AdminState {
        live,
        ops,
        metrics,
        listening,
        books,
    };
    let api = call::routes(Router::new())
        .route("/admin/v1/exports/{id}/file", get(audit::export_file))
        .route(
            "/admin/v1/exports/{id}/manifest",
            get(audit::export_manifest),
        )
        .route(
            "/admin/v1/verify/export",
            post(audit::verify_upload).layer(DefaultBodyLimit::max(audit::MAX_UPLOAD + (2 << 20))),
        )
        .route("/admin/v1/server", get(server_info))
        .route("/admin/v1/whoami", get(whoami))
        .route("/admin/v1/openapi.json", get(openapi))
        .route("/metrics", get(render_metrics))
        .route_layer(middleware::from_fn_with_state(
            state.live.access().clone(),
            access::guard,
        ))
        .fallback(|| async { Problem::new(Code::NotFound, "no such admin endpoint") })
        .layer(middleware::from_fn(problems_only));
    let mut r = Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .merge(api);
    if let Some(dir) = &console_dir {
        // The console for browsers: static files, no data, so no token; every API call it makes
        // carries the token the operator enters. Same origin: no CORS needed.
        let csp = HeaderValue::from_static(
            "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
             connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'none'; \
             frame-ancestors 'none'",
        );
        let files = tower::ServiceBuilder::new()
            .layer(tower_http::set_header::SetResponseHeaderLayer::overriding(
                header::CONTENT_SECURITY_POLICY,
                csp,
            ))
            .service(tower_http::services::ServeDir::new(dir));
        r = r.nest_service("/console", files).route(
            "/",
            get(|| async { axum::response::Redirect::temporary("/console/") }),
        );
    }
    r.with_state(state)
}

/// Every error of the admin API is problem+json, including the framework's own (a path that is
/// not a number, a query or JSON body that does not parse, a method the path does not take).
async fn problems_only(req: Request, next: Next) -> Response {
    let r = next.run(req).await;
    let status = r.status();
    let is_problem = r
        .headers()
        .get(header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"application/problem+json"));
    if !(status.is_client_error() || status.is_server_error()) || is_problem {
        return r;
    }
    let (parts, body) = r.into_parts();
    let text = axum::body::to_bytes(body, 16 * 1024)
        .await
        .map(|b| String::from_utf8_lossy(&b).trim().to_owned())
        .unwrap_or_default();
    let code = match status.as_u16() {
        405 => Code::MethodNotAllowed,
        415 => Code::UnsupportedMediaType,
        422 => Code::InvalidRequest,
        s if s >= 500 => Code::Internal,
        _ => Code::BadRequest,
    };
    let detail = if text.is_empty() {
        status.canonical_reason().unwrap_or("Error").to_owned()
    } else {
        text
    };
    let mut out = Problem::new(code, detail)
        .with_status(status.as_u16())
        .into_response();
    if let Some(allow) = parts.headers.get(header::ALLOW) {
        out.headers_mut().insert(header::ALLOW, allow.clone());
    }
    out
}

/// An endpoint that takes no query parameters refuses any, as the others refuse one they do not
/// know, rather than act without it: `POST /admin/v1/purge?dry_run=true` would purge.
struct NoQuery;

impl<S: Send + Sync> FromRequestParts<S> for NoQuery {
    type Rejection = Problem;

    async fn from_request_parts(parts: &mut request::Parts, _: &S) -> Result<Self, Problem> {
        match parts.uri.query() {
            None | Some("") => Ok(NoQuery),
            Some(q) => {
                let names: Vec<&str> = q
                    .split('&')
                    .filter_map(|p| p.split('=').next())
                    .filter(|n| !n.is_empty())
                    .collect();
                Err(Problem::new(
                    Code::InvalidArgument,
                    format!(
                        "{} takes no query parameters: {}",
                        parts.uri.path(),
                        names.join(", ")
                    ),
                ))
            }
        }
    }
}

/// The id in the path (an entry's number, an export's text), refused as the other arguments are
/// when it does not parse.
struct Id<T>(T);

impl<S: Send + Sync, T: serde::de::DeserializeOwned + Send> FromRequestParts<S> for Id<T> {
    type Rejection = Problem;

    async fn from_request_parts(parts: &mut request::Parts, s: &S) -> Result<Self, Problem> {
        let Path(id) = Path::<T>::from_request_parts(parts, s)
            .await
            .map_err(|e| Problem::new(Code::InvalidArgument, e.body_text()))?;
        Ok(Id(id))
    }
}

type ExportId = Id<String>;

pub(crate) fn bad_json(e: JsonRejection) -> Problem {
    match e {
        JsonRejection::MissingJsonContentType(_) => Problem::new(
            Code::UnsupportedMediaType,
            "send the body as JSON, with Content-Type: application/json",
        ),
        _ if e.status() == StatusCode::PAYLOAD_TOO_LARGE => {
            Problem::new(Code::BodyTooLarge, e.body_text())
        }
        _ => Problem::new(Code::InvalidArgument, e.body_text()),
    }
}

/// Runs a blocking ledger operation off the async threads.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, idemgate_ops::OpsError> + Send + 'static,
) -> Result<T, Problem> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| Problem::new(Code::Internal, e.to_string()))?
        .map_err(Problem::from)
}

/// Like [`blocking`], for long work that can stop part-way: `f` is handed a progress callback
/// that says stop once this call is dropped. Hyper drops a request's handler when its client goes
/// away (a closed tab, a cancelled `fetch`, curl's Ctrl-C), so a verify or a purge stops instead
/// of working on for nobody.
async fn blocking_while_wanted<T: Send + 'static>(
    f: impl FnOnce(Progress<'_>) -> Result<T, idemgate_ops::OpsError> + Send + 'static,
) -> Result<T, Problem> {
    struct RaiseOnDrop(Arc<AtomicBool>);
    impl Drop for RaiseOnDrop {
        fn drop(&mut self) {
            self.0.store(true, Ordering::Relaxed);
        }
    }
    let unwanted = Arc::new(AtomicBool::new(false));
    let _raise = RaiseOnDrop(Arc::clone(&unwanted));
    blocking(move || f(&mut |_| !unwanted.load(Ordering::Relaxed))).await
}

/// The media type of a long work's answer given as it goes (see [`long_work`]).
const NDJSON: &str = "application/x-ndjson";

/// Whether the client's `Accept` names [`NDJSON`] (and not with `q=0`).
fn wants_lines(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|range| {
            let mut parts = range.split(';').map(str::trim);
            parts.next().is_some_and(|m| m.eq_ignore_ascii_case(NDJSON))
                && !parts.any(|p| {
                    p.split_once('=').is_some_and(|(k, v)| {
                        k.trim().eq_ignore_ascii_case("q")
                            && v.trim().parse::<f32>().is_ok_and(|q| q == 0.0)
                    })
                })
        })
}

/// Long work (a verify, a purge), answered as the client asks:
/// - by default, one JSON document once it ends ([`blocking_while_wanted`]);
/// - with `Accept: application/x-ndjson`, a line `{"progress":N}` each time the work reports
///   (events verified, entries purged), then one line `{"result":…}`, the document the default
///   answer holds, or `{"problem":…}`, a problem+json body, when it failed after the answer began.
///   A failure before its first report is an ordinary problem+json answer with its own status.
///
/// Either way the work stops at its next report once its client has gone away: a line that can
/// no longer be sent says so at once.
async fn long_work<T: Serialize + Send + 'static>(
    lines: bool,
    f: impl FnOnce(Progress<'_>) -> Result<T, idemgate_ops::OpsError> + Send + 'static,
) -> Result<Response, Problem> {
    use tokio::sync::mpsc::error::TrySendError;
    if !lines {
        return Ok(Json(blocking_while_wanted(f).await?).into_response());
    }
    let (tx, mut rx) = tokio::sync::mpsc::channel::<Line>(16);
    tokio::task::spawn_blocking(move || {
        // A full channel (a slow reader) skips a progress line; a closed one stops the work.
        let r = f(&mut |n| !matches!(tx.try_send(Line::Progress(n)), Err(TrySendError::Closed(_))));
        let last = match r.map_err(Problem::from).and_then(|v| {
            serde_json::to_value(v).map_err(|e| Problem::new(Code::Internal, e.to_string()))
        }) {
            Ok(v) => Line::Result(v),
            Err(p) => Line::Problem(p),
        };
        let _ = tx.blocking_send(last);
    });
    let first = match rx.recv().await {
        Some(Line::Problem(p)) => return Err(p),
        Some(line) => line,
        None => {
            return Err(Problem::new(
                Code::Internal,
                "the work ended without an answer",
            ))
        }
    };
    let body = axum::body::Body::new(Lines {
        first: Some(first),
        rx,
    });
    Ok(([(header::CONTENT_TYPE, NDJSON)], body).into_response())
}

/// One line of a long work's answer as it goes.
enum Line {
    Progress(u64),
    Result(serde_json::Value),
    Problem(Problem),
}

impl Line {
    fn bytes(&self) -> bytes::Bytes {
        let v = match self {
            Line::Progress(n) => serde_json::json!({ "progress": n }),
            Line::Result(v) => serde_json::json!({ "result": v }),
            Line::Problem(p) => serde_json::json!({ "problem": p.body() }),
        };
        let mut b = serde_json::to_vec(&v).unwrap_or_default();
        b.push(b'\n');
        b.into()
    }
}

/// The body of a long work's answer as it goes: its lines as the work sends them. Dropped (the
/// client went away), it closes the channel, and the work stops at its next report.
struct Lines {
    first: Option<Line>,
    rx: tokio::sync::mpsc::Receiver<Line>,
}

impl hyper::body::Body for Lines {
    type Data = bytes::Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<Self::Data>, Self::Error>>> {
        if let Some(line) = self.first.take() {
            return std::task::Poll::Ready(Some(Ok(hyper::body::Frame::data(line.bytes()))));
        }
        self.rx
            .poll_recv(cx)
            .map(|line| line.map(|l| Ok(hyper::body::Frame::data(l.bytes()))))
    }
}

/// `GET /admin/v1/whoami`: the operator the token stands for, and their role (the browser
/// console shows it, and offers only what the role may do).
async fn whoami(Extension(who): Extension<Identity>, _: NoQuery) -> Json<Identity> {
    Json(who)
}

async fn openapi() -> Response {
    ([(header::CONTENT_TYPE, "application/json")], crate::OPENAPI).into_response()
}

/// How long after a failed ledger commit `/readyz` still says not ready. Not at once on the next
/// success: on a full disk, a commit that writes nothing (a sweep that found nothing) succeeds
/// between the failures, and a readiness that flapped with it would be no use to a balancer.
const NOT_READY_AFTER_FAILURE: i64 = 5_000;

async fn server_info(State(s): State<AdminState>) -> Json<ServerInfo> {
    let books = s.books.clone();
    let leader = match tokio::task::spawn_blocking(move || books.leader()).await {
        Ok(Ok(l)) => l,
        Ok(Err(e)) => {
            tracing::warn!(error = %e, "cannot read which instance leads");
            None
        }
        Err(_) => None,
    };
    Json(ServerInfo {
        version: env!("CARGO_PKG_VERSION").to_owned(),
        proxy_addr: s.listening.proxy.to_string(),
        admin_addr: s
            .listening
            .admin
            .map_or_else(String::new, |a| a.to_string()),
        ledger: s.ops.store().location(),
        instance: s.books.instance().to_owned(),
        leader,
    })
}

/// Liveness: `503` only when this process can never write again (its ledger writer has stopped),
/// so that a supervisor restarts it. No token; it says nothing about the ledger's contents.
async fn healthz(State(s): State<AdminState>) -> Response {
    if s.ops.store().writer_health().running {
        "ok\n".into_response()
    } else {
        writer_stopped().into_response()
    }
}

fn writer_stopped() -> Problem {
    Problem::new(
        Code::LedgerWriterStopped,
        "the ledger writer has stopped: no write can succeed in this process; restart it",
    )
}

/// Readiness: `503` while the ledger cannot take writes (a commit failed in the last 5 s, or the
/// writer has stopped), so a balancer sends new calls to another proxy. No token, and no error
/// text: the metrics and the log have the cause.
async fn readyz(State(s): State<AdminState>) -> Response {
    let h = s.ops.store().writer_health();
    if !h.running {
        return writer_stopped().into_response();
    }
    match h.last_failure_at {
        Some(at) if now_millis() - at < NOT_READY_AFTER_FAILURE => Problem::new(Code::LedgerUnavailable, format!(
                "a ledger commit failed {} ms ago; see idemgate_ledger_commit_failures_total and the log",
                (now_millis() - at).max(0)
            ))
        .retry_after(1)
        .into_response(),
        _ => "ready\n".into_response(),
    }
}

async fn render_metrics(State(s): State<AdminState>) -> Response {
    let mut r = s.metrics.render().into_response();
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; version=0.0.4"),
    );
    *r.status_mut() = StatusCode::OK;
    r
}
