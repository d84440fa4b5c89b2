//! What the reads print: entries, one entry, the log, incidents.

use std::io::Write;

use idemgate_ops::ledger::{rfc3339, Approval, EntryDetail, EntryFilter, EntrySummary, Event};
use idemgate_ops::op::entries::EntriesRequest;
use idemgate_ops::op::log::LogRequest;
use idemgate_ops::{op, EntryView, Ops};
use serde_json::{json, Value};

use super::{
    body_text, counted, opt_time, pretty, route_label, short, state_label, subjects_json,
    subjects_text, Out, R,
};

/// The stable JSON shape of an entry.
pub fn entry_json(e: &EntrySummary) -> Value {
    json!({
        "id": e.id,
        "route": e.route,
        "scope": e.scope,
        "key": e.key,
        "state": e.state,
        "stuck": e.stuck,
        "fingerprint": e.fingerprint,
        "attempts": e.attempts,
        "replays": e.replays,
        "created_at": rfc3339(e.created_at),
        "updated_at": rfc3339(e.updated_at),
        "expires_at": opt_time(e.expires_at),
        "effect": e.effect,
        "lease_expires_at": opt_time(e.lease_expires_at),
        "outcome_unknown": e.outcome_unknown,
        "last_error": e.last_error,
        "collisions": e.collisions,
        "duplicate_of": e.duplicate_of,
        "response_status": e.response_status,
        "tool": e.tool,
        "subjects": subjects_json(&e.subjects),
    })
}

/// Incidents: each its subjects, route and scope, its entries, and its review.
pub fn incidents(out: &mut Out, list: &[idemgate_ops::ledger::Incident], json: bool) -> R {
    if json {
        let v: Vec<Value> = list
            .iter()
            .map(|i| {
                json!({
                    "id": i.id,
                    "title": i.title,
                    "route": i.route,
                    "scope": i.scope,
                    "subjects": subjects_json(&i.subjects),
                    "open": i.open,
                    "first_purged": i.first_purged,
                    "review": i.review,
                    "entries": i.entries.iter().map(entry_json).collect::<Vec<_>>(),
                })
            })
            .collect();
        return pretty(out, &v);
    }
    for i in list {
        let status = match (&i.review, i.open) {
            (Some(r), false) => format!("reviewed by {}: {}", r.operator, r.reason),
            (Some(_), true) => "open again since its review".to_owned(),
            (None, _) => "open".to_owned(),
        };
        writeln!(out, "incident {}  {} · {status}", i.id, i.title)?;
        if i.first_purged {
            writeln!(out, "  {:>8}  (purged: the first entry)", i.id)?;
        }
        for e in &i.entries {
            writeln!(
                out,
                "  {:>8}  {:<18} {:<18} {}  {}",
                e.id,
                short(&e.scope, 18),
                short(&e.key, 18),
                rfc3339(e.created_at),
                subjects_text(&e.subjects)
            )?;
        }
    }
    writeln!(
        out,
        "({})",
        counted(list.len() as u64, "incident", "incidents")
    )?;
    Ok(())
}

pub(super) fn event_json(e: &Event) -> Value {
    json!({
        "seq": e.seq,
        "at": rfc3339(e.at),
        "kind": e.kind,
        "entry_id": e.entry_id,
        "route": e.route,
        "scope": e.scope,
        "key": e.key,
        "operator": e.operator,
        "reason": e.reason,
        "detail": serde_json::from_str::<Value>(&e.detail).unwrap_or(Value::String(e.detail.clone())),
        "payload_digest": e.payload_digest,
        "prev_hash": e.prev_hash,
        "hash": e.hash,
    })
}

/// How `entries` lists: how many, in which order, as a table or JSON.
#[derive(Debug, Clone, Copy)]
pub struct Listing {
    pub limit: Option<usize>,
    pub oldest_first: bool,
    pub json: bool,
}

pub fn entries(out: &mut Out, ops: &Ops, filter: &EntryFilter, page: Listing) -> R {
    let Listing {
        limit,
        oldest_first,
        json,
    } = page;
    let req = EntriesRequest {
        oldest_first: Some(oldest_first),
        ..EntriesRequest::from(filter)
    };
    if json {
        // Streamed: one JSON array, written page by page.
        write!(out, "[")?;
        let mut first = true;
        op::entries::each(ops, req, limit, &mut |e| {
            if !first {
                write!(out, ",")?;
            }
            first = false;
            write!(out, "\n  ")?;
            serde_json::to_writer(&mut *out, &entry_json(e)).map_err(std::io::Error::other)?;
            Ok(())
        })?;
        writeln!(out, "{}]", if first { "" } else { "\n" })?;
        return Ok(());
    }
    writeln!(
        out,
        "{:>8}  {:<18} {:<21} {:<18} {:<38} {:>3} {:>3}  {:<24}",
        "ID", "STATE", "ROUTE", "SCOPE", "KEY", "TRY", "RPL", "CREATED"
    )?;
    let n = op::entries::each(ops, req, limit, &mut |e| {
        let mut flags = String::new();
        if e.collisions > 0 {
            flags.push_str(&format!(" collisions={}", e.collisions));
        }
        if let Some(d) = e.duplicate_of {
            flags.push_str(&format!(" duplicate-of={d}"));
        }
        if !e.subjects.is_empty() {
            flags.push_str(&format!(" {}", subjects_text(&e.subjects)));
        }
        if let Some(err) = &e.last_error {
            if e.state == idemgate_ops::ledger::State::Pending {
                flags.push_str(&format!(" last-error={err:?}"));
            }
        }
        writeln!(
            out,
            "{:>8}  {:<18} {:<21} {:<18} {:<38} {:>3} {:>3}  {:<24}{}",
            e.id,
            state_label(e),
            short(&route_label(e), 21),
            short(&e.scope, 18),
            short(&e.key, 38),
            e.attempts,
            e.replays,
            rfc3339(e.created_at),
            flags
        )?;
        Ok(())
    })?;
    writeln!(out, "({})", counted(n as u64, "entry", "entries"))?;
    Ok(())
}

