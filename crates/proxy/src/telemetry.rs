//! Spans of proxied calls, sent over OTLP/HTTP when `[telemetry]` is configured: one server span
//! per request on the proxy listener (its parent the client's `traceparent`, when it sends one;
//! on an MCP route, the message's own `params._meta.traceparent` before the header's), with the
//! ledger's claim and commit and each upstream attempt as its children.
//!
//! A request's span lives in a task-local ([`within`]) that the request's tasks carry
//! ([`carry`]); it ends when the last of them is done, so a write whose client went away still
//! ends with its outcome. Off, no task-local is ever set: the request path's marks ([`note`],
//! [`step`]) find none and do nothing.

use std::borrow::Cow;
use std::collections::HashMap;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, SystemTime};

use axum::http::request::Parts;
use axum::http::HeaderValue;
use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use opentelemetry::propagation::TextMapPropagator;
use opentelemetry::trace::{SpanKind, Status, TraceContextExt, Tracer, TracerProvider};
use opentelemetry::{Context, KeyValue};
use opentelemetry_http::{HeaderExtractor, HttpError};
use opentelemetry_otlp::{WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{SdkTracer, SdkTracerProvider};
use opentelemetry_sdk::Resource;
use sha2::Digest as _;

use idemgate_ledger::LedgerError;

use crate::config::{Protocol, Route, Telemetry};
use crate::forward::{Attempt, HttpClient};

/// How long one batch of spans may take to reach the collector.
const EXPORT_TIMEOUT: Duration = Duration::from_secs(10);
/// The most of a collector's answer that is read.
const MAX_ANSWER: usize = 64 * 1024;

/// The exporter of this process's spans: batches them on a thread of its own, and posts each batch
/// with the proxy's HTTP client (https with the system's roots, like an upstream).
#[derive(Debug)]
pub struct Tracing {
    provider: SdkTracerProvider,
    tracer: SdkTracer,
}

/// Tracing could not start.
#[derive(Debug, thiserror::Error)]
pub enum TracingError {
    #[error("tracing needs a running tokio runtime")]
    NoRuntime,
    #[error("cannot make the OTLP exporter for {url}: {why}")]
    Exporter { url: String, why: String },
}

impl TracingError {
    pub fn code(&self) -> idemgate_code::Code {
        match self {
            TracingError::NoRuntime => idemgate_code::Code::Runtime,
            TracingError::Exporter { .. } => idemgate_code::Code::BadConfig,
        }
    }
}

impl Tracing {
    /// Starts exporting to `t.traces_url`. The batching follows the `OTEL_BSP_*` variables, the
    /// collector's headers `OTEL_EXPORTER_OTLP_HEADERS` (credentials stay out of the file).
    pub fn start(
        t: &Telemetry,
        client: HttpClient,
        instance: &str,
    ) -> Result<Tracing, TracingError> {
        let rt = tokio::runtime::Handle::try_current().map_err(|_| TracingError::NoRuntime)?;
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_endpoint(t.traces_url.clone())
            .with_timeout(EXPORT_TIMEOUT)
            .with_http_client(Post { client, rt })
            .build()
            .map_err(|e| TracingError::Exporter {
                url: t.traces_url.clone(),
                why: e.to_string(),
            })?;
        let resource = Resource::builder_empty()
            .with_service_name(t.service_name.clone())
            .with_attributes([
                KeyValue::new("service.version", env!("CARGO_PKG_VERSION")),
                KeyValue::new("service.instance.id", instance.to_owned()),
            ])
            .build();
        let provider = SdkTracerProvider::builder()
            .with_batch_exporter(exporter)
            .with_resource(resource)
            .build();
        let tracer = provider.tracer("idemgate");
        Ok(Tracing { provider, tracer })
    }

    /// Sends what is batched and stops the exporter's thread; blocks until then.
    pub fn shutdown(&self) {
        if let Err(e) = self.provider.shutdown() {
            tracing::warn!(error = %e, "spans not sent at shutdown");
        }
    }

    /// A request's span, started now, named and described as HTTP's conventions say (an MCP
    /// route's calls rename it once their message is read).
    pub(crate) fn http_call(
        &self,
        route: Option<&Route>,
        parts: &Parts,
        peer: SocketAddr,
    ) -> Arc<Call> {
        let method = parts.method.as_str().to_owned();
        let mut attrs = vec![
            KeyValue::new("url.scheme", "http"),
            KeyValue::new("url.path", parts.uri.path().to_owned()),
            KeyValue::new("client.address", peer.ip().to_string()),
        ];
        let name = match route {
            Some(r) => {
                attrs.push(KeyValue::new("http.route", r.path.clone()));
                attrs.push(KeyValue::new("idemgate.route", r.name.clone()));
                format!("{method} {}", r.path)
            }
            None => method.clone(),
        };
        attrs.push(KeyValue::new("http.request.method", method));
        let call = Call {
            cx: OnceLock::new(),
            tracer: self.tracer.clone(),
            pending: Mutex::new(Some(Pending {
                name,
                attrs,
                at: SystemTime::now(),
                parent: TraceContextPropagator::new().extract(&HeaderExtractor(&parts.headers)),
            })),
        };
        // An MCP route's span waits for its message, whose `_meta` may name its parent.
        if route.is_none_or(|r| r.protocol != Protocol::Mcp) {
            call.cx();
        }
        Arc::new(call)
    }
}

/// A request's span, ended when the last task of the request lets go of it.
#[derive(Debug)]
pub(crate) struct Call {
    /// The span, once started.
    cx: OnceLock<Context>,
    tracer: SdkTracer,
    /// What it starts with: taken when it starts.
    pending: Mutex<Option<Pending>>,
}

/// A request's span not yet started: its name and attributes, when the request came, and the
/// parent its headers name.
#[derive(Debug)]
struct Pending {
    name: String,
    attrs: Vec<KeyValue>,
    at: SystemTime,
    parent: Context,
}

impl Call {
    /// The span, started now (as of the request's arrival) under its headers' parent if it has
    /// not started yet.
    fn cx(&self) -> &Context {
        self.cx.get_or_init(|| self.start(None))
    }

    /// Starts the span under `parent`, or its headers' parent.
    fn start(&self, parent: Option<Context>) -> Context {
        let p = self
            .pending
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        let Some(p) = p else {
            return Context::new();
        };
        let parent = parent.unwrap_or(p.parent);
        let span = self
            .tracer
            .span_builder(p.name)
            .with_kind(SpanKind::Server)
            .with_start_time(p.at)
            .with_attributes(p.attrs)
            .start_with_context(&self.tracer, &parent);
        parent.with_span(span)
    }
}

impl Drop for Call {
    fn drop(&mut self) {
        self.cx().span().end();
    }
}

tokio::task_local! {
    /// The current request's span, if it has one.
    static CALL: Option<Arc<Call>>;
}

/// `f` of the current request's span, if it has one.
fn with_call<R>(f: impl FnOnce(&Arc<Call>) -> R) -> Option<R> {
    CALL.try_with(|c| c.as_ref().map(f)).ok().flatten()
}

/// `work` with `call` as its request's span (none when `call` is `None`). One scope either way,
/// and no async fn around it: an async fn keeps its argument beside the future it awaits, so a
/// request's future (some 7 KB) would be held, and moved at every hand-over, twice.
pub(crate) fn within<F: Future>(
    call: Option<Arc<Call>>,
    work: F,
) -> impl Future<Output = F::Output> {
    CALL.scope(call, work)
}

/// `work`, to be spawned, carrying the current request's span with it.
pub(crate) fn carry<T>(work: impl Future<Output = T>) -> impl Future<Output = T> {
    within(with_call(Arc::clone), work)
}

/// Attributes for the current request's span (`attrs` is called only when there is one).
pub(crate) fn note(attrs: impl FnOnce() -> Vec<KeyValue>) {
    with_call(|c| c.cx().span().set_attributes(attrs()));
}

/// The current request is an MCP `method` (a `tools/call` of `call`: its id and tool name): its
/// span started under the message's `trace` when it carries one, named and described as
/// OpenTelemetry's conventions for MCP servers say.
pub(crate) fn mcp(
    method: &'static str,
    call: Option<(&serde_json::Value, &str)>,
    trace: &TraceMeta,
    parts: &Parts,
) {
    with_call(|c| {
        let cx = c.cx.get_or_init(|| c.start(parent_of(trace)));
        let span = cx.span();
        let header = |name: &str| {
            parts
                .headers
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned)
        };
        let mut attrs = vec![
            KeyValue::new("mcp.method.name", method),
            KeyValue::new("jsonrpc.protocol.version", "2.0"),
        ];
        attrs.extend(header("mcp-session-id").map(|s| KeyValue::new("mcp.session.id", s)));
        attrs.extend(
            header("mcp-protocol-version").map(|v| KeyValue::new("mcp.protocol.version", v)),
        );
        match call {
            Some((id, name)) => {
                let id = match id {
                    serde_json::Value::String(s) => s.clone(),
                    other => other.to_string(),
                };
                attrs.extend([
                    KeyValue::new("jsonrpc.request.id", id),
                    KeyValue::new("gen_ai.operation.name", "execute_tool"),
                    KeyValue::new("gen_ai.tool.name", name.to_owned()),
                ]);
                span.update_name(format!("{method} {name}"));
            }
            None => span.update_name(method),
        }
        span.set_attributes(attrs);
    });
}

