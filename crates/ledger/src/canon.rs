//! Canonical JSON and request fingerprints.
//!
//! Canonical JSON: object keys sorted by their UTF-8 bytes, no whitespace, strings escaped as
//! `serde_json` escapes them, numbers as `serde_json` prints them. Keys are sorted here explicitly, so
//! the result does not depend on whether `serde_json`'s `preserve_order` feature is on somewhere in
//! the dependency graph. The canonical form is written straight into the hasher: no intermediate
//! string is built.
//!
//! A request's JSON is read by [`parse_json`], which refuses an object that names a member twice:
//! RFC 8259 leaves what such an object means to each parser, and they differ.

use std::fmt;

use serde::de::{DeserializeSeed, Error as _, MapAccess, SeqAccess, Visitor};
use serde_json::map::Entry;
use serde_json::{Map, Number, Value};
use sha2::{Digest, Sha256};

/// Parses a JSON text into a value, as `serde_json::from_slice::<Value>` does, but refuses an
/// object with two members of one name (`{"amount": 100, "amount": 1}`).
///
/// serde_json keeps the last of them and many parsers keep the first, so the canonical form of
/// either reading could make two requests that an upstream reads differently one request: a retry
/// that changed `amount` would be replayed instead of refused as a collision, and a key derived
/// from the body could match another request's. I-JSON (RFC 7493) forbids such names for the
/// same reason.
pub fn parse_json(bytes: &[u8]) -> serde_json::Result<Value> {
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let v = Strict.deserialize(&mut de)?;
    de.end()?;
    Ok(v)
}

/// A JSON value whose objects name each member once; see [`parse_json`].
#[derive(Clone, Copy)]
struct Strict;

impl<'de> DeserializeSeed<'de> for Strict {
    type Value = Value;

    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Strict {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E>(self, b: bool) -> Result<Value, E> {
        Ok(Value::Bool(b))
    }

    fn visit_i64<E>(self, n: i64) -> Result<Value, E> {
        Ok(Value::Number(n.into()))
    }

    fn visit_u64<E>(self, n: u64) -> Result<Value, E> {
        Ok(Value::Number(n.into()))
    }

    fn visit_f64<E>(self, n: f64) -> Result<Value, E> {
        Ok(Number::from_f64(n).map_or(Value::Null, Value::Number))
    }

    fn visit_str<E>(self, s: &str) -> Result<Value, E> {
        Ok(Value::String(s.to_owned()))
    }

    fn visit_string<E>(self, s: String) -> Result<Value, E> {
        Ok(Value::String(s))
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(0));
        while let Some(v) = seq.next_element_seed(self)? {
            items.push(v);
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut members = Map::new();
        while let Some(name) = map.next_key::<String>()? {
            match members.entry(name) {
                Entry::Vacant(slot) => {
                    slot.insert(map.next_value_seed(self)?);
                }
                Entry::Occupied(twice) => {
                    return Err(A::Error::custom(format_args!(
                        "the member {:?} appears twice in one object",
                        twice.key()
                    )));
                }
            }
        }
        Ok(Value::Object(members))
    }
}

/// Something canonical bytes can be written into (a hasher or a buffer).
pub trait Sink {
    fn put(&mut self, bytes: &[u8]);
}

impl Sink for Sha256 {
    fn put(&mut self, bytes: &[u8]) {
        self.update(bytes);
    }
}

impl Sink for Vec<u8> {
    fn put(&mut self, bytes: &[u8]) {
        self.extend_from_slice(bytes);
    }
}

/// Writes the canonical form of `v` into `out`.
pub fn write_canonical(v: &Value, out: &mut impl Sink) {
    match v {
        Value::Null => out.put(b"null"),
        Value::Bool(true) => out.put(b"true"),
        Value::Bool(false) => out.put(b"false"),
        Value::Number(n) => write_json(n, out),
        Value::String(s) => write_string(s, out),
        Value::Array(items) => {
            out.put(b"[");
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.put(b",");
                }
                write_canonical(item, out);
            }
            out.put(b"]");
        }
        Value::Object(map) => {
            out.put(b"{");
            // serde_json's default map is sorted already; with `preserve_order` on somewhere in the
            // dependency graph it is not, and the keys are sorted here.
            let sorted = map.keys().zip(map.keys().skip(1)).all(|(a, b)| a <= b);
            if sorted {
                for (i, (k, v)) in map.iter().enumerate() {
                    member(i, k, v, out);
                }
            } else {
                let mut keys: Vec<&String> = map.keys().collect();
                keys.sort_unstable();
                for (i, k) in keys.into_iter().enumerate() {
                    member(i, k, &map[k], out);
                }
            }
            out.put(b"}");
        }
    }
}

