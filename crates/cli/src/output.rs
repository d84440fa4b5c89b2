//! Human and `--json` rendering. JSON field names are stable (docs/design.md, "CLI"); times are RFC 3339.

use std::io::Write;
use std::path::Path;

use idemgate_ledger::export::{ExportVerifyReport, Manifest};
use idemgate_ledger::{rfc3339, EntryFilter, EntrySummary, Event, EventFilter, VerifyReport};
use idemgate_ops::{
    AgainstReport, BulkReport, DemoReport, EntryView, Ops, OpsError, Preview, PurgeReport,
};
use serde_json::{json, Value};

/// Standard output, which its reader may close before the end (`idemgate log | head`). What
/// nobody reads any more is dropped, and the command ends as it would have, with its own exit
/// code: not `error[io]: Broken pipe` and exit 1, which also hid a verification's 3.
pub struct Out {
    inner: std::io::StdoutLock<'static>,
    closed: bool,
}

impl Out {
    pub fn stdout() -> Out {
        Out {
            inner: std::io::stdout().lock(),
            closed: false,
        }
    }

    fn closed_on_broken_pipe<T>(
        &mut self,
        r: std::io::Result<T>,
        dropped: T,
    ) -> std::io::Result<T> {
        match r {
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {
                self.closed = true;
                Ok(dropped)
            }
            r => r,
        }
    }
}

impl Write for Out {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if self.closed {
            return Ok(buf.len());
        }
        let r = self.inner.write(buf);
        self.closed_on_broken_pipe(r, buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        if self.closed {
            return Ok(());
        }
        let r = self.inner.flush();
        self.closed_on_broken_pipe(r, ())
    }
}

type R = Result<(), OpsError>;

fn opt_time(t: Option<i64>) -> Value {
    t.map_or(Value::Null, |t| Value::String(rfc3339(t)))
}

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

fn subjects_json(s: &[(String, String)]) -> Value {
    Value::Object(
        s.iter()
            .map(|(n, v)| (n.clone(), Value::String(v.clone())))
            .collect(),
    )
}

