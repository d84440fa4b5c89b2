//! What the operator actions print: a preview, a resolve, a bulk action, a purge.

use std::io::Write;

use idemgate_ops::ledger::EntrySummary;
use idemgate_ops::{BulkReport, Preview, PurgeReport};

use super::{counted, entry_json, pretty, Out, R};

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