/// The current request's idempotency key, scope and entry (when it has one): the key as its
/// SHA-256, so that a trace store holds no client's key.
pub(crate) fn keyed(scope: &str, key: &str) {
    note(|| {
        let hash = hex::encode(sha2::Sha256::digest(key.as_bytes()));
        vec![
            KeyValue::new("idemgate.key.hash", hash),
            KeyValue::new("idemgate.scope", scope.to_owned()),
        ]
    });
}

/// How the current request ended, when it was answered: `executed`, `replayed`, `refused`
/// (by the upstream, nothing done), `forwarded` or `cached` (reads).
pub(crate) fn outcome(outcome: &'static str) {
    note(|| {
        vec![
            KeyValue::new("idemgate.outcome", outcome),
            KeyValue::new("idemgate.replayed", outcome == "replayed"),
        ]
    });
}

/// A commit's attributes: what it recorded, and its error when the ledger refused it.
pub(crate) fn committed(what: &'static str, error: Option<&LedgerError>) -> Vec<KeyValue> {
    let mut attrs = vec![KeyValue::new("idemgate.commit", what)];
    if let Some(e) = error {
        attrs.push(KeyValue::new("error.type", e.code().as_str()));
    }
    attrs
}

/// An upstream attempt's attributes: its method, its number among the entry's attempts, and
/// what it came to (a status, or why there is none to keep: idemgate's own words, never the
/// upstream's body).
pub(crate) fn attempted(method: &str, attempt: i64, a: &Attempt) -> Vec<KeyValue> {
    let mut attrs = vec![
        KeyValue::new("http.request.method", method.to_owned()),
        KeyValue::new("idemgate.attempt", attempt),
    ];
    match a {
        Attempt::Executed(r) | Attempt::Refused(r) => {
            attrs.push(KeyValue::new(
                "http.response.status_code",
                i64::from(r.status),
            ));
        }
        Attempt::NotExecuted { why, class, .. } => attrs.extend([
            KeyValue::new("error.type", format!("not-executed:{class}")),
            KeyValue::new("idemgate.why", why.clone()),
        ]),
        Attempt::Unknown { why, timed_out } => attrs.extend([
            KeyValue::new(
                "error.type",
                if *timed_out {
                    "timeout"
                } else {
                    "outcome-unknown"
                },
            ),
            KeyValue::new("idemgate.why", why.clone()),
        ]),
    }
    attrs
}

