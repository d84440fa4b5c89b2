//! Every operation a host runs, one file each. A file declares its operation once, with
//! [`operation!`]: its doc (the OpenAPI description and the console's help), its role, how it
//! runs, its admin API route, its request and answer types and its function. The list at the
//! bottom of this file registers them; from it come the dispatch table the hosts call
//! ([`crate::dispatch`]), the command table that gates roles ([`crate::commands`]), the admin
//! API's routes and the console's typed client.
//!
//! A request is one flat object: the admin API merges an operation's path parameters, its query
//! parameters (`GET`) or its JSON body (`POST`) into it, and the desktop console sends it as is.

use serde::de::DeserializeOwned;
use serde::Serialize;

pub use idemgate_config::Role;

/// How an operation runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// A ledger read or write: blocking, off the async threads.
    Ledger,
    /// Long work: blocking, reporting progress, stoppable between two reports.
    Job,
    /// Long work that reaches the upstream for some of its requests (a bulk replay): given the
    /// data plane when the host has one. Its declaration says which requests do
    /// ([`Declared::reaches_upstream`]).
    UpstreamJob,
    /// Reaches the upstream through the route configuration's data plane: async.
    Upstream,
}

impl Kind {
    /// Whether it reports progress and can be stopped (a host runs it as a job).
    pub fn is_job(self) -> bool {
        matches!(self, Kind::Job | Kind::UpstreamJob)
    }

    /// Whether it may reach the upstream, so a host that runs it needs the routes' upstream
    /// credentials.
    pub fn reaches_upstream(self) -> bool {
        matches!(self, Kind::Upstream | Kind::UpstreamJob)
    }
}

/// An operation's admin API route.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Http {
    /// `GET` takes the request from the path and the query, `POST` from the path and a JSON body.
    pub method: &'static str,
    /// As the router writes it: `/admin/v1/entries/{entry_id}`.
    pub path: &'static str,
}

impl Http {
    /// The names of the path's parameters, in order.
    pub fn params(&self) -> impl Iterator<Item = &'static str> {
        self.path
            .split('/')
            .filter_map(|s| s.strip_prefix('{').and_then(|s| s.strip_suffix('}')))
    }
}

/// What an operation is, as its hosts need to know it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Spec {
    /// Its name: the console's call, the key of the UI's table, the OpenAPI operation id.
    pub name: &'static str,
    /// Its doc comment: the first paragraph its summary, the rest its description.
    pub doc: &'static str,
    /// The least role that may run it through the admin API.
    pub role: Role,
    /// How it runs.
    pub kind: Kind,
    /// Its admin API route; `None` when it reads or writes files of the host that runs it (the
    /// desktop console's own disk), which a remote client must not name.
    pub http: Option<Http>,
    /// Whether it acts under an operator's name (`operator` in its request): the admin API
    /// fills it in from the token.
    pub acts: bool,
    /// The largest JSON body the admin API takes for it, in bytes.
    pub max_body: usize,
    /// Statuses it may answer besides those its kind, role and route imply (the OpenAPI
    /// document lists them).
    pub also: &'static [u16],
    /// A request it takes, as JSON (without `operator` where the admin API fills it in): the
    /// OpenAPI document's example, checked to decode as the request.
    pub example: &'static str,
    /// How the admin API answers it.
    pub answers: Answers,
    /// Whether only the server runs it (its export jobs): the desktop console and the CLI do
    /// not offer it.
    pub server_only: bool,
}

/// How the admin API answers an operation that succeeded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answers {
    /// `200 OK` with the answer.
    Json,
    /// `202 Accepted` with the answer, a job that goes on, and `Location` its URL: this path with
    /// the answer's members in its `{braces}`.
    Accepted(&'static str),
    /// `204 No Content`.
    NoContent,
}

impl Spec {
    /// Its doc's first paragraph, in one line, and the rest.
    pub fn summary(&self) -> (String, String) {
        let lines: Vec<&str> = self.doc.lines().map(str::trim).collect();
        let end = lines
            .iter()
            .position(|l| l.is_empty())
            .unwrap_or(lines.len());
        let rest: Vec<&str> = lines[end..]
            .iter()
            .copied()
            .skip_while(|l| l.is_empty())
            .collect();
        (lines[..end].join(" "), rest.join("\n").trim().to_owned())
    }
}

