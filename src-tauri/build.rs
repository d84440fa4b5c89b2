/// The console's commands: `call`, which runs any operation of the command table by name, and the
/// console's own. Listing them makes Tauri generate `allow-<command>` permissions and stop
/// allowing every app command by default: a window may call only what a capability grants
/// (capabilities/default.json). tests/capabilities.rs keeps this list, the handler list in lib.rs,
/// the capability and the UI's transport in step.
const COMMANDS: &[&str] = &[
    "ledger_info",
    "open_ledger",
    "call",
    "cancel_job",
    "proxy_status",
    "proxy_start",
    "proxy_stop",
];

fn main() {
    tauri_build::try_build(
        tauri_build::Attributes::new()
            .app_manifest(tauri_build::AppManifest::new().commands(COMMANDS)),
    )
    .unwrap_or_else(|e| panic!("tauri-build: {e:#}"));
}
