//! Configuration text: any input is accepted or refused with an error, never a panic; an accepted
//! configuration keeps the rules `serve` relies on.
#![no_main]

use idemgate_config::Config;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(c) = Config::parse(text) {
        for r in &c.routes {
            assert!(r.timeout < r.lease, "{}: timeout must be below the lease", r.name);
            assert!(r.path.starts_with('/'));
        }
        assert!(!c.ledger.trim().is_empty());
    }
});
