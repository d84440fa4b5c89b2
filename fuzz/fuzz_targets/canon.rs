//! Fingerprinting any bytes never panics; for JSON, the canonical form parses back to the same
//! value and is a fixed point (the fingerprint of the canonical text equals the original's). The
//! strict parse reads what serde_json reads, and refuses only a member named twice.
#![no_main]

use idemgate_ledger::canon;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|body: &[u8]| {
    let fp = canon::fingerprint("POST", "route", &[], body);
    assert_eq!(fp.len(), 64);
    let plain = serde_json::from_slice::<serde_json::Value>(body);
    match canon::parse_json(body) {
        Ok(v) => {
            assert_eq!(plain.as_ref().ok(), Some(&v), "the strict parse reads as serde_json");
            let c = canon::canonical_string(&v);
            let back: serde_json::Value =
                serde_json::from_str(&c).expect("canonical JSON parses");
            assert_eq!(back, v);
            assert_eq!(canon::canonical_string(&back), c);
            assert_eq!(canon::fingerprint("POST", "route", &[], c.as_bytes()), fp);
        }
        Err(e) if plain.is_ok() => {
            assert!(e.to_string().contains("appears twice"), "{e}");
        }
        Err(_) => {}
    }
});
