#![allow(
    clippy::too_many_lines,
    reason = "a test is one scenario told top to bottom, its steps checked in order"
)]

use super::*;

mod money;
mod secrets;

const EXAMPLE: &str = include_str!("../../../examples/idemgate.toml");

#[test]
fn the_example_parses() {
    std::env::set_var("CHARGES_SECRET", "whsec_test");
    std::env::set_var("PROCESSOR_AUTH", "Bearer sk_test");
    let c = Config::parse(EXAMPLE).expect("example config");
    assert!(c.routes.len() >= 3);
    assert_eq!(c.listen.to_string(), "127.0.0.1:8700");
    let refunds = c.route("refunds").expect("refunds");
    assert!(refunds.approval.is_some() && refunds.upstream_auth.is_some());
}

fn err(toml: &str) -> String {
    Config::parse(toml)
        .expect_err("should be refused")
        .to_string()
}

const BASE: &str = "[server]\nledger = \"x.db\"\n";

#[test]
fn every_server_and_defaults_field_in_error_is_named_at_once() {
    let cfg = "[server]\nlisten = \"localhost\"\nledger = \" \"\n\
               [defaults]\nttl = \"soon\"\nin_flight = \"maybe\"\nwait = \"5s\"\n\
               [[routes]]\nname = \"r\"\nmethod = \"POST\"\npath = \"/r\"\n\
               upstream = \"http://127.0.0.1:9\"\neffect = \"writ\"\n";
    let e = err(cfg);
    assert!(e.starts_with("4 errors:"), "{e}");
    for field in [
        "defaults.ttl",
        "defaults.in_flight",
        "server.listen",
        "server.ledger",
    ] {
        assert!(e.contains(&format!("\n  {field}: ")), "{field}: {e}");
    }
    // The routes build on the defaults: checked once these are right.
    assert!(
        !e.contains("routes[0]") && !e.contains("defaults.wait"),
        "{e}"
    );
    // One error alone is itself, not a list of one.
    assert_eq!(
        err("[server]\nledger = \" \"\n"),
        "server.ledger: name a SQLite file or a postgres:// URL"
    );
}