/// The current request ended in `code` (a problem's), an error when `server_error`.
pub(crate) fn failed(code: &'static str, server_error: bool) {
    with_call(|c| {
        let span = c.cx().span();
        span.set_attributes([
            KeyValue::new("idemgate.outcome", code),
            KeyValue::new("error.type", code),
        ]);
        if server_error {
            span.set_status(Status::error(code));
        }
    });
}

/// A tool call's JSON-RPC response: a result with `isError` is the tool's own failure, which MCP
/// answers as a success; the span says so (`error.type = "tool_error"`), as MCP's conventions ask.
pub(crate) fn tool_result(message: &[u8]) {
    note(|| {
        use crate::mcp::jsonrpc::{tool_answer, ToolAnswer};
        if let ToolAnswer::Result { failed: true, .. } = tool_answer(message) {
            vec![KeyValue::new("error.type", "tool_error")]
        } else {
            Vec::new()
        }
    });
}

/// The W3C trace context a request carries in `params._meta` (`traceparent`, `tracestate`), as
/// MCP propagates it (SEP-414): on the wire, one HTTP request may carry many messages, so the
/// message's own context is the one its span continues.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TraceMeta {
    pub traceparent: Option<String>,
    pub tracestate: Option<String>,
}

/// The context a message's `_meta` names, when it names a valid one.
fn parent_of(trace: &TraceMeta) -> Option<Context> {
    let mut carrier = HashMap::new();
    carrier.insert("traceparent".to_owned(), trace.traceparent.clone()?);
    if let Some(s) = &trace.tracestate {
        carrier.insert("tracestate".to_owned(), s.clone());
    }
    let cx = TraceContextPropagator::new().extract(&carrier);
    cx.span().span_context().is_valid().then_some(cx)
}

