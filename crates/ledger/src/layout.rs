//! ARCHITECTURE.md's invariants about which of the crate's files may name which, read from the
//! sources: a file that breaks one fails here, not only in a review.

use std::path::Path;

/// `text` without its comment lines (a doc link names a path without importing it).
fn code(text: &str) -> String {
    text.lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The code of the file at `path`.
fn code_at(path: &Path) -> String {
    code(&std::fs::read_to_string(path).expect("a source"))
}

/// Each `.rs` file directly in `src/DIR`, with its module name and code.
fn sources(dir: &str) -> Vec<(String, String)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("src").join(dir);
    let mut out: Vec<_> = std::fs::read_dir(&dir)
        .expect("the sources")
        .flatten()
        .filter_map(|e| {
            let name = e
                .file_name()
                .to_string_lossy()
                .strip_suffix(".rs")?
                .to_owned();
            Some((name, code_at(&e.path())))
        })
        .collect();
    out.sort();
    out
}

/// What follows each `super::` in `text`, up to the end of its first name.
fn after_super(text: &str) -> Vec<&str> {
    text.match_indices("super::")
        .map(|(i, s)| {
            let rest = &text[i + s.len()..];
            let end = rest
                .find(|c: char| !(c.is_alphanumeric() || c == '_'))
                .unwrap_or(rest.len());
            &rest[..end.max(1).min(rest.len())]
        })
        .collect()
}

#[test]
fn the_state_machine_s_files_take_nothing_from_write_rs() {
    let files = sources("write");
    let modules: Vec<&str> = files.iter().map(|(m, _)| m.as_str()).collect();
    assert!(modules.contains(&"log"), "{modules:?}");
    for (module, text) in &files {
        for name in after_super(text) {
            assert!(
                modules.contains(&name),
                "write/{module}.rs takes `super::{name}` from write.rs: take it from the file \
                 under write/ that defines it"
            );
        }
    }
}

#[test]
fn the_storage_trait_names_no_module_that_goes_through_it() {
    let store = code_at(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src/store.rs"));
    for module in [
        "tree",
        "checkpoint",
        "export",
        "entries_export",
        "proof",
        "archive",
    ] {
        assert!(
            !store.contains(&format!("crate::{module}::")),
            "store.rs names crate::{module}: put the type in model"
        );
    }
}
