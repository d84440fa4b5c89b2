//! Signature headers: parsing any text never panics, and no header verifies a body it was not
//! computed for.
#![no_main]

use std::time::Duration;

use idemgate_config::{Secret, Signature};
use idemgate_proxy::signature;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some(split) = data.iter().position(|b| *b == b'\n') else {
        return;
    };
    let (header, body) = (String::from_utf8_lossy(&data[..split]), &data[split + 1..]);
    let sig = Signature {
        header: "x-sig".into(),
        secret: Secret(b"fuzz-secret".to_vec()),
        tolerance: Duration::from_secs(300),
    };
    if let Some(p) = signature::parse(&header) {
        assert!(!p.v1.is_empty());
        if signature::verify(&sig, Some(&header), body, p.t).is_ok() {
            // Only a header carrying the real MAC of this body can pass.
            let mac = signature::sign(b"fuzz-secret", p.t, body);
            assert!(header.contains(&mac) || header.to_ascii_lowercase().contains(&mac));
        }
    }
});
