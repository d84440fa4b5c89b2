//! The console's IPC surface is exactly what the UI uses: `call` (any operation of the command
//! table, crates/ops/src/commands.rs, by name) and the console's own commands are what build.rs
//! declares (and so gets `allow-` permissions for), what lib.rs registers, what the window's
//! capability grants and what the UI's transport calls; the operations the transport asks `call`
//! for are those `idemgate_ops::dispatch` runs. Nothing
//! else is granted: no plugin, no core permission beyond listening to events. The real webview
//! checks that an ungranted command is refused (tests/e2e/console_e2e.py).

use std::collections::BTreeSet;

fn read(path: &str) -> String {
    std::fs::read_to_string(format!("{}/{path}", env!("CARGO_MANIFEST_DIR")))
        .unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The double-quoted snake_case words between `start` and the next `end`.
fn quoted_between(text: &str, start: &str, end: &str) -> BTreeSet<String> {
    let from = text
        .find(start)
        .unwrap_or_else(|| panic!("{start} not found"))
        + start.len();
    let to = from + text[from..].find(end).expect("end");
    text[from..to]
        .split('"')
        .skip(1)
        .step_by(2)
        .map(str::to_owned)
        .collect()
}

#[test]
fn declared_registered_granted_and_called_commands_are_one_set() {
    let declared = quoted_between(&read("build.rs"), "const COMMANDS: &[&str] = &[", "];");
    let lib = read("src/lib.rs");
    let registered: BTreeSet<String> = {
        let from = lib.find("generate_handler![").expect("generate_handler") + 18;
        let to = from + lib[from..].find(']').expect("]");
        lib[from..to]
            .split(',')
            .map(|s| s.trim().trim_start_matches("commands::").to_owned())
            .filter(|s| !s.is_empty())
            .collect()
    };
    let capability: serde_json::Value =
        serde_json::from_str(&read("capabilities/default.json")).expect("capability JSON");
    assert_eq!(capability["windows"], serde_json::json!(["main"]));
    let perms: Vec<String> = capability["permissions"]
        .as_array()
        .expect("permissions")
        .iter()
        .map(|p| p.as_str().expect("plain permission names").to_owned())
        .collect();
    let (core, app): (Vec<_>, Vec<_>) = perms.iter().partition(|p| p.contains(':'));
    assert_eq!(
        core,
        ["core:event:allow-listen", "core:event:allow-unlisten"],
        "only progress events beyond the app's own commands"
    );
    let granted: BTreeSet<String> = app
        .iter()
        .map(|p| {
            p.strip_prefix("allow-")
                .unwrap_or_else(|| panic!("{p}: only allow- permissions"))
                .replace('-', "_")
        })
        .collect();
    let transport = read("../ui/src/transport.ts");
    let called: BTreeSet<String> = transport
        .match_indices("this.call<")
        .map(|(i, _)| {
            let rest = &transport[i..];
            let q = rest.find("(\"").expect("command name") + 2;
            rest[q..q + rest[q..].find('"').expect("quote")].to_owned()
        })
        .collect();
    assert!(!declared.is_empty());
    assert_eq!(
        declared, registered,
        "build.rs COMMANDS vs generate_handler!"
    );
    assert_eq!(
        declared, granted,
        "build.rs COMMANDS vs capabilities/default.json"
    );
    assert_eq!(declared, called, "build.rs COMMANDS vs ui/src/transport.ts");
    // `call` runs the table's operations by name; the other commands are the console's own.
    let callable: BTreeSet<String> = idemgate_ops::dispatch::SPECS
        .iter()
        .map(|s| s.name.to_owned())
        .collect();
    let mut own: BTreeSet<String> = idemgate_ops::commands::desktop()
        .map(str::to_owned)
        .filter(|n| !callable.contains(n))
        .collect();
    own.insert("call".into());
    assert_eq!(
        declared, own,
        "build.rs COMMANDS vs the command table's own desktop commands and call"
    );
}

#[test]
fn the_csp_admits_only_the_app_itself_and_its_ipc() {
    let conf: serde_json::Value =
        serde_json::from_str(&read("tauri.conf.json")).expect("tauri.conf.json");
    assert_eq!(conf["app"]["withGlobalTauri"], false);
    let csp = conf["app"]["security"]["csp"]
        .as_object()
        .expect("a CSP given directive by directive");
    for d in [
        "default-src",
        "script-src",
        "style-src",
        "connect-src",
        "object-src",
        "base-uri",
    ] {
        assert!(csp.contains_key(d), "{d} is set");
    }
    for (directive, sources) in csp {
        for source in sources.as_str().expect("sources").split_whitespace() {
            let allowed = matches!(source, "'self'" | "'none'" | "data:" | "ipc:")
                || (directive == "connect-src" && source == "http://ipc.localhost");
            assert!(
                allowed && !(source == "data:" && directive != "img-src"),
                "{directive} allows {source}: the console loads nothing from elsewhere, runs no \
                 inline or eval'd code and talks only to its own IPC"
            );
        }
    }
    assert_eq!(csp["object-src"], "'none'");
    assert_eq!(csp["script-src"], "'self'");
}