#[test]
fn bad_fields_are_named() {
    let route = |extra: &str| {
        format!("{BASE}[[routes]]\nname = \"charges\"\nmethod = \"POST\"\npath = \"/v1/charges\"\nupstream = \"http://127.0.0.1:9000\"\neffect = \"write\"\n{extra}")
    };
    assert!(err(&route("timeout = \"soon\"")).contains("routes[0] (charges).timeout"));
    // Every route in error is named at once, each by its first error; a good one is not.
    let three = format!(
        "{}\n[[routes]]\nname = \"ok\"\nmethod = \"GET\"\npath = \"/ok\"\n\
         upstream = \"http://127.0.0.1:9000\"\neffect = \"read\"\n\
         [[routes]]\nname = \"emails\"\nmethod = \"POST\"\npath = \"v1/emails\"\n\
         upstream = \"http://127.0.0.1:9000\"\neffect = \"writ\"\n",
        route("timeout = \"soon\"\nlease = \"0s\"")
    );
    let e = err(&three);
    assert!(e.starts_with("2 errors:"), "{e}");
    assert!(e.contains("\n  routes[0] (charges).timeout"), "{e}");
    assert!(e.contains("\n  routes[2] (emails).path"), "{e}");
    assert!(
        !e.contains("lease") && !e.contains("effect") && !e.contains("(ok)"),
        "{e}"
    );
    assert!(err(&route("effect2 = 1")).contains("unknown field"));
    let encoded = route("").replace("/v1/charges", "/v1/%63harges");
    assert!(err(&encoded).contains("write it decoded, \"/v1/charges\""));
    assert!(err(&route("retry = { attempts = 0 }")).contains("retry.attempts"));
    assert!(err(&route("timeout = \"60s\"")).contains("shorter than the lease"));
    // A retry's wait counts: 25s plus 10s passes a 30s lease, though each alone does not.
    let long_wait = "timeout = \"25s\"\nretry = { attempts = 2, max = \"10s\" }";
    assert!(err(&route(long_wait)).contains("plus a retry's wait of up to retry.max (10s)"));
    let one_try = "timeout = \"25s\"\nretry = { attempts = 1, max = \"10s\" }";
    assert!(Config::parse(&route(one_try)).is_ok(), "no retry, no wait");
    assert!(err(&route("lease = \"0s\"")).contains(".lease: must be more than zero"));
    assert!(err(&route("ttl = \"0s\"")).contains(".ttl: must be more than zero"));
    assert!(err(&route("scope.required = true")).contains(".scope.required: needs scope.header"));
    assert!(err(&format!("{BASE}[defaults]\nttl = \"0ms\""))
        .contains("defaults.ttl: must be more than zero"));
    // A route an earlier one takes every request of is refused; listed first, it is used.
    let two = |first: (&str, &str), second: (&str, &str)| {
        let r = |name: &str, (method, path): (&str, &str)| {
            format!("[[routes]]\nname = \"{name}\"\nmethod = \"{method}\"\npath = \"{path}\"\nupstream = \"http://127.0.0.1:9000\"\neffect = \"read\"\n")
        };
        format!("{BASE}{}{}", r("a", first), r("b", second))
    };
    let e = err(&two(("GET", "/v1/x"), ("get", "/v1/x/y")));
    assert!(
        e.contains("routes[1] (b).path") && e.contains("routes[0] (a)"),
        "{e}"
    );
    assert!(err(&two(("GET", "/v1/"), ("GET", "/v1/x"))).contains("never used"));
    assert!(err(&two(("GET", "/v1"), ("HEAD", "/v1"))).contains("never used"));
    for fine in [
        (("GET", "/v1/x/y"), ("GET", "/v1/x")),
        (("GET", "/v1/x"), ("POST", "/v1/x/y")),
        (("GET", "/v1/x"), ("GET", "/v1/xy")),
        (("HEAD", "/v1"), ("GET", "/v1")),
    ] {
        let (first, second) = fine;
        Config::parse(&two(first, second)).expect("both routes are used");
    }
    assert!(err(&route("key.json = \"args\"")).contains("key.json"));
    assert!(err(&route(
        "signature = { secret_env = \"IDEMGATE_TEST_UNSET_VAR\" }"
    ))
    .contains("IDEMGATE_TEST_UNSET_VAR"));
    assert!(err(&route("cache_ttl = \"5m\"")).contains("only read routes"));
    assert!(err(&route("secret_query = [\"sig=1\"]")).contains("routes[0] (charges).secret_query"));
    assert!(err(&route("secret_query = [\"\"]")).contains("not a query parameter name"));
    assert!(
        err(&format!("{BASE}[defaults]\nmax_body = \"1 parsec\"")).contains("defaults.max_body")
    );
    assert!(err(&format!("{BASE}[defaults]\nin_flight = \"queue\"")).contains("defaults.in_flight"));
    assert!(err("[server]\nledger = \"x\"\nlisten = \"localhost\"").contains("server.listen"));
    let upstream = |u: &str| {
        format!("{BASE}[[routes]]\nname = \"a\"\nmethod = \"POST\"\npath = \"/a\"\nupstream = \"{u}\"\neffect = \"write\"\n")
    };
    assert!(err(&upstream("ftp://x")).contains("http:// or https://"));
    // The proxy's own upstream credential: named by its field, never echoed.
    let auth = |a: &str| format!("{}upstream_auth = {a}\n", upstream("https://x"));
    let e = err(&auth("{ secret_env = \"IDEMGATE_TEST_NO_SUCH_VAR\" }"));
    assert!(
        e.contains("routes[0] (a).upstream_auth") && e.contains("not set"),
        "{e}"
    );
    assert!(
        err(&auth("{ header = \"a b\", secret_env = \"PATH\" }")).contains("upstream_auth.header")
    );
    let dir = tempfile::tempdir().expect("tempdir");
    let bad = dir.path().join("auth");
    std::fs::write(&bad, "Bearer sk_1\r\nX-Injected: 1\n").expect("write");
    let e = err(&auth(&format!(
        "{{ secret_file = {:?} }}",
        bad.display().to_string()
    )));
    assert!(
        e.contains("not a valid header value") && !e.contains("sk_1"),
        "{e}"
    );
    let good = dir.path().join("good");
    std::fs::write(&good, "Bearer sk_1\n").expect("write");
    let c = Config::parse(&auth(&format!(
        "{{ secret_file = {:?} }}",
        good.display().to_string()
    )))
    .expect("upstream_auth");
    let a = c.routes[0].upstream_auth.as_ref().expect("auth");
    assert_eq!(
        (a.header.as_str(), a.value.as_bytes()),
        ("authorization", &b"Bearer sk_1"[..])
    );
    assert!(a.value.is_sensitive());
    assert!(c.routes[0]
        .secret_headers
        .contains(&"authorization".to_owned()));
    let tls = Config::parse(&upstream("https://api.example.com:8443/v2/")).expect("https");
    assert_eq!(
        tls.routes[0].upstream,
        Upstream {
            https: true,
            authority: "api.example.com:8443".into(),
            prefix: "/v2".into()
        }
    );
    // As `serve --check` lists it, and as requests are sent.
    assert_eq!(
        tls.routes[0].upstream.to_string(),
        "https://api.example.com:8443/v2"
    );
}