/// The largest JSON body an operation takes unless it says otherwise: 2 MiB.
pub const DEFAULT_MAX_BODY: usize = 2 << 20;

/// The types an operation's request and answer are: plain serde types, and TypeScript types and
/// JSON Schemas when the contract is generated (the console's bindings, the OpenAPI document).
#[cfg(feature = "ts")]
pub trait Wire: ts_rs::TS + schemars::JsonSchema + 'static {}
#[cfg(feature = "ts")]
impl<T: ts_rs::TS + schemars::JsonSchema + 'static> Wire for T {}
/// The types an operation's request and answer are: plain serde types, and TypeScript types and
/// JSON Schemas when the contract is generated (the console's bindings, the OpenAPI document).
#[cfg(not(feature = "ts"))]
pub trait Wire: 'static {}
#[cfg(not(feature = "ts"))]
impl<T: 'static> Wire for T {}

/// What the host running an operation has besides the ledger: the route configuration it runs
/// under, and the data plane built from it; the data plane brings its configuration.
#[derive(Debug, Clone, Copy, Default)]
pub struct Host<'a> {
    pub(crate) routes: Routes<'a>,
    upstream: Option<&'a idemgate_proxy::Engine>,
    /// Who asks, as far as the host can tell: an entry's view and the approvals inbox say by
    /// it whether they may decide on a held call (one who approved it already may not again).
    /// Nobody known by default, as with the shared admin token, whose actions each name whom
    /// they claim.
    pub caller: idemgate_ledger::Decider<'a>,
}

/// What a host knows of the routes an entry's replay or reconcile would go through.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) enum Routes<'a> {
    /// Nothing: the host takes its configuration per command (the CLI without `--config`).
    #[default]
    Unknown,
    /// That it has none now, so nothing reaches the upstream from it (the desktop console before
    /// its proxy starts).
    Absent,
    /// These.
    Known(&'a idemgate_config::Config),
}

impl<'a> Host<'a> {
    /// A host that takes its route configuration per command: what an entry's state allows is
    /// all an operation can judge.
    pub fn none() -> Host<'a> {
        Host::default()
    }

    /// A host that has no route configuration now: a replay or a reconcile is refused on it.
    pub fn without_routes() -> Host<'a> {
        Host {
            routes: Routes::Absent,
            ..Host::default()
        }
    }

    /// A host that runs under `cfg` (an entry's actions are judged by its routes too) but does
    /// not reach the upstream for this operation.
    pub fn routes(cfg: &'a idemgate_config::Config) -> Host<'a> {
        Host {
            routes: Routes::Known(cfg),
            ..Host::default()
        }
    }

    /// A host that reaches the upstream through `engine`, under its configuration.
    pub fn upstream(engine: &'a idemgate_proxy::Engine) -> Host<'a> {
        Host {
            routes: Routes::Known(&engine.cfg),
            upstream: Some(engine),
            ..Host::default()
        }
    }

    /// The same host, asked by `caller`.
    pub fn by(self, caller: idemgate_ledger::Decider<'a>) -> Host<'a> {
        Host { caller, ..self }
    }

    /// The data plane, when the host hands it over (long work that may reach the upstream).
    pub fn engine(&self) -> Option<&'a idemgate_proxy::Engine> {
        self.upstream
    }
}

/// What a blocking operation is handed besides its request.
pub struct Cx<'a, 'p> {
    /// What the host has: its route configuration and data plane.
    pub host: Host<'a>,
    /// Hears long work's progress; answering `false` stops it at that report.
    pub progress: idemgate_ledger::Progress<'p>,
}

impl std::fmt::Debug for Cx<'_, '_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cx").finish_non_exhaustive()
    }
}