fn member(i: usize, k: &str, v: &Value, out: &mut impl Sink) {
    if i > 0 {
        out.put(b",");
    }
    write_string(k, out);
    out.put(b":");
    write_canonical(v, out);
}

/// Lets serde_json write straight into a [`Sink`]: no intermediate string per value.
struct SinkWriter<'a, S: Sink>(&'a mut S);

impl<S: Sink> std::io::Write for SinkWriter<'_, S> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.put(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// serde_json's own text for a string or number: its escaping and number printing are
/// deterministic, and writing into a sink cannot fail.
fn write_json<T: serde::Serialize + ?Sized>(v: &T, out: &mut impl Sink) {
    let _ = serde_json::to_writer(SinkWriter(out), v);
}

/// `s` as a JSON string, escaped byte for byte as serde_json escapes it: `"` and `\`, the short
/// escapes of `\b \f \n \r \t`, every other byte below 0x20 as `\u00XX`, nothing else. Runs that
/// need no escape are found eight bytes at a time and written whole: every event the chain hashes
/// or verifies passes through here.
pub(crate) fn write_string(s: &str, out: &mut impl Sink) {
    let bytes = s.as_bytes();
    out.put(b"\"");
    let mut start = 0;
    loop {
        let at = next_escape(bytes, start);
        if at == bytes.len() {
            break;
        }
        out.put(&bytes[start..at]);
        let b = bytes[at];
        let short = match b {
            b'"' => Some(b'"'),
            b'\\' => Some(b'\\'),
            0x08 => Some(b'b'),
            0x0c => Some(b'f'),
            b'\n' => Some(b'n'),
            b'\r' => Some(b'r'),
            b'\t' => Some(b't'),
            _ => None,
        };
        match short {
            Some(c) => out.put(&[b'\\', c]),
            None => {
                const HEX: &[u8; 16] = b"0123456789abcdef";
                out.put(&[
                    b'\\',
                    b'u',
                    b'0',
                    b'0',
                    HEX[usize::from(b >> 4)],
                    HEX[usize::from(b & 0xf)],
                ]);
            }
        }
        start = at + 1;
    }
    out.put(&bytes[start..]);
    out.put(b"\"");
}

/// The index of the first byte at or after `from` that a JSON string escapes (`"`, `\`, or below
/// 0x20), or `bytes.len()`.
fn next_escape(bytes: &[u8], from: usize) -> usize {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    // Per byte, the high bit of `zero(v)` is set where that byte of `v` is 0, of `below(x)` where
    // it is under 0x20; a borrow can set bits above a true match only, so the lowest is exact.
    let zero = |v: u64| v.wrapping_sub(ONES) & !v & HIGH;
    let below = |x: u64| x.wrapping_sub(ONES * 0x20) & !x & HIGH;
    let mut i = from;
    while let Some(word) = bytes.get(i..i + 8) {
        let mut eight = [0u8; 8];
        eight.copy_from_slice(word);
        let x = u64::from_le_bytes(eight);
        let hits =
            below(x) | zero(x ^ (ONES * u64::from(b'"'))) | zero(x ^ (ONES * u64::from(b'\\')));
        if hits != 0 {
            return i + (hits.trailing_zeros() / 8) as usize;
        }
        i += 8;
    }
    while i < bytes.len() && !matches!(bytes[i], b'"' | b'\\' | 0..=0x1f) {
        i += 1;
    }
    i
}

/// The canonical JSON text of `v`.
pub fn canonical_string(v: &Value) -> String {
    let mut buf = Vec::new();
    write_canonical(v, &mut buf);
    String::from_utf8(buf).unwrap_or_default()
}

/// Hex sha256 of a byte string.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// The body part of a fingerprint: canonical JSON when the body parses as JSON (by [`parse_json`]:
/// a body that names a member twice is hashed as raw bytes), else the raw bytes.
/// The two are told apart by a prefix so a raw body can never equal a JSON one. `parsed`, when
/// given, is `body` already parsed by the caller (it is not parsed again).
fn hash_body(hasher: &mut Sha256, body: &[u8], parsed: Option<&Value>) {
    if body.is_empty() {
        hasher.update(b"empty");
        return;
    }
    let owned;
    let json = match parsed {
        Some(v) => Some(v),
        None => {
            owned = parse_json(body).ok();
            owned.as_ref()
        }
    };
    match json {
        Some(v) => {
            hasher.update(b"json:");
            write_canonical(v, hasher);
        }
        None => {
            hasher.update(b"raw:");
            hasher.update(body);
        }
    }
}

