//! Idempotency keys and scopes: from a header, a JSON pointer into the body, or derived from the
//! canonical arguments. Keys are 1–255 visible ASCII characters (RFC 9110 field-value safe).

use axum::http::{HeaderMap, HeaderName, HeaderValue};
use idemgate_ledger::canon;
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::config::{KeySource, Route};
use crate::problem::{Code, Problem};

pub const MAX_KEY_LEN: usize = 255;
pub const MAX_SCOPE_LEN: usize = 128;

fn visible_ascii(s: &str) -> bool {
    s.bytes().all(|b| (0x20..0x7f).contains(&b)) && !s.starts_with(' ') && !s.ends_with(' ')
}

/// The single value of header `name`: `Ok(None)` when absent, an error when repeated, and
/// `invalid` (the problem of a bad value of its kind) when not text.
fn single_header<'h>(
    headers: &'h HeaderMap,
    name: &str,
    what: &'static str,
    invalid: impl FnOnce() -> Problem,
) -> Result<Option<&'h str>, Problem> {
    let mut values = headers.get_all(name).iter();
    let Some(first) = values.next() else {
        return Ok(None);
    };
    if values.next().is_some() {
        return Err(Problem::new(
            Code::DuplicateHeader,
            format!("the {what} header {name} must appear once"),
        ));
    }
    first.to_str().map(Some).map_err(|_| invalid())
}

pub fn scope(route: &Route, headers: &HeaderMap) -> Result<String, Problem> {
    let Some(h) = &route.scope_header else {
        return Ok(String::new());
    };
    let invalid = || {
        Problem::new(Code::InvalidScope, format!("{h} must be at most {MAX_SCOPE_LEN} printable ASCII characters, not starting or ending with a space"))
    };
    let v = single_header(headers, h, "scope", invalid)?.unwrap_or("");
    if v.is_empty() && route.scope_required {
        return Err(Problem::new(Code::MissingScope, format!("send {h}: on this route it names the caller, whose keys are kept apart from every other caller's")));
    }
    if v.len() > MAX_SCOPE_LEN || !visible_ascii(v) {
        return Err(invalid());
    }
    Ok(v.to_owned())
}

/// Checks a key: 1–255 visible ASCII characters, not starting or ending with a space.
pub fn check_key(k: &str) -> Result<(), Problem> {
    if k.is_empty() || k.len() > MAX_KEY_LEN || !visible_ascii(k) {
        return Err(invalid_key(&format!("got {} bytes", k.len())));
    }
    Ok(())
}

/// The key in header `name`, checked; `None` when the request has none.
pub fn header_key(headers: &HeaderMap, name: &str) -> Result<Option<String>, Problem> {
    let v = single_header(headers, name, "idempotency key", || {
        invalid_key("got bytes that are not ASCII")
    })?;
    match v {
        None => Ok(None),
        Some(v) => {
            check_key(v)?;
            Ok(Some(v.to_owned()))
        }
    }
}

fn invalid_key(got: &str) -> Problem {
    Problem::new(Code::InvalidKey, format!(
            "an idempotency key is 1 to {MAX_KEY_LEN} printable ASCII characters, not starting or ending with a space ({got})"
        ))
}

fn missing(detail: String) -> Problem {
    Problem::new(Code::MissingKey, detail)
}

/// The key an upstream is sent (`forward_key`) for `key` in `scope`.
///
/// Scopes keep two agents' (or tenants') equal keys apart in the ledger. Sent as they came, those
/// keys would be one key to an upstream that dedupes by key or keeps an idempotency cache, as
/// payment APIs do: it would answer one agent's request with another's result (or refuse it as a
/// reuse). So a scoped key is sent as a UUID (RFC 9562, version 8) made from sha256 of the scope
/// and the key: one per (scope, key), the same on every retry and replay, and of a form every
/// idempotency-key header takes (Stripe's 255 characters, Square's 45, APIs that ask for a UUID).
/// An unscoped key, and a derived one (which covers its scope already), is sent as it is.
pub fn upstream_key<'k>(route: &Route, scope: &str, key: &'k str) -> std::borrow::Cow<'k, str> {
    if scope.is_empty() || matches!(route.key, Some(KeySource::Derive(_))) {
        return std::borrow::Cow::Borrowed(key);
    }
    std::borrow::Cow::Owned(scoped(scope, key))
}

/// Puts the key an upstream is sent ([`upstream_key`]) into `h`, as the route says. With
/// `forward_key`: as `Idempotency-Key`, and, when the route takes its key from another header, in
/// that header too, in place of the client's own key (which, scoped, could be another agent's key
/// to an upstream that reads that header). Without it: the route's key header is left out.
pub fn send_key(route: &Route, h: &mut HeaderMap, upstream_key: &str) {
    const IDEMPOTENCY_KEY: &str = "idempotency-key";
    let own = match &route.key {
        Some(KeySource::Header(name)) => Some(name.as_str()),
        _ => None,
    };
    if !route.forward_key {
        if let Some(name) = own {
            h.remove(name);
        }
        return;
    }
    let Ok(v) = HeaderValue::from_str(upstream_key) else {
        return;
    };
    // Named (lower case) by the configuration; the usual one, Idempotency-Key, costs nothing more.
    let other = own
        .filter(|n| *n != IDEMPOTENCY_KEY)
        .and_then(|n| HeaderName::from_bytes(n.as_bytes()).ok());
    if let Some(name) = other {
        h.insert(name, v.clone());
    }
    h.insert(HeaderName::from_static(IDEMPOTENCY_KEY), v);
}

