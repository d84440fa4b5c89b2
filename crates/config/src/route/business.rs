//! A route's business settings: the subjects its calls are about, how they state their amount,
//! what makes two calls the same effect, and its loop guard.

#[allow(
    clippy::wildcard_imports,
    reason = "the route's own vocabulary and its checks"
)]
use super::*;
use crate::raw::{RawLoopGuard, RawMoney};

/// A route's business terms: its subjects, its `money`, its `duplicate_on` and `duplicate_scope`,
/// its `loop_guard`. A read route has none (nothing of it is claimed).
pub(super) struct Business {
    pub(super) subjects: Vec<Subject>,
    pub(super) money: Option<Money>,
    pub(super) duplicate_on: Option<Vec<String>>,
    pub(super) any_scope: bool,
    pub(super) loop_guard: Option<LoopGuard>,
}

pub(super) fn business(
    f: &Fields<'_>,
    r: &RawRoute,
    effect: Effect,
    protocol: Protocol,
    secret_headers: &[String],
) -> Result<Business, ConfigError> {
    let set = r.subject.is_some()
        || r.money.is_some()
        || r.duplicate_on.is_some()
        || r.duplicate_scope.is_some()
        || r.loop_guard.is_some();
    if set && effect == Effect::Read && protocol == Protocol::Http {
        return Err(invalid(
            f.at("subject"),
            "a read route claims nothing: subject, money, duplicate_on, duplicate_scope and \
             loop_guard are for write routes",
        ));
    }
    let any_scope = match r.duplicate_scope.as_deref().unwrap_or("same") {
        "same" => false,
        "any" => true,
        other => {
            return Err(invalid(
                f.at("duplicate_scope"),
                format!("{other:?}: use \"same\" or \"any\""),
            ))
        }
    };
    Ok(Business {
        subjects: subjects(&f.at("subject"), r.subject.as_ref(), secret_headers)?,
        // An MCP route's tools may name their own subjects.
        money: money(&f.at("money"), r.money.as_ref(), |name| {
            let tools = r.tools.iter().flatten();
            let mut names = r
                .subject
                .iter()
                .chain(tools.filter_map(|(_, t)| t.subject.as_ref()));
            names.any(|s| s.contains_key(name))
        })?,
        duplicate_on: duplicate_on(&f.at("duplicate_on"), r.duplicate_on.as_ref())?,
        any_scope,
        loop_guard: loop_guard(&f.at("loop_guard"), r.loop_guard.as_ref())?,
    })
}

/// Headers whose values are credentials: never a subject (a subject is stored and shown).
const CREDENTIAL_HEADERS: &[&str] = &[
    "authorization",
    "proxy-authorization",
    "cookie",
    "set-cookie",
];

/// `subject = { NAME = "/pointer" | "header:Name", … }`, in name order.
pub(super) fn subjects(
    field: &str,
    raw: Option<&BTreeMap<String, String>>,
    secret_headers: &[String],
) -> Result<Vec<Subject>, ConfigError> {
    let mut out = Vec::new();
    for (name, from) in raw.into_iter().flatten() {
        if name.is_empty()
            || name.len() > 64
            || !name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        {
            return Err(invalid(
                field,
                format!("{name:?}: a subject's name is 1 to 64 letters, digits, _ or -"),
            ));
        }
        let from = match from.strip_prefix("header:") {
            Some(h) if !is_header_name(h) => {
                return Err(invalid(
                    format!("{field}.{name}"),
                    format!("{h:?} is not a header name"),
                ))
            }
            Some(h) => {
                let h = h.to_ascii_lowercase();
                if CREDENTIAL_HEADERS.contains(&h.as_str()) || secret_headers.contains(&h) {
                    return Err(invalid(
                        format!("{field}.{name}"),
                        format!("{h} carries secrets, which are never stored"),
                    ));
                }
                SubjectSource::Header(h)
            }
            None if from.starts_with('/') => SubjectSource::Pointer(from.clone()),
            None => {
                return Err(invalid(
                    format!("{field}.{name}"),
                    format!("{from:?}: a JSON pointer (/customer) or header:NAME"),
                ))
            }
        };
        out.push(Subject {
            name: name.clone(),
            from,
        });
    }
    Ok(out)
}

/// `money = { minor_units = true, currency = "USD" }`. An amount in minor units needs an `amount`
/// subject to convert, and a currency to convert it by: the calls' `currency` subject, or
/// `currency` here. `named` says whether the calls it applies to name a subject.
pub(super) fn money(
    field: &str,
    raw: Option<&RawMoney>,
    named: impl Fn(&str) -> bool,
) -> Result<Option<Money>, ConfigError> {
    let Some(RawMoney {
        minor_units,
        currency,
    }) = raw
    else {
        return Ok(None);
    };
    let currency = match currency {
        None => None,
        Some(c) if Money::decimals(c).is_some() => Some(c.to_ascii_uppercase()),
        Some(c) => {
            return Err(invalid(
                format!("{field}.currency"),
                format!("{c:?} is not an ISO 4217 currency with a minor unit (USD, EUR, JPY)"),
            ))
        }
    };
    let minor_units = minor_units.unwrap_or(false);
    if minor_units {
        if !named("amount") {
            return Err(invalid(
                format!("{field}.minor_units"),
                "no subject named amount: name the call's amount (subject = { amount = \"/amount\" })",
            ));
        }
        if currency.is_none() && !named("currency") {
            return Err(invalid(
                format!("{field}.minor_units"),
                "an amount in minor units needs its currency: name a currency subject, or set \
                 money.currency",
            ));
        }
    }
    Ok(Some(Money {
        minor_units,
        currency,
    }))
}

/// `duplicate_on = ["/pointer", …]`: at least one JSON pointer.
pub(super) fn duplicate_on(
    field: &str,
    raw: Option<&Vec<String>>,
) -> Result<Option<Vec<String>>, ConfigError> {
    let Some(ps) = raw else { return Ok(None) };
    if ps.is_empty() {
        return Err(invalid(field, "name at least one JSON pointer"));
    }
    if let Some(p) = ps.iter().find(|p| !p.starts_with('/')) {
        return Err(invalid(
            field,
            format!("{p:?}: a JSON pointer starts with /"),
        ));
    }
    Ok(Some(ps.clone()))
}

/// `loop_guard = { max, window, action = "flag" | "reject" }`.
pub(super) fn loop_guard(
    field: &str,
    raw: Option<&RawLoopGuard>,
) -> Result<Option<LoopGuard>, ConfigError> {
    let Some(g) = raw else { return Ok(None) };
    if g.max == 0 {
        return Err(invalid(format!("{field}.max"), "must be at least 1"));
    }
    let window = parse_positive(&format!("{field}.window"), &g.window, "")?;
    let reject = match g.action.as_deref().unwrap_or("flag") {
        "flag" => false,
        "reject" => true,
        other => {
            return Err(invalid(
                format!("{field}.action"),
                format!("{other:?}: use \"flag\" or \"reject\""),
            ))
        }
    };
    Ok(Some(LoopGuard {
        max: g.max,
        window,
        reject,
    }))
}