#[test]
fn an_export_dir_must_be_a_directory_and_defaults_to_the_temporary_one() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("f");
    std::fs::write(&file, "x").expect("write");
    for d in [dir.path().join("missing"), file] {
        let cfg = format!(
            "[server]\nledger = \"x.db\"\nexport_dir = \"{}\"\n",
            d.display()
        );
        assert!(err(&cfg).contains("server.export_dir"), "{d:?}");
    }
    let cfg = format!(
        "[server]\nledger = \"x.db\"\nexport_dir = \"{}\"\n",
        dir.path().display()
    );
    assert_eq!(Config::parse(&cfg).expect("config").export_dir, dir.path());
    let cfg = "[server]\nledger = \"x.db\"\n";
    assert_eq!(
        Config::parse(cfg).expect("config").export_dir,
        std::env::temp_dir()
    );
}

#[test]
fn telemetry_sends_to_the_collector_s_traces_url() {
    let at = |section: &str| Config::parse(&format!("{BASE}[telemetry]\n{section}"));
    let t = at("otlp_endpoint = \"http://127.0.0.1:4318\"\n")
        .expect("config")
        .telemetry
        .expect("telemetry");
    assert_eq!(t.traces_url, "http://127.0.0.1:4318/v1/traces");
    assert_eq!(t.service_name, "idemgate");
    let t =
        at("otlp_endpoint = \"https://otel.example/tenant/v1/traces/\"\nservice_name = \"pay\"\n")
            .expect("config")
            .telemetry
            .expect("telemetry");
    assert_eq!(t.traces_url, "https://otel.example/tenant/v1/traces");
    assert_eq!(t.service_name, "pay");
    assert_eq!(
        at("otlp_endpoint = \"https://otel.example/otlp\"\n")
            .expect("config")
            .telemetry
            .map(|t| t.traces_url),
        Some("https://otel.example/otlp/v1/traces".to_owned())
    );
    assert!(Config::parse(BASE).expect("config").telemetry.is_none());
    for (section, field) in [
        (
            "otlp_endpoint = \"127.0.0.1:4318\"\n",
            "telemetry.otlp_endpoint",
        ),
        (
            "otlp_endpoint = \"grpc://127.0.0.1:4317\"\n",
            "telemetry.otlp_endpoint",
        ),
        (
            "otlp_endpoint = \"http://c:4318/?x=1\"\n",
            "telemetry.otlp_endpoint",
        ),
        (
            "otlp_endpoint = \"http://c:4318\"\nservice_name = \" \"\n",
            "telemetry.service_name",
        ),
    ] {
        let e = at(section).expect_err(section).to_string();
        assert!(e.contains(field), "{section}: {e}");
    }
    assert!(at("")
        .expect_err("no endpoint")
        .to_string()
        .contains("otlp_endpoint"));
}

