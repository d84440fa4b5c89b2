//! What the audit commands print: exports, verifications, copies, the demo.

use std::io::Write;
use std::path::Path;

use idemgate_ops::ledger::{ExportVerifyReport, Manifest, VerifyReport};
use idemgate_ops::{AgainstReport, DemoReport};

use super::{counted, pretty, short, verdict, Out, R};

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
    if let Some(t) = &m.tree {
        writeln!(
            out,
            "tree     leaves {}..{} of the tree of {}, root {}{}",
            t.first_leaf,
            t.size.saturating_sub(1),
            t.size,
            t.root,
            if t.checkpoint.is_some() {
                ", signed"
            } else {
                ""
            }
        )?;
    }
    Ok(())
}

/// Where an export's manifest went, and the file's digest.
pub(super) fn file_lines(out: &mut Out, path: &Path, sha256: &str) -> R {
    writeln!(
        out,
        "manifest {}",
        idemgate_ops::ledger::manifest_path(path).display()
    )?;
    writeln!(out, "sha256   {sha256}")?;
    Ok(())
}

pub fn exported_entries(
    out: &mut Out,
    path: &Path,
    m: &idemgate_ops::ledger::EntriesManifest,
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

pub(super) fn chain_lines(out: &mut Out, r: &VerifyReport) -> R {
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

pub fn copied(out: &mut Out, r: &idemgate_ops::ledger::CopyReport, json: bool) -> R {
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
    if r.tree_matches == Some(true) {
        writeln!(
            out,
            "tree OK: the events are the leaves of the tree the manifest names"
        )?;
    }
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