/// The request fingerprint: sha256 over method, route, the selected headers (names lower-cased,
/// sorted) and the canonical body. Hex-encoded.
pub fn fingerprint(method: &str, route: &str, headers: &[(&str, &str)], body: &[u8]) -> String {
    fingerprint_parsed(method, route, headers, body, None)
}

/// [`fingerprint`] of a body the caller has already parsed as JSON (`parsed` must be `body`'s
/// value): the same fingerprint, without parsing the body a second time.
pub fn fingerprint_parsed(
    method: &str,
    route: &str,
    headers: &[(&str, &str)],
    body: &[u8],
    parsed: Option<&Value>,
) -> String {
    let mut h = Sha256::new();
    h.update(b"idemgate-fp-v1\n");
    h.update(method.to_ascii_uppercase().as_bytes());
    h.update(b"\n");
    h.update(route.as_bytes());
    h.update(b"\n");
    let mut hs: Vec<(String, &str)> = headers
        .iter()
        .map(|(n, v)| (n.to_ascii_lowercase(), v.trim()))
        .collect();
    hs.sort();
    for (n, v) in hs {
        h.update(n.as_bytes());
        h.update(b":");
        h.update(v.as_bytes());
        h.update(b"\n");
    }
    h.update(b"\n");
    hash_body(&mut h, body, parsed);
    hex::encode(h.finalize())
}

/// The fingerprint of a request sent beyond its route's path, or with a query: `fingerprint` (the
/// request's [`fingerprint`], which covers the route but not the request target) with the path
/// and the canonical query. Two requests under one route that name different resources
/// (`/v1/charges/ch_1/refund`, `/v1/charges/ch_2/refund`) or ask differently (`?dry_run=true`)
/// are different operations: a key reused across them is a collision, and neither is a
/// duplicate suspect of the other. A request at exactly its route's path with no query keeps
/// [`fingerprint`] itself, which is all a fingerprint covered before (ledgers written then stay
/// valid). Built on the other fingerprint, so the caller has both for the cost of one more small
/// hash (a claim made before the target counted carries the other: `ClaimRequest::
/// legacy_fingerprint`).
pub fn with_target(fingerprint: &str, path: &str, query: Option<&str>) -> String {
    let mut h = Sha256::new();
    h.update(b"idemgate-fp-v2\n");
    h.update(fingerprint.as_bytes());
    h.update(b"\n");
    h.update(path.as_bytes());
    h.update(b"\n");
    write_query(query.unwrap_or(""), &mut h);
    hex::encode(h.finalize())
}

/// A query in canonical form: its parameters in the order of their names (bytes, as sent), the
/// values of one name in the order sent (`a=1&a=2` is a list, and its order may be data); empty
/// parameters (`a=1&&b=2`) dropped. Nothing is decoded: `%7E` and `~` differ.
fn write_query(query: &str, out: &mut impl Sink) {
    let mut params: Vec<&str> = query.split('&').filter(|p| !p.is_empty()).collect();
    // Stable: the values of one name keep their order.
    params.sort_by_key(|p| p.split_once('=').map_or(*p, |(name, _)| name));
    for (i, p) in params.into_iter().enumerate() {
        if i > 0 {
            out.put(b"&");
        }
        out.put(p.as_bytes());
    }
}