#[test]
fn a_console_dir_must_hold_a_built_ui() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cfg = format!(
        "[server]\nledger = \"x.db\"\nconsole_dir = \"{}\"\n",
        dir.path().display()
    );
    assert!(err(&cfg).contains("server.console_dir"));
    std::fs::write(dir.path().join("index.html"), "<html>").expect("write");
    assert!(Config::parse(&cfg).expect("config").console_dir.is_some());
}

#[test]
fn sizes_and_durations() {
    assert_eq!(parse_size("f", "1MiB").expect("size"), 1 << 20);
    assert_eq!(parse_size("f", "64KB").expect("size"), 64_000);
    assert_eq!(parse_size("f", "100").expect("size"), 100);
    assert!(parse_size("f", "1TiB").is_err());
    assert_eq!(
        parse_duration("f", "100ms").expect("dur"),
        Duration::from_millis(100)
    );
    assert_eq!(
        parse_duration("f", "24h").expect("dur"),
        Duration::from_secs(86_400)
    );
}

#[test]
fn destructive_routes_never_retry() {
    let c = Config::parse(&format!("{BASE}[[routes]]\nname = \"del\"\nmethod = \"POST\"\npath = \"/d\"\nupstream = \"http://127.0.0.1:1\"\neffect = \"destructive\"\nretry = {{ attempts = 5 }}\n")).expect("config");
    assert_eq!(c.routes[0].retry.attempts, 1);
    assert_eq!(
        c.routes[0].key,
        Some(KeySource::Header("idempotency-key".into()))
    );
}