/// An MCP entry's call: its tool, arguments and what came back.
pub(super) fn tool_call(out: &mut Out, c: &idemgate_ops::ToolCall) -> R {
    writeln!(out, "\ncall  {}", c.label)?;
    let args = serde_json::to_string_pretty(&c.arguments).unwrap_or_default();
    writeln!(out, "  arguments {args}")?;
    if let Some(t) = &c.result_text {
        let error = if c.is_error { " (isError)" } else { "" };
        writeln!(out, "  result{error}    {t}")?;
    }
    if let Some(err) = &c.error {
        writeln!(out, "  error     {err}")?;
    }
    Ok(())
}

/// An entry as `show --json` gives it.
pub(super) fn show_json(out: &mut Out, v: &EntryView) -> R {
    let mut entry = entry_json(&v.entry.summary);
    let d = &v.entry;
    if let Some(obj) = entry.as_object_mut() {
        obj.insert("headline".into(), json!(d.headline));
        obj.insert("lease_owner".into(), json!(d.lease_owner));
        obj.insert("request".into(), json!(d.request));
        obj.insert("response".into(), json!(d.response));
        obj.insert("last_replay_at".into(), opt_time(d.last_replay_at));
        obj.insert("completed_at".into(), opt_time(d.completed_at));
        obj.insert("resolved_by".into(), json!(d.resolved_by));
        obj.insert("resolution_reason".into(), json!(d.resolution_reason));
        obj.insert("external_ref".into(), json!(d.external_ref));
        obj.insert("collision_requests".into(), json!(d.collision_requests));
        obj.insert("approval".into(), json!(d.approval));
        obj.insert("call".into(), json!(v.call));
        obj.insert("actions".into(), json!(v.actions));
        obj.insert(
            "timeline".into(),
            Value::Array(v.timeline.iter().map(event_json).collect()),
        );
    }
    pretty(out, &entry)
}

pub fn show(out: &mut Out, v: &EntryView, json: bool) -> R {
    if json {
        return show_json(out, v);
    }
    let e = &v.entry.summary;
    let d = &v.entry;
    writeln!(out, "entry {}  {}", e.id, state_label(e))?;
    writeln!(
        out,
        "  route        {} ({})",
        route_label(e),
        e.effect.as_str()
    )?;
    writeln!(
        out,
        "  scope        {}",
        if e.scope.is_empty() { "-" } else { &e.scope }
    )?;
    if !e.subjects.is_empty() {
        writeln!(out, "  subjects     {}", subjects_text(&e.subjects))?;
    }
    writeln!(out, "  key          {}", e.key)?;
    writeln!(out, "  fingerprint  {}", e.fingerprint)?;
    writeln!(
        out,
        "  attempts     {}   replays {}   collisions {}",
        e.attempts, e.replays, e.collisions
    )?;
    writeln!(out, "  created      {}", rfc3339(e.created_at))?;
    writeln!(out, "  updated      {}", rfc3339(e.updated_at))?;
    if let Some(x) = e.expires_at {
        writeln!(out, "  expires      {}", rfc3339(x))?;
    }
    if let Some(l) = e.lease_expires_at {
        writeln!(
            out,
            "  lease        {} until {}",
            d.lease_owner.as_deref().unwrap_or("-"),
            rfc3339(l)
        )?;
    }
    if let Some(err) = &e.last_error {
        writeln!(out, "  last error   {err}")?;
    }
    if let Some(dup) = e.duplicate_of {
        writeln!(
            out,
            "  DUPLICATE SUSPECT of entry {dup} (same route, scope and request under another key)"
        )?;
    }
    if let Some(op) = &d.resolved_by {
        writeln!(
            out,
            "  resolved by  {op}: {}",
            d.resolution_reason.as_deref().unwrap_or("")
        )?;
    }
    if let Some(x) = &d.external_ref {
        writeln!(out, "  external ref {x}")?;
    }
    if let Some(a) = &d.approval {
        writeln!(out, "  approval     {}", approval_standing(a))?;
    }
    writeln!(out, "  actions      {}", actions_taken(v))?;
    if let Some(c) = &v.call {
        tool_call(out, c)?;
    }
    stored_calls(out, d)?;
    writeln!(out, "\ntimeline")?;
    for ev in &v.timeline {
        event_line(out, ev)?;
    }
    Ok(())
}

