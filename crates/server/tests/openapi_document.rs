//! The admin API's OpenAPI document is generated from the operations' declarations and the
//! types (`idemgate_server::openapi`). This test fails when the checked-in `openapi.json`, which
//! the server serves, differs from what they generate (drift), or when an operation is not
//! documented well enough to be used from it;
//! `UPDATE_BINDINGS=1 cargo test -p idemgate-server --features ts --test openapi_document`
//! rewrites it.
#![cfg(feature = "ts")]

use idemgate_ops::op::Answers;
use std::path::Path;

#[test]
fn the_served_document_is_the_generated_one() {
    let doc = idemgate_server::openapi::document();
    let text = serde_json::to_string_pretty(&doc).expect("json") + "\n";
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/openapi.json");
    if std::env::var("UPDATE_BINDINGS").is_ok() {
        std::fs::write(&path, &text).expect("write openapi.json");
    }
    assert!(
        std::fs::read_to_string(&path).expect("openapi.json") == text,
        "crates/server/src/openapi.json is out of date: run UPDATE_BINDINGS=1 cargo test -p \
         idemgate-server --features ts --test openapi_document"
    );
    // docs/admin-api.md's list of endpoints is the document's.
    let md = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/admin-api.md");
    let text = std::fs::read_to_string(&md).expect("admin-api.md");
    let (open, close) = (
        "<!-- endpoints: generated from the OpenAPI document -->\n",
        "<!-- /endpoints -->",
    );
    let start = text.find(open).expect("the endpoints' opening marker") + open.len();
    let end = text.find(close).expect("the endpoints' closing marker");
    let table = idemgate_server::openapi::endpoints(&doc);
    if std::env::var("UPDATE_BINDINGS").is_ok() {
        let updated = format!("{}{table}{}", &text[..start], &text[end..]);
        std::fs::write(&md, updated).expect("write admin-api.md");
    } else {
        assert!(
            text[start..end] == table,
            "docs/admin-api.md's endpoints are out of date (see above)"
        );
    }
}

/// Whether `op`'s success, the status it declares it `answers` with, has a JSON body.
fn answers_with_a_body(answers: Answers, op: &serde_json::Value) -> bool {
    let status = match answers {
        Answers::Json => "200",
        Answers::Accepted(_) => "202",
        Answers::NoContent => "204",
    };
    op["responses"][status]["content"]["application/json"]["schema"].is_object()
}

#[test]
fn every_operation_says_what_it_does_who_may_and_what_it_takes() {
    let doc = idemgate_server::openapi::document();
    let mut seen = 0;
    for spec in idemgate_ops::dispatch::SPECS {
        let (first, _) = spec.summary();
        assert!(
            first.len() > 10 && first.ends_with('.'),
            "{}: its doc comment's first paragraph is its summary, a sentence: {first:?}",
            spec.name
        );
        let Some(http) = spec.http else { continue };
        let op = &doc["paths"][http.path][http.method.to_ascii_lowercase()];
        assert_eq!(op["operationId"], spec.name, "{http:?}");
        assert_eq!(op["x-idemgate-role"], spec.role.as_str(), "{}", spec.name);
        assert_eq!(
            answers_with_a_body(spec.answers, op),
            spec.answers != Answers::NoContent,
            "{}",
            spec.name
        );
        // Every member of the request is a parameter or a member of the body, each described.
        let params = op["parameters"].as_array().cloned().unwrap_or_default();
        for p in &params {
            assert!(
                p["description"].is_string(),
                "{}: parameter {} undescribed",
                spec.name,
                p["name"]
            );
        }
        for name in http.params() {
            assert!(
                params
                    .iter()
                    .any(|p| p["name"] == name && p["in"] == "path" && !p["example"].is_null()),
                "{}: {name}, with its example",
                spec.name
            );
        }
        // Each takes an example request (checked to decode as one by the operations' tests):
        // its body's, or its parameters' values.
        let example: serde_json::Value =
            serde_json::from_str(spec.example).expect("an example is JSON");
        assert!(example.is_object(), "{}: an example request", spec.name);
        let shown = if http.method == "POST" {
            op["requestBody"]["content"]["application/json"]["example"].clone()
        } else {
            serde_json::Value::Object(
                params
                    .iter()
                    .filter(|p| p["in"] == "query" && !p["example"].is_null())
                    .map(|p| {
                        (
                            p["name"].as_str().expect("name").to_owned(),
                            p["example"].clone(),
                        )
                    })
                    .collect(),
            )
        };
        let mut expected = example.clone();
        for name in http.params() {
            expected.as_object_mut().expect("object").remove(name);
        }
        assert_eq!(
            shown, expected,
            "{}: the document shows its example",
            spec.name
        );
        if http.method == "POST" {
            assert!(
                op["requestBody"]["content"]["application/json"]["schema"].is_object(),
                "{}",
                spec.name
            );
        }
        seen += 1;
    }
    assert!(seen >= 15, "{seen} operations with a route");
    // The codes are the one Code list.
    let codes = doc["components"]["schemas"]["Problem"]["properties"]["code"]["enum"]
        .as_array()
        .expect("codes")
        .len();
    assert_eq!(codes, idemgate_proxy::problem::Code::ALL.len());
}
