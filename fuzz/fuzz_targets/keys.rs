//! Key and scope extraction from any header bytes and any body, for every key source: never a
//! panic, and an accepted key is always 1-255 visible ASCII characters.
#![no_main]

use std::sync::OnceLock;

use axum::http::{HeaderMap, HeaderName, HeaderValue};
use idemgate_config::Config;
use idemgate_proxy::keys;
use libfuzzer_sys::fuzz_target;

/// One route per key source, shared with the property tests.
const CONFIG: &str = include_str!("../../crates/proxy/tests/key-routes.toml");

fn config() -> &'static Config {
    static C: OnceLock<Config> = OnceLock::new();
    C.get_or_init(|| Config::parse(CONFIG).expect("config"))
}

fuzz_target!(|data: &[u8]| {
    // data = key header bytes \0 scope header bytes \0 body
    let mut parts = data.splitn(3, |b| *b == 0);
    let (k, s, body) = (
        parts.next().unwrap_or(b""),
        parts.next().unwrap_or(b""),
        parts.next().unwrap_or(b""),
    );
    let mut h = HeaderMap::new();
    if let Ok(v) = HeaderValue::from_bytes(k) {
        h.append(HeaderName::from_static("idempotency-key"), v);
    }
    if let Ok(v) = HeaderValue::from_bytes(s) {
        h.append(HeaderName::from_static("x-agent-id"), v);
    }
    for r in &config().routes {
        let Ok(scope) = keys::scope(r, &h) else { continue };
        if let Ok(key) = keys::extract(r, &scope, &h, body) {
            assert!(!key.is_empty() && key.len() <= keys::MAX_KEY_LEN, "{key:?}");
            assert!(key.bytes().all(|b| (0x20..0x7f).contains(&b)), "{key:?}");
        }
    }
});
