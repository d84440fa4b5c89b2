use super::export_job::ExportRef;
use super::Answers;

operation! {
    /// Cancels a running export, or deletes an ended one's files.
    Op {
        name: cancel_export,
        role: Admin,
        kind: Ledger,
        http: DELETE "/admin/v1/exports/{id}",
        also: [404],
        example: r#"{"id": "3f9c2a7e5b1d4c60"}"#,
        answers: Answers::NoContent,
        server_only: true,
    }
    fn run(ops, req: ExportRef, _) -> () {
        ops.exports()?.delete(&req.id)
    }
}
