//! The engine: what the request path needs, shared by all connections (the configuration, the
//! ledger, the upstream client, the caches and counters), and what every route's path does with
//! it (a request's body and signature, the headers sent upstream, the request as stored, an
//! outcome recorded). The request path itself is `handle.rs`.

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::sync::Arc;

use axum::http::{header, HeaderMap, HeaderValue, Method, Response};
use bytes::Bytes;
use hyper::body::Incoming;
use idemgate_ledger::{now_millis, LedgerError, OwnerReport, RequestRecord, Result, Storage};
use metrics::Histogram;
use opentelemetry::trace::SpanKind;

use crate::config::{Config, Route};
use crate::flights::Flights;
use crate::forward::{self, HttpClient};
use crate::keys;
use crate::problem::{Code, Problem};
use crate::read_body;
use crate::read_cache::ReadCache;
use crate::settle::{Outcome, Unsettled};
use crate::signature;
use crate::telemetry;

pub use crate::request_checks::{MAX_HEADERS, MAX_HEADER_BYTES};
pub use crate::respond::{respond, respond_upstream, ProxyBody};
pub(crate) use metrics_of_route::{describe as describe_metrics, RouteMetrics};

mod make;
mod metrics_of_route;
mod read;

/// Where a stored request keeps the key its upstream was sent (`forward_key`) when that is not the
/// entry's own key ([`keys::upstream_key`]: a scoped key). Never sent under this name: a replay
/// sends it as `Idempotency-Key`. An entry stored without it was sent its own key.
pub const UPSTREAM_KEY_HEADER: &str = "idemgate-upstream-key";

/// Everything the request path needs; shared by all connections.
#[derive(Debug)]
pub struct Engine {
    pub cfg: Arc<Config>,
    pub store: Arc<dyn Storage>,
    pub client: HttpClient,
    /// This instance's lease-owner id.
    pub owner: String,
    read_cache: ReadCache,
    pub(crate) flights: Arc<Flights>,
    /// Per route, in the configuration's order: an MCP route's tools as last listed.
    pub(crate) tools: Vec<Arc<crate::mcp::tools::Tools>>,
    /// The MCP calls running for clients, whose cancels are held back.
    pub(crate) mcp_calls: Arc<crate::mcp::calls::Calls>,
    /// The loop guards' counts.
    pub(crate) loops: Arc<crate::business::LoopGuards>,
    /// Outcomes known here that the ledger could not take yet.
    pub unsettled: Arc<Unsettled>,
    /// Per route, in the configuration's order.
    metrics: Vec<RouteMetrics>,
    pub(crate) claim_seconds: Histogram,
    /// Where spans of proxied calls go, when `[telemetry]` is configured.
    pub tracing: Option<Arc<crate::telemetry::Tracing>>,
    /// The write requests being served, each on a task of its own: a client that goes away does
    /// not cancel its request, and shutdown waits for them.
    pub requests: tokio_util::task::TaskTracker,
}

pub(crate) type Answer = Result<Response<ProxyBody>, Problem>;

impl Engine {
    /// The first route that serves the method and whose path is a prefix of the request path at a
    /// segment boundary.
    pub(crate) fn route_at(&self, method: &Method, path: &str) -> Option<usize> {
        self.cfg
            .routes
            .iter()
            .position(|r| r.serves(method.as_str()) && r.takes(path))
    }

    /// Runs `work` on a task of its own ([`Engine::requests`]) and waits for it: if the caller
    /// goes away (its future dropped with its connection), `work` still runs to the end.
    pub async fn to_the_end<T: Send + 'static>(
        &self,
        work: impl std::future::Future<Output = Result<T, Problem>> + Send + 'static,
    ) -> Result<T, Problem> {
        self.requests
            .spawn(telemetry::carry(work))
            .await
            .map_err(|j| Problem::new(Code::Internal, j.to_string()))?
    }

    /// The problem for a request no route takes: `405` with `Allow` when routes take its path
    /// with other methods, else `404`.
    pub(crate) fn no_route(&self, method: &Method, path: &str) -> Problem {
        let mut allow: Vec<&str> = Vec::new();
        for r in self.cfg.routes.iter().filter(|r| r.takes(path)) {
            let head = r.serves("HEAD").then_some("HEAD");
            for m in std::iter::once(r.method.as_str()).chain(head) {
                if !allow.contains(&m) {
                    allow.push(m);
                }
            }
        }
        if allow.is_empty() {
            return Problem::new(Code::UnknownRoute, format!("no route for {method} {path}"));
        }
        let allow = allow.join(", ");
        let p = Problem::new(
            Code::MethodNotAllowed,
            format!("no route for {method} {path}; its routes take {allow}"),
        );
        match HeaderValue::from_str(&allow) {
            Ok(v) => p.header(header::ALLOW, v),
            Err(_) => p,
        }
    }

    /// `route`'s metric handles (registered now if `route` is not one of this configuration's).
    pub(crate) fn metrics_of(&self, route: &Route) -> std::borrow::Cow<'_, RouteMetrics> {
        match self
            .cfg
            .routes
            .iter()
            .position(|r| std::ptr::eq(r, route) || r.name == route.name)
        {
            Some(i) => std::borrow::Cow::Borrowed(&self.metrics[i]),
            None => std::borrow::Cow::Owned(RouteMetrics::new(&route.name)),
        }
    }
}

