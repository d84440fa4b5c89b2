//! `[telemetry]`: where spans of proxied calls go, over OTLP/HTTP. Absent, none are made.

use serde::Deserialize;

use super::{invalid, ConfigError};

/// `[telemetry]` as TOML writes it.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawTelemetry {
    otlp_endpoint: String,
    service_name: Option<String>,
}

/// Where spans are sent, and the service they are of.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Telemetry {
    /// The collector's traces URL: `otlp_endpoint` as given when it ends in `/v1/traces`, else
    /// with `/v1/traces` after it (as `OTEL_EXPORTER_OTLP_ENDPOINT` is read).
    pub traces_url: String,
    /// `service.name` on every span's resource; `idemgate` unless configured.
    pub service_name: String,
}

pub(super) fn telemetry(t: &RawTelemetry) -> Result<Telemetry, ConfigError> {
    const FIELD: &str = "telemetry.otlp_endpoint";
    let given = t.otlp_endpoint.trim();
    let uri: http::Uri = given.parse().map_err(|e| {
        invalid(
            FIELD,
            format!("{given:?}: {e} (use the collector's OTLP/HTTP address, e.g. http://127.0.0.1:4318)"),
        )
    })?;
    match (uri.scheme_str(), uri.host()) {
        (Some("http" | "https"), Some(_)) => {}
        _ => {
            return Err(invalid(
                FIELD,
                format!(
                "{given:?}: use an http:// or https:// URL with a host, e.g. http://127.0.0.1:4318"
            ),
            ))
        }
    }
    if uri.query().is_some() {
        return Err(invalid(FIELD, format!("{given:?}: a query is not taken")));
    }
    let base = given.trim_end_matches('/');
    let traces_url = if base.ends_with("/v1/traces") {
        base.to_owned()
    } else {
        format!("{base}/v1/traces")
    };
    let service_name = match t.service_name.as_deref().map(str::trim) {
        None => "idemgate".to_owned(),
        Some("") => return Err(invalid("telemetry.service_name", "must not be empty")),
        Some(s) => s.to_owned(),
    };
    Ok(Telemetry {
        traces_url,
        service_name,
    })
}
