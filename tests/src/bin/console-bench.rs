//! The console's data calls timed on a ledger (bench/run.py runs it on a demo ledger): the same
//! `Ops` calls the console's commands make, each repeated and the median kept, then an export of
//! the newest million events, a verify of every event, the archival of the older ones and a verify
//! of the whole history, and this process's peak RSS (the console backend without its webview).
//! Prints one JSON object.
//!
//! Usage: console-bench LEDGER [REPEATS]

// The allocator of the shipped binaries (see crates/cli/src/main.rs).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::time::Instant;

use idemgate_ledger::export::Format;
use idemgate_ledger::{EntryFilter, EntrySummary, EventFilter, EventRange};
use idemgate_ops::{ArchiveCmd, ExportCmd, Ops};
use serde_json::{json, Map, Value};

fn median_ms(repeats: usize, mut f: impl FnMut()) -> f64 {
    let mut t: Vec<f64> = (0..repeats)
        .map(|_| {
            let s = Instant::now();
            f();
            s.elapsed().as_secs_f64() * 1000.0
        })
        .collect();
    t.sort_by(f64::total_cmp);
    t[t.len() / 2]
}

fn peak_rss_mb() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<f64>().ok())
        })
        .map_or(0.0, |kb| kb / 1024.0)
}

/// A customer's charges, by the subject's value (the demo's double-charged customer) and by name
/// and value; the console's search box asks the first.
fn subject_search(ops: &Ops, repeats: usize, put: &mut impl FnMut(&str, Value)) {
    let customer = EntryFilter {
        search: Some("cus_41000".into()),
        ..EntryFilter::default()
    };
    put(
        "subject_search_ms",
        json!(median_ms(repeats, || {
            let p = ops.entries(&customer, None, 100).expect("search");
            assert!(p.entries.len() >= 3, "the search finds the double charge");
        })),
    );
    let named = EntryFilter {
        subject: Some("customer=cus_41000".into()),
        ..EntryFilter::default()
    };
    put(
        "subject_lookup_ms",
        json!(median_ms(repeats, || {
            let p = ops.entries(&named, None, 100).expect("lookup");
            assert!(p.entries.len() >= 3, "the lookup finds the double charge");
        })),
    );
}

/// The Overview's numbers and the first pages of the lists; an entry from the middle of the first
/// page, for the lookups after.
fn pages(ops: &Ops, repeats: usize, put: &mut impl FnMut(&str, Value)) -> EntrySummary {
    let all = EntryFilter::default();
    let first = ops.entries(&all, None, 100).expect("entries");
    let next = first.next_before;
    put(
        "overview_stats_ms",
        json!(median_ms(repeats, || drop(ops.stats(24).expect("stats")))),
    );
    put(
        "entries_first_page_ms",
        json!(median_ms(repeats, || drop(
            ops.entries(&all, None, 100).expect("page")
        ))),
    );
    put(
        "entries_next_page_ms",
        json!(median_ms(repeats, || drop(
            ops.entries(&all, next, 100).expect("page")
        ))),
    );
    let stuck = EntryFilter {
        stuck: true,
        ..EntryFilter::default()
    };
    put(
        "stuck_first_page_ms",
        json!(median_ms(repeats, || drop(
            ops.entries(&stuck, None, 100).expect("page")
        ))),
    );
    put(
        "log_first_page_ms",
        json!(median_ms(repeats, || drop(
            ops.log(&EventFilter::default(), None, 100).expect("log")
        ))),
    );
    first
        .entries
        .get(first.entries.len() / 2)
        .cloned()
        .expect("an entry")
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let ledger = args.get(1).expect("usage: console-bench LEDGER [REPEATS]");
    let repeats: usize = args.get(2).and_then(|r| r.parse().ok()).unwrap_or(5);
    let ops = Ops::open_existing(ledger).expect("open ledger");
    let mut out = Map::new();
    let mut put = |k: &str, v: Value| {
        out.insert(k.to_owned(), v);
    };
    let head = ops.store().head().expect("head").map_or(0, |h| h.seq);
    put("events", json!(head));

    let probe = pages(&ops, repeats, &mut put);
    let search = EventFilter {
        search: Some(probe.key.clone()),
        ..EventFilter::default()
    };
    let find = || {
        let p = ops.log(&search, None, 100).expect("search");
        assert!(!p.events.is_empty(), "the search finds the probe key");
    };
    // The first search on a ledger builds the search's skip index (every event read once).
    put("log_search_first_ms", json!(median_ms(1, find)));
    put("log_search_ms", json!(median_ms(repeats, find)));
    let by_key = EntryFilter {
        key: Some(probe.key.clone()),
        ..EntryFilter::default()
    };
    put(
        "key_lookup_ms",
        json!(median_ms(repeats, || {
            let p = ops.entries(&by_key, None, 10).expect("lookup");
            assert!(!p.entries.is_empty(), "the lookup finds the probe key");
        })),
    );
    subject_search(&ops, repeats, &mut put);
    let colliding = ops
        .entries(
            &EntryFilter {
                collisions: true,
                ..EntryFilter::default()
            },
            None,
            1,
        )
        .expect("collisions");
    if let Some(e) = colliding.entries.first() {
        put(
            "collision_diff_ms",
            json!(median_ms(repeats, || {
                let v = ops
                    .show(e.id, idemgate_ops::op::Host::none())
                    .expect("show");
                assert!(!v.collision_diffs.is_empty());
            })),
        );
    }
    audit(&ops, &mut put);
    put("peak_rss_mb", json!(peak_rss_mb()));
    println!("{}", Value::Object(out));
}

