//! The command table: every command a host offers, with the role it needs and its admin API
//! routes. The operations ([`crate::op`]) are most of it; the rest are the hosts' own (what the
//! server is, who the token is, its metrics, a done export's files and an uploaded export's
//! check; the desktop's open ledger, jobs and embedded proxy). The admin API takes each route's
//! role from here (a route missing from the table is refused to everyone), and the browser
//! console hides what a role cannot do from its TypeScript copy (`ui/src/bindings/commands.ts`,
//! generated).

pub use idemgate_config::Role;

use crate::op::{Http, SPECS};

/// One command as the hosts offer it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Command {
    /// Its name: the operation's, or the host's command.
    pub name: &'static str,
    /// The least role that may run it through the admin API.
    pub role: Role,
    /// Its admin API routes; empty when it has none.
    pub http: &'static [Http],
    /// Whether the desktop console offers it.
    pub desktop: bool,
}

const fn host(name: &'static str, role: Role, http: &'static [Http], desktop: bool) -> Command {
    Command {
        name,
        role,
        http,
        desktop,
    }
}

const fn get(path: &'static str) -> Http {
    Http {
        method: "GET",
        path,
    }
}

use Role::{Admin, Viewer};

/// The hosts' own commands: what they run themselves rather than through an operation.
pub const HOST: &[Command] = &[
    host("ledger_info", Viewer, &[], true),
    host("open_ledger", Viewer, &[], true),
    host("server_info", Viewer, &[get("/admin/v1/server")], false),
    host("whoami", Viewer, &[get("/admin/v1/whoami")], false),
    host("openapi", Viewer, &[get("/admin/v1/openapi.json")], false),
    host("metrics", Viewer, &[get("/metrics")], false),
    // A done export job's files (the jobs are operations), downloaded from the server.
    host(
        "export_download",
        Admin,
        &[
            get("/admin/v1/exports/{id}/file"),
            get("/admin/v1/exports/{id}/manifest"),
        ],
        false,
    ),
    // An export file the client uploads, checked by the server without the ledger.
    host(
        "verify_upload",
        Admin,
        &[Http {
            method: "POST",
            path: "/admin/v1/verify/export",
        }],
        false,
    ),
    // The desktop console's own: its jobs and its embedded proxy.
    host("cancel_job", Viewer, &[], true),
    host("proxy_status", Viewer, &[], true),
    host("proxy_start", Admin, &[], true),
    host("proxy_stop", Admin, &[], true),
];

/// Every command: the operations, then the hosts' own.
pub fn all() -> impl Iterator<Item = Command> {
    SPECS
        .iter()
        .map(|s| Command {
            name: s.name,
            role: s.role,
            http: s.http.as_slice(),
            desktop: !s.server_only,
        })
        .chain(HOST.iter().copied())
}

/// The command an admin API route belongs to (`path` as the router matched it: `{id}`, not `7`).
pub fn for_route(method: &str, path: &str) -> Option<Command> {
    all().find(|c| {
        c.http
            .iter()
            .any(|h| h.method.eq_ignore_ascii_case(method) && h.path == path)
    })
}

/// The methods the admin API takes at `path` (as the router writes it).
pub fn methods_of(path: &str) -> impl Iterator<Item = &'static str> + '_ {
    all()
        .flat_map(|c| c.http.iter())
        .filter(move |h| h.path == path)
        .map(|h| h.method)
}

/// A command by its name.
pub fn by_name(name: &str) -> Option<Command> {
    all().find(|c| c.name == name)
}

/// The names of the commands the desktop console offers.
pub fn desktop() -> impl Iterator<Item = &'static str> {
    all().filter(|c| c.desktop).map(|c| c.name)
}

/// The table as TypeScript: each command's name, role and routes, for the browser console to
/// show only what the signed-in role may do.
pub fn typescript() -> String {
    let mut s = String::from(
        "// Generated from crates/ops/src/commands.rs and crates/ops/src/op by the ipc_bindings \
         test; do not edit.\n\
         import type { Role } from \"./Role\";\n\n\
         export const COMMANDS = {\n",
    );
    for c in all() {
        let http: Vec<String> = c
            .http
            .iter()
            .map(|h| format!("[\"{}\", \"{}\"]", h.method, h.path))
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
        let every: Vec<Command> = all().collect();
        for (i, c) in every.iter().enumerate() {
            assert!(
                !every[..i].iter().any(|d| d.name == c.name),
                "{} twice",
                c.name
            );
            for h in c.http {
                assert_eq!(
                    for_route(h.method, h.path).map(|d| d.name),
                    Some(c.name),
                    "{h:?}"
                );
            }
        }
        assert_eq!(for_route("GET", "/admin/v1/entries/7"), None);
        assert_eq!(by_name("purge").map(|c| c.role), Some(Role::Admin));
        assert_eq!(by_name("resolve").map(|c| c.role), Some(Role::Operator));
        assert_eq!(by_name("entries").map(|c| c.role), Some(Role::Viewer));
    }
}
