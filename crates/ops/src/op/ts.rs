//! The console's typed client, generated from the operations' declarations: each operation a
//! function of its request type to its answer type, and the table that says how each is
//! reached (role, kind, admin API route).

use ts_rs::{TypeVisitor, TS};

use super::{Kind, Spec};

/// Exports `T`'s declaration, and those of the types it names, into `cfg`'s directory; its
/// TypeScript name.
pub(super) fn export<T: TS + 'static + ?Sized>(
    cfg: &ts_rs::Config,
) -> Result<String, ts_rs::ExportError> {
    struct Each<'a> {
        cfg: &'a ts_rs::Config,
        error: Option<ts_rs::ExportError>,
    }
    impl TypeVisitor for Each<'_> {
        fn visit<U: TS + 'static + ?Sized>(&mut self) {
            if self.error.is_none() && U::output_path().is_some() {
                self.error = U::export_all(self.cfg).err();
            }
        }
    }
    let mut each = Each { cfg, error: None };
    if T::output_path().is_some() {
        T::export_all(cfg)?;
    } else {
        // A `Vec<Incident>` or an `Option<Manifest>` names its type as a generic.
        T::visit_dependencies(&mut each);
        T::visit_generics(&mut each);
    }
    match each.error {
        Some(e) => Err(e),
        None => Ok(T::name(cfg)),
    }
}

/// The names a TypeScript type expression imports: its capitalised identifiers but the
/// language's own.
fn imports(ty: &str) -> Vec<String> {
    ty.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|w| w.starts_with(|c: char| c.is_ascii_uppercase()))
        .filter(|w| !matches!(*w, "Array" | "Record" | "Partial" | "Promise"))
        .map(str::to_owned)
        .collect()
}

fn doc_comment(doc: &str, indent: &str) -> String {
    let lines: Vec<&str> = doc.lines().map(str::trim).collect();
    let mut s = format!("{indent}/**\n");
    for l in lines.iter().skip_while(|l| l.is_empty()) {
        s.push_str(&format!(
            "{indent} *{}{l}\n",
            if l.is_empty() { "" } else { " " }
        ));
    }
    s.push_str(&format!("{indent} */\n"));
    s
}

/// `ops.ts`: the table of the operations and a client over a host's `call`.
pub fn client(ops: &[(Spec, String, String)]) -> String {
    let mut names: Vec<String> = ops
        .iter()
        .flat_map(|(_, req, ans)| imports(req).into_iter().chain(imports(ans)))
        .collect();
    names.sort();
    names.dedup();
    let mut s = String::from(
        "// Generated from crates/ops/src/op by the ipc_bindings test; do not edit.\n",
    );
    for n in &names {
        s.push_str(&format!("import type {{ {n} }} from \"./{n}\";\n"));
    }
    s.push_str(
        "\n/** Each operation: the least role that may run it, how it runs, its admin API route \
         (none for one that reads or writes the desktop's own files), and whether the admin API \
         records it under the token's operator. */\nexport const OPS = {\n",
    );
    for (spec, _, _) in ops {
        let http = spec.http.map_or_else(
            || "null".to_owned(),
            |h| format!("{{ method: \"{}\", path: \"{}\" }}", h.method, h.path),
        );
        s.push_str(&format!(
            "  {}: {{ role: \"{}\", kind: \"{}\", http: {http}, acts: {} }},\n",
            spec.name,
            spec.role,
            kind(spec.kind),
            spec.acts
        ));
    }
    s.push_str(
        "} as const;\n\nexport type OpName = keyof typeof OPS;\n\n\
         /** Runs one operation on a host: over IPC, or through the admin API. `job` names long \
         work (its progress and Cancel); `null` for the rest. */\n\
         export type Call = (name: OpName, req: unknown, job: string | null) => Promise<unknown>;\n\n\
         /** The operations, typed. A job's answer is `null` when it was cancelled where its \
         report is lost (a browser dropping the request). */\nexport interface Ops {\n",
    );
    for (spec, req, ans) in ops {
        s.push_str(&doc_comment(spec.doc, "  "));
        if spec.kind.is_job() {
            s.push_str(&format!(
                "  {}(req: {req}, job: string): Promise<{ans} | null>;\n",
                spec.name
            ));
        } else {
            s.push_str(&format!("  {}(req: {req}): Promise<{ans}>;\n", spec.name));
        }
    }
    s.push_str("}\n\n/** The typed operations over a host's `call`. */\nexport function opsClient(call: Call): Ops {\n  return {\n");
    for (spec, req, ans) in ops {
        if spec.kind.is_job() {
            s.push_str(&format!(
                "    {n}: (req: {req}, job: string) => call(\"{n}\", req, job) as Promise<{ans} | null>,\n",
                n = spec.name
            ));
        } else {
            s.push_str(&format!(
                "    {n}: (req: {req}) => call(\"{n}\", req, null) as Promise<{ans}>,\n",
                n = spec.name
            ));
        }
    }
    s.push_str("  };\n}\n");
    s
}

/// `values.ts`: the values of the ledger's enums that the console offers as choices (the Log's
/// kinds, the states), so one the ledger adds is offered with no change to the console.
pub fn values() -> String {
    use idemgate_ledger::{EventKind, State};
    let list = |values: &mut dyn Iterator<Item = &'static str>| -> String {
        values.map(|v| format!("  \"{v}\",\n")).collect()
    };
    format!(
        "// Generated from crates/ledger/src/model.rs by the ipc_bindings test; do not edit.\n\
         import type {{ EventKind }} from \"./EventKind\";\n\
         import type {{ State }} from \"./State\";\n\n\
         /** Every kind of event the log holds, in the ledger's order. */\n\
         export const EVENT_KINDS: readonly EventKind[] = [\n{}];\n\n\
         /** Every state an entry may be in. */\n\
         export const STATES: readonly State[] = [\n{}];\n",
        list(&mut EventKind::ALL.iter().map(|k| k.as_str())),
        list(&mut State::ALL.iter().map(|s| s.as_str())),
    )
}

fn kind(k: Kind) -> &'static str {
    match k {
        Kind::Ledger => "ledger",
        Kind::Job => "job",
        Kind::UpstreamJob => "upstream_job",
        Kind::Upstream => "upstream",
    }
}