/// The UUID [`upstream_key`] sends for `key` in (non-empty) `scope`.
pub fn scoped(scope: &str, key: &str) -> String {
    let mut h = Sha256::new();
    h.update(b"idemgate-upstream-key-v1\n");
    h.update(scope.as_bytes());
    h.update(b"\n");
    h.update(key.as_bytes());
    let mut b: [u8; 16] = h.finalize()[..16].try_into().unwrap_or_default();
    b[6] = (b[6] & 0x0f) | 0x80; // version 8: custom
    b[8] = (b[8] & 0x3f) | 0x80; // the RFC 9562 variant
    let x = hex::encode(b);
    format!(
        "{}-{}-{}-{}-{}",
        &x[..8],
        &x[8..12],
        &x[12..16],
        &x[16..20],
        &x[20..]
    )
}

fn parse_json(body: &[u8]) -> Result<Value, Problem> {
    canon::parse_json(body).map_err(|e| {
        Problem::new(
            Code::InvalidBody,
            format!("this route reads its key from the JSON body: {e}"),
        )
    })
}

/// The key of a request, per the route's key source.
pub fn extract(
    route: &Route,
    scope: &str,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<String, Problem> {
    extract_parsed(route, scope, headers, body, None)
}

/// [`extract`] with the body already parsed as JSON by the caller when it was (`parsed` must be
/// `body`'s value), so a JSON key source does not parse it again.
pub fn extract_parsed(
    route: &Route,
    scope: &str,
    headers: &HeaderMap,
    body: &[u8],
    parsed: Option<&Value>,
) -> Result<String, Problem> {
    let json = || -> Result<std::borrow::Cow<'_, Value>, Problem> {
        Ok(match parsed {
            Some(v) => std::borrow::Cow::Borrowed(v),
            None => std::borrow::Cow::Owned(parse_json(body)?),
        })
    };
    let Some(src) = &route.key else {
        return Err(missing("this route has no key source".into()));
    };
    let key = match src {
        KeySource::Header(h) => single_header(headers, h, "idempotency key", || {
            invalid_key("got bytes that are not ASCII")
        })?
        .ok_or_else(|| {
            missing(format!(
                "send an {h} header: a unique value per logical operation, the same on every retry"
            ))
        })?
        .to_owned(),
        KeySource::Json(ptr) => {
            let v = json()?;
            match v.pointer(ptr) {
                Some(Value::String(s)) => s.clone(),
                Some(Value::Number(n)) => n.to_string(),
                Some(_) => {
                    return Err(Problem::new(
                        Code::InvalidKey,
                        format!("{ptr} must be a string or a number"),
                    ))
                }
                None => return Err(missing(format!("the JSON body has no {ptr}"))),
            }
        }
        KeySource::Derive(ptrs) => {
            let v = json()?;
            let mut parts = Vec::with_capacity(ptrs.len());
            for p in ptrs {
                parts.push(v.pointer(p).cloned().ok_or_else(|| {
                    missing(format!("the key is derived from {p}, which the body lacks"))
                })?);
            }
            let mut h = Sha256::new();
            h.update(b"idemgate-derived-key-v1\n");
            h.update(scope.as_bytes());
            h.update(b"\n");
            h.update(route.name.as_bytes());
            h.update(b"\n");
            canon::write_canonical(&Value::Array(parts), &mut h);
            format!("derived:{}", hex::encode(h.finalize()))
        }
    };
    check_key(&key)?;
    Ok(key)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn route(key: &str) -> Route {
        let toml = format!(
            "[server]\nledger = \"x.db\"\n[[routes]]\nname = \"r\"\nmethod = \"POST\"\n\
             path = \"/r\"\nupstream = \"http://127.0.0.1:9\"\neffect = \"write\"\n{key}\n"
        );
        let mut cfg = crate::config::Config::parse(&toml).expect("config");
        cfg.routes.remove(0)
    }

    #[test]
    fn a_scoped_key_goes_upstream_as_a_uuid_of_its_own() {
        let r = route("key.header = \"Idempotency-Key\"");
        let a = upstream_key(&r, "agent-7", "order-1");
        let b = upstream_key(&r, "agent-8", "order-1");
        assert_ne!(a, b, "two scopes' equal keys are two keys upstream");
        assert_eq!(a, upstream_key(&r, "agent-7", "order-1"), "stable");
        assert_ne!(a, upstream_key(&r, "agent-7", "order-2"));
        // A UUID, version 8, RFC 9562 variant.
        let parts: Vec<&str> = a.split('-').collect();
        assert_eq!(
            parts.iter().map(|p| p.len()).collect::<Vec<_>>(),
            [8, 4, 4, 4, 12]
        );
        assert!(a.bytes().all(|c| c == b'-' || c.is_ascii_hexdigit()));
        assert!(parts[2].starts_with('8'), "{a}");
        assert!(matches!(&parts[3][..1], "8" | "9" | "a" | "b"), "{a}");
        // Unscoped, and derived keys (which cover their scope), go as they are.
        assert_eq!(upstream_key(&r, "", "order-1"), "order-1");
        let d = route("key.derive = [\"/to\"]");
        assert_eq!(upstream_key(&d, "agent-7", "derived:ab"), "derived:ab");
        // A header key that only looks derived is still scoped.
        assert_ne!(upstream_key(&r, "agent-7", "derived:ab"), "derived:ab");
    }
}