/// The current request's `traceparent` for its upstream: this span as the upstream's parent.
pub(crate) fn traceparent() -> Option<HeaderValue> {
    with_call(|c| {
        let span = c.cx().span();
        let sc = span.span_context();
        let v = format!(
            "00-{}-{}-{:02x}",
            sc.trace_id(),
            sc.span_id(),
            sc.trace_flags().to_u8()
        );
        HeaderValue::from_str(&v).ok()
    })
    .flatten()
}

/// A part of the current request (a claim, a commit, an upstream attempt), timed from now until
/// [`Step::end`]; nothing when the request has no span.
pub(crate) fn step(name: &'static str, kind: SpanKind) -> Step {
    Step(
        with_call(|c| (c.clone(), SystemTime::now()))
            .map(|(call, started)| (call, started, name, kind)),
    )
}

/// A part of a request being timed.
pub(crate) struct Step(Option<(Arc<Call>, SystemTime, &'static str, SpanKind)>);

impl Step {
    /// The part's span, ended now with `attrs` (called only when there is a span).
    pub(crate) fn end(self, attrs: impl FnOnce() -> Vec<KeyValue>) {
        let Some((call, started, name, kind)) = self.0 else {
            return;
        };
        let mut span = call
            .tracer
            .span_builder(Cow::Borrowed(name))
            .with_kind(kind)
            .with_start_time(started)
            .with_attributes(attrs())
            .start_with_context(&call.tracer, call.cx());
        opentelemetry::trace::Span::end(&mut span);
    }
}

/// The OTLP exporter's HTTP client: the proxy's own, run on the server's runtime (the exporter's
/// thread has none).
#[derive(Debug)]
struct Post {
    client: HttpClient,
    rt: tokio::runtime::Handle,
}

#[async_trait::async_trait]
impl opentelemetry_http::HttpClient for Post {
    async fn send_bytes(
        &self,
        request: http::Request<Bytes>,
    ) -> Result<http::Response<Bytes>, HttpError> {
        let client = self.client.clone();
        let request = request.map(Full::new);
        let sent = self.rt.spawn(async move {
            let answer = tokio::time::timeout(EXPORT_TIMEOUT, client.request(request))
                .await
                .map_err(|_| "the collector did not answer in time")??;
            let (parts, body) = answer.into_parts();
            let body = Limited::new(body, MAX_ANSWER).collect().await?.to_bytes();
            Ok::<_, HttpError>(http::Response::from_parts(parts, body))
        });
        sent.await?
    }
}