/// Subjects as people read them: `customer=cus_123 amount=49.99`.
fn subjects_text(s: &[(String, String)]) -> String {
    s.iter()
        .map(|(n, v)| format!("{n}={v}"))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Incidents: each its subjects, route and scope, its entries, and its review.
pub fn incidents(out: &mut Out, list: &[idemgate_ledger::Incident], json: bool) -> R {
    if json {
        let v: Vec<Value> = list
            .iter()
            .map(|i| {
                json!({
                    "id": i.id,
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
        let about = match subjects_text(&i.subjects) {
            t if t.is_empty() => i.fingerprint.chars().take(12).collect(),
            t => t,
        };
        writeln!(
            out,
            "incident {}  {} · {} · {} entries · {status}",
            i.id,
            about,
            i.route,
            i.entries.len()
        )?;
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

/// An entry's route as people read it: `route · tool` for an MCP call.
fn route_label(e: &EntrySummary) -> String {
    match &e.tool {
        Some(t) => format!("{} · {t}", e.route),
        None => e.route.clone(),
    }
}

fn event_json(e: &Event) -> Value {
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

pub(crate) fn pretty(out: &mut Out, v: &impl serde::Serialize) -> R {
    serde_json::to_writer_pretty(&mut *out, v).map_err(std::io::Error::other)?;
    writeln!(out)?;
    Ok(())
}

fn short(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_owned()
    } else {
        let mut t: String = s.chars().take(n.saturating_sub(1)).collect();
        t.push('…');
        t
    }
}

fn state_label(e: &EntrySummary) -> String {
    let mut s = e.state.to_string();
    if e.stuck {
        s.push_str(" (stuck)");
    }
    s
}

pub fn entries(
    out: &mut Out,
    ops: &Ops,
    filter: &EntryFilter,
    limit: Option<usize>,
    json: bool,
) -> R {
    if json {
        // Streamed: one JSON array, written page by page.
        write!(out, "[")?;
        let mut first = true;
        ops.each_entry(filter, limit, &mut |e| {
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
    let n = ops.each_entry(filter, limit, &mut |e| {
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
            if e.state == idemgate_ledger::State::Pending {
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

fn body_text(b: &[u8]) -> String {
    match std::str::from_utf8(b) {
        Ok(s) => match serde_json::from_str::<Value>(s) {
            Ok(v) => serde_json::to_string_pretty(&v).unwrap_or_else(|_| s.to_owned()),
            Err(_) => s.to_owned(),
        },
        Err(_) => format!("<{} bytes, not UTF-8>", b.len()),
    }
}

/// An MCP entry's call: its tool, arguments and what came back.
fn tool_call(out: &mut Out, c: &idemgate_ops::ToolCall) -> R {
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
fn show_json(out: &mut Out, v: &EntryView) -> R {
    let mut entry = entry_json(&v.entry.summary);
    let d = &v.entry;
    if let Some(obj) = entry.as_object_mut() {
        obj.insert("lease_owner".into(), json!(d.lease_owner));
        obj.insert("request".into(), json!(d.request));
        obj.insert("response".into(), json!(d.response));
        obj.insert("last_replay_at".into(), opt_time(d.last_replay_at));
        obj.insert("completed_at".into(), opt_time(d.completed_at));
        obj.insert("resolved_by".into(), json!(d.resolved_by));
        obj.insert("resolution_reason".into(), json!(d.resolution_reason));
        obj.insert("external_ref".into(), json!(d.external_ref));
        obj.insert("collision_requests".into(), json!(d.collision_requests));
        obj.insert("call".into(), json!(v.call));
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
    if let Some(c) = &v.call {
        tool_call(out, c)?;
    }
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
    writeln!(out, "\ntimeline")?;
    for ev in &v.timeline {
        event_line(out, ev)?;
    }
    Ok(())
}

fn event_line(out: &mut Out, ev: &Event) -> R {
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

pub fn log(out: &mut Out, ops: &Ops, filter: &EventFilter, limit: usize, json: bool) -> R {
    let mut remaining = limit;
    let mut before = None;
    let mut all = Vec::new();
    let mut more = false;
    while remaining > 0 {
        let page = ops.log(filter, before, remaining.min(1000))?;
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
    } else if more && !ops.log(filter, before, 1)?.events.is_empty() {
        eprintln!("(the newest {shown} events; older ones with a larger --limit, or --until)");
    }
    Ok(())
}

pub fn resolved(out: &mut Out, e: &EntrySummary, json: bool) -> R {
    if json {
        return pretty(out, &entry_json(e));
    }
    writeln!(
        out,
        "entry {} ({} {}) is now {}",
        e.id, e.route, e.key, e.state
    )?;
    Ok(())
}

pub fn preview(out: &mut Out, p: &Preview, json: bool) -> R {
    if json {
        return pretty(out, p);
    }
    writeln!(
        out,
        "{} would touch {}{}",
        p.action,
        counted(p.count as u64, "entry", "entries"),
        if p.destructive {
            " (destructive route: needs --confirm-destructive)"
        } else {
            ""
        }
    )?;
    for (id, key) in p.ids.iter().zip(&p.keys) {
        writeln!(out, "  {id}  {key}")?;
    }
    for (id, why) in &p.skipped {
        writeln!(out, "  skipped {id}: {why}")?;
    }
    Ok(())
}

pub fn bulk(out: &mut Out, r: &BulkReport, json: bool) -> R {
    if json {
        return pretty(out, r);
    }
    writeln!(
        out,
        "{}: {} of {} done{}{}",
        r.action.as_str(),
        r.succeeded,
        counted(r.total as u64, "entry", "entries"),
        if r.failed > 0 {
            format!(", {} failed", r.failed)
        } else {
            String::new()
        },
        if r.cancelled { " (stopped)" } else { "" }
    )?;
    for f in &r.failures {
        writeln!(
            out,
            "  {}  {}  error[{}]: {}",
            f.id, f.key, f.code, f.message
        )?;
    }
    Ok(())
}

pub fn purged(out: &mut Out, r: &PurgeReport, json: bool) -> R {
    if json {
        return pretty(out, r);
    }
    writeln!(
        out,
        "purged {}{}",
        counted(r.purged.len() as u64, "entry", "entries"),
        if r.purged.is_empty() { "" } else { ":" }
    )?;
    for id in &r.purged {
        writeln!(out, "  {id}")?;
    }
    Ok(())
}

pub fn exported(out: &mut Out, path: &Path, m: &Manifest, json: bool) -> R {
    if json {
        return pretty(out, m);
    }
    writeln!(
        out,
        "exported {} events (seq {}..{}) to {}",
        m.count,
        m.first_seq.unwrap_or(0),
        m.last_seq.unwrap_or(0),
        path.display()
    )?;
    file_lines(out, path, &m.sha256)?;
    if let Some(h) = &m.chain_head {
        writeln!(out, "head     seq {} {}", h.seq, h.hash)?;
    }
    Ok(())
}

/// Where an export's manifest went, and the file's digest.
fn file_lines(out: &mut Out, path: &Path, sha256: &str) -> R {
    writeln!(
        out,
        "manifest {}",
        idemgate_ledger::export::manifest_path(path).display()
    )?;
    writeln!(out, "sha256   {sha256}")?;
    Ok(())
}

pub fn exported_entries(
    out: &mut Out,
    path: &Path,
    m: &idemgate_ledger::entries_export::EntriesManifest,
    json: bool,
) -> R {
    if json {
        return pretty(out, m);
    }
    writeln!(
        out,
        "exported {} to {}",
        counted(m.count, "entry", "entries"),
        path.display()
    )?;
    file_lines(out, path, &m.sha256)?;
    if let Some(h) = &m.ledger_head {
        writeln!(out, "log head seq {} {}", h.seq, h.hash)?;
    }
    Ok(())
}

fn chain_lines(out: &mut Out, r: &VerifyReport) -> R {
    if r.ok {
        writeln!(
            out,
            "chain OK: {} events ({}), head seq {}",
            r.count,
            r.alg,
            r.head.as_ref().map_or(0, |h| h.seq)
        )?;
    } else if r.cancelled {
        writeln!(
            out,
            "chain not verified: stopped after {} events, none of them bad",
            r.count
        )?;
    } else if let Some(seq) = r.first_bad_seq {
        writeln!(
            out,
            "chain BROKEN at seq {seq}: {} ({} events verified before it)",
            r.problem.as_deref().unwrap_or(""),
            r.count
        )?;
    } else {
        writeln!(
            out,
            "chain not verified: {}",
            r.problem.as_deref().unwrap_or("")
        )?;
    }
    Ok(())
}

pub fn copied(out: &mut Out, r: &idemgate_ledger::copy::CopyReport, json: bool) -> R {
    if json {
        return pretty(out, r);
    }
    writeln!(
        out,
        "copied {}, {}, {}",
        counted(r.entries, "entry", "entries"),
        counted(r.collisions, "collision", "collisions"),
        counted(r.events, "event", "events")
    )?;
    match &r.head {
        Some(h) => writeln!(out, "chain head seq {} {}", h.seq, h.hash)?,
        None => writeln!(out, "the log is empty")?,
    }
    Ok(())
}

pub fn verified(out: &mut Out, r: &VerifyReport, json: bool) -> R {
    if json {
        return pretty(out, r);
    }
    chain_lines(out, r)?;
    if let Some(h) = &r.started_after {
        writeln!(
            out,
            "from the archive checkpoint at seq {} {}: the events before it are in archive \
             segments (verify --archive DIR checks the whole history)",
            h.seq, h.hash
        )?;
    }
    Ok(())
}

/// The last line of a verify with more than the chain to check.
pub(crate) fn verdict(ok: bool, stopped: bool) -> &'static str {
    match (ok, stopped) {
        (true, _) => "OK",
        (false, true) => "STOPPED",
        (false, false) => "FAILED",
    }
}

pub fn verified_against(out: &mut Out, r: &AgainstReport, json: bool) -> R {
    if json {
        return pretty(out, r);
    }
    chain_lines(out, &r.chain)?;
    for (h, held) in &r.heads {
        writeln!(
            out,
            "manifest head seq {} {}: {}",
            h.seq,
            short(&h.hash, 16),
            if *held { "held" } else { "MISSING" }
        )?;
    }
    writeln!(out, "{}", verdict(r.ok, r.chain.cancelled))?;
    Ok(())
}

pub fn verified_export(out: &mut Out, r: &ExportVerifyReport, json: bool) -> R {
    if json {
        return pretty(out, r);
    }
    writeln!(out, "export {}", r.file)?;
    chain_lines(out, &r.chain)?;
    for p in &r.problems {
        writeln!(out, "  {p}")?;
    }
    writeln!(out, "{}", verdict(r.ok, r.chain.cancelled))?;
    Ok(())
}

pub fn demo(out: &mut Out, path: &str, r: &DemoReport) -> R {
    let s = &r.stats;
    writeln!(out, "seeded {path}: {} events", r.events)?;
    for (state, n) in &s.entries_by_state {
        writeln!(out, "  {state:<10} {n}")?;
    }
    writeln!(
        out,
        "  stuck {}, collisions {}, expired {}, duplicate suspects {}",
        s.stuck, s.collisions, s.expired, s.duplicate_suspects
    )?;
    writeln!(out, "try: idemgate entries --ledger {path} --stuck")?;
    Ok(())
}

/// "1 entry", "2 entries".
pub(crate) fn counted(n: u64, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}
