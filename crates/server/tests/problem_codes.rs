//! The problem codes are one list ([`ProblemCode`]): the admin API's OpenAPI document names
//! exactly those, and every code an operation's or the ledger's error carries is one of them, so
//! no answer can carry a code the contract does not list.

use std::collections::BTreeSet;

use idemgate_proxy::problem::ProblemCode;

fn all() -> BTreeSet<&'static str> {
    ProblemCode::ALL.iter().map(|c| c.as_str()).collect()
}

/// The string literals a `fn code` returns in the source file at `path` (from the workspace root).
fn codes_in(path: &str) -> BTreeSet<String> {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../../");
    let text = std::fs::read_to_string(format!("{root}{path}")).expect(path);
    let from = text.find("pub fn code(&self)").expect("fn code");
    let body = &text[from..from + text[from..].find("\n    }\n").expect("end of fn code")];
    body.split("=> \"")
        .skip(1)
        .map(|s| s[..s.find('"').expect("closing quote")].to_owned())
        .collect()
}

#[test]
fn the_openapi_document_lists_exactly_the_problem_codes() {
    let doc: serde_json::Value =
        serde_json::from_str(idemgate_server::OPENAPI).expect("the OpenAPI document");
    let listed: BTreeSet<&str> = doc["components"]["schemas"]["Problem"]["properties"]["code"]
        ["enum"]
        .as_array()
        .expect("Problem.code lists its values")
        .iter()
        .map(|v| v.as_str().expect("a string"))
        .collect();
    assert_eq!(listed, all());
}

#[test]
fn every_error_an_operation_or_the_ledger_answers_has_a_problem_code() {
    let all = all();
    for path in ["crates/ledger/src/error.rs", "crates/ops/src/error.rs"] {
        let codes = codes_in(path);
        assert!(codes.len() > 5, "{path}: {codes:?}");
        for c in &codes {
            assert!(all.contains(c.as_str()), "{path}: {c} is not a ProblemCode");
        }
    }
}

#[test]
fn each_code_reads_back_and_is_an_error_status() {
    for &c in ProblemCode::ALL {
        assert_eq!(ProblemCode::parse(c.as_str()), Some(c));
        assert!((400..600).contains(&c.status()), "{c}: {}", c.status());
        assert!(!c.title().is_empty());
    }
    assert_eq!(ProblemCode::ALL.len(), all().len(), "no code twice");
}