/// The newest events kept live (and exported); the rest are archived.
const NEWEST: i64 = 1_000_000;

/// The time of event `seq`, for a range that starts at it.
fn time_of(ops: &Ops, seq: i64) -> i64 {
    ops.log(&EventFilter::default(), Some(seq + 1), 1)
        .expect("log")
        .events
        .first()
        .map_or(0, |e| e.at)
}

/// An export of the newest million events (or a tenth of a smaller log), a whole-chain verify,
/// then the archival of every older event and a verify of the whole history across the segments
/// and the live log, timed. Archival changes the ledger: it runs last.
fn audit(ops: &Ops, put: &mut impl FnMut(&str, Value)) {
    let dir = tempfile::tempdir().expect("tempdir");
    let head = ops.store().head().expect("head").map_or(0, |h| h.seq);
    let keep = if head > 2 * NEWEST {
        NEWEST
    } else {
        (head / 10).max(1)
    };
    let cut = time_of(ops, head - keep + 1);
    let path = dir.path().join("newest.ndjson");
    let s = Instant::now();
    let manifest = ops
        .export(
            &ExportCmd {
                format: Format::Ndjson,
                range: EventRange {
                    since: Some(cut),
                    until: None,
                },
                path: path.display().to_string(),
                overwrite: false,
            },
            &mut |_| true,
        )
        .expect("export")
        .expect("manifest");
    put("export_s", json!(s.elapsed().as_secs_f64()));
    put("exported_events", json!(manifest.count));
    drop(std::fs::remove_file(&path));
    let s = Instant::now();
    let v = ops.verify(&mut |_| true).expect("verify");
    assert!(v.ok, "verify: {:?}", v.problem);
    put("verify_all_s", json!(s.elapsed().as_secs_f64()));

    let archive = dir.path().join("archive");
    std::fs::create_dir(&archive).expect("archive dir");
    let s = Instant::now();
    let r = ops
        .archive(
            &ArchiveCmd {
                before: idemgate_ops::op::common::Time(cut),
                dir: archive.display().to_string(),
                segment_events: None,
            },
            &mut |_| true,
        )
        .expect("archive");
    put("archive_s", json!(s.elapsed().as_secs_f64()));
    put(
        "archived_events",
        json!(r.segments.iter().map(|s| s.count).sum::<i64>()),
    );
    put(
        "archive_mb",
        json!(r.segments.iter().map(|s| s.bytes).sum::<i64>() as f64 / 1e6),
    );
    let s = Instant::now();
    let v = ops
        .verify_archive(
            &idemgate_ledger::archive::Place::Dir(archive.clone()),
            None,
            &mut |_| true,
        )
        .expect("verify archive");
    assert!(v.ok, "verify --archive: {:?}", v.problems);
    put("verify_history_s", json!(s.elapsed().as_secs_f64()));
}