/// One request on its route, as the request path passes it along.
pub(crate) struct Req<'a> {
    pub(crate) route: &'a Route,
    pub(crate) metrics: &'a RouteMetrics,
    pub(crate) parts: &'a axum::http::request::Parts,
    pub(crate) peer: SocketAddr,
}

impl Engine {
    pub(crate) fn req<'a>(
        &'a self,
        route_at: usize,
        parts: &'a axum::http::request::Parts,
        peer: SocketAddr,
    ) -> Req<'a> {
        Req {
            route: &self.cfg.routes[route_at],
            metrics: &self.metrics[route_at],
            parts,
            peer,
        }
    }

    /// A request's body, read whole within the route's limit and the body deadline, its signature
    /// checked.
    pub(crate) async fn body(&self, req: &Req<'_>, body: Incoming) -> Result<Bytes, Problem> {
        let (route, parts) = (req.route, req.parts);
        let body =
            read_body::read(body, &parts.headers, route.max_body, self.cfg.body_timeout).await?;
        if let Some(sig) = &route.signature {
            let h = parts
                .headers
                .get(sig.header.as_str())
                .and_then(|v| v.to_str().ok());
            signature::verify(sig, h, &body, now_millis() / 1000)?;
        }
        Ok(body)
    }

    /// Headers sent upstream: the client's minus hop-by-hop ones, with forwarding headers and,
    /// when the route says so, the idempotency key.
    pub(crate) fn forward_headers(&self, req: &Req<'_>, key: Option<&str>) -> HeaderMap {
        let route = req.route;
        let mut h = req.parts.headers.clone();
        forward::strip_hop_by_hop(&mut h);
        h.remove(header::CONTENT_LENGTH);
        // The client's `Expect: 100-continue` was this proxy's to answer, and was: by now the body
        // is read (or on its way). An upstream that does not take expectations answers it `417`,
        // which a write would have stored as its outcome.
        h.remove(header::EXPECT);
        let original_host = h.remove(header::HOST);
        if let Ok(v) = HeaderValue::from_str(&route.upstream.authority) {
            h.insert(header::HOST, v);
        }
        if let Some(host) = original_host {
            h.insert("x-forwarded-host", host);
        }
        h.insert("x-forwarded-proto", HeaderValue::from_static("http"));
        if let Some(a) = &route.upstream_auth {
            a.set_in(&mut h);
        }
        // The client's own hop appended to what came, all of it: a second `X-Forwarded-For`
        // line is the same list continued (RFC 9110 §5.3), which `insert` would drop.
        let mut xff = String::new();
        for prev in h
            .get_all("x-forwarded-for")
            .iter()
            .filter_map(|v| v.to_str().ok())
        {
            xff.push_str(prev);
            xff.push_str(", ");
        }
        let _ = write!(xff, "{}", req.peer.ip());
        if let Some(v) = forward::header_value(&xff) {
            h.insert("x-forwarded-for", v);
        }
        if let Some(k) = key {
            keys::send_key(route, &mut h, k);
        }
        if let Some(t) = telemetry::traceparent() {
            h.insert("traceparent", t);
        }
        h
    }

    /// The request as stored: method, `target` (its path and query without secret parameters),
    /// an allowlist of headers (never secrets), body; and the key the upstream is sent, as
    /// [`UPSTREAM_KEY_HEADER`], so that a replay or a reconcile probe uses the same one.
    pub(crate) fn stored_request(
        route: &Route,
        parts: &axum::http::request::Parts,
        target: &str,
        body: &Bytes,
        upstream_key: Option<&str>,
    ) -> RequestRecord {
        let mut keep: Vec<&str> = vec![
            "content-type",
            "accept",
            "user-agent",
            "x-request-id",
            "traceparent",
            "idempotency-key",
            "mcp-protocol-version",
        ];
        if let Some(crate::config::KeySource::Header(h)) = &route.key {
            keep.push(h);
        }
        if let Some(h) = &route.scope_header {
            keep.push(h);
        }
        keep.extend(route.fingerprint_headers.iter().map(String::as_str));
        let headers = parts
            .headers
            .iter()
            .filter(|(n, _)| {
                keep.contains(&n.as_str()) && !route.secret_headers.iter().any(|s| s == n.as_str())
            })
            .filter_map(|(n, v)| {
                v.to_str()
                    .ok()
                    .map(|v| (n.as_str().to_owned(), v.to_owned()))
            })
            .chain(upstream_key.map(|k| (UPSTREAM_KEY_HEADER.to_owned(), k.to_owned())))
            .collect();
        RequestRecord {
            method: parts.method.to_string(),
            path: target.to_owned(),
            headers,
            body: body.to_vec(),
        }
        .redacted()
    }

    /// Records an outcome; if the ledger cannot take it now, keeps it to record later. `Ok(true)`
    /// once recorded, `Ok(false)` when kept; the ledger's error when it was refused for good.
    pub(crate) async fn settle(&self, o: Outcome) -> Result<bool, LedgerError> {
        let step = telemetry::step("ledger commit", SpanKind::Internal);
        let written = o.clone().write(&*self.store).await;
        step.end(|| telemetry::committed(o.name(), written.as_ref().err()));
        match written {
            Ok(()) => Ok(true),
            Err(e) if self.unsettled.keep(o, &e) => Ok(false),
            Err(e) => Err(e),
        }
    }

    pub(crate) fn report(&self, entry_id: i64, error: String) -> OwnerReport {
        OwnerReport {
            entry_id,
            owner: self.owner.clone(),
            error,
            at: now_millis(),
        }
    }
}

#[cfg(test)]
mod tests;