/// The operator actions the entry's state takes, as a list; a held call's are its approvers':
/// what the one who runs the command may decide, or why not.
fn actions_taken(v: &EntryView) -> String {
    let taken: Vec<&str> = v
        .actions
        .iter()
        .filter(|a| a.refused.is_none())
        .map(|a| a.action.as_str())
        .collect();
    let id = v.entry.summary.id;
    let waits = v.entry.approval.as_ref().is_some_and(|a| a.end.is_none());
    match (&v.decision, taken.is_empty()) {
        (_, false) => taken.join(", "),
        (Some(d), true) if waits => match (&d.approve, &d.reject) {
            (None, _) => format!("approve or reject it (idemgate approve|reject {id})"),
            (Some(why), None) => format!("reject it (idemgate reject {id}); not approve: {why}"),
            (Some(why), Some(_)) => format!("none: {why}"),
        },
        _ => "none in this state".to_owned(),
    }
}

/// Where a held call's approval stands: waiting or how it ended, the approvals it has of those
/// its policy needs and from whom, and when an undecided one expires.
pub fn approval_standing(a: &Approval) -> String {
    let end = a.end.map_or("waiting", |e| e.as_str());
    let by = if a.approved_by.is_empty() {
        String::new()
    } else {
        format!(", by {}", a.approved_by.join(", "))
    };
    let when = match a.ended_at {
        Some(at) if a.end.is_some() => format!("ended {}", rfc3339(at)),
        _ => format!("expires {}", rfc3339(a.expires_at)),
    };
    format!(
        "{end}: {} of {} approvals{by} (policy {}), {when}",
        a.approved_by.len(),
        a.needed,
        a.policy
    )
}

/// An entry's stored request and response, and the requests its key refused (collisions).
fn stored_calls(out: &mut Out, d: &EntryDetail) -> R {
    if let Some(r) = &d.request {
        writeln!(out, "\nrequest  {} {}", r.method, r.path)?;
        for (n, val) in &r.headers {
            writeln!(out, "  {n}: {val}")?;
        }
        writeln!(out, "{}", body_text(&r.body))?;
    }
    if let Some(r) = &d.response {
        writeln!(out, "\nresponse  {}", r.status)?;
        for (n, val) in &r.headers {
            writeln!(out, "  {n}: {val}")?;
        }
        writeln!(out, "{}", body_text(&r.body))?;
    }
    for c in &d.collision_requests {
        writeln!(
            out,
            "\nrejected request (collision) at {}  fingerprint {}",
            rfc3339(c.at),
            c.fingerprint
        )?;
        writeln!(out, "{}", body_text(&c.request.body))?;
    }
    Ok(())
}

pub(super) fn event_line(out: &mut Out, ev: &Event) -> R {
    let who = match (&ev.operator, &ev.reason) {
        (Some(o), Some(r)) => format!("  by {o}: {r}"),
        _ => String::new(),
    };
    writeln!(
        out,
        "{:>9}  {}  {:<17} {:>7}  {}/{}/{}  {}{}",
        ev.seq,
        rfc3339(ev.at),
        ev.kind,
        ev.entry_id.map_or("-".into(), |i| i.to_string()),
        ev.route,
        if ev.scope.is_empty() { "-" } else { &ev.scope },
        short(&ev.key, 36),
        ev.detail,
        who
    )?;
    Ok(())
}

/// The newest `limit` events `req` matches, a page of the declared `log` operation at a time.
pub fn log(out: &mut Out, ops: &Ops, req: LogRequest, limit: usize, json: bool) -> R {
    let page = |before: Option<i64>, n: usize| {
        let req = LogRequest {
            before,
            limit: Some(n),
            ..req.clone()
        };
        op::run::<op::log::Op>(ops, req, op::Host::none(), &mut |_| true)
    };
    let mut remaining = limit;
    let mut before = None;
    let mut all = Vec::new();
    let mut more = false;
    while remaining > 0 {
        let page = page(before, remaining.min(1000))?;
        remaining -= page.events.len();
        for ev in &page.events {
            if json {
                all.push(event_json(ev));
            } else {
                event_line(out, ev)?;
            }
        }
        match page.next_before {
            Some(b) => before = Some(b),
            None => break,
        }
        more = remaining == 0;
    }
    if json {
        return pretty(out, &all);
    }
    // Said on stderr, so that the lines on stdout are events only.
    let shown = limit - remaining;
    if shown == 0 {
        eprintln!("(no events)");
    } else if more && !page(before, 1)?.events.is_empty() {
        eprintln!("(the newest {shown} events; older ones with a larger --limit, or --until)");
    }
    Ok(())
}
