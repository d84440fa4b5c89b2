//! A call, and an incident's calls, in the business's terms: the one line the console, the CLI
//! and an approval's webhook title them with, so that a pager and a screen read alike.

use super::{EntrySummary, Incident};

/// Who a call is about: its `customer`, the one a page is about; else its first subject that is
/// not its amount, its currency or its agent (a charge, an email address).
fn about(subjects: &[(String, String)]) -> Option<&str> {
    subject(subjects, "customer").or_else(|| {
        subjects
            .iter()
            .find(|(n, _)| !matches!(n.as_str(), "amount" | "currency" | "agent"))
            .map(|(_, v)| v.as_str())
    })
}

fn subject<'a>(subjects: &'a [(String, String)], name: &str) -> Option<&'a str> {
    subjects
        .iter()
        .find(|(n, _)| n == name)
        .map(|(_, v)| v.as_str())
}

/// "49.99 USD", or "amount 49.99" when the call names no currency.
fn amount(subjects: &[(String, String)]) -> Option<String> {
    let amount = subject(subjects, "amount")?;
    Some(match subject(subjects, "currency") {
        Some(c) => format!("{amount} {}", c.to_uppercase()),
        None => format!("amount {amount}"),
    })
}

/// The route, with the tool of an MCP call: `tools · refund`.
fn route(e: &EntrySummary) -> String {
    match &e.tool {
        Some(tool) => format!("{} · {tool}", e.route),
        None => e.route.clone(),
    }
}

/// One call: who it is about, its route (and tool) and its amount, as far as its route's
/// subjects name them: "cus_123 · refunds · 600.00 USD".
pub fn call(e: &EntrySummary) -> String {
    let mut parts: Vec<String> = about(&e.subjects).map(str::to_owned).into_iter().collect();
    parts.push(route(e));
    parts.extend(amount(&e.subjects));
    parts.join(" · ")
}

/// An incident: who it is about (else its fingerprint's start), its route, how many calls of what
/// amount, from which agents, how far apart: "cus_123 · charges · 2 × 49.99 USD · agents
/// billing-01, billing-02 · 14 s apart".
pub fn incident(i: &Incident) -> String {
    let who = about(&i.subjects).map_or_else(
        || format!("{}…", i.fingerprint.chars().take(12).collect::<String>()),
        str::to_owned,
    );
    let route = i.entries.first().map_or_else(|| i.route.clone(), route);
    // A purged first entry still happened: it counts.
    let calls = i.entries.len() + usize::from(i.first_purged);
    let what = match (
        subject(&i.subjects, "amount"),
        subject(&i.subjects, "currency"),
    ) {
        (Some(a), Some(c)) => format!("{calls} × {a} {}", c.to_uppercase()),
        (Some(a), None) => format!("{calls} × {a}"),
        (None, _) => format!("{calls} calls"),
    };
    let mut parts = vec![who, route, what];
    let mut agents: Vec<&str> = Vec::new();
    for e in &i.entries {
        if !e.scope.is_empty() && !agents.contains(&e.scope.as_str()) {
            agents.push(&e.scope);
        }
    }
    if !agents.is_empty() {
        let noun = if agents.len() > 1 { "agents" } else { "agent" };
        parts.push(format!("{noun} {}", agents.join(", ")));
    }
    if i.entries.len() > 1 {
        let at = || i.entries.iter().map(|e| e.created_at);
        let span = at().max().unwrap_or(0) - at().min().unwrap_or(0);
        parts.push(format!("{} apart", apart(span)));
    }
    parts.join(" · ")
}

/// "14 s", "3 min", "2 h".
fn apart(ms: i64) -> String {
    let s = (ms + 500) / 1000;
    if s < 120 {
        format!("{s} s")
    } else if s < 7200 {
        format!("{} min", (s + 30) / 60)
    } else {
        format!("{} h", (s + 1800) / 3600)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Effect, State};

    fn entry(id: i64, scope: &str, at: i64, subjects: &[(&str, &str)]) -> EntrySummary {
        EntrySummary {
            id,
            route: "charges".into(),
            scope: scope.into(),
            key: format!("k-{id}"),
            state: State::Completed,
            stuck: false,
            fingerprint: "0123456789abcdef".into(),
            attempts: 1,
            replays: 0,
            created_at: at,
            updated_at: at,
            expires_at: None,
            effect: Effect::Write,
            lease_expires_at: None,
            outcome_unknown: false,
            last_error: None,
            collisions: 0,
            duplicate_of: None,
            response_status: Some(201),
            tool: None,
            subjects: subjects
                .iter()
                .map(|(n, v)| ((*n).to_owned(), (*v).to_owned()))
                .collect(),
        }
    }

    fn incident_of(entries: Vec<EntrySummary>) -> Incident {
        let head = entries[0].clone();
        Incident {
            id: head.id,
            route: head.route,
            scope: head.scope,
            fingerprint: head.fingerprint,
            subjects: head.subjects,
            first_purged: false,
            entries,
            review: None,
            open: true,
            title: String::new(),
        }
    }

    #[test]
    fn a_call_reads_as_who_it_is_about_its_route_and_its_amount() {
        let charge = [
            ("customer", "cus_1"),
            ("amount", "49.99"),
            ("currency", "usd"),
        ];
        assert_eq!(
            call(&entry(1, "a", 0, &charge)),
            "cus_1 · charges · 49.99 USD"
        );
        // Without a customer the first subject names whom, whatever it is called; no currency,
        // no unit.
        let refund = [("amount", "60000"), ("charge", "ch_1")];
        assert_eq!(
            call(&entry(1, "a", 0, &refund)),
            "ch_1 · charges · amount 60000"
        );
        // With one, the customer, though another subject sorts first.
        let refund = [
            ("amount", "60000"),
            ("charge", "ch_1"),
            ("customer", "cus_2"),
        ];
        assert_eq!(
            call(&entry(1, "a", 0, &refund)),
            "cus_2 · charges · amount 60000"
        );
        let mut tool = entry(1, "a", 0, &[]);
        tool.route = "tools".into();
        tool.tool = Some("refund".into());
        assert_eq!(call(&tool), "tools · refund");
    }

    #[test]
    fn an_incident_reads_as_its_calls_their_agents_and_how_far_apart() {
        let charge = [
            ("customer", "cus_1"),
            ("amount", "49.99"),
            ("currency", "usd"),
        ];
        let two = incident_of(vec![
            entry(1, "billing-01", 1_000, &charge),
            entry(2, "billing-02", 15_000, &charge),
        ]);
        assert_eq!(
            incident(&two),
            "cus_1 · charges · 2 × 49.99 USD · agents billing-01, billing-02 · 14 s apart"
        );
        // One agent named once; no subjects: the fingerprint says which request.
        let bare = incident_of(vec![
            entry(1, "billing-01", 0, &[]),
            entry(2, "billing-01", 600_000, &[]),
            entry(3, "", 9_000_000, &[]),
        ]);
        assert_eq!(
            incident(&bare),
            "0123456789ab… · charges · 3 calls · agent billing-01 · 3 h apart"
        );
        // Its first entry purged, the charge it was still counts.
        let mut purged = incident_of(vec![entry(2, "billing-02", 0, &charge)]);
        purged.first_purged = true;
        assert_eq!(
            incident(&purged),
            "cus_1 · charges · 2 × 49.99 USD · agent billing-02"
        );
    }
}
