use crate::dispatch::Host;
use idemgate_proxy::problem::Problem;

use super::*;

/// An error as the admin API answers it.
fn problem(e: OpsError) -> Problem {
    Problem::from(e)
}

fn ops(dir: &Path) -> Ops {
    Ops::open_or_create(&dir.join("ledger.db").display().to_string()).expect("ledger")
}

/// A job as if it were running (its thread never ends) or had ended `ago` ms ago.
fn fake(e: &Exports, id: &str, ended_ago: Option<Millis>) {
    let now = now_millis();
    let spool = e.base.join("fake");
    std::fs::create_dir_all(&spool).expect("mkdir");
    let file = spool.join(format!("{id}.ndjson"));
    std::fs::write(&file, b"x").expect("write");
    std::fs::write(manifest_path(&file), b"{}").expect("write");
    e.lock().jobs.push(Job {
        id: id.into(),
        what: Exported::Events,
        format: Format::Ndjson,
        range: EventRange::default(),
        created_at: now,
        ended_at: ended_ago.map(|a| now - a),
        done: Arc::default(),
        cancel: Arc::default(),
        manifest: None,
        error: None,
        file,
    });
}

fn until_ended(e: &Exports, id: &str) -> ExportJob {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while std::time::Instant::now() < deadline {
        let j = e.get(id).expect("job");
        if j.state != ExportState::Running {
            return j;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    panic!("export {id} did not end");
}

/// Starts exporting the whole log as NDJSON.
fn start_whole_log(e: &Arc<Exports>, ops: &Ops) -> OpsResult<ExportJob> {
    e.start(ops, Exported::Events, Format::Ndjson, EventRange::default())
}

/// The whole log exported as NDJSON, once the export has ended.
fn the_whole_log(e: &Arc<Exports>, ops: &Ops) -> ExportJob {
    let j = start_whole_log(e, ops).expect("start");
    until_ended(e, &j.id)
}

#[test]
fn at_most_two_run_at_once_and_a_new_one_pushes_out_the_oldest_ended() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ops = ops(dir.path());
    let e = Arc::new(Exports::new(dir.path().to_path_buf()));
    fake(&e, "r1", None);
    fake(&e, "r2", None);
    let p = start_whole_log(&e, &ops).expect_err("a third at once");
    let p = problem(p);
    assert_eq!((p.status, p.code.as_str()), (429, "too-many-exports"));
    assert_eq!(e.list().len(), 2, "a refused export leaves no job");

    e.delete("r2").expect("delete");
    assert!(e.get("r2").is_err());
    for i in 0..(MAX_KEPT - 1) {
        fake(&e, &format!("ended{i}"), Some(1000 + i as Millis));
    }
    assert_eq!(e.list().len(), MAX_KEPT);
    let oldest = e.lock().jobs[1].file.clone();
    assert!(oldest.exists());
    let j = e
        .start(&ops, Exported::Events, Format::Csv, EventRange::default())
        .expect("pushes out an ended one");
    let jobs = e.list();
    assert_eq!(jobs.len(), MAX_KEPT);
    assert_eq!(jobs[0].id, j.id, "newest first");
    assert!(
        jobs.iter().all(|j| j.id != "ended0"),
        "the first one kept went"
    );
    assert!(
        !oldest.exists() && !manifest_path(&oldest).exists(),
        "with its files"
    );
    let j = until_ended(&e, &j.id);
    assert_eq!(j.state, ExportState::Done, "{j:?}");
}

#[test]
fn reclaim_removes_the_spools_whose_lock_nobody_holds_and_no_other() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ops = ops(dir.path());
    let base = dir.path().join("exports");
    std::fs::create_dir(&base).expect("mkdir");
    let live = Arc::new(Exports::new(base.clone()));
    let j = the_whole_log(&live, &ops);
    let live_spool = live.lock().spool.as_ref().expect("made").dir.clone();
    // A killed process's spool (its lock let go), one being made, one with no lock file, and a
    // file that only has the name.
    let dead = base.join(format!("{SPOOL_PREFIX}7-0000dead"));
    std::fs::create_dir(&dead).expect("mkdir");
    std::fs::write(dead.join(SPOOL_LOCK), b"").expect("lock");
    std::fs::write(dead.join("idemgate-export-1.ndjson"), b"x").expect("write");
    let making = base.join(format!(".{SPOOL_PREFIX}8-00000000"));
    std::fs::create_dir(&making).expect("mkdir");
    std::fs::write(making.join(SPOOL_LOCK), b"").expect("lock");
    let unlocked = base.join(format!("{SPOOL_PREFIX}9-00000000"));
    std::fs::create_dir(&unlocked).expect("mkdir");
    let file = base.join(format!("{SPOOL_PREFIX}notes"));
    std::fs::write(&file, b"x").expect("write");

    let other = Exports::new(base.clone());
    assert_eq!(other.reclaim().expect("reclaim"), [dead.as_path()]);
    assert!(!dead.exists());
    assert!(live_spool.exists() && making.exists() && unlocked.exists() && file.exists());
    let d = live
        .download(&j.id, false)
        .expect("the live one's export is still there");
    assert!(d.path.exists());

    // Its process dies: the lock goes with it, and the spool is the next reclaim's.
    drop(live.lock().spool.take());
    assert!(live_spool.exists());
    assert_eq!(other.reclaim().expect("reclaim"), [live_spool.as_path()]);
    assert!(!live_spool.exists());
}

