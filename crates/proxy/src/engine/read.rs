//! The read path: a route whose calls change nothing upstream is forwarded as it comes, retried
//! when the upstream says "not now", and its answers cached when the route says so. Nothing is
//! written to the ledger.

use std::net::SocketAddr;

use axum::http::Method;
use bytes::Bytes;
use http_body_util::Either;
use hyper::body::Incoming;
use metrics::counter;

use super::{Answer, Engine, Req};
use crate::config::Route;
use crate::forward::{self, NoAnswer, ReadAnswer};
use crate::keys;
use crate::problem::{Code, Problem};
use crate::read_cache::ReadCache;
use crate::respond::{respond_upstream, response};
use crate::telemetry;

impl Engine {
    /// A read, on the connection's task.
    pub(crate) async fn read(
        &self,
        route_at: usize,
        parts: &axum::http::request::Parts,
        peer: SocketAddr,
        body: Incoming,
    ) -> Answer {
        let req = &self.req(route_at, parts, peer);
        let body = self.body(req, body).await?;
        self.read_path(req, body).await
    }

    /// What a read route answers: a cached answer, or the upstream's, after the route's retries
    /// of those that say "not now".
    async fn read_path(&self, req: &Req<'_>, body: Bytes) -> Answer {
        let (route, parts) = (req.route, req.parts);
        if route.scope_required {
            keys::scope(route, &parts.headers)?;
        }
        let pq = parts.uri.path_and_query().map_or("/", |p| p.as_str());
        let mut cached = route
            .cache_ttl
            .and_then(|ttl| Some((ttl, ReadCache::lookup(route, parts)?)));
        if let Some((_, place)) = &cached {
            if let Some(r) = self.read_cache.get(place, &parts.headers) {
                req.metrics.cache_hit.increment(1);
                telemetry::outcome("cached");
                return Ok(respond_upstream(r, None, Some("HIT")));
            }
        }
        let uri = forward::upstream_uri(&route.upstream, pq)
            .map_err(|e| Problem::new(Code::BadRequest, e))?;
        let headers = self.forward_headers(req, None);
        // Kept whole to cache it; else streamed.
        let whole = cached.is_some();
        let mut n = 1;
        loop {
            let out = forward::Outgoing {
                method: &parts.method,
                uri: uri.clone(),
                headers: &headers,
                body: body.clone(),
                timeout: route.timeout,
            };
            let a = forward::read(&self.client, out, whole).await;
            if let Some((class, wait)) = read_again(route, n, &a) {
                counter!("idemgate_retries_total", "route" => route.name.clone(), "class" => class)
                    .increment(1);
                tokio::time::sleep(wait).await;
                n += 1;
                continue;
            }
            return match a {
                Ok(ReadAnswer::Whole(r)) => {
                    let keep = !forward::not_executed(r.status)
                        && !forward::outcome_unknown(r.status)
                        && parts.method != Method::HEAD;
                    if let Some((ttl, place)) = cached.take().filter(|_| keep) {
                        self.read_cache.put(place, &parts.headers, &r, ttl);
                    }
                    req.metrics.forwarded.increment(1);
                    telemetry::outcome("forwarded");
                    Ok(respond_upstream(r, None, route.cache_ttl.map(|_| "MISS")))
                }
                Ok(ReadAnswer::Streamed {
                    status,
                    headers,
                    body,
                }) => {
                    req.metrics.forwarded.increment(1);
                    telemetry::outcome("forwarded");
                    let cache = route.cache_ttl.map(|_| "MISS");
                    Ok(response(
                        status,
                        &headers,
                        Either::Right(Either::Left(body)),
                        None,
                        false,
                        cache,
                    ))
                }
                // Too large only for a HEAD's answer, read whole without a way to stream the rest.
                Err(e) => Err(Problem::from(e)),
            };
        }
    }
}

/// Whether the `n`th try of a read is tried again, and after how long. A read does nothing
/// upstream: what the upstream answers is passed on, whatever its status (a 500 with the
/// upstream's own words in it too), once those that say "not now" (408, 425, 429, 503) and failed
/// connections have had the route's retries.
fn read_again(
    route: &Route,
    n: u32,
    a: &Result<ReadAnswer, NoAnswer>,
) -> Option<(&'static str, std::time::Duration)> {
    let (class, after) = match a {
        Ok(r) if forward::not_executed(r.status()) => (
            forward::retry_class(r.status()),
            forward::retry_after_secs(r.headers()),
        ),
        Err(NoAnswer::Connect(_)) => ("connect", None),
        _ => return None,
    };
    if n >= route.retry.attempts {
        return None;
    }
    Some((
        class,
        forward::retry_wait(route.retry.base, route.retry.max, n, after)?,
    ))
}
