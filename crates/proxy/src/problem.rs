//! RFC 9457 problem+json answers. Every error the proxy and the admin API give is one of these,
//! with a stable `code` (also the last part of `type`).

use axum::body::Body;
use axum::http::{header, HeaderName, HeaderValue, Response, StatusCode};
use serde_json::{json, Value};

pub use idemgate_code::Code;

#[derive(Debug, Clone)]
pub struct Problem {
    pub status: u16,
    pub code: Code,
    pub detail: String,
    pub retry_after: Option<u64>,
    /// One more header field the answer needs, such as `Allow` on a `405` or `Accept-Encoding`
    /// on a `415` (boxed: problems travel in `Result`s, which stay small).
    pub header: Option<Box<(HeaderName, HeaderValue)>>,
    pub extra: Value,
    /// Already counted in `idemgate_requests_total` under an outcome of its own (`not_executed`,
    /// `unknown`), so the proxy does not count it again under its code.
    pub counted: bool,
}

impl Problem {
    /// A problem with `code`'s usual status.
    pub fn new(code: Code, detail: impl Into<String>) -> Problem {
        Problem {
            status: code.status(),
            code,
            detail: detail.into(),
            retry_after: None,
            header: None,
            extra: Value::Null,
            counted: false,
        }
    }

    /// Answers with `status` in place of the code's usual one (an unknown outcome is a `504`
    /// after a timeout, a `409` for a later try).
    pub fn with_status(mut self, status: u16) -> Problem {
        self.status = status;
        self
    }

    /// Marks the problem as counted in `idemgate_requests_total` already.
    pub fn counted(mut self) -> Problem {
        self.counted = true;
        self
    }

    pub fn retry_after(mut self, secs: u64) -> Problem {
        self.retry_after = Some(secs.max(1));
        self
    }

    pub fn header(mut self, name: HeaderName, value: HeaderValue) -> Problem {
        self.header = Some(Box::new((name, value)));
        self
    }

    pub fn with(mut self, k: &str, v: impl Into<Value>) -> Problem {
        if !self.extra.is_object() {
            self.extra = json!({});
        }
        self.extra[k] = v.into();
        self
    }

    pub fn body(&self) -> Value {
        let mut v = json!({
            "type": format!("urn:idemgate:problem:{}", self.code),
            "title": self.code.title(),
            "status": self.status,
            "detail": self.detail,
            "code": self.code.as_str(),
        });
        if let Value::Object(extra) = &self.extra {
            for (k, x) in extra {
                v[k] = x.clone();
            }
        }
        v
    }

    pub fn into_response(self) -> Response<Body> {
        self.into_response_with()
    }

    /// The problem as a response with a body of type `B` (the proxy's, or axum's).
    pub fn into_response_with<B: From<bytes::Bytes>>(self) -> Response<B> {
        let body = serde_json::to_vec(&self.body()).unwrap_or_default();
        let mut r = Response::new(B::from(bytes::Bytes::from(body)));
        *r.status_mut() =
            StatusCode::from_u16(self.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        r.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/problem+json"),
        );
        if let Some(s) = self.retry_after {
            r.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(s));
        }
        if let Some(h) = self.header {
            let (name, value) = *h;
            r.headers_mut().insert(name, value);
        }
        r
    }
}

impl axum::response::IntoResponse for Problem {
    fn into_response(self) -> axum::response::Response {
        Problem::into_response(self)
    }
}

impl From<idemgate_ledger::LedgerError> for Problem {
    fn from(e: idemgate_ledger::LedgerError) -> Problem {
        Problem::new(e.code(), e.to_string())
    }
}

/// An upstream that gave no answer to pass on: it could not be reached (`503`, try again), or it
/// timed out (`504`), broke off or sent more than is kept (`502`).
impl From<crate::forward::NoAnswer> for Problem {
    fn from(e: crate::forward::NoAnswer) -> Problem {
        use crate::forward::NoAnswer;
        match e {
            NoAnswer::Connect(why) => Problem::new(Code::UpstreamUnavailable, why).retry_after(1),
            NoAnswer::Timeout(why) => Problem::new(Code::UpstreamError, why).with_status(504),
            NoAnswer::Broken(why) => Problem::new(Code::UpstreamError, why),
            NoAnswer::TooLarge { status } => {
                Problem::new(Code::UpstreamError, crate::forward::too_large(status))
            }
        }
    }
}
