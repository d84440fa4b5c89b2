use super::common::NoArgs;
use crate::jobs::exports::ExportJob;

operation! {
    /// The exports of this process (running, or ended within the hour), newest first.
    Op {
        name: export_jobs,
        role: Viewer,
        kind: Ledger,
        http: GET "/admin/v1/exports",
        example: "{}",
        server_only: true,
    }
    fn run(ops, _req: NoArgs, _) -> Vec<ExportJob> {
        Ok(ops.exports()?.list())
    }
}
