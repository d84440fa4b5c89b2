//! What is checked of a request before anything is written: the path a route is matched on (no
//! dot segments), the header limits, a body declared as JSON (strict: a member named twice is
//! refused), a body sent as it is (no content encoding to hide it from the fingerprint), and the
//! size limit. Each refusal is a problem+json 4xx.

use axum::http::{header, HeaderMap, HeaderValue};
use idemgate_ledger::canon;

use crate::problem::{Code, Problem};

/// The most header bytes (names and values) a proxied request may carry; more gets 431.
pub const MAX_HEADER_BYTES: usize = 32 * 1024;
/// The most header fields a proxied request may carry; more gets 431.
pub const MAX_HEADERS: usize = 128;

/// The path a route is chosen by: `path` percent-decoded, as the upstream reads it (every web
/// framework decodes a path before it routes it). Else `/v1/%63ancel` went by a broader route
/// than `/v1/cancel`'s (`/v1`, or a catch-all `/`) and skipped the stricter one's checks (its
/// signature, `destructive`) while the upstream cancelled. The path forwarded is the one that
/// came. Borrowed when nothing is encoded: every request is asked.
pub(crate) fn route_path(path: &str) -> std::borrow::Cow<'_, str> {
    percent_encoding::percent_decode_str(path).decode_utf8_lossy()
}

/// Whether `path` has a `.` or `..` segment, plain or percent-encoded. An upstream that resolves
/// it (RFC 3986 §5.2.4) would act on another path than the one the route was chosen by: a write
/// sent through a read route's prefix, or a destructive call through a retried one. Segments are
/// split at `/` and at what an upstream may decode or read as one (`%2F`, `\`, `%5C`), so that
/// `/v1/customers/x%2F..%2F..%2Fcharges` is found; a `%2F` inside a segment that holds no dot
/// segment (`group%2Fproject`) passes. A segment's parameters (`;` or `%3B` and what follows, up
/// to the next separator) are not part of its name: Tomcat and Jetty drop them before they
/// resolve dots, so `/v1/charges/..;/cancel` is `/v1/cancel` to them. Allocates nothing: every
/// request is asked.
pub(crate) fn has_dot_segment(path: &str) -> bool {
    let b = path.as_bytes();
    // Dots in the segment's name so far, whether the name holds anything else, and whether its
    // parameters have begun.
    let (mut i, mut dots, mut other, mut params) = (0, 0u8, false, false);
    loop {
        let (sep, dot, param, len) = match b.get(i) {
            None | Some(b'/' | b'\\') => (true, false, false, 1),
            Some(b'.') => (false, true, false, 1),
            Some(b';') => (false, false, true, 1),
            Some(b'%') => match b.get(i + 1..i + 3) {
                Some([b'2', b'e' | b'E']) => (false, true, false, 3),
                Some([b'2', b'f' | b'F'] | [b'5', b'c' | b'C']) => (true, false, false, 3),
                Some([b'3', b'b' | b'B']) => (false, false, true, 3),
                _ => (false, false, false, 1),
            },
            Some(_) => (false, false, false, 1),
        };
        if sep {
            if !other && (dots == 1 || dots == 2) {
                return true;
            }
            if i >= b.len() {
                return false;
            }
            (dots, other, params) = (0, false, false);
        } else if param {
            params = true;
        } else if !params {
            if dot {
                dots = dots.saturating_add(1);
            } else {
                other = true;
            }
        }
        i += len;
    }
}

pub(crate) fn dot_segment(path: &str) -> Problem {
    Problem::new(
        Code::InvalidPath,
        format!("{path} has a . or .. segment: send the path it stands for"),
    )
}

/// Refuses requests with more header fields or bytes than the proxy keeps (the listener's parser
/// allows more, so such requests get this problem rather than a bare status).
pub(crate) fn check_headers(headers: &HeaderMap) -> Result<(), Problem> {
    let bytes: usize = headers
        .iter()
        .map(|(n, v)| n.as_str().len() + v.len())
        .sum();
    if headers.len() > MAX_HEADERS || bytes > MAX_HEADER_BYTES {
        return Err(Problem::new(Code::HeadersTooLarge, format!(
                "{} header fields, {bytes} bytes: at most {MAX_HEADERS} fields and {MAX_HEADER_BYTES} bytes",
                headers.len()
            )));
    }
    Ok(())
}

/// A body the client declared as JSON must be JSON: it is fingerprinted and stored as such. Its
/// value, parsed once here, serves the key extraction and the fingerprint.
pub(crate) fn declared_json(
    headers: &HeaderMap,
    body: &[u8],
) -> Result<Option<serde_json::Value>, Problem> {
    sent_as_is(headers)?;
    let declared = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|m| {
            let m = m.trim();
            m.eq_ignore_ascii_case("application/json")
                || m.len() > 5 && m[m.len() - 5..].eq_ignore_ascii_case("+json")
        });
    if !declared || body.is_empty() {
        return Ok(None);
    }
    // Parsing into a value checks the UTF-8 of every string, too.
    // Strictly: a member named twice is refused, as every reading of it is a guess (see
    // `canon::parse_json`).
    canon::parse_json(body).map(Some).map_err(|e| {
        Problem::new(
            Code::InvalidBody,
            format!("the body is declared as JSON but is not: {e}"),
        )
    })
}

/// A write's body is fingerprinted and stored as it is sent, so it must be sent without a content
/// coding: compressed, the same request's bytes differ between retries (gzip stamps a time), its
/// JSON is hidden from the fingerprint and the key, and `max_body` would bound the compressed
/// size. RFC 7694: `415`, with `Accept-Encoding` naming what is accepted.
fn sent_as_is(headers: &HeaderMap) -> Result<(), Problem> {
    let coded = headers
        .get_all(header::CONTENT_ENCODING)
        .iter()
        .flat_map(|v| v.to_str().unwrap_or("?").split(','))
        .map(str::trim)
        .find(|c| !c.is_empty() && !c.eq_ignore_ascii_case("identity"));
    match coded {
        None => Ok(()),
        Some(c) => Err(Problem::new(
            Code::UnsupportedEncoding,
            format!(
                "a write's body is fingerprinted and stored as sent: send it without \
                 Content-Encoding (got {c:?})"
            ),
        )
        .header(
            header::ACCEPT_ENCODING,
            HeaderValue::from_static("identity"),
        )),
    }
}

pub(crate) fn too_large(limit: usize) -> Problem {
    Problem::new(
        Code::BodyTooLarge,
        format!("the body exceeds this route's limit of {limit} bytes"),
    )
}
