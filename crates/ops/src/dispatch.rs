//! One call by name: how a host that speaks JSON (the desktop console's IPC) runs any operation of
//! the command table without a function of its own per operation. Each operation is one line
//! below: its name, its arguments as the host's JSON names them, and the call it makes.

use std::path::Path;

use idemgate_ledger::{EntryFilter, EventFilter, Progress};
use idemgate_proxy::Engine;
use serde::Serialize;
use serde_json::Value;

use crate::{
    desktop_operator, ActionCmd, BulkCmd, BulkKind, BulkTarget, ExportCmd, Ops, OpsError,
    OpsResult, PurgeCmd, PurgeTarget, ResolveCmd, ReviewCmd,
};

/// How an operation runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A ledger read or write: blocking, off the async threads.
    Ledger,
    /// Long work: blocking, reporting progress, stoppable between two reports.
    Job,
    /// Long work that reaches the upstream for some of its commands (a bulk replay): given the
    /// data plane when the host has one.
    UpstreamJob,
    /// Reaches the upstream through the route configuration's data plane: async.
    Upstream,
}

fn answer<T: Serialize>(r: OpsResult<T>) -> OpsResult<Value> {
    serde_json::to_value(r?).map_err(|e| OpsError::Internal(e.to_string()))
}

fn args<T: serde::de::DeserializeOwned>(name: &str, v: Value) -> OpsResult<T> {
    serde_json::from_value(v).map_err(|e| OpsError::invalid(name, &e.to_string()))
}

