//! Each crate is a room with one door: the hosts (the server, the CLI, the desktop console) reach
//! the ledger through `idemgate-ops` only, so what they may do to it is what the operations
//! allow. Their tests may set ledgers up directly.

use std::process::Command;

#[test]
fn the_hosts_reach_the_ledger_through_ops_only() {
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
    for host in ["idemgate-server", "idemgate-cli", "idemgate-console"] {
        let p = packages
            .iter()
            .find(|p| p["name"] == host)
            .unwrap_or_else(|| panic!("{host} is a workspace member"));
        let deps: Vec<&str> = p["dependencies"]
            .as_array()
            .expect("dependencies")
            .iter()
            .filter(|d| d["kind"].is_null())
            .filter_map(|d| d["name"].as_str())
            .collect();
        assert!(deps.contains(&"idemgate-ops"), "{host}: {deps:?}");
        assert!(
            !deps.contains(&"idemgate-ledger"),
            "{host} depends on idemgate-ledger: reach it through idemgate-ops"
        );
    }
}