/// Strings of any characters, with the ones JSON escapes (controls, quotes, backslashes)
/// frequent, up to `max` of them.
#[cfg(test)]
pub(crate) fn escape_rich_text(max: usize) -> impl proptest::strategy::Strategy<Value = String> {
    use proptest::prelude::*;
    let char = prop_oneof![
        any::<char>(),
        Just('"'),
        Just('\\'),
        (0u8..0x20).prop_map(char::from)
    ];
    prop::collection::vec(char, 0..max).prop_map(|cs| cs.into_iter().collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Strings of any characters (controls, quotes, backslashes and non-ASCII among them),
        /// escaped as serde_json escapes them.
        #[test]
        fn strings_are_escaped_as_serde_json_escapes_them(s in escape_rich_text(40)) {
            let mut ours = Vec::new();
            write_string(&s, &mut ours);
            prop_assert_eq!(ours, serde_json::to_vec(&s).unwrap());
        }
    }

    #[test]
    fn key_order_and_whitespace_do_not_matter() {
        let a = br#"{"amount": 100, "customer": "cus_1", "meta": {"b": 1, "a": [1, 2]}}"#;
        let b = br#"{"meta":{"a":[1,2],"b":1},"customer":"cus_1","amount":100}"#;
        assert_eq!(
            fingerprint("POST", "charges", &[], a),
            fingerprint("post", "charges", &[], b)
        );
    }

    #[test]
    fn values_route_method_and_headers_matter() {
        let a = br#"{"amount": 100}"#;
        let b = br#"{"amount": 101}"#;
        let base = fingerprint("POST", "charges", &[], a);
        assert_ne!(base, fingerprint("POST", "charges", &[], b));
        assert_ne!(base, fingerprint("POST", "refunds", &[], a));
        assert_ne!(base, fingerprint("PUT", "charges", &[], a));
        assert_ne!(
            base,
            fingerprint("POST", "charges", &[("x-tenant", "t1")], a)
        );
        // array order matters (it is data)
        assert_ne!(
            fingerprint("POST", "r", &[], b"[1,2]"),
            fingerprint("POST", "r", &[], b"[2,1]")
        );
    }

    #[test]
    fn the_target_counts_and_the_order_of_query_names_does_not() {
        let base = fingerprint("POST", "charges", &[], b"{}");
        let at = |path: &str, query: Option<&str>| with_target(&base, path, query);
        let refund_1 = at("/v1/charges/ch_1/refund", None);
        assert_ne!(refund_1, base);
        assert_ne!(refund_1, at("/v1/charges/ch_2/refund", None));
        assert_eq!(refund_1, at("/v1/charges/ch_1/refund", Some("")));
        assert_ne!(
            refund_1,
            at("/v1/charges/ch_1/refund", Some("dry_run=true"))
        );
        assert_eq!(
            at("/v1/charges", Some("b=2&a=1&a=0")),
            at("/v1/charges", Some("a=1&&b=2&a=0"))
        );
        assert_ne!(
            at("/v1/charges", Some("a=1&a=0")),
            at("/v1/charges", Some("a=0&a=1")),
            "the values of one name are a list"
        );
        assert_ne!(at("/v1/charges", Some("a")), at("/v1/charges", Some("a=")));
        assert_ne!(
            at("/v1/charges", Some("a=%7E")),
            at("/v1/charges", Some("a=~"))
        );
        assert_ne!(
            refund_1,
            with_target(
                &fingerprint("POST", "charges", &[], b"[]"),
                "/v1/charges/ch_1/refund",
                None
            ),
            "the body still counts"
        );
    }

    /// A member named twice is read as the last by serde_json and as the first by many parsers:
    /// such a body is never the same request as either reading.
    #[test]
    fn a_member_named_twice_makes_the_body_its_bytes() {
        let twice = br#"{"amount": 100, "amount": 1}"#;
        let e = parse_json(twice).expect_err("refused");
        assert_eq!(
            e.to_string(),
            r#"the member "amount" appears twice in one object at line 1 column 24"#
        );
        let fp = |b: &[u8]| fingerprint("POST", "charges", &[], b);
        assert_ne!(fp(twice), fp(br#"{"amount": 1}"#));
        assert_ne!(fp(twice), fp(br#"{"amount": 100}"#));
        assert_eq!(fp(twice), fp(twice));
        // Deeper down, too; and one name in two objects is two members.
        assert!(parse_json(br#"[{"a": {"b": 1, "b": 1}}]"#).is_err());
        assert!(parse_json(br#"{"a": {"b": 1}, "c": {"b": 1}}"#).is_ok());
    }

    #[test]
    fn non_json_bodies_hash_as_bytes() {
        let a = fingerprint("POST", "r", &[], b"amount=100&x=1");
        let b = fingerprint("POST", "r", &[], b"x=1&amount=100");
        assert_ne!(a, b);
        assert_eq!(a, fingerprint("POST", "r", &[], b"amount=100&x=1"));
        // a raw body that looks like canonical JSON text cannot collide with JSON
        assert_ne!(
            fingerprint("POST", "r", &[], b"{\"a\":1}"),
            fingerprint("POST", "r", &[], b"json:{\"a\":1}")
        );
    }

    #[test]
    fn canonical_string_sorts_nested_keys() {
        let v: Value = serde_json::from_str(r#"{"z":{"y":1,"x":"\u00e9"},"a":[{"c":1,"b":2}]}"#)
            .expect("json");
        assert_eq!(
            canonical_string(&v),
            r#"{"a":[{"b":2,"c":1}],"z":{"x":"é","y":1}}"#
        );
    }
}
