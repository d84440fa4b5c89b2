//! A call in the business's terms: its subjects (the route's named values: a customer, an
//! amount), the digest of its `duplicate_on` values (what makes two calls the same effect), and
//! the loop guard that counts calls of one request from one scope.

use std::collections::HashMap;
use std::sync::Mutex;

use axum::http::HeaderMap;
use idemgate_ledger::{canon, Millis};
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::config::{LoopGuard, Money, Route, Subject, SubjectSource};

/// The longest subject value kept (longer ones are cut, on a character boundary).
pub const MAX_SUBJECT: usize = 256;

/// A value as a subject's text: a string as it is, a number or a boolean as JSON writes it, an
/// object or an array as canonical JSON; `None` for null.
fn text(v: &Value) -> Option<String> {
    let mut t = match v {
        Value::Null => return None,
        Value::String(s) => s.clone(),
        Value::Number(_) | Value::Bool(_) => v.to_string(),
        other => canon::canonical_string(other),
    };
    if t.len() > MAX_SUBJECT {
        let mut end = MAX_SUBJECT;
        while !t.is_char_boundary(end) {
            end -= 1;
        }
        t.truncate(end);
    }
    Some(t)
}

/// The subjects of an MCP call of `tool` on `route`, from its `arguments`: by the tool's own
/// `subject` and `money`, else the route's.
pub fn tool_subjects(
    route: &Route,
    tool: &str,
    headers: &HeaderMap,
    arguments: &Value,
) -> Vec<(String, String)> {
    let rule = route.tools.get(tool);
    let spec = match rule {
        Some(r) if !r.subjects.is_empty() => &r.subjects,
        _ => &route.subjects,
    };
    let money = rule.and_then(|r| r.money.as_ref()).or(route.money.as_ref());
    subjects(spec, money, headers, Some(arguments))
}

/// The digest of an MCP call of `tool` on `route` by the tool's own `duplicate_on`, else the
/// route's (`None` when neither names one), under the name `route/tool`.
pub fn tool_dup_fp(route: &Route, tool: &str, scope: &str, arguments: &Value) -> Option<String> {
    let on = route
        .tools
        .get(tool)
        .and_then(|r| r.duplicate_on.as_ref())
        .or(route.duplicate_on.as_ref())?;
    let name = format!("{}/{tool}", route.name);
    Some(dup_fp(
        &name,
        scope,
        route.duplicate_any_scope,
        on,
        Some(arguments),
    ))
}

/// The subjects `spec` names, from `json` (the body, or an MCP call's arguments) and `headers`;
/// those the request lacks are left out. Under the route's `money`, a call with an amount that
/// names no currency gets the route's, and an amount in minor units is recorded in the
/// currency's own unit.
pub fn subjects(
    spec: &[Subject],
    money: Option<&Money>,
    headers: &HeaderMap,
    json: Option<&Value>,
) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = spec
        .iter()
        .filter_map(|s| {
            let v = match &s.from {
                SubjectSource::Pointer(p) => text(json?.pointer(p)?)?,
                SubjectSource::Header(h) => headers.get(h.as_str())?.to_str().ok()?.to_owned(),
            };
            Some((s.name.clone(), v))
        })
        .collect();
    let named = |out: &[(String, String)], name: &str| out.iter().position(|(n, _)| n == name);
    let (Some(money), Some(amount)) = (money, named(&out, "amount")) else {
        return out;
    };
    if let (None, Some(c)) = (named(&out, "currency"), &money.currency) {
        out.push(("currency".to_owned(), c.clone()));
    }
    if money.minor_units {
        let currency = named(&out, "currency").map(|i| out[i].1.clone());
        if let Some(d) = currency.as_deref().and_then(Money::decimals) {
            if let Some(major) = in_major_units(&out[amount].1, d) {
                out[amount].1 = major;
            }
        }
    }
    out
}

/// `minor` (a whole number of a currency's minor unit) in its major unit, with `decimals`
/// places: "310000" → "3100.00", "-5" → "-0.05"; `None` for anything else (a decimal, an
/// exponent, text), which is recorded as sent.
fn in_major_units(minor: &str, decimals: u32) -> Option<String> {
    let (sign, digits) = match minor.strip_prefix('-') {
        Some(rest) => ("-", rest),
        None => ("", minor),
    };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let d = decimals as usize;
    if d == 0 {
        return Some(minor.to_owned());
    }
    let digits = digits.trim_start_matches('0');
    let padded = format!("{digits:0>width$}", width = d + 1);
    let (whole, cents) = padded.split_at(padded.len() - d);
    Some(format!("{sign}{whole}.{cents}"))
}

