//! The console's IPC types, generated from the Rust types into `ui/src/bindings/` with ts-rs.
//! This test fails when the checked-in TypeScript differs from what the Rust types generate (drift);
//! `UPDATE_BINDINGS=1 cargo test -p idemgate-server --features ts --test ipc_bindings` rewrites them.
#![cfg(feature = "ts")]

use std::collections::BTreeMap;
use std::path::Path;

use ts_rs::TS;

fn generate(dir: &Path) {
    // i64s travel as JSON numbers (all well below 2^53), not bigints.
    let cfg = ts_rs::Config::new()
        .with_out_dir(dir)
        .with_large_int("number");
    // Every operation's request and answer, and what they name; then what the hosts add.
    let ops = idemgate_ops::op::export_types(&cfg).expect("the operations' types");
    std::fs::write(dir.join("ops.ts"), idemgate_ops::op::ts::client(&ops)).expect("ops.ts");
    std::fs::write(dir.join("values.ts"), idemgate_ops::op::ts::values()).expect("values.ts");
    macro_rules! export {
        ($($t:ty),* $(,)?) => { $( <$t>::export_all(&cfg).expect(stringify!($t)); )* };
    }
    use idemgate_ops::*;
    export!(
        ErrorBody,
        Code,
        LedgerInfo,
        JobProgress,
        idemgate_server::ProxyStatus,
        idemgate_ops::jobs::exports::ExportJob,
        idemgate_server::admin::ServerInfo,
        idemgate_server::access::Identity,
        commands::Role,
    );
    std::fs::write(dir.join("commands.ts"), commands::typescript()).expect("commands.ts");
}

fn read_dir(dir: &Path) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for e in std::fs::read_dir(dir).expect("read dir").flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if name.ends_with(".ts") {
            out.insert(name, std::fs::read_to_string(e.path()).expect("read"));
        }
    }
    out
}

#[test]
fn ui_bindings_match_the_rust_types() {
    let tmp = tempfile::tempdir().expect("tempdir");
    generate(tmp.path());
    let generated = read_dir(tmp.path());
    let target = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../ui/src/bindings");
    if std::env::var("UPDATE_BINDINGS").is_ok() {
        std::fs::create_dir_all(&target).expect("mkdir");
        for old in read_dir(&target).keys() {
            std::fs::remove_file(target.join(old)).expect("remove");
        }
        for (n, s) in &generated {
            std::fs::write(target.join(n), s).expect("write");
        }
    }
    let checked_in = read_dir(&target);
    assert_eq!(
        checked_in.keys().collect::<Vec<_>>(),
        generated.keys().collect::<Vec<_>>(),
        "ui/src/bindings is out of date: run UPDATE_BINDINGS=1 cargo test -p idemgate-server --features ts --test ipc_bindings"
    );
    for (n, s) in &generated {
        assert_eq!(
            &checked_in[n], s,
            "ui/src/bindings/{n} is out of date (see above)"
        );
    }
}