#[test]
fn an_ended_export_goes_after_an_hour_and_every_file_at_close() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ops = ops(dir.path());
    let e = Arc::new(Exports::new(dir.path().to_path_buf()));
    fake(&e, "old", Some(KEPT_FOR_MS + 1));
    fake(&e, "young", Some(KEPT_FOR_MS - 60_000));
    let old = e.lock().jobs[0].file.clone();
    let ids: Vec<String> = e.list().into_iter().map(|j| j.id).collect();
    assert_eq!(ids, ["young"]);
    assert!(!old.exists());

    let j = the_whole_log(&e, &ops);
    let d = e.download(&j.id, false).expect("done");
    assert!(d.path.exists() && d.name.starts_with("idemgate-export-"));
    let spool = d.path.parent().expect("spool").to_path_buf();
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&spool)
            .expect("spool")
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o700, "the spool is this user's only");
    }
    e.close();
    assert!(!spool.exists(), "the spool goes with the process");
    let p = start_whole_log(&e, &ops).expect_err("closed");
    let p = problem(p);
    assert_eq!(p.code, "shutting-down");
}

#[test]
fn a_bad_range_is_refused_before_a_job_exists() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ops = ops(dir.path());
    let e = Arc::new(Exports::new(dir.path().to_path_buf()));
    let range = EventRange {
        since: Some(2_000),
        until: Some(1_000),
    };
    let p = e
        .start(&ops, Exported::Events, Format::Ndjson, range)
        .expect_err("bad range");
    let p = problem(p);
    assert_eq!((p.status, p.code.as_str()), (400, "invalid-argument"));
    assert!(e.list().is_empty());
    assert!(e.lock().spool.is_none(), "and no spool is made for it");
}

/// The export jobs are the server's: a host without them (the desktop console, the CLI) refuses
/// them as a bad request and starts nothing; one with them runs them through the declared
/// operations.
#[test]
fn the_export_job_operations_run_only_where_the_host_has_export_jobs() {
    let dir = tempfile::tempdir().expect("tempdir");
    let start = |ops: &Ops| {
        let args =
            crate::dispatch::Args::json("start_export", serde_json::json!({"format": "csv"}));
        crate::dispatch::run(
            ops,
            Host::none(),
            "start_export",
            args.expect("args"),
            &mut |_| true,
        )
    };
    let e = start(&ops(dir.path())).expect_err("no export jobs");
    assert_eq!(problem(e).status, 400);
    let exports = Arc::new(Exports::new(dir.path().to_owned()));
    let ops = ops(dir.path()).with_exports(Arc::clone(&exports));
    let job = start(&ops).expect("started");
    let id = job["id"].as_str().expect("id");
    assert_eq!(until_ended(&exports, id).state, ExportState::Done);
    let args = crate::dispatch::Args::json("cancel_export", serde_json::json!({"id": id}));
    let gone = crate::dispatch::run(
        &ops,
        Host::none(),
        "cancel_export",
        args.expect("args"),
        &mut |_| true,
    );
    assert_eq!(gone.expect("deleted"), serde_json::Value::Null);
    assert!(exports.list().is_empty());
}
