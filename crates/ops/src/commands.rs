//! The command table: every operation a host offers, with the role it needs and where each host
//! offers it. The admin API takes each route's role from here (a route missing from the table is
//! refused to everyone), the console's command list and capability are checked against it, and
//! the browser console hides what a role cannot do from its TypeScript copy (`ui/src/bindings/
//! commands.ts`, generated). Adding an operation is one line here, its function in its module,
//! and its call in the UI.

pub use idemgate_proxy::config::Role;

/// One operation as the hosts offer it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Command {
    /// Its name: the console's Tauri command, the key of the UI's table.
    pub name: &'static str,
    /// The least role that may run it through the admin API.
    pub role: Role,
    /// Its admin API routes (method, path as the router writes it); empty when it has none.
    pub http: &'static [(&'static str, &'static str)],
    /// Whether the desktop console offers it as a command.
    pub desktop: bool,
}

const fn cmd(
    name: &'static str,
    role: Role,
    http: &'static [(&'static str, &'static str)],
    desktop: bool,
) -> Command {
    Command {
        name,
        role,
        http,
        desktop,
    }
}

use Role::{Admin, Operator, Viewer};

/// Every command, in the order the UI lists them.
pub const COMMANDS: &[Command] = &[
    // What the open ledger and the host are.
    cmd("ledger_info", Viewer, &[], true),
    cmd("open_ledger", Viewer, &[], true),
    cmd("server_info", Viewer, &[("GET", "/admin/v1/server")], false),
    cmd("whoami", Viewer, &[("GET", "/admin/v1/whoami")], false),
    cmd(
        "openapi",
        Viewer,
        &[("GET", "/admin/v1/openapi.json")],
        false,
    ),
    cmd("metrics", Viewer, &[("GET", "/metrics")], false),
    // Reads.
    cmd("stats", Viewer, &[("GET", "/admin/v1/stats")], true),
    cmd("entries", Viewer, &[("GET", "/admin/v1/entries")], true),
    cmd("show", Viewer, &[("GET", "/admin/v1/entries/{id}")], true),
    cmd("log", Viewer, &[("GET", "/admin/v1/events")], true),
    cmd("incidents", Viewer, &[("GET", "/admin/v1/incidents")], true),
    cmd(
        "review_incident",
        Operator,
        &[("POST", "/admin/v1/incidents/{id}/review")],
        true,
    ),
    // Operator actions.
    cmd(
        "preview_resolve",
        Operator,
        &[("GET", "/admin/v1/entries/{id}/resolve/preview")],
        true,
    ),
    cmd(
        "resolve",
        Operator,
        &[("POST", "/admin/v1/entries/{id}/resolve")],
        true,
    ),
    cmd(
        "replay",
        Operator,
        &[("POST", "/admin/v1/entries/{id}/replay")],
        true,
    ),
    cmd(
        "reconcile",
        Operator,
        &[("POST", "/admin/v1/entries/{id}/reconcile")],
        true,
    ),
    cmd(
        "preview_bulk",
        Operator,
        &[("POST", "/admin/v1/bulk/preview")],
        true,
    ),
    cmd("bulk", Operator, &[("POST", "/admin/v1/bulk")], true),
    // An administrator's work: what removes data, copies it out or walks the whole chain.
    cmd(
        "preview_purge",
        Admin,
        &[("POST", "/admin/v1/purge/preview")],
        true,
    ),
    cmd("purge", Admin, &[("POST", "/admin/v1/purge")], true),
    cmd("export", Admin, &[("POST", "/admin/v1/exports")], true),
    cmd("export_entries", Admin, &[], true),
    cmd(
        "export_status",
        Viewer,
        &[
            ("GET", "/admin/v1/exports"),
            ("GET", "/admin/v1/exports/{id}"),
        ],
        false,
    ),
    cmd(
        "export_download",
        Admin,
        &[
            ("GET", "/admin/v1/exports/{id}/file"),
            ("GET", "/admin/v1/exports/{id}/manifest"),
        ],
        false,
    ),
    cmd(
        "cancel_export",
        Admin,
        &[("DELETE", "/admin/v1/exports/{id}")],
        false,
    ),
    cmd("verify_ledger", Admin, &[("GET", "/admin/v1/verify")], true),
    cmd(
        "verify_against",
        Admin,
        &[("POST", "/admin/v1/verify/against")],
        true,
    ),
    cmd("verify_export", Admin, &[], true),
    // The archive: the policy's last run for everyone, the segments for an administrator.
    cmd(
        "retention_status",
        Viewer,
        &[("GET", "/admin/v1/retention")],
        true,
    ),
    cmd("archive_segments", Admin, &[], true),
    cmd("verify_archive", Admin, &[], true),
    // The desktop console's own: its jobs and its embedded proxy.
    cmd("cancel_job", Viewer, &[], true),
    cmd("proxy_status", Viewer, &[], true),
    cmd("proxy_start", Admin, &[], true),
    cmd("proxy_stop", Admin, &[], true),
];

