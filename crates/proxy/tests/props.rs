//! Properties of the proxy's input handling over generated input: key extraction, signatures and
//! configuration never panic, and what they accept obeys the documented rules.

use std::time::Duration;

use axum::http::{HeaderMap, HeaderName, HeaderValue};
use idemgate_config::Config;
use idemgate_config::{KeySource, Route, Secret, Signature};
use idemgate_proxy::{keys, signature};
use proptest::prelude::*;
use serde_json::Value;

/// One route per key source (shared with the keys fuzz target).
const CONFIG: &str = include_str!("key-routes.toml");

fn route(name: &str) -> Route {
    Config::parse(CONFIG)
        .expect("config")
        .route(name)
        .cloned()
        .expect("route")
}

fn sig(secret: &[u8]) -> Signature {
    Signature {
        header: "x-sig".into(),
        secret: Secret(secret.to_vec()),
        tolerance: Duration::from_secs(300),
    }
}

fn accepted_key_is_valid(k: &str) -> bool {
    !k.is_empty()
        && k.len() <= keys::MAX_KEY_LEN
        && k.bytes().all(|b| (0x20..0x7f).contains(&b))
        && !k.starts_with(' ')
        && !k.ends_with(' ')
}

fn cfg() -> ProptestConfig {
    ProptestConfig {
        cases: 512,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

proptest! {
    #![proptest_config(cfg())]

    #[test]
    fn header_keys_are_accepted_only_when_valid(
        values in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..300), 0..3),
        scope in prop::collection::vec(any::<u8>(), 0..200),
    ) {
        let r = route("by-header");
        let mut h = HeaderMap::new();
        for v in &values {
            if let Ok(v) = HeaderValue::from_bytes(v) {
                h.append(HeaderName::from_static("idempotency-key"), v);
            }
        }
        if let Ok(v) = HeaderValue::from_bytes(&scope) {
            h.insert(HeaderName::from_static("x-agent-id"), v);
        }
        let n = h.get_all("idempotency-key").iter().count();
        match keys::scope(&r, &h) {
            Err(p) => prop_assert_eq!(p.status, 400),
            Ok(s) => {
                prop_assert!(s.len() <= keys::MAX_SCOPE_LEN);
                match keys::extract(&r, &s, &h, b"") {
                    Ok(k) => {
                        prop_assert_eq!(n, 1, "a key from repeated headers");
                        prop_assert!(accepted_key_is_valid(&k), "{:?}", k);
                        prop_assert_eq!(Some(k.as_str()), h.get("idempotency-key").and_then(|v| v.to_str().ok()));
                    }
                    Err(p) => prop_assert_eq!(p.status, 400),
                }
            }
        }
    }

    #[test]
    fn json_keys_never_panic_and_are_valid(body in prop::collection::vec(any::<u8>(), 0..200), id in any::<String>()) {
        let r = route("by-json");
        for b in [body, serde_json::to_vec(&serde_json::json!({"args": {"id": id}})).expect("json")] {
            match keys::extract(&r, "", &HeaderMap::new(), &b) {
                Ok(k) => prop_assert!(accepted_key_is_valid(&k), "{:?}", k),
                Err(p) => prop_assert_eq!(p.status, 400),
            }
        }
    }

    #[test]
    fn derived_keys_depend_on_the_arguments_and_scope_only(
        to in "[a-z@.]{1,20}", template in any::<String>(), extra in any::<i64>(),
        scope_a in "[a-z]{1,8}", scope_b in "[a-z]{1,8}",
    ) {
        let r = route("derived");
        let a = serde_json::to_vec(&serde_json::json!({"to": to, "template": template, "n": extra})).expect("json");
        // Same arguments, other member order and whitespace, another unrelated field.
        let b = format!("{{ \"n\": 0, \"template\": {}, \"to\": {} }}",
            serde_json::to_string(&template).expect("json"), serde_json::to_string(&to).expect("json"));
        let h = HeaderMap::new();
        let ka = keys::extract(&r, &scope_a, &h, &a).expect("key");
        prop_assert!(accepted_key_is_valid(&ka));
        prop_assert_eq!(&ka, &keys::extract(&r, &scope_a, &h, b.as_bytes()).expect("key"));
        if scope_a != scope_b {
            prop_assert_ne!(&ka, &keys::extract(&r, &scope_b, &h, &a).expect("key"));
        }
    }

    #[test]
    fn signature_headers_never_panic(header in any::<String>(), body in prop::collection::vec(any::<u8>(), 0..64), now in any::<i64>()) {
        let _ = signature::parse(&header);
        if let Err(p) = signature::verify(&sig(b"s"), Some(&header), &body, now) {
            prop_assert_eq!(p.status, 401);
        }
    }

    #[test]
    fn a_signature_verifies_exactly_its_body_and_time(
        secret in prop::collection::vec(any::<u8>(), 1..64),
        body in prop::collection::vec(any::<u8>(), 0..256),
        t in 0i64..4_000_000_000,
        skew in -300i64..=300,
        flip in any::<prop::sample::Index>(),
        other_scheme in "[a-z0-9]{0,12}",
    ) {
        let s = sig(&secret);
        let v1 = signature::sign(&secret, t, &body);
        let header = format!("t={t}, v0={other_scheme} ,v1={v1}");
        prop_assert!(signature::verify(&s, Some(&header), &body, t + skew).is_ok());
        prop_assert!(signature::verify(&s, Some(&header), &body, t + 301).is_err());
        if !body.is_empty() {
            let mut changed = body.clone();
            let i = flip.index(changed.len());
            changed[i] ^= 1;
            prop_assert!(signature::verify(&s, Some(&header), &changed, t).is_err());
        }
        let mut wrong = secret.clone();
        wrong[0] ^= 1;
        prop_assert!(signature::verify(&sig(&wrong), Some(&header), &body, t).is_err());
    }

    #[test]
    fn any_text_as_config_never_panics(text in any::<String>()) {
        let _ = Config::parse(&text);
    }

    #[test]
    fn a_mutated_config_is_accepted_or_refused_with_a_field(
        line in any::<prop::sample::Index>(),
        value in prop_oneof![any::<String>(), "[0-9]{1,6}(ms|s|m|h|KiB|MiB)?", Just(String::new())],
    ) {
        // Replace one `name = value` line's value with something else; parse must not panic, and
        // an invalid value is reported with the field it belongs to.
        let lines: Vec<&str> = CONFIG.lines().collect();
        let assigns: Vec<usize> = (0..lines.len()).filter(|i| lines[*i].contains(" = ")).collect();
        let i = assigns[line.index(assigns.len())];
        let (name, _) = lines[i].split_once(" = ").expect("assignment");
        let mut out: Vec<String> = lines.iter().map(|l| (*l).to_owned()).collect();
        out[i] = format!("{name} = {}", toml_string(&value));
        match Config::parse(&out.join("\n")) {
            Ok(c) => prop_assert_eq!(c.routes.len(), 3),
            Err(e) => {
                let msg = e.to_string();
                prop_assert!(!msg.is_empty());
                // One mutated line puts one route in error at most.
                prop_assert!(!matches!(e, idemgate_config::ConfigError::Several(_)), "{msg}");
                if let idemgate_config::ConfigError::Invalid { field, .. } = &e {
                    prop_assert!(!field.is_empty());
                }
            }
        }
    }
}

fn toml_string(s: &str) -> String {
    // A TOML basic string: JSON's escaping is a subset TOML accepts for these characters.
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 || c == '\u{7f}' => {
                out.push_str(&format!("\\u{:04X}", c as u32))
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[test]
fn key_sources_parse_as_documented() {
    assert!(matches!(route("by-header").key, Some(KeySource::Header(_))));
    assert!(matches!(route("by-json").key, Some(KeySource::Json(_))));
    assert!(matches!(route("derived").key, Some(KeySource::Derive(_))));
    // The JSON route refuses a body that is no JSON, and a key that is not a string or number.
    let r = route("by-json");
    let h = HeaderMap::new();
    assert_eq!(keys::extract(&r, "", &h, b"{").unwrap_err().status, 400);
    let v: Value = serde_json::json!({"args": {"id": [1]}});
    let b = serde_json::to_vec(&v).expect("json");
    assert_eq!(keys::extract(&r, "", &h, &b).unwrap_err().status, 400);
}