/// The digest of `pointers`' values in `json` (absent ones as null) for `route`: the same for two
/// calls that are the same effect. Scoped unless `any_scope` (then prefixed `any:`, which the
/// ledger compares across scopes).
pub fn dup_fp(
    route: &str,
    scope: &str,
    any_scope: bool,
    pointers: &[String],
    json: Option<&Value>,
) -> String {
    let values: Vec<Value> = pointers
        .iter()
        .map(|p| {
            json.and_then(|j| j.pointer(p))
                .cloned()
                .unwrap_or(Value::Null)
        })
        .collect();
    let mut h = Sha256::new();
    h.update(b"idemgate-duplicate-on-v1\n");
    h.update(route.as_bytes());
    h.update(b"\n");
    if !any_scope {
        h.update(scope.as_bytes());
    }
    h.update(b"\n");
    canon::write_canonical(&Value::Array(values), &mut h);
    let prefix = if any_scope { "any" } else { "v" };
    format!("{prefix}:{}", hex::encode(h.finalize()))
}

/// What the loop guard says of one more call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Within the limit.
    Within,
    /// Past it: the `calls` in this window so far; `first` the first time in this window (the
    /// one to log); `retry_after` seconds until the window ends.
    Past {
        calls: u32,
        first: bool,
        retry_after: u64,
    },
}

impl Verdict {
    /// The verdict on the `calls`-th call of a window that ends at `ends`, under a limit of
    /// `max`: the first past it is the one to log, wherever it was counted.
    pub fn of(calls: u64, ends: Millis, max: u32, now: Millis) -> Verdict {
        if calls <= u64::from(max) {
            return Verdict::Within;
        }
        let left = (ends - now).max(0) as u64;
        Verdict::Past {
            calls: u32::try_from(calls).unwrap_or(u32::MAX),
            first: calls == u64::from(max) + 1,
            retry_after: left.div_ceil(1000).max(1),
        }
    }
}

/// Calls counted per route, tool, scope and request, in fixed windows.
#[derive(Debug, Default)]
pub struct LoopGuards(Mutex<HashMap<String, Window>>);

#[derive(Debug, Clone, Copy)]
struct Window {
    start: Millis,
    calls: u32,
}

/// Past this many counted requests, windows that have ended are dropped.
const PRUNE_AT: usize = 100_000;

impl LoopGuards {
    /// Counts a call of `what` (route, tool, scope and request, joined) at `now` under `guard`.
    pub fn hit(&self, what: String, guard: &LoopGuard, now: Millis) -> Verdict {
        let window = guard.window.as_millis() as i64;
        let Ok(mut m) = self.0.lock() else {
            return Verdict::Within;
        };
        if m.len() >= PRUNE_AT {
            m.retain(|_, w| now - w.start < window);
        }
        let w = m.entry(what).or_insert(Window {
            start: now,
            calls: 0,
        });
        if now - w.start >= window {
            *w = Window {
                start: now,
                calls: 0,
            };
        }
        w.calls = w.calls.saturating_add(1);
        Verdict::of(u64::from(w.calls), w.start + window, guard.max, now)
    }
}

/// What the log records of a loop suspect: the `calls` of `what` (its fingerprint, or its
/// `duplicate_on` values) counted in the window, and the `guard` they went past.
pub fn loop_detail(guard: &LoopGuard, calls: u32, tool: Option<&str>, what: &str) -> Value {
    let action = if guard.reject { "reject" } else { "flag" };
    serde_json::json!({"calls": calls, "max": guard.max,
        "window_ms": guard.window.as_millis() as u64, "action": action,
        "tool": tool, "request": what})
}

