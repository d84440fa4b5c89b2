use super::*;
use std::time::Duration;

use idemgate_ledger::Millis;

use crate::flights::{flight_key, Flight, Seen};
use crate::request_checks::has_dot_segment;

#[test]
fn dot_segments_are_found_plain_and_percent_encoded() {
    for p in [
        "/v1/customers/../charges",
        "/v1/customers/%2e%2E/charges",
        "/v1/./charges",
        "/v1/charges/.%2e",
        "/v1/charges/%2E.",
        "/..",
        "/v1/charges/%2e",
        "/v1/customers/x%2F..%2F..%2Fcharges",
        "/v1/customers/x%2f%2e%2e%2fcharges",
        "/v1/customers\\..\\charges",
        "/v1/customers/x%5C..%5ccharges",
        "/v1/charges/..;/cancel",
        "/v1/charges/.;jsessionid=1/x",
        "/v1/charges/..%3B/cancel",
        "/v1/charges/%2e%2e%3bx=1%2Fcancel",
        "/v1/charges/..;a.b;c/cancel",
    ] {
        assert!(has_dot_segment(p), "{p}");
    }
    for p in [
        "/v1/charges",
        "/v1/charges/ch_1.json",
        "/v1/...",
        "/v1/.well-known",
        "/",
        "",
        "/v1/projects/group%2Fproject",
        "/v1/a..b/%2e%2e%2e/.x/x.",
        "/v1/100%",
        "/v1/%2",
        "/v1/charges;v=2",
        "/v1/charges/ch_1;..",
        "/v1/charges/;../x",
        "/v1/charges/...;/x",
    ] {
        assert!(!has_dot_segment(p), "{p}");
    }
}

fn flight(fingerprint: &str, lease_expires_at: Millis) -> Flight {
    Flight {
        entry_id: 7,
        fingerprint: fingerprint.into(),
        lease_expires_at,
        done: Arc::default(),
    }
}

#[tokio::test]
async fn a_flight_answers_its_own_request_until_it_lands_or_its_lease_passes() {
    let flights = Flights::default();
    let k = flight_key("charges", "agent-7", "k1");
    assert!(matches!(flights.seen(&k, "fp", 100), Seen::Unknown));
    let landing = flights.take_off(k.clone(), flight("fp", 1_000));
    let Seen::InFlight {
        entry_id, ended, ..
    } = flights.seen(&k, "fp", 999)
    else {
        panic!("in flight");
    };
    assert_eq!(entry_id, 7);
    // Another request under the key, or the same past its lease: the ledger decides.
    assert!(matches!(flights.seen(&k, "other", 999), Seen::Unknown));
    assert!(matches!(flights.seen(&k, "fp", 1_000), Seen::Unknown));
    // Another scope's key of the same name is another key.
    let k2 = flight_key("charges", "agent-8", "k1");
    assert!(matches!(flights.seen(&k2, "fp", 999), Seen::Unknown));
    // Landing (however the request ends) wakes the waiters — even one that looked it up before
    // and has not waited yet — and forgets the key.
    drop(landing);
    tokio::time::timeout(Duration::from_secs(5), ended)
        .await
        .expect("woken when the request ends");
    assert!(matches!(flights.seen(&k, "fp", 999), Seen::Unknown));
}

/// The lines of code (no comments) of each of `files` under `src/`.
fn code_of(files: &[&str]) -> Vec<(String, String)> {
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut out = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(src.join(file)).expect("a source");
        for line in text.lines().filter(|l| !l.trim_start().starts_with("//")) {
            out.push(((*file).to_owned(), line.to_owned()));
        }
    }
    out
}

/// ARCHITECTURE.md: the request path's building blocks take nothing from the engine, and the
/// engine nothing from the modules that run a call's steps with it; so neither leans on what
/// stands above it.
#[test]
fn the_engine_stands_between_the_building_blocks_and_the_steps() {
    let blocks = [
        "respond.rs",
        "request_checks.rs",
        "read_body.rs",
        "telemetry.rs",
        "business.rs",
        "mcp/jsonrpc.rs",
        "mcp/sse.rs",
        "mcp/attempt.rs",
        "mcp/tools.rs",
        "mcp/calls.rs",
    ];
    let steps = [
        "crate::handle",
        "crate::approval",
        "crate::claim",
        "crate::drive",
        "crate::redrive",
        "crate::loop_guard",
    ];
    for (file, line) in code_of(&blocks) {
        assert!(
            !line.contains("engine::") && !steps.iter().any(|s| line.contains(s)),
            "{file}: {line}"
        );
    }
    let engine = [
        "engine.rs",
        "engine/make.rs",
        "engine/read.rs",
        "engine/metrics_of_route.rs",
    ];
    for (file, line) in code_of(&engine) {
        let mcp_below = line
            .split("crate::mcp::")
            .skip(1)
            .all(|rest| rest.starts_with("tools::") || rest.starts_with("calls::"));
        assert!(
            mcp_below && !steps.iter().any(|s| line.contains(s)),
            "{file}: {line}"
        );
    }
}
