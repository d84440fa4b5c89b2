//! The result cache of read routes (`cache_ttl`). It is a shared cache in RFC 9111's sense: one
//! proxy answers many callers from it, so it keeps apart what different callers may see.
//!
//! - **Per caller.** A response is kept under the route, the method, the path and query, the
//!   route's scope (its scope header's value) and a digest of the caller's credentials (the
//!   headers the ledger never stores and the route's `secret_headers`). A caller with other
//!   credentials, or none, never gets it.
//! - **Only what the upstream lets a shared cache keep.** A `200` without `Cache-Control:
//!   no-store`, `private` or `no-cache` and without `Vary: *`; kept for `cache_ttl`, or less when
//!   the response's `s-maxage` (else `max-age`) says less. A request with `Cache-Control:
//!   no-cache` or `no-store` is forwarded, and its response is not kept.
//! - **`HEAD`** is answered from a kept `GET` response, and its own responses are not kept.
//! - **`Vary`.** A response answers a later request only when the request headers it names have
//!   the values they had.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use axum::http::{request::Parts, HeaderMap, Method};
use idemgate_ledger::{ResponseRecord, ALWAYS_REDACTED_HEADERS};
use sha2::{Digest, Sha256};

use crate::config::Route;

/// The most responses kept.
const CAP: usize = 10_000;

struct Kept {
    until: Instant,
    /// The request headers the response varies on (lower case), with the values they had.
    vary: Vec<(String, Option<String>)>,
    response: ResponseRecord,
}

/// See the module's comment.
#[derive(Default)]
pub struct ReadCache {
    kept: Mutex<HashMap<String, Kept>>,
}

impl std::fmt::Debug for ReadCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let n = self.kept.lock().map_or(0, |k| k.len());
        f.debug_struct("ReadCache").field("kept", &n).finish()
    }
}

/// A request's place in the cache.
#[derive(Debug)]
pub struct Lookup {
    key: String,
}

impl ReadCache {
    /// Where `parts`' response is kept on `route`; `None` when the request asks not to be
    /// answered from a cache.
    pub fn lookup(route: &Route, parts: &Parts) -> Option<Lookup> {
        let asks = directives(&parts.headers, "cache-control");
        if asks
            .iter()
            .any(|(d, _)| matches!(d.as_str(), "no-cache" | "no-store"))
        {
            return None;
        }
        let scope = route
            .scope_header
            .as_deref()
            .and_then(|h| parts.headers.get(h))
            .map(|v| v.as_bytes())
            .unwrap_or_default();
        let mut who = Sha256::new();
        let credentials = ALWAYS_REDACTED_HEADERS
            .iter()
            .copied()
            .chain(route.secret_headers.iter().map(String::as_str));
        for name in credentials {
            for v in parts.headers.get_all(name) {
                who.update(name.as_bytes());
                who.update(b":");
                who.update(v.as_bytes());
                who.update(b"\n");
            }
        }
        let pq = parts.uri.path_and_query().map_or("/", |p| p.as_str());
        // A kept `GET` response answers a `HEAD` (RFC 9111 §4), whose answer has no body.
        let method = if parts.method == Method::HEAD {
            &Method::GET
        } else {
            &parts.method
        };
        let key = format!(
            "{}\n{method}\n{pq}\n{}\n{}",
            route.name,
            hex::encode(scope),
            hex::encode(who.finalize())
        );
        Some(Lookup { key })
    }

    /// The response kept at `place` for a request with `headers`, if it is fresh and was made for
    /// these values of the headers it varies on.
    pub fn get(&self, place: &Lookup, headers: &HeaderMap) -> Option<ResponseRecord> {
        let kept = self.kept.lock().ok()?;
        let k = kept.get(&place.key)?;
        let same = k.vary.iter().all(|(n, v)| joined(headers, n) == *v);
        (Instant::now() < k.until && same).then(|| k.response.clone())
    }

    /// Keeps `response` (to a request with `headers`) at `place` for at most `ttl`, if a shared
    /// cache may keep it.
    pub fn put(
        &self,
        place: Lookup,
        headers: &HeaderMap,
        response: &ResponseRecord,
        ttl: Duration,
    ) {
        if response.status != 200 {
            return;
        }
        let mut ttl = ttl;
        let said = directives_of(&response.headers, "cache-control");
        if said
            .iter()
            .any(|(d, _)| matches!(d.as_str(), "no-store" | "private" | "no-cache"))
        {
            return;
        }
        let age = |name: &str| {
            said.iter()
                .find(|(d, _)| d == name)
                .and_then(|(_, v)| v.as_deref()?.trim_matches('"').parse::<u64>().ok())
        };
        if let Some(secs) = age("s-maxage").or_else(|| age("max-age")) {
            ttl = ttl.min(Duration::from_secs(secs));
        }
        let vary: Vec<String> = directives_of(&response.headers, "vary")
            .into_iter()
            .map(|(name, _)| name)
            .collect();
        if ttl.is_zero() || vary.iter().any(|n| n == "*") {
            return;
        }
        let vary = vary
            .into_iter()
            .map(|n| {
                let v = joined(headers, &n);
                (n, v)
            })
            .collect();
        let Ok(mut kept) = self.kept.lock() else {
            return;
        };
        let now = Instant::now();
        if kept.len() >= CAP {
            kept.retain(|_, k| now < k.until);
        }
        if kept.len() < CAP || kept.contains_key(&place.key) {
            kept.insert(
                place.key,
                Kept {
                    until: now + ttl,
                    vary,
                    response: response.clone(),
                },
            );
        }
    }
}

/// Every value of header `name`, joined as one field value; `None` if it is absent.
fn joined(headers: &HeaderMap, name: &str) -> Option<String> {
    let values: Vec<&str> = headers
        .get_all(name)
        .iter()
        .map(|v| v.to_str().unwrap_or("\u{fffd}"))
        .collect();
    (!values.is_empty()).then(|| values.join(", "))
}

/// The comma-separated items of header `name` (`Cache-Control`'s directives, `Vary`'s names):
/// each lower-cased, with its `=value` if it has one.
fn directives(headers: &HeaderMap, name: &str) -> Vec<(String, Option<String>)> {
    let values = headers.get_all(name);
    split(values.iter().filter_map(|v| v.to_str().ok()))
}

/// [`directives`] of a stored response's header list.
fn directives_of(headers: &[(String, String)], name: &str) -> Vec<(String, Option<String>)> {
    split(
        headers
            .iter()
            .filter(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str()),
    )
}

fn split<'a>(values: impl Iterator<Item = &'a str>) -> Vec<(String, Option<String>)> {
    values
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .filter(|d| !d.is_empty())
        .map(|d| match d.split_once('=') {
            Some((n, v)) => (n.trim().to_ascii_lowercase(), Some(v.trim().to_owned())),
            None => (d.to_ascii_lowercase(), None),
        })
        .collect()
}