/// The command an admin API route belongs to (`path` as the router matched it: `{id}`, not `7`).
pub fn for_route(method: &str, path: &str) -> Option<&'static Command> {
    COMMANDS.iter().find(|c| {
        c.http
            .iter()
            .any(|(m, p)| m.eq_ignore_ascii_case(method) && *p == path)
    })
}

/// The methods the admin API takes at `path` (as the router writes it).
pub fn methods_of(path: &str) -> impl Iterator<Item = &'static str> + '_ {
    COMMANDS
        .iter()
        .flat_map(|c| c.http.iter())
        .filter(move |(_, p)| *p == path)
        .map(|(m, _)| *m)
}

/// A command by its name.
pub fn by_name(name: &str) -> Option<&'static Command> {
    COMMANDS.iter().find(|c| c.name == name)
}

/// The names of the commands the desktop console offers.
pub fn desktop() -> impl Iterator<Item = &'static str> {
    COMMANDS.iter().filter(|c| c.desktop).map(|c| c.name)
}

/// The table as TypeScript: each command's name, role and routes, for the browser console to
/// show only what the signed-in role may do.
pub fn typescript() -> String {
    let mut s = String::from(
        "// Generated from crates/ops/src/commands.rs by the ipc_bindings test; do not edit.\n\
         import type { Role } from \"./Role\";\n\n\
         export const COMMANDS = {\n",
    );
    for c in COMMANDS {
        let http: Vec<String> = c
            .http
            .iter()
            .map(|(m, p)| format!("[\"{m}\", \"{p}\"]"))
            .collect();
        s.push_str(&format!(
            "  {}: {{ role: \"{}\", http: [{}], desktop: {} }},\n",
            c.name,
            c.role,
            http.join(", "),
            c.desktop
        ));
    }
    s.push_str(
        "} as const satisfies Record<string, { role: Role; http: readonly (readonly [string, string])[]; desktop: boolean }>;\n\n\
         export type CommandName = keyof typeof COMMANDS;\n\n\
         /** The roles, lowest first: each may do what the ones before it may. */\n",
    );
    let roles: Vec<String> = Role::ALL.iter().map(|r| format!("\"{r}\"")).collect();
    s.push_str(&format!(
        "export const ROLES: readonly Role[] = [{}];\n\n\
         /** Whether `role` may run `cmd` through the admin API. */\n\
         export function allows(role: Role, cmd: CommandName): boolean {{\n  \
         return ROLES.indexOf(role) >= ROLES.indexOf(COMMANDS[cmd].role);\n}}\n",
        roles.join(", ")
    ));
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_routes_are_unique() {
        for (i, c) in COMMANDS.iter().enumerate() {
            assert!(
                !COMMANDS[..i].iter().any(|d| d.name == c.name),
                "{} twice",
                c.name
            );
            for (m, p) in c.http {
                assert_eq!(for_route(m, p).map(|d| d.name), Some(c.name), "{m} {p}");
            }
        }
        assert_eq!(for_route("GET", "/admin/v1/entries/7"), None);
        assert_eq!(by_name("purge").map(|c| c.role), Some(Role::Admin));
        assert_eq!(by_name("resolve").map(|c| c.role), Some(Role::Operator));
        assert_eq!(by_name("entries").map(|c| c.role), Some(Role::Viewer));
    }
}
