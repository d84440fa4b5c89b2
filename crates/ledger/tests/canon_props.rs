//! Properties of canonical JSON and request fingerprints, over generated JSON documents.

use idemgate_ledger::canon;
use proptest::prelude::*;
use serde_json::{Map, Number, Value};

fn arb_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| Value::Number(n.into())),
        any::<u64>().prop_map(|n| Value::Number(n.into())),
        any::<f64>()
            .prop_filter_map("finite", Number::from_f64)
            .prop_map(Value::Number),
        ".{0,12}".prop_map(Value::String),
        any::<String>().prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::btree_map(".{0,8}", inner, 0..6)
                .prop_map(|m| Value::Object(m.into_iter().collect::<Map<_, _>>())),
        ]
    })
}

/// JSON text for `v` with object members in reverse order and `ws` whitespace between tokens:
/// what another client library might send for the same arguments.
fn scrambled(v: &Value, ws: &str, out: &mut String) {
    match v {
        Value::Array(items) => {
            out.push('[');
            for (i, x) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(ws);
                scrambled(x, ws, out);
            }
            out.push_str(ws);
            out.push(']');
        }
        Value::Object(m) => {
            out.push('{');
            for (i, (k, x)) in m.iter().rev().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(ws);
                out.push_str(&serde_json::to_string(k).expect("key"));
                out.push_str(ws);
                out.push(':');
                out.push_str(ws);
                scrambled(x, ws, out);
            }
            out.push_str(ws);
            out.push('}');
        }
        leaf => out.push_str(&serde_json::to_string(leaf).expect("leaf")),
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn member_order_and_whitespace_never_change_the_fingerprint(
        v in arb_json(),
        ws in prop::sample::select(vec!["", " ", "\n  ", "\t", "\r\n"]),
    ) {
        let compact = serde_json::to_vec(&v).expect("json");
        let mut other = String::new();
        scrambled(&v, ws, &mut other);
        prop_assert_eq!(
            canon::fingerprint("POST", "r", &[], &compact),
            canon::fingerprint("POST", "r", &[], other.as_bytes())
        );
    }

    #[test]
    fn a_body_parsed_by_the_caller_has_the_same_fingerprint(v in arb_json()) {
        let text = serde_json::to_vec(&v).expect("json");
        let parsed: Value = serde_json::from_slice(&text).expect("parses");
        prop_assert_eq!(
            canon::fingerprint("POST", "r", &[], &text),
            canon::fingerprint_parsed("POST", "r", &[], &text, Some(&parsed))
        );
    }

    #[test]
    fn the_strict_parse_reads_any_json_text_as_serde_json_does(
        v in arb_json(),
        ws in prop::sample::select(vec!["", " ", "\n  "]),
    ) {
        let mut text = String::new();
        scrambled(&v, ws, &mut text);
        let strict = canon::parse_json(text.as_bytes()).expect("parses");
        let plain: Value = serde_json::from_str(&text).expect("parses");
        prop_assert_eq!(&strict, &plain);
        prop_assert_eq!(&strict, &v);
    }

    #[test]
    fn a_member_named_twice_is_refused_wherever_it_is(
        v in arb_json(),
        name in ".{0,8}",
        a in arb_json(),
        b in arb_json(),
    ) {
        // The object with the twice-named member, alone or inside v.
        let twice = format!(
            "{{{}:{},{}:{}}}",
            serde_json::to_string(&name).expect("name"),
            serde_json::to_string(&a).expect("a"),
            serde_json::to_string(&name).expect("name"),
            serde_json::to_string(&b).expect("b"),
        );
        let inside = format!("[{},{twice}]", serde_json::to_string(&v).expect("v"));
        for text in [&twice, &inside] {
            let e = canon::parse_json(text.as_bytes()).expect_err("refused");
            prop_assert!(e.to_string().contains("appears twice"), "{}", e);
        }
        // As a body, it is its bytes: never the same request as either reading of it.
        let last = format!("{{{}:{}}}", serde_json::to_string(&name).expect("name"), serde_json::to_string(&b).expect("b"));
        prop_assert_ne!(
            canon::fingerprint("POST", "r", &[], twice.as_bytes()),
            canon::fingerprint("POST", "r", &[], last.as_bytes())
        );
    }

    #[test]
    fn canonical_text_parses_back_to_the_same_value_and_is_a_fixed_point(v in arb_json()) {
        let c = canon::canonical_string(&v);
        let back: Value = serde_json::from_str(&c).expect("canonical JSON parses");
        prop_assert_eq!(&back, &v);
        prop_assert_eq!(canon::canonical_string(&back), c);
    }

    #[test]
    fn different_values_have_different_fingerprints(a in arb_json(), b in arb_json()) {
        prop_assume!(a != b);
        prop_assert_ne!(
            canon::fingerprint("POST", "r", &[], &serde_json::to_vec(&a).expect("json")),
            canon::fingerprint("POST", "r", &[], &serde_json::to_vec(&b).expect("json"))
        );
    }

    #[test]
    fn any_bytes_fingerprint_and_method_route_headers_all_count(
        body in prop::collection::vec(any::<u8>(), 0..256),
        h in "[a-z]{1,8}",
        v in "[ -~]{0,16}",
    ) {
        let base = canon::fingerprint("POST", "r", &[], &body);
        prop_assert_eq!(base.len(), 64);
        prop_assert_eq!(&base, &canon::fingerprint("post", "r", &[], &body));
        prop_assert_ne!(&base, &canon::fingerprint("PUT", "r", &[], &body));
        prop_assert_ne!(&base, &canon::fingerprint("POST", "r2", &[], &body));
        prop_assert_ne!(&base, &canon::fingerprint("POST", "r", &[(h.as_str(), v.as_str())], &body));
    }

    #[test]
    fn a_raw_body_never_collides_with_a_json_one(v in arb_json()) {
        // The text of a JSON value sent as a JSON string is raw-looking but parses: the prefix keeps
        // "json:" and "raw:" bodies apart even when the bytes would otherwise match.
        let text = serde_json::to_vec(&v).expect("json");
        let mut garbage = text.clone();
        garbage.push(b'}');
        prop_assert_ne!(
            canon::fingerprint("POST", "r", &[], &text),
            canon::fingerprint("POST", "r", &[], &garbage)
        );
    }

    #[test]
    fn a_query_is_its_named_values_in_any_order_of_the_names(
        params in prop::collection::btree_map("[a-z_]{1,6}", prop::collection::vec("[a-z0-9%]{0,4}", 1..3), 1..6),
        path in "/[a-z0-9/_]{0,16}",
        shift in any::<prop::sample::Index>(),
    ) {
        let base = canon::fingerprint("POST", "r", &[], b"{}");
        let query = |names: &[&String]| names.iter()
            .flat_map(|n| params[*n].iter().map(move |v| format!("{n}={v}")))
            .collect::<Vec<_>>()
            .join("&");
        let mut names: Vec<&String> = params.keys().collect();
        let sent = canon::with_target(&base, &path, Some(&query(&names)));
        prop_assert_ne!(&sent, &base);
        let by = shift.index(names.len());
        names.rotate_left(by);
        prop_assert_eq!(&sent, &canon::with_target(&base, &path, Some(&query(&names))));
        prop_assert_ne!(&sent, &canon::with_target(&base, &format!("{path}/x"), Some(&query(&names))));
        let mut other = query(&names);
        other.push('z');
        prop_assert_ne!(&sent, &canon::with_target(&base, &path, Some(&other)));
    }
}
