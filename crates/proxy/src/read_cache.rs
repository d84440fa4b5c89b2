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
//! - **Bounded.** At most [`CAP`] responses and [`CAP_BYTES`] of them; a response that does not
//!   fit is not kept until expired ones make room. A hit shares the kept body, never copies it.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use axum::http::{request::Parts, HeaderMap, Method};
use idemgate_ledger::ALWAYS_REDACTED_HEADERS;
use sha2::{Digest, Sha256};

use crate::config::Route;
use crate::forward::UpstreamResponse;

/// The most responses kept.
const CAP: usize = 10_000;
/// The most bytes of responses (bodies, header names and values) kept: without it, 10,000
/// responses of up to 16 MiB each could hold 160 GiB.
pub const CAP_BYTES: usize = 64 << 20;

struct Kept {
    until: Instant,
    /// The request headers the response varies on (lower case), with the values they had.
    vary: Vec<(String, Option<String>)>,
    response: UpstreamResponse,
    bytes: usize,
}

#[derive(Default)]
struct Store {
    map: HashMap<String, Kept>,
    /// The sum of the kept responses' `bytes`.
    bytes: usize,
}

/// See the module's comment.
#[derive(Default)]
pub struct ReadCache {
    kept: Mutex<Store>,
}

impl std::fmt::Debug for ReadCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (n, bytes) = self.kept.lock().map_or((0, 0), |k| (k.map.len(), k.bytes));
        f.debug_struct("ReadCache")
            .field("kept", &n)
            .field("bytes", &bytes)
            .finish()
    }
}

impl Store {
    /// Whether a response of `bytes` may be kept at `key`, in place of what is kept there.
    fn has_room(&self, key: &str, bytes: usize) -> bool {
        let replaced = self.map.get(key).map(|k| k.bytes);
        (replaced.is_some() || self.map.len() < CAP)
            && self.bytes - replaced.unwrap_or(0) + bytes <= CAP_BYTES
    }
}

/// What a response costs the cache.
fn size_of(r: &UpstreamResponse) -> usize {
    r.body.len()
        + r.headers
            .iter()
            .map(|(n, v)| n.len() + v.len())
            .sum::<usize>()
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
    pub fn get(&self, place: &Lookup, headers: &HeaderMap) -> Option<UpstreamResponse> {
        let kept = self.kept.lock().ok()?;
        let k = kept.map.get(&place.key)?;
        let same = k.vary.iter().all(|(n, v)| joined(headers, n) == *v);
        (Instant::now() < k.until && same).then(|| k.response.clone())
    }

    /// Keeps `response` (to a request with `headers`) at `place` for at most `ttl`, if a shared
    /// cache may keep it.
    pub fn put(
        &self,
        place: Lookup,
        headers: &HeaderMap,
        response: &UpstreamResponse,
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
        let bytes = size_of(response);
        let Ok(mut kept) = self.kept.lock() else {
            return;
        };
        let now = Instant::now();
        if !kept.has_room(&place.key, bytes) {
            kept.map.retain(|_, k| now < k.until);
            kept.bytes = kept.map.values().map(|k| k.bytes).sum();
            if !kept.has_room(&place.key, bytes) {
                return;
            }
        }
        let k = Kept {
            until: now + ttl,
            vary,
            response: response.clone(),
            bytes,
        };
        let replaced = kept.map.insert(place.key, k).map_or(0, |old| old.bytes);
        kept.bytes = kept.bytes + bytes - replaced;
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

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    fn ok(body: usize) -> UpstreamResponse {
        UpstreamResponse {
            status: 200,
            headers: vec![("content-type".into(), "text/plain".into())],
            body: Bytes::from(vec![b'x'; body]),
        }
    }

    fn at(key: &str) -> Lookup {
        Lookup { key: key.into() }
    }

    #[test]
    fn the_cache_keeps_at_most_its_bytes_and_shares_what_it_keeps() {
        let c = ReadCache::default();
        let h = HeaderMap::new();
        let ttl = Duration::from_secs(60);
        let big = CAP_BYTES / 4;
        for i in 0..8 {
            c.put(at(&format!("k{i}")), &h, &ok(big), ttl);
        }
        let kept: Vec<bool> = (0..8)
            .map(|i| c.get(&at(&format!("k{i}")), &h).is_some())
            .collect();
        assert_eq!(kept, [true, true, true, false, false, false, false, false]);
        let bytes = c.kept.lock().expect("lock").bytes;
        assert!(bytes <= CAP_BYTES, "{bytes}");
        // A response in place of a kept one replaces its bytes, not adds to them.
        c.put(at("k0"), &h, &ok(big), ttl);
        assert_eq!(c.kept.lock().expect("lock").bytes, bytes);
        // A hit shares the kept body.
        let (a, b) = (c.get(&at("k1"), &h), c.get(&at("k1"), &h));
        let (a, b) = (a.expect("kept"), b.expect("kept"));
        assert_eq!(a.body.as_ptr(), b.body.as_ptr());
        // Expired responses make room.
        c.put(at("short"), &h, &ok(1), Duration::from_millis(1));
        for i in 0..3 {
            c.put(at(&format!("k{i}")), &h, &ok(big), Duration::from_millis(1));
        }
        std::thread::sleep(Duration::from_millis(5));
        c.put(at("k7"), &h, &ok(big), ttl);
        assert!(c.get(&at("k7"), &h).is_some());
        assert_eq!(c.kept.lock().expect("lock").bytes, size_of(&ok(big)));
    }
}
