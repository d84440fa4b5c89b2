//! Each crate is a room with one door: the hosts (the server, the CLI, the desktop console) reach
//! the ledger through `idemgate-ops` only, so what they may do to it is what the operations
//! allow. Their tests may set ledgers up directly. The configuration file is a crate below the
//! data plane, so no settings are the proxy's to hand out.

use std::process::Command;

/// The normal (not dev, not build) dependencies of each workspace crate, from `cargo metadata`.
fn dependencies() -> Vec<(String, Vec<String>)> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .args([
            "metadata",
            "--format-version",
            "1",
            "--no-deps",
            "--offline",
        ])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("cargo metadata");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let meta: serde_json::Value = serde_json::from_slice(&out.stdout).expect("metadata");
    let packages = meta["packages"].as_array().expect("packages");
    packages
        .iter()
        .map(|p| {
            let deps = p["dependencies"]
                .as_array()
                .expect("dependencies")
                .iter()
                .filter(|d| d["kind"].is_null())
                .filter_map(|d| d["name"].as_str().map(str::to_owned))
                .collect();
            (p["name"].as_str().expect("name").to_owned(), deps)
        })
        .collect()
}

fn of<'a>(all: &'a [(String, Vec<String>)], name: &str) -> &'a [String] {
    all.iter()
        .find(|(n, _)| n == name)
        .map(|(_, d)| d.as_slice())
        .unwrap_or_else(|| panic!("{name} is a workspace member"))
}

#[test]
fn the_hosts_reach_the_ledger_through_ops_only() {
    let all = dependencies();
    for host in ["idemgate-server", "idemgate-cli", "idemgate-console"] {
        let deps = of(&all, host);
        assert!(deps.iter().any(|d| d == "idemgate-ops"), "{host}: {deps:?}");
        assert!(
            !deps.iter().any(|d| d == "idemgate-ledger"),
            "{host} depends on idemgate-ledger: reach it through idemgate-ops"
        );
    }
}

/// The configuration file sits below the data plane: the operations and the hosts read their
/// own settings (operators, roles, retention, signing) from it, not through the proxy.
#[test]
fn the_configuration_is_below_the_data_plane_and_read_by_its_users() {
    let all = dependencies();
    let config = of(&all, "idemgate-config");
    assert!(
        config
            .iter()
            .filter(|d| d.starts_with("idemgate-"))
            .all(|d| d == "idemgate-code" || d == "idemgate-ledger"),
        "idemgate-config reaches up: {config:?}"
    );
    for user in [
        "idemgate-proxy",
        "idemgate-ops",
        "idemgate-server",
        "idemgate-cli",
        "idemgate-console",
    ] {
        let deps = of(&all, user);
        assert!(
            deps.iter().any(|d| d == "idemgate-config"),
            "{user}: {deps:?}"
        );
    }
}
