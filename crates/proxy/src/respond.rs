//! Responses to the client: a stored one (a replay, the read cache's) or the upstream's fresh
//! one, each with the key echoed, a replay marked, and the cache's verdict when it has one.

use axum::http::{HeaderValue, Response, StatusCode};
use bytes::Bytes;
use http_body_util::{Either, Full};
use idemgate_ledger::ResponseRecord;

use crate::forward::{self, UpstreamResponse};
use crate::mcp::sse::EventBody;

/// The body of every answer the proxy gives: complete before it is sent (a stored response, an
/// upstream's collected body, a problem), a read's, streamed from its upstream as it comes, or an
/// MCP call's events, passed on as its task reads them.
pub type ProxyBody = Either<Full<Bytes>, Either<forward::StreamedBody, EventBody>>;

/// A stored response to the client (a replay, or the read cache's), with the key echoed and the
/// replay marked. The record's body becomes the response's without a copy.
pub fn respond(
    r: ResponseRecord,
    key: Option<&str>,
    replayed: bool,
    cache: Option<&'static str>,
) -> Response<ProxyBody> {
    let ResponseRecord {
        status,
        mut headers,
        body,
    } = r;
    // An operator's response recorded before ops checked them may hold one (a `content-length`
    // that contradicts the body would break every replay).
    headers.retain(|(n, _)| {
        !idemgate_ledger::ANSWER_HEADERS
            .iter()
            .any(|a| a.eq_ignore_ascii_case(n))
    });
    let body = Either::Left(Full::new(Bytes::from(body)));
    response(status, &headers, body, key, replayed, cache)
}

/// An upstream's fresh response to the client, with the key echoed: the same status and headers a
/// later replay of it gets, and the body as it arrived.
pub fn respond_upstream(
    r: UpstreamResponse,
    key: Option<&str>,
    cache: Option<&'static str>,
) -> Response<ProxyBody> {
    let body = Either::Left(Full::new(r.body));
    response(r.status, &r.headers, body, key, false, cache)
}

pub(crate) fn response(
    status: u16,
    headers: &[(String, String)],
    body: ProxyBody,
    key: Option<&str>,
    replayed: bool,
    cache: Option<&'static str>,
) -> Response<ProxyBody> {
    let mut resp = Response::new(body);
    *resp.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_GATEWAY);
    let h = resp.headers_mut();
    for (n, v) in headers {
        if let (Ok(n), Ok(v)) = (
            axum::http::HeaderName::from_bytes(n.as_bytes()),
            HeaderValue::from_str(v),
        ) {
            h.append(n, v);
        }
    }
    if let Some(k) = key.and_then(forward::header_value) {
        h.insert("idempotency-key", k);
    }
    if replayed {
        h.insert("idempotent-replayed", HeaderValue::from_static("true"));
    }
    if let Some(c) = cache {
        h.insert("x-cache", HeaderValue::from_static(c));
    }
    resp
}
