//! One call by name: how a host runs any operation ([`crate::op`]) without a function of its
//! own per operation, on the arguments it hands over ([`Args`]).

use idemgate_ledger::Progress;
use idemgate_proxy::Engine;
use serde_json::Value;

pub use crate::op::args::Args;
use crate::op::Cx;
pub use crate::op::{spec, Host, Kind, Spec, SPECS};
use crate::{desktop_operator, OpsError, OpsResult};
pub use idemgate_ledger::Decider;

/// Runs the operation `name` with `args`. All but [`Kind::Upstream`] operations block (call
/// them off the async threads); `progress` hears long work; `host` is what the host has: the
/// routes it runs under (an entry's view and the previews judge its actions by them) and the
/// data plane a [`Kind::UpstreamJob`] may need.
pub fn run(
    ops: &crate::Ops,
    host: Host<'_>,
    name: &str,
    args: Args,
    progress: Progress<'_>,
) -> OpsResult<Value> {
    match spec(name).map(|s| s.kind) {
        Some(Kind::Upstream) => Err(crate::op::refuse(name)),
        _ => crate::op::call(ops, name, args, Cx { host, progress })
            .unwrap_or_else(|| Err(no_such(name))),
    }
}

/// Runs the [`Kind::Upstream`] operation `name` with `args`, through `engine`.
pub async fn run_upstream(
    ops: &crate::Ops,
    engine: &Engine,
    name: &str,
    args: Args,
) -> OpsResult<Value> {
    match spec(name).map(|s| s.kind) {
        Some(Kind::Upstream) => crate::op::call_upstream(ops, engine, name, args)
            .await
            .unwrap_or_else(|| Err(no_such(name))),
        Some(_) => Err(crate::op::refuse(name)),
        None => Err(no_such(name)),
    }
}

fn no_such(name: &str) -> OpsError {
    OpsError::invalid("command", &format!("{name:?}: no such operation"))
}

/// How `name` runs, when it is an operation.
pub fn kind(name: &str) -> Option<Kind> {
    spec(name).map(|s| s.kind)
}

/// Whether running `name` on `args` may reach the upstream, so that its host needs the routes'
/// upstream credentials and the data plane, as the operation declares it
/// ([`crate::op::Declared::reaches_upstream`]): a host asks before it reads its configuration, so
/// arguments the operation refuses are refused here first, with the error running it gives.
pub fn reaches_upstream(name: &str, args: &Args) -> OpsResult<bool> {
    crate::op::reaches_upstream(name, args).unwrap_or_else(|| Err(no_such(name)))
}

/// An action's arguments as the desktop console records them: the operator's name typed, with
/// the OS user beside it ([`desktop_operator`]). Only `operator` names who acts.
pub fn as_desktop(name: &str, args: &mut Value, os_user: &str) {
    if !spec(name).is_some_and(|s| s.acts) {
        return;
    }
    if let Some(Value::String(op)) = args.get_mut("operator") {
        *op = desktop_operator(op, os_user);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Ops;

    fn ledger() -> (tempfile::TempDir, Ops) {
        let dir = tempfile::tempdir().expect("tempdir");
        let ops =
            Ops::open_or_create(&dir.path().join("l.db").display().to_string()).expect("ledger");
        (dir, ops)
    }

    #[test]
    fn a_call_runs_its_operation_and_refuses_what_it_does_not_know() {
        let (_dir, ops) = ledger();
        let json = |v| Args::json("stats", v).expect("object");
        let stats = run(
            &ops,
            Host::none(),
            "stats",
            json(serde_json::json!({"hours": 1})),
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
            ("stats", serde_json::json!({"hours": "1"}), "stats"),
            ("nothing", serde_json::json!({}), "command"),
            ("replay", serde_json::json!({}), "command"),
        ] {
            match run(&ops, Host::none(), name, json(a), &mut |_| true) {
                Err(OpsError::Invalid { field: f, .. }) => assert_eq!(f, field, "{name}"),
                other => panic!("{name}: {other:?}"),
            }
        }
        assert!(Args::json("stats", serde_json::json!([1])).is_err());
        let mut a = serde_json::json!({"entry_id": 1, "operator": "alice", "reason": "r"});
        as_desktop("replay", &mut a, "ada");
        assert_eq!(a["operator"], "alice (OS user ada)");
        let mut a = serde_json::json!({"operator": "alice"});
        as_desktop("log", &mut a, "ada");
        assert_eq!(
            a["operator"], "alice",
            "a filter by operator is not an action"
        );
    }

    #[test]
    fn text_parameters_are_read_as_the_request_asks() {
        let (_dir, ops) = ledger();
        let mut a = Args::default();
        for (k, v) in [
            ("state", "pending"),
            ("stuck", "true"),
            ("limit", "10"),
            ("route", "42"),
        ] {
            a.text(k, v);
        }
        let page = run(&ops, Host::none(), "entries", a, &mut |_| true).expect("entries");
        assert_eq!(page["entries"], serde_json::json!([]));
        for (k, v, says) in [
            (
                "limit",
                "ten",
                "limit=\"ten\": not a whole number, 0 or more",
            ),
            ("stuck", "yes", "stuck=\"yes\": not true or false"),
            ("state", "lost", "unknown variant `lost`"),
            ("colour", "red", "unknown field `colour`"),
        ] {
            let mut a = Args::default();
            a.text(k, v);
            match run(&ops, Host::none(), "entries", a, &mut |_| true) {
                Err(OpsError::Invalid { message, .. }) => {
                    assert!(message.contains(says), "{k}: {message}")
                }
                other => panic!("{k}: {other:?}"),
            }
        }
        let mut a = Args::json("log", serde_json::json!({"limit": 5})).expect("object");
        a.text("since", "2026-01-01");
        a.text("entry_id", "3");
        let page = run(&ops, Host::none(), "log", a, &mut |_| true).expect("log");
        assert_eq!(page["events"], serde_json::json!([]));
    }

    #[test]
    fn only_a_request_that_may_send_reaches_the_upstream() {
        let bulk = |action| {
            let v = serde_json::json!({
                "action": action, "target": {"filter": {}}, "operator": "o", "reason": "r"
            });
            Args::json("bulk", v).expect("object")
        };
        let replay = Args::json(
            "replay",
            serde_json::json!({"entry_id": 7, "operator": "o", "reason": "r"}),
        )
        .expect("object");
        let show = Args::json("show", serde_json::json!({"entry_id": 7})).expect("object");
        for (name, args, reaches) in [
            ("bulk", bulk("resolve"), false),
            ("bulk", bulk("replay"), true),
            ("bulk", bulk("reconcile"), true),
            ("replay", replay, true),
            ("show", show, false),
        ] {
            assert_eq!(reaches_upstream(name, &args).ok(), Some(reaches), "{name}");
        }
        // A request its operation refuses is refused before anything is read for it.
        for (name, args, field) in [
            ("bulk", bulk("explode"), "bulk"),
            ("replay", Args::default(), "replay"),
            ("nothing", Args::default(), "command"),
        ] {
            match reaches_upstream(name, &args) {
                Err(OpsError::Invalid { field: f, .. }) => assert_eq!(f, field, "{name}"),
                other => panic!("{name}: {other:?}"),
            }
        }
    }
}