/// The loop guard's name for a call: its route, tool, scope and request.
pub fn loop_key(route: &str, tool: Option<&str>, scope: &str, request: &str) -> String {
    let mut k = String::with_capacity(route.len() + scope.len() + request.len() + 16);
    for part in [route, tool.unwrap_or(""), scope, request] {
        k.push_str(part);
        k.push('\0');
    }
    k
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use axum::http::HeaderValue;
    use serde_json::json;

    use super::*;

    #[test]
    fn subjects_read_members_and_headers_as_text() {
        let spec = [
            ("customer", SubjectSource::Pointer("/customer".into())),
            ("amount", SubjectSource::Pointer("/amount".into())),
            ("agent", SubjectSource::Header("x-agent".into())),
            ("missing", SubjectSource::Pointer("/nope".into())),
            ("items", SubjectSource::Pointer("/items".into())),
        ]
        .map(|(n, from)| Subject {
            name: n.into(),
            from,
        });
        let mut h = HeaderMap::new();
        h.insert("x-agent", HeaderValue::from_static("billing-01"));
        let body = json!({"customer": "cus_123", "amount": 49.99, "items": {"b": 1, "a": 2}});
        assert_eq!(
            subjects(&spec, None, &h, Some(&body)),
            [
                ("customer".to_owned(), "cus_123".to_owned()),
                ("amount".to_owned(), "49.99".to_owned()),
                ("agent".to_owned(), "billing-01".to_owned()),
                ("items".to_owned(), r#"{"a":2,"b":1}"#.to_owned()),
            ]
        );
        let long = json!({"customer": "é".repeat(200)});
        let v = &subjects(&spec[..1], None, &h, Some(&long))[0].1;
        assert!(v.len() <= MAX_SUBJECT && v.chars().all(|c| c == 'é'));
    }

    #[test]
    fn an_amount_in_minor_units_is_recorded_in_its_currencys_own_unit() {
        let spec = ["amount", "currency", "charge"].map(|n| Subject {
            name: n.into(),
            from: SubjectSource::Pointer(format!("/{n}")),
        });
        let minor = |currency: Option<&str>| Money {
            minor_units: true,
            currency: currency.map(str::to_owned),
        };
        let h = HeaderMap::new();
        let of = |money: &Money, body: Value| {
            let got = subjects(&spec, Some(money), &h, Some(&body));
            let get = |name: &str| got.iter().find(|(n, _)| n == name).map(|(_, v)| v.clone());
            (get("amount"), get("currency"))
        };
        let (usd, none) = (minor(Some("USD")), minor(None));
        let pair = |a: &str, c: &str| (Some(a.to_owned()), Some(c.to_owned()));
        // The call's own currency decides the decimals; the route's stands in when it names none.
        assert_eq!(of(&usd, json!({"amount": 310_000})), pair("3100.00", "USD"));
        assert_eq!(
            of(&usd, json!({"amount": 5, "currency": "jpy"})),
            pair("5", "jpy")
        );
        assert_eq!(
            of(&none, json!({"amount": "1234", "currency": "kwd"})),
            pair("1.234", "kwd")
        );
        assert_eq!(
            of(&none, json!({"amount": -5, "currency": "eur"})),
            pair("-0.05", "eur")
        );
        assert_eq!(
            of(&none, json!({"amount": 0, "currency": "eur"})),
            pair("0.00", "eur")
        );
        // What is not a whole number of a known currency's minor unit is recorded as sent.
        assert_eq!(
            of(&none, json!({"amount": 500})),
            (Some("500".into()), None)
        );
        assert_eq!(
            of(&none, json!({"amount": 500, "currency": "xau"})),
            pair("500", "xau")
        );
        assert_eq!(of(&usd, json!({"amount": 12.5})), pair("12.5", "USD"));
        assert_eq!(of(&usd, json!({"amount": "1e3"})), pair("1e3", "USD"));
        // Without minor units, only the currency is filled in.
        let plain = Money {
            minor_units: false,
            ..usd.clone()
        };
        assert_eq!(of(&plain, json!({"amount": 4999})), pair("4999", "USD"));
        // A call without an amount is not about money.
        assert_eq!(of(&usd, json!({"charge": "ch_1"})), (None, None));
    }

    #[test]
    fn duplicate_values_ignore_the_other_members_and_may_span_scopes() {
        let on = ["/customer".to_owned(), "/amount".to_owned()];
        let a = json!({"customer": "cus_1", "amount": 4999, "request_id": "r-1"});
        let b = json!({"request_id": "r-2", "amount": 4999, "customer": "cus_1"});
        assert_eq!(
            dup_fp("charges", "agent-1", false, &on, Some(&a)),
            dup_fp("charges", "agent-1", false, &on, Some(&b))
        );
        assert_ne!(
            dup_fp("charges", "agent-1", false, &on, Some(&a)),
            dup_fp("charges", "agent-2", false, &on, Some(&a))
        );
        let any = dup_fp("charges", "agent-1", true, &on, Some(&a));
        assert!(any.starts_with("any:"));
        assert_eq!(any, dup_fp("charges", "agent-2", true, &on, Some(&b)));
        assert_ne!(
            dup_fp("charges", "agent-1", false, &on, Some(&a)),
            dup_fp(
                "charges",
                "agent-1",
                false,
                &on,
                Some(&json!({"customer": "cus_1"}))
            )
        );
    }

    #[test]
    fn the_loop_guard_counts_in_windows_and_logs_once_per_window() {
        let g = LoopGuards::default();
        let guard = LoopGuard {
            max: 3,
            window: Duration::from_secs(60),
            reject: false,
        };
        let k = || loop_key("charges", None, "agent-1", "fp");
        for i in 0..3 {
            assert_eq!(g.hit(k(), &guard, 1_000 + i), Verdict::Within);
        }
        assert_eq!(
            g.hit(k(), &guard, 2_000),
            Verdict::Past {
                calls: 4,
                first: true,
                retry_after: 59
            }
        );
        assert!(matches!(
            g.hit(k(), &guard, 3_000),
            Verdict::Past {
                calls: 5,
                first: false,
                ..
            }
        ));
        assert_eq!(
            g.hit(loop_key("charges", None, "agent-2", "fp"), &guard, 3_000),
            Verdict::Within
        );
        // A new window.
        assert_eq!(g.hit(k(), &guard, 61_000), Verdict::Within);
    }
}