#[test]
fn operators_are_read_from_the_config_and_their_file_and_checked() {
    let h = |t: &str| TokenHash::of(t.as_bytes()).to_config();
    let op = |name: &str, role: &str, hash: &str| {
        format!("[[operators]]\nname = \"{name}\"\nrole = \"{role}\"\ntoken_hash = \"{hash}\"\n")
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("operators.toml");
    std::fs::write(&file, op("vic", "viewer", &h("t-vic"))).expect("write");
    let c = Config::parse(&format!(
        "[server]\nledger = \"x.db\"\noperators_file = \"{}\"\n{}",
        file.display(),
        op("ada", "admin", &h("t-ada"))
    ))
    .expect("config");
    let got: Vec<(&str, Role)> = c
        .operators
        .iter()
        .map(|o| (o.name.as_str(), o.role))
        .collect();
    assert_eq!(got, [("ada", Role::Admin), ("vic", Role::Viewer)]);
    assert_eq!(c.operators[1].token_hash, TokenHash::of(b"t-vic"));
    for (extra, field, says) in [
        (op("a", "root", &h("1")), "operators[0].role", "\"root\""),
        (
            op("a", "admin", "t-plain"),
            "operators[0].token_hash",
            "never the token",
        ),
        (op(" ", "admin", &h("1")), "operators[0].name", "1 to 200"),
        (
            op("a", "admin", &h("1")) + &op("a", "viewer", &h("2")),
            "operators[1].name",
            "named twice",
        ),
        (
            op("a", "admin", &h("1")) + &op("b", "viewer", &h("1")),
            "operators[1].token_hash",
            "share one token",
        ),
        (
            "[[operators]]\nname = \"a\"\nrole = \"admin\"\ntoken = \"t\"\n".to_owned(),
            "",
            "unknown field `token`",
        ),
    ] {
        let e = err(&format!("{BASE}{extra}"));
        assert!(e.contains(field) && e.contains(says), "{extra}: {e}");
    }
    let e = err(&format!(
        "{BASE}operators_file = \"/nonexistent/operators.toml\"\n"
    ));
    assert!(
        e.starts_with("server.operators_file: /nonexistent/operators.toml"),
        "{e}"
    );
}

#[test]
fn an_mcp_route_takes_tools_and_refuses_what_only_http_routes_have() {
    let mcp = |extra: &str| {
        format!(
            "{BASE}[[routes]]\nname = \"tools\"\npath = \"/mcp\"\nupstream = \"http://127.0.0.1:9\"\n\
             protocol = \"mcp\"\n{extra}"
        )
    };
    let c = Config::parse(&mcp(
        "[routes.tools.\"charge\"]\neffect = \"destructive\"\nkey.arg = \"/idempotency_key\"\n",
    ))
    .expect("an MCP route");
    let r = &c.routes[0];
    assert_eq!(r.protocol, Protocol::Mcp);
    assert!(r.serves("POST") && r.serves("GET") && r.serves("DELETE") && !r.serves("PUT"));
    assert_eq!(
        r.tools.get("charge"),
        Some(&ToolRule {
            effect: Some(Effect::Destructive),
            key_arg: Some("/idempotency_key".into()),
            ..ToolRule::default()
        })
    );
    // Retries stay for the tools that may be retried.
    assert_eq!(r.retry.attempts, 3);
    for (extra, field, says) in [
        ("method = \"POST\"\n", "method", "leave it out"),
        ("effect = \"write\"\n", "effect", "per tool"),
        ("key.header = \"K\"\n", "key", "not on an MCP route"),
        ("cache_ttl = \"1m\"\n", "cache_ttl", "not on an MCP route"),
        (
            "[routes.tools.\"x\"]\neffect = \"often\"\n",
            "tools.\"x\".effect",
            "often",
        ),
        (
            "[routes.tools.\"x\"]\nkey.arg = \"id\"\n",
            "tools.\"x\".key.arg",
            "JSON pointer",
        ),
        (
            "[routes.tools.\"x\"]\nkey = { json = \"/id\" }\n",
            "",
            "unknown field",
        ),
    ] {
        let e = err(&mcp(extra));
        assert!(e.contains(field) && e.contains(says), "{extra}: {e}");
    }
    let e = err(&format!("{BASE}[[routes]]\nname = \"r\"\npath = \"/r\"\nupstream = \"http://127.0.0.1:9\"\nprotocol = \"grpc\"\n"));
    assert!(e.contains("protocol") && e.contains("grpc"), "{e}");
    let e = err(&format!(
        "{BASE}[[routes]]\nname = \"r\"\nmethod = \"POST\"\npath = \"/r\"\nupstream = \"http://127.0.0.1:9\"\n\
         effect = \"write\"\n[routes.tools.\"x\"]\neffect = \"read\"\n"
    ));
    assert!(e.contains("only an MCP route"), "{e}");
    let e = err(&format!("{BASE}[[routes]]\nname = \"r\"\npath = \"/r\"\nupstream = \"http://127.0.0.1:9\"\neffect = \"write\"\n"));
    assert!(e.contains("method") && e.contains("missing"), "{e}");
}

#[test]
fn subjects_duplicate_values_and_loop_guards_are_checked() {
    let route = |extra: &str| {
        format!(
            "{BASE}[[routes]]\nname = \"charges\"\nmethod = \"POST\"\npath = \"/v1/charges\"\n\
             upstream = \"http://127.0.0.1:9\"\neffect = \"write\"\nsecret_headers = [\"X-Card\"]\n{extra}"
        )
    };
    let c = Config::parse(&route(
        "subject = { customer = \"/customer\", agent = \"header:X-Agent\" }\n\
         duplicate_on = [\"/customer\", \"/amount\"]\nduplicate_scope = \"any\"\n\
         loop_guard = { max = 20, window = \"1m\", action = \"reject\" }\n",
    ))
    .expect("business terms");
    let r = &c.routes[0];
    assert_eq!(
        r.subjects,
        [
            Subject {
                name: "agent".into(),
                from: SubjectSource::Header("x-agent".into())
            },
            Subject {
                name: "customer".into(),
                from: SubjectSource::Pointer("/customer".into())
            },
        ]
    );
    assert!(r.duplicate_any_scope);
    assert_eq!(
        r.loop_guard,
        Some(LoopGuard {
            max: 20,
            window: Duration::from_secs(60),
            reject: true
        })
    );
    for (extra, says) in [
        (
            "subject = { card = \"header:X-Card\" }\n",
            "carries secrets",
        ),
        (
            "subject = { auth = \"header:Authorization\" }\n",
            "carries secrets",
        ),
        ("subject = { customer = \"customer\" }\n", "JSON pointer"),
        ("subject = { \"a b\" = \"/x\" }\n", "name"),
        ("duplicate_on = []\n", "at least one"),
        ("duplicate_scope = \"all\"\n", "\"all\""),
        ("loop_guard = { max = 0, window = \"1m\" }\n", "at least 1"),
        (
            "loop_guard = { max = 5, window = \"1m\", action = \"block\" }\n",
            "block",
        ),
    ] {
        let e = err(&route(extra));
        assert!(e.contains(says), "{extra}: {e}");
    }
    let e = err(&format!(
        "{BASE}[[routes]]\nname = \"r\"\nmethod = \"GET\"\npath = \"/r\"\n\
         upstream = \"http://127.0.0.1:9\"\neffect = \"read\"\nsubject = {{ c = \"/c\" }}\n"
    ));
    assert!(e.contains("read route claims nothing"), "{e}");
}

#[test]
fn an_archive_may_be_a_bucket_and_its_url_is_checked() {
    let cfg = Config::parse(&format!(
        "{BASE}[retention]\nlog_hot = \"90d\"\narchive_dir = \"s3://audit/idemgate/\"\n"
    ))
    .expect("a bucket");
    let r = cfg.retention.expect("retention");
    assert_eq!(r.archive_dir.as_deref(), Some("s3://audit/idemgate"));
    for bad in ["s3://", "s3://key:secret@audit/x", "gs://audit/x"] {
        let e = err(&format!(
            "{BASE}[retention]\nlog_hot = \"90d\"\narchive_dir = \"{bad}\"\n"
        ));
        assert!(e.contains("retention.archive_dir"), "{bad}: {e}");
        assert!(!e.contains("secret@"), "{bad}: {e}");
    }
}

#[test]
fn a_retention_policy_and_a_signing_key_are_checked() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path().display();
    let ok = Config::parse(&format!(
        "{BASE}[retention]\nentries = \"30d\"\nlog_hot = \"90d\"\narchive_dir = \"{d}\"\n"
    ))
    .expect("a policy");
    let r = ok.retention.expect("retention");
    assert_eq!(r.entries, Some(Duration::from_secs(30 * 86_400)));
    assert_eq!(r.interval, Duration::from_secs(3600));
    assert!(Config::parse(BASE).expect("none").retention.is_none());
    for (toml, field) in [
        ("[retention]\n", "retention"),
        ("[retention]\nlog_hot = \"90d\"\n", "retention.archive_dir"),
        (
            "[retention]\nlog_hot = \"90d\"\narchive_dir = \"/no/such/dir\"\n",
            "retention.archive_dir",
        ),
        ("[retention]\nentries = \"soon\"\n", "retention.entries"),
        ("[retention]\nentries = \"1d\"\nkeep = \"1d\"\n", "keep"),
    ] {
        let e = err(&format!("{BASE}{toml}"));
        assert!(e.contains(field), "{toml}: {e}");
    }
    // A signing key is read at start: a missing or public one is refused there.
    let (private, public) =
        idemgate_ledger::checkpoint::generate("cfg.example/idemgate").expect("keys");
    let key = dir.path().join("k.key");
    let pubf = dir.path().join("k.pub");
    std::fs::write(&key, &private).expect("key");
    std::fs::write(&pubf, &public).expect("pub");
    let with_key = |f: &std::path::Path, extra: &str| {
        format!(
            "[server]\nledger = \"x.db\"\nsigning_key_file = \"{}\"\n{extra}",
            f.display()
        )
    };
    let c = Config::parse(&with_key(&key, "checkpoint_interval = \"10m\"\n")).expect("signing");
    assert_eq!(
        c.signing.map(|s| s.interval),
        Some(Duration::from_secs(600))
    );
    assert!(err(&with_key(&pubf, "")).contains("server.signing_key_file"));
    assert!(err(&with_key(&dir.path().join("none"), "")).contains("server.signing_key_file"));
    assert!(err(&format!("{BASE}checkpoint_interval = \"1h\"\n")).contains("checkpoint_interval"));
}