macro_rules! calls {
    ($( $kind:ident $name:ident ( $($f:ident : $t:ty),* $(,)? ) $run:expr; )*) => {
        /// Each operation's arguments, as a host sends them.
        #[allow(non_camel_case_types, missing_docs)]
        mod arg {
            use super::*;
            $(
                #[derive(Debug, serde::Deserialize)]
                #[serde(deny_unknown_fields)]
                pub struct $name { $(pub $f: $t),* }
            )*
        }

        /// The operations a host may call by name, and how each runs.
        pub const CALLS: &[(&str, Kind)] = &[$( (stringify!($name), Kind::$kind) ),*];

        /// Runs the operation `name` with `args` (a JSON object of its arguments). All but
        /// `Kind::Upstream` operations block (call them off the async threads); `progress` hears
        /// long work. `upstream` is the data plane a `Kind::UpstreamJob` may need.
        pub fn run(
            ops: &Ops,
            upstream: Option<&Engine>,
            name: &str,
            args: Value,
            progress: Progress<'_>,
        ) -> OpsResult<Value> {
            let _ = (&upstream, &progress);
            $( calls!(@sync $kind $name ops upstream name args progress $run); )*
            Err(OpsError::invalid("command", &format!("{name:?}: no such operation, or it reaches the upstream (run_upstream)")))
        }

        /// Runs the `Kind::Upstream` operation `name` with `args`, through `engine`.
        pub async fn run_upstream(
            ops: &Ops,
            engine: &Engine,
            name: &str,
            args: Value,
        ) -> OpsResult<Value> {
            let _ = engine;
            $( calls!(@async $kind $name ops engine name args $run); )*
            Err(OpsError::invalid("command", &format!("{name:?}: no such operation that reaches the upstream")))
        }
    };
    (@sync Ledger $name:ident $ops:ident $up:ident $n:ident $args:ident $p:ident $run:expr) => {
        if $n == stringify!($name) {
            let a: arg::$name = args(stringify!($name), $args)?;
            let f: &dyn Fn(&Ops, arg::$name, Option<&Engine>, Progress<'_>) -> OpsResult<Value> = &$run;
            return f($ops, a, $up, $p);
        }
    };
    (@sync Job $name:ident $ops:ident $up:ident $n:ident $args:ident $p:ident $run:expr) => {
        calls!(@sync Ledger $name $ops $up $n $args $p $run);
    };
    (@sync UpstreamJob $name:ident $ops:ident $up:ident $n:ident $args:ident $p:ident $run:expr) => {
        calls!(@sync Ledger $name $ops $up $n $args $p $run);
    };
    (@sync Upstream $($rest:tt)*) => {};
    (@async Upstream $name:ident $ops:ident $e:ident $n:ident $args:ident $run:expr) => {
        if $n == stringify!($name) {
            let a: arg::$name = args(stringify!($name), $args)?;
            return $run($ops, $e, a).await;
        }
    };
    (@async $other:ident $($rest:tt)*) => {};
}

calls! {
    Ledger stats(hours: u32) |o: &Ops, a: arg::stats, _, _| answer(o.stats(a.hours));
    Ledger entries(filter: EntryFilter, before: Option<i64>, limit: usize)
        |o: &Ops, a: arg::entries, _, _| answer(o.entries(&a.filter, a.before, a.limit));
    Ledger show(id: i64) |o: &Ops, a: arg::show, _, _| answer(o.show(a.id));
    Ledger log(filter: EventFilter, before: Option<i64>, limit: usize)
        |o: &Ops, a: arg::log, _, _| answer(o.log(&a.filter, a.before, a.limit));
    Ledger incidents(before: Option<i64>, limit: usize)
        |o: &Ops, a: arg::incidents, _, _| answer(o.incidents(a.before, a.limit));
    Ledger review_incident(cmd: ReviewCmd)
        |o: &Ops, a: arg::review_incident, _, _| answer(o.review_incident(&a.cmd));
    Ledger preview_resolve(id: i64) |o: &Ops, a: arg::preview_resolve, _, _| answer(o.preview_resolve(a.id));
    Ledger resolve(cmd: ResolveCmd) |o: &Ops, a: arg::resolve, _, _| answer(o.resolve(&a.cmd));
    Ledger preview_purge(target: PurgeTarget)
        |o: &Ops, a: arg::preview_purge, _, _| answer(o.preview_purge(&a.target));
    Ledger preview_bulk(action: BulkKind, target: BulkTarget)
        |o: &Ops, a: arg::preview_bulk, _, _| answer(o.preview_bulk(a.action, &a.target));
    Job purge(cmd: PurgeCmd) |o: &Ops, a: arg::purge, _, p| answer(o.purge(&a.cmd, p));
    Job export(cmd: ExportCmd) |o: &Ops, a: arg::export, _, p| answer(o.export(&a.cmd, p));
    Job export_entries(cmd: ExportCmd)
        |o: &Ops, a: arg::export_entries, _, p| answer(o.export_entries(&a.cmd, p));
    Ledger retention_status() |o: &Ops, _: arg::retention_status, _, _| answer(o.retention_status());
    Ledger archive_segments(dir: String)
        |o: &Ops, a: arg::archive_segments, _, _| answer(o.archive_segments(Path::new(&a.dir)));
    Job verify_archive(dir: String)
        |o: &Ops, a: arg::verify_archive, _, p| answer(o.verify_archive(Path::new(&a.dir), None, p));
    Job verify_ledger() |o: &Ops, _: arg::verify_ledger, _, p| answer(o.verify(p));
    Job verify_export(path: String)
        |o: &Ops, a: arg::verify_export, _, p| answer(o.verify_export(Path::new(&a.path), p));
    Job verify_against(path: String)
        |o: &Ops, a: arg::verify_against, _, p| answer(o.verify_against(Path::new(&a.path), p));
    UpstreamJob bulk(cmd: BulkCmd) |o: &Ops, a: arg::bulk, e, p| answer(o.bulk(&a.cmd, e, p));
    Upstream replay(id: i64, cmd: ActionCmd)
        async |o: &Ops, e: &Engine, a: arg::replay| answer(o.replay(e, a.id, &a.cmd).await);
    Upstream reconcile(id: i64, cmd: ActionCmd)
        async |o: &Ops, e: &Engine, a: arg::reconcile| answer(o.reconcile(e, a.id, &a.cmd).await);
}

/// How `name` runs, when it is an operation a host may call by name.
pub fn kind(name: &str) -> Option<Kind> {
    CALLS.iter().find(|(n, _)| *n == name).map(|(_, k)| *k)
}

/// An action's arguments as the desktop console records them: the operator's name typed, with
/// the OS user beside it ([`desktop_operator`]). Only `cmd.operator` names who acts.
pub fn as_desktop(args: &mut Value, os_user: &str) {
    if let Some(Value::String(op)) = args.get_mut("cmd").and_then(|c| c.get_mut("operator")) {
        *op = desktop_operator(op, os_user);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::commands;

    #[test]
    fn every_desktop_command_of_the_table_is_callable_but_the_hosts_own() {
        let host_own = [
            "ledger_info",
            "open_ledger",
            "cancel_job",
            "proxy_status",
            "proxy_start",
            "proxy_stop",
        ];
        let table: std::collections::BTreeSet<&str> = commands::desktop()
            .filter(|n| !host_own.contains(n))
            .collect();
        let callable: std::collections::BTreeSet<&str> = CALLS.iter().map(|(n, _)| *n).collect();
        assert_eq!(callable.len(), CALLS.len(), "no name twice");
        assert_eq!(table, callable);
    }

    #[test]
    fn a_call_runs_its_operation_and_refuses_what_it_does_not_know() {
        let dir = tempfile::tempdir().expect("tempdir");
        let ops =
            Ops::open_or_create(&dir.path().join("l.db").display().to_string()).expect("ledger");
        let stats = run(
            &ops,
            None,
            "stats",
            serde_json::json!({"hours": 1}),
            &mut |_| true,
        )
        .expect("stats");
        assert!(stats.get("stuck").is_some(), "{stats}");
        for (name, a, field) in [
            (
                "stats",
                serde_json::json!({"hours": 1, "extra": 1}),
                "stats",
            ),
            ("stats", serde_json::json!({}), "stats"),
            ("nothing", serde_json::json!({}), "command"),
            ("replay", serde_json::json!({}), "command"),
        ] {
            match run(&ops, None, name, a, &mut |_| true) {
                Err(OpsError::Invalid { field: f, .. }) => assert_eq!(f, field, "{name}"),
                other => panic!("{name}: {other:?}"),
            }
        }
        let mut a = serde_json::json!({"id": 1, "cmd": {"operator": "alice", "reason": "r"}});
        as_desktop(&mut a, "ada");
        assert_eq!(a["cmd"]["operator"], "alice (OS user ada)");
    }
}
