//! What a claim's or a completion's writes need that does not depend on the ledger: the stored
//! headers' JSON, the body's digest, a first claim's event detail and the tail of its event's
//! canonical encoding. Computed on the caller's thread before the job is queued, since the writer
//! is one thread for every caller.

use std::borrow::Cow;

use serde_json::json;

use crate::canon::{canonical_string, sha256_hex};
use crate::model::{is_secret_header, without_secret_params};
use crate::store::{ClaimRequest, CompleteRequest};

/// Headers as stored: JSON pairs, secret headers left out (every header written goes through here).
pub(crate) fn headers_json(h: &[(String, String)]) -> String {
    let kept: Vec<&(String, String)> = h.iter().filter(|(n, _)| !is_secret_header(n)).collect();
    serde_json::to_string(&kept).unwrap_or_else(|_| "[]".into())
}

/// A claim, with what its writes need that does not depend on the ledger: computed on the caller's
/// thread (the writer is one thread for every claim; the callers are many), before it is queued.
pub(crate) struct Claim {
    pub(crate) req: ClaimRequest,
    /// The request's headers as stored ([`headers_json`]).
    pub(crate) headers: String,
    /// The request body's digest.
    pub(crate) digest: String,
    /// A first claim's event detail.
    pub(crate) detail: String,
    /// A first claim's event, encoded for its hash but for its place in the log and its entry.
    pub(crate) tail: Vec<u8>,
    /// The request's subjects as stored with the entry: a JSON object of names and values.
    pub(crate) subjects: Option<String>,
}

impl Claim {
    /// What a duplicate of the claimed entry shares with it besides the route, as its row will
    /// say ([`crate::entry_row::Row::effect`]).
    pub fn effect(&self) -> &str {
        self.req.dup_fp.as_deref().unwrap_or(&self.req.fingerprint)
    }

    pub fn new(mut req: ClaimRequest) -> Claim {
        // Redacted by the caller; secret query parameters are left out again here, as secret
        // headers are by `headers_json`: the target is stored, and logged in the claim's event.
        if let Cow::Owned(path) = without_secret_params(&req.request.path, &[]) {
            req.request.path = path;
        }
        let r = &req.request;
        let digest = sha256_hex(&r.body);
        let mut detail = json!({"attempt": 1, "fingerprint": req.fingerprint,
            "owner": req.owner, "method": r.method, "path": r.path});
        // The claim's subjects travel with it into the log, and so into exports.
        if !req.subjects.is_empty() {
            detail["subjects"] = req
                .subjects
                .iter()
                .map(|(n, v)| (n.clone(), serde_json::Value::String(v.clone())))
                .collect::<serde_json::Map<_, _>>()
                .into();
        }
        let detail = canonical_string(&detail);
        let tail = crate::chain::canonical_tail(
            &req.route,
            &req.scope,
            &req.key,
            None,
            None,
            &detail,
            Some(&digest),
        );
        let subjects = (!req.subjects.is_empty()).then(|| {
            let m: serde_json::Map<String, serde_json::Value> = req
                .subjects
                .iter()
                .map(|(n, v)| (n.clone(), serde_json::Value::String(v.clone())))
                .collect();
            serde_json::Value::Object(m).to_string()
        });
        Claim {
            headers: headers_json(&r.headers),
            digest,
            detail,
            tail,
            subjects,
            req,
        }
    }
}

/// A completion, with its stored headers and its body's digest computed before it is queued (see
/// [`Claim`]; a response body may be megabytes).
pub(crate) struct Completion {
    pub req: CompleteRequest,
    pub(crate) headers: String,
    pub(crate) digest: String,
}

impl Completion {
    pub fn new(req: CompleteRequest) -> Completion {
        Completion {
            headers: headers_json(&req.response.headers),
            digest: sha256_hex(&req.response.body),
            req,
        }
    }
}
