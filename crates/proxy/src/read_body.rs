//! A request's body, read whole within its route's limit and the body deadline. A body over the
//! limit is refused with a 413 that its client can read: one that sends its whole body before it
//! reads (Python's `http.client` and `requests`, many agent SDKs) would meet a connection closed
//! under it if the server answered and closed while it was still writing, so the rest of the body
//! is read and dropped first, up to [`DRAIN_MAX`] bytes and the deadline (nginx's lingering close,
//! done before the answer). A client that asked `Expect: 100-continue` has sent nothing yet: it is
//! answered at once, without the `100 Continue` that would ask for the body.

use std::time::Duration;

use axum::http::{header, HeaderMap};
use bytes::{Bytes, BytesMut};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use tokio::time::Instant;

use crate::problem::{Code, Problem};
use crate::request_checks::too_large;

/// The most bytes of a refused body read and dropped before the 413; past them the connection is
/// closed under a client still sending (it sent far more than any route takes).
pub const DRAIN_MAX: u64 = 16 << 20;

/// Reads `body` (whose request's headers are `headers`) within `limit` bytes and `deadline`.
pub(crate) async fn read(
    mut body: Incoming,
    headers: &HeaderMap,
    limit: usize,
    deadline: Duration,
) -> Result<Bytes, Problem> {
    let until = Instant::now() + deadline;
    if let Some(len) = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
    {
        match len.trim().parse::<u64>() {
            Ok(n) if n > limit as u64 => {
                if !expects_continue(headers) {
                    drain(&mut body, 0, until).await;
                }
                return Err(too_large(limit));
            }
            Ok(_) => {}
            Err(_) => return Err(Problem::new(Code::BadRequest, "invalid Content-Length")),
        }
    }
    let mut buf = BytesMut::new();
    loop {
        let frame = match tokio::time::timeout_at(until, body.frame()).await {
            Err(_) => {
                return Err(Problem::new(
                    Code::BodyTimeout,
                    format!("the body did not arrive within {deadline:?}"),
                ))
            }
            Ok(None) => return Ok(buf.freeze()),
            Ok(Some(Err(e))) => {
                return Err(Problem::new(
                    Code::BadBody,
                    format!("the request body could not be read: {e}"),
                ))
            }
            Ok(Some(Ok(frame))) => frame,
        };
        let Ok(data) = frame.into_data() else {
            continue;
        };
        if buf.len() + data.len() > limit {
            drain(&mut body, (buf.len() + data.len()) as u64, until).await;
            return Err(too_large(limit));
        }
        buf.extend_from_slice(&data);
    }
}

/// Whether the client waits for `100 Continue` before it sends its body.
fn expects_continue(headers: &HeaderMap) -> bool {
    headers
        .get(header::EXPECT)
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"100-continue"))
}

/// Reads and drops the rest of `body`, `read` bytes of which are already read, until it ends,
/// [`DRAIN_MAX`] bytes in all, or `until`.
async fn drain(body: &mut Incoming, mut read: u64, until: Instant) {
    while read <= DRAIN_MAX {
        match tokio::time::timeout_at(until, body.frame()).await {
            Ok(Some(Ok(frame))) => {
                read += frame.data_ref().map_or(0, |d| d.len() as u64);
            }
            _ => return,
        }
    }
}
