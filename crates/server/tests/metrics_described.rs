//! Every metric a crate of the workspace records is described (its `# HELP` line on `/metrics`)
//! and named in docs/admin-api.md's list of metrics, read from the sources: a metric only some
//! event records would not show in a scrape of a quiet server.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// Every `.rs` file under `dir`.
fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).expect("read_dir").flatten() {
        let p = e.path();
        if p.is_dir() {
            sources(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The metric names `text` gives to a `counter!`, `gauge!` or `histogram!` (`recorded`) or to
/// their `describe_` forms.
fn names(text: &str, described: bool) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for kind in ["counter!(", "gauge!(", "histogram!("] {
        for (at, _) in text.match_indices(kind) {
            if text[..at].ends_with("describe_") != described {
                continue;
            }
            let rest = text[at + kind.len()..].trim_start();
            if let Some(name) = rest
                .strip_prefix("\"idemgate_")
                .and_then(|r| r.split('"').next())
            {
                out.insert(format!("idemgate_{name}"));
            }
        }
    }
    out
}

#[test]
fn every_metric_is_described_and_documented() {
    let crates = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut files = Vec::new();
    for c in std::fs::read_dir(&crates).expect("crates").flatten() {
        let src = c.path().join("src");
        if src.is_dir() {
            sources(&src, &mut files);
        }
    }
    let (mut recorded, mut described) = (BTreeSet::new(), BTreeSet::new());
    for f in &files {
        let text = std::fs::read_to_string(f).expect("source");
        recorded.extend(names(&text, false));
        described.extend(names(&text, true));
    }
    assert!(recorded.len() >= 30, "{recorded:?}");
    let undescribed: Vec<_> = recorded.difference(&described).collect();
    assert!(
        undescribed.is_empty(),
        "recorded, not described: {undescribed:?}"
    );
    let md = std::fs::read_to_string(crates.join("../docs/admin-api.md")).expect("admin-api.md");
    let list = &md[md.find("\n## Metrics").expect("## Metrics")..];
    let list = &list[..list[1..].find("\n## ").map_or(list.len(), |e| e + 1)];
    let undocumented: Vec<_> = recorded
        .iter()
        .filter(|n| !list.contains(&format!("`{n}")))
        .collect();
    assert!(
        undocumented.is_empty(),
        "not in docs/admin-api.md's metrics: {undocumented:?}"
    );
}