#[test]
fn an_approval_policy_is_checked_when_the_configuration_is() {
    std::env::set_var("REFUNDS_TOKEN", "Bearer sk_test");
    let route = |auth: &str, approval: &str| {
        format!(
            "{BASE}[[routes]]\nname = \"refunds\"\nmethod = \"POST\"\npath = \"/r\"\n\
             upstream = \"http://127.0.0.1:9\"\neffect = \"write\"\n{auth}\n\
             subject = {{ customer = \"/customer\" }}\n[routes.approval]\n{approval}\n"
        )
    };
    let auth = "upstream_auth = { secret_env = \"REFUNDS_TOKEN\" }";
    let ok = Config::parse(&route(
        auth,
        "when = 'args.amount > 50000 || subject.customer.startsWith(\"vip_\")'\napprovals = 2",
    ))
    .expect("a policy");
    let policy = ok.routes[0].approval.as_ref().expect("approval");
    let when = policy.when.as_ref().expect("condition");
    let subject = [("customer".to_owned(), "vip_1".to_owned())];
    let args = |v: serde_json::Value| Some(v);
    assert_eq!(
        when.matches(args(serde_json::json!({"amount": 60000})).as_ref(), &[]),
        Ok(true)
    );
    assert_eq!(
        when.matches(args(serde_json::json!({"amount": 100})).as_ref(), &subject),
        Ok(true)
    );
    assert_eq!(
        when.matches(args(serde_json::json!({"amount": 100.5})).as_ref(), &[])
            .ok(),
        None,
        "no customer: an error, which holds the call"
    );
    assert_eq!(policy.approvals, 2);
    for (auth, approval, says) in [
        ("", "approvals = 1", "set the route's upstream_auth"),
        (
            auth,
            "when = 'args.amount >'",
            "routes[0] (refunds).approval.when: not a CEL expression",
        ),
        (
            auth,
            "when = 'request.amount > 1'",
            "\"request\" is not known here",
        ),
        (
            auth,
            "approvals = 0",
            "approval.approvals: must be at least 1",
        ),
        (
            auth,
            "approvals = 2\napprovers = [\"alice\"]",
            "2 approvals need at least as many approvers",
        ),
        (
            auth,
            "notify_secret_env = \"HOOK\"",
            "signs what notify sends: set notify too",
        ),
        (
            auth,
            "notify = \"ftp://hooks\"",
            "an http:// or https:// URL",
        ),
        (auth, "expires = \"soon\"", "approval.expires"),
    ] {
        let e = err(&route(auth, approval));
        assert!(e.contains(says), "{approval}: {e}");
    }
    // An MCP route's approvals are its tools'.
    let mcp = |auth: &str, table: &str| {
        format!(
            "{BASE}[[routes]]\nname = \"tools\"\npath = \"/mcp\"\nprotocol = \"mcp\"\n\
             upstream = \"http://127.0.0.1:9\"\n{auth}\n[{table}]\nhold = \"1s\"\n"
        )
    };
    let tools =
        Config::parse(&mcp(auth, "routes.tools.\"refund\".approval")).expect("a tool's policy");
    let refund = &tools.routes[0].tools["refund"];
    assert_eq!(
        refund.approval.as_ref().map(|a| a.name.as_str()),
        Some("tools/refund")
    );
    let e = err(&mcp(auth, "routes.approval"));
    assert!(e.contains("an MCP route holds calls per tool"), "{e}");
    let e = err(&mcp("", "routes.tools.\"refund\".approval"));
    assert!(
        e.contains("tools.\"refund\".approval: a held call is forwarded later"),
        "{e}"
    );
}