/// Declares one operation (see the module's doc). The doc comment comes first; `http`, `acts`,
/// `max_body` and the like may be left out (`reaches_upstream: |req| ...` when its request decides
/// whether it reaches the upstream); then its function: `fn` for a blocking one, `async fn` with
/// the data plane for [`Kind::Upstream`].
macro_rules! operation {
    (
        $(#[doc = $doc:literal])*
        $op:ident {
            name: $name:ident,
            role: $role:ident,
            kind: $kind:ident,
            $(http: $method:ident $path:literal,)?
            $(acts: $acts:literal,)?
            $(max_body: $max:expr,)?
            $(also: [$($also:literal),*],)?
            example: $example:expr,
            $(answers: $answers:expr,)?
            $(server_only: $server_only:literal,)?
            $(reaches_upstream: |$reach_req:ident| $reach:expr,)?
        }
        fn run($ops:ident, $req:ident : $request:ty, $cx:pat) -> $answer:ty $body:block
    ) => {
        $crate::op::operation!(
            @spec $(#[doc = $doc])* $op $name $role $kind
            [$($method $path)?] [$($acts)?] [$($max)?] [$($($also),*)?] $example,
            [$($answers)?] [$($server_only)?] [$($reach_req $reach)?], $request, $answer
        );
        impl $crate::op::Operation for $op {
            fn run(
                $ops: &$crate::Ops,
                $req: $request,
                $cx: $crate::op::Cx<'_, '_>,
            ) -> $crate::OpsResult<$answer> $body
            async fn run_upstream(
                _: &$crate::Ops,
                _: &idemgate_proxy::Engine,
                _: $request,
            ) -> $crate::OpsResult<$answer> {
                Err($crate::op::refuse(stringify!($name)))
            }
        }
    };
    (
        $(#[doc = $doc:literal])*
        $op:ident {
            name: $name:ident,
            role: $role:ident,
            kind: Upstream,
            $(http: $method:ident $path:literal,)?
            $(acts: $acts:literal,)?
            $(max_body: $max:expr,)?
            $(also: [$($also:literal),*],)?
            example: $example:expr,
        }
        async fn run($ops:ident, $engine:ident, $req:ident : $request:ty) -> $answer:ty $body:block
    ) => {
        $crate::op::operation!(
            @spec $(#[doc = $doc])* $op $name $role Upstream
            [$($method $path)?] [$($acts)?] [$($max)?] [$($($also),*)?] $example, [] [] [],
            $request, $answer
        );
        impl $crate::op::Operation for $op {
            fn run(
                _: &$crate::Ops,
                _: $request,
                _: $crate::op::Cx<'_, '_>,
            ) -> $crate::OpsResult<$answer> {
                Err($crate::op::refuse(stringify!($name)))
            }
            async fn run_upstream(
                $ops: &$crate::Ops,
                $engine: &idemgate_proxy::Engine,
                $req: $request,
            ) -> $crate::OpsResult<$answer> $body
        }
    };
    (
        @spec $(#[doc = $doc:literal])* $op:ident $name:ident $role:ident $kind:ident
        [$($method:ident $path:literal)?] [$($acts:literal)?] [$($max:expr)?] [$($also:literal),*]
        $example:expr, [$($answers:expr)?] [$($server_only:literal)?]
        [$($reach_req:ident $reach:expr)?], $request:ty, $answer:ty
    ) => {
        $(#[doc = $doc])*
        #[derive(Debug)]
        pub struct $op;
        impl $crate::op::Declared for $op {
            const SPEC: $crate::op::Spec = $crate::op::Spec {
                name: stringify!($name),
                doc: concat!($($doc, "\n"),*),
                role: $crate::op::Role::$role,
                kind: $crate::op::Kind::$kind,
                http: $crate::op::operation!(@http $($method $path)?),
                acts: $crate::op::operation!(@acts $($acts)?),
                max_body: $crate::op::operation!(@max $($max)?),
                also: &[$($also),*],
                example: $example,
                answers: $crate::op::operation!(@answers $($answers)?),
                server_only: $crate::op::operation!(@server_only $($server_only)?),
            };
            type Request = $request;
            type Answer = $answer;
            $(
                fn reaches_upstream($reach_req: &$request) -> bool {
                    $reach
                }
            )?
        }
    };
    (@http) => { None };
    (@http $method:ident $path:literal) => {
        Some($crate::op::Http { method: stringify!($method), path: $path })
    };
    (@acts) => { false };
    (@max) => { $crate::op::DEFAULT_MAX_BODY };
    (@max $max:expr) => { $max };
    (@acts $acts:literal) => { $acts };
    (@answers) => { $crate::op::Answers::Json };
    (@answers $answers:expr) => { $answers };
    (@server_only) => { false };
    (@server_only $server_only:literal) => { $server_only };
}
pub(crate) use operation;

/// An operation's declaration, as [`operation!`] writes it.
pub trait Declared {
    /// What it is.
    const SPEC: Spec;
    /// What it is asked.
    type Request: DeserializeOwned + Wire;
    /// What it answers.
    type Answer: Serialize + Wire;

    /// Whether running it on `req` may reach the upstream, so that its host needs the routes'
    /// upstream credentials and the data plane: by its kind, unless its declaration says by its
    /// request (a bulk resolve never does, a bulk replay may).
    fn reaches_upstream(_req: &Self::Request) -> bool {
        Self::SPEC.kind.reaches_upstream()
    }
}

/// An operation's function: [`operation!`] writes the one its kind runs, and the other
/// refuses.
pub trait Operation: Declared {
    /// Runs a blocking operation (every kind but [`Kind::Upstream`]).
    fn run(ops: &crate::Ops, req: Self::Request, cx: Cx<'_, '_>) -> crate::OpsResult<Self::Answer>;
    /// Runs a [`Kind::Upstream`] operation through `engine`, the data plane.
    fn run_upstream<'a>(
        ops: &'a crate::Ops,
        engine: &'a idemgate_proxy::Engine,
        req: Self::Request,
    ) -> impl std::future::Future<Output = crate::OpsResult<Self::Answer>> + Send + 'a;
}

/// Runs the blocking operation `O` on `req`, on this thread: the path a host holding a typed
/// request takes (the CLI), through the function the dispatch runs for the others. `host` is
/// what the host has: its routes (an entry's actions are judged by them) and its data plane (for
/// long work that may reach the upstream, a bulk replay).
pub fn run<O: Operation>(
    ops: &crate::Ops,
    req: O::Request,
    host: Host<'_>,
    progress: idemgate_ledger::Progress<'_>,
) -> crate::OpsResult<O::Answer> {
    O::run(ops, req, Cx { host, progress })
}

/// Runs the [`Kind::Upstream`] operation `O` on `req` through `engine`, the data plane.
pub async fn run_upstream<O: Operation>(
    ops: &crate::Ops,
    engine: &idemgate_proxy::Engine,
    req: O::Request,
) -> crate::OpsResult<O::Answer> {
    O::run_upstream(ops, engine, req).await
}

/// The error of an operation called the way its kind does not run.
pub fn refuse(name: &str) -> crate::OpsError {
    crate::OpsError::invalid(
        "command",
        &format!("{name:?} does not run this way (an upstream call is async, the others block)"),
    )
}

/// Registers the operations: from this one list come [`SPECS`], the blocking and the async
/// dispatch, and (with the bindings) the console's TypeScript client.
macro_rules! registry {
    ($($module:ident),* $(,)?) => {
        $(
            #[doc = concat!("The `", stringify!($module), "` operation: its declaration, `Op`.")]
            pub mod $module;
        )*

        /// Every operation, in the order the console lists them.
        pub const SPECS: &[Spec] = &[$(<$module::Op as Declared>::SPEC),*];

        /// Runs the blocking operation `name` on `args`, its answer as JSON.
        pub(crate) fn call(
            ops: &crate::Ops,
            name: &str,
            args: args::Args,
            cx: Cx<'_, '_>,
        ) -> Option<crate::OpsResult<serde_json::Value>> {
            $(
                if name == <$module::Op as Declared>::SPEC.name {
                    return Some(args.decode(name).and_then(|req| {
                        args::answer(<$module::Op as Operation>::run(ops, req, cx))
                    }));
                }
            )*
            None
        }

        /// Whether running the operation `name` on `args` may reach the upstream
        /// ([`Declared::reaches_upstream`]); `None` when there is no such operation.
        pub(crate) fn reaches_upstream(
            name: &str,
            args: &args::Args,
        ) -> Option<crate::OpsResult<bool>> {
            $(
                if name == <$module::Op as Declared>::SPEC.name {
                    return Some(args.clone().decode(name).map(|req| {
                        <$module::Op as Declared>::reaches_upstream(&req)
                    }));
                }
            )*
            None
        }

        /// Runs the [`Kind::Upstream`] operation `name` on `args` through `engine`.
        pub(crate) async fn call_upstream(
            ops: &crate::Ops,
            engine: &idemgate_proxy::Engine,
            name: &str,
            args: args::Args,
        ) -> Option<crate::OpsResult<serde_json::Value>> {
            $(
                if name == <$module::Op as Declared>::SPEC.name {
                    let req = match args.decode(name) {
                        Ok(r) => r,
                        Err(e) => return Some(Err(e)),
                    };
                    return Some(args::answer(
                        <$module::Op as Operation>::run_upstream(ops, engine, req).await,
                    ));
                }
            )*
            None
        }

        /// Each operation's example decoded as its request, as a call's arguments are (with an
        /// operator where it acts): the operations whose example does not, and why.
        pub fn example_errors() -> Vec<(&'static str, String)> {
            let mut out = Vec::new();
            $(
                let spec = <$module::Op as Declared>::SPEC;
                let decoded = serde_json::from_str::<serde_json::Value>(spec.example)
                    .map_err(|e| e.to_string())
                    .and_then(|mut v| {
                        if spec.acts {
                            v["operator"] = serde_json::json!("alice");
                        }
                        args::Args::json(spec.name, v)
                            .and_then(|a| a.decode::<<$module::Op as Declared>::Request>(spec.name))
                            .map_err(|e| e.to_string())
                    });
                if let Err(e) = decoded {
                    out.push((spec.name, e));
                }
            )*
            out
        }

        /// Each operation with its request's schema (inline: its members are the operation's
        /// parameters) and its answer's (a reference into `gen`'s definitions).
        #[cfg(feature = "ts")]
        pub fn schemas(
            gen: &mut schemars::SchemaGenerator,
        ) -> Vec<(Spec, schemars::Schema, schemars::Schema)> {
            vec![$(
                (
                    <$module::Op as Declared>::SPEC,
                    <<$module::Op as Declared>::Request as schemars::JsonSchema>::json_schema(gen),
                    gen.subschema_for::<<$module::Op as Declared>::Answer>(),
                )
            ),*]
        }

        /// Each operation's request and answer as TypeScript type names, exporting their
        /// declarations (and what they name) into `cfg`'s directory.
        #[cfg(feature = "ts")]
        pub fn export_types(
            cfg: &ts_rs::Config,
        ) -> Result<Vec<(Spec, String, String)>, ts_rs::ExportError> {
            Ok(vec![$(
                (
                    <$module::Op as Declared>::SPEC,
                    ts::export::<<$module::Op as Declared>::Request>(cfg)?,
                    ts::export::<<$module::Op as Declared>::Answer>(cfg)?,
                )
            ),*])
        }
    };
}

pub(crate) mod args;
pub mod common;
#[cfg(feature = "ts")]
pub mod ts;

registry![
    stats,
    entries,
    show,
    log,
    incidents,
    review_incident,
    reopen_incident,
    preview_resolve,
    resolve,
    replay,
    reconcile,
    preview_bulk,
    bulk,
    preview_purge,
    purge,
    export,
    export_entries,
    start_export,
    export_jobs,
    export_job,
    cancel_export,
    verify_ledger,
    head,
    prove,
    prove_consistency,
    verify_against,
    verify_against_manifest,
    verify_export,
    retention_status,
    archive_segments,
    verify_archive,
    archived,
    verify_history,
    archive,
    run_retention,
    approvals,
    approve,
    reject,
];

/// An operation by its name.
pub fn spec(name: &str) -> Option<&'static Spec> {
    SPECS.iter().find(|s| s.name == name)
}

#[cfg(test)]
mod tests {
    /// Every operation's example is a request it takes: the OpenAPI document shows them.
    #[test]
    fn every_example_decodes_as_its_operation_s_request() {
        assert_eq!(super::example_errors(), Vec::new());
    }

    /// ARCHITECTURE.md: `op/` takes nothing from `dispatch.rs` or `commands.rs`, which are built
    /// on it (its tests may run operations through `dispatch`).
    #[test]
    fn the_declarations_take_nothing_from_their_hosts_side() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/op");
        for file in std::fs::read_dir(dir).expect("src/op").flatten() {
            let text = std::fs::read_to_string(file.path()).expect("a source");
            let code = text.split("#[cfg(test)]").next().unwrap_or_default();
            for line in code.lines().filter(|l| !l.trim_start().starts_with("//")) {
                assert!(
                    !line.contains("dispatch::") && !line.contains("commands::"),
                    "{}: {line}",
                    file.path().display()
                );
            }
        }
    }
}
