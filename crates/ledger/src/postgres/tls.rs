//! TLS to PostgreSQL, as libpq's `sslmode` and `sslrootcert` say in the ledger's URL.
//!
//! | `sslmode` | TLS | the server's certificate |
//! |---|---|---|
//! | `disable` | never | — |
//! | `prefer` (the default, as libpq's) | when the server offers it | not checked (with `sslrootcert`: as `verify-ca`) |
//! | `require` | always | not checked (with `sslrootcert`: as `verify-ca`) |
//! | `verify-ca` | always | signed by a trusted CA |
//! | `verify-full` | always | signed by a trusted CA, and for the host connected to |
//!
//! The trusted CAs are `sslrootcert`'s (a PEM file), or the system's (`sslrootcert=system`, and
//! `verify-*` without it: Debian's `ca-certificates`; `SSL_CERT_FILE` or `SSL_CERT_DIR` name
//! others). tokio-postgres knows neither `verify-*` nor `sslrootcert`: both are taken out of the
//! URL here, and the connection asks for TLS as `require` does. Client certificates (`sslcert`,
//! `sslkey`) are refused by name, not ignored. rustls with ring, as the proxy's upstream client;
//! SCRAM's channel binding comes with tokio-postgres-rustls.

use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::crypto::{CryptoProvider, WebPkiSupportedAlgorithms};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{
    CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme,
};
use tokio_postgres::config::SslMode;
use tokio_postgres_rustls::MakeRustlsConnect;

use crate::error::{LedgerError, Result};

/// How the connection's TLS is asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    Disable,
    Prefer,
    Require,
    VerifyCa,
    VerifyFull,
}

impl Mode {
    fn parse(v: &str) -> Option<Mode> {
        Some(match v {
            "disable" => Mode::Disable,
            "allow" | "prefer" => Mode::Prefer,
            "require" => Mode::Require,
            "verify-ca" => Mode::VerifyCa,
            "verify-full" => Mode::VerifyFull,
            _ => return None,
        })
    }

    /// What tokio-postgres is told: it negotiates; the checks are the verifier's.
    pub(crate) fn ssl_mode(self) -> SslMode {
        match self {
            Mode::Disable => SslMode::Disable,
            Mode::Prefer => SslMode::Prefer,
            Mode::Require | Mode::VerifyCa | Mode::VerifyFull => SslMode::Require,
        }
    }
}

/// The TLS settings of a URL, and the URL without the ones tokio-postgres does not know.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Settings {
    pub mode: Mode,
    /// A PEM file of trusted CAs; `None` for the system's.
    pub root_cert: Option<String>,
}

/// Splits `sslmode` and `sslrootcert` off `url` (which must otherwise be tokio-postgres's to
/// parse). Errors name the setting, never the URL (it may hold a password).
pub(crate) fn split(url: &str) -> Result<(String, Settings)> {
    let invalid = |what: String| LedgerError::Unsupported(format!("PostgreSQL URL: {what}"));
    let (base, query) = match url.split_once('?') {
        Some((b, q)) => (b, q),
        None => (url, ""),
    };
    let (mut mode, mut root_cert) = (None, None);
    let mut kept = Vec::new();
    for kv in query.split('&').filter(|kv| !kv.is_empty()) {
        let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
        let v = percent_encoding::percent_decode_str(v)
            .decode_utf8()
            .map_err(|_| invalid(format!("{k}: not UTF-8 once percent-decoded")))?;
        match k {
            "sslmode" => {
                mode = Some(Mode::parse(&v).ok_or_else(|| {
                    invalid(format!(
                        "sslmode {v:?}: disable, allow, prefer, require, verify-ca or verify-full"
                    ))
                })?);
            }
            "sslrootcert" => root_cert = Some(v.into_owned()),
            "sslcert" | "sslkey" | "sslpassword" | "sslcrl" | "sslcrldir" => {
                return Err(invalid(format!(
                    "{k} is not supported (client certificates and CRLs): authenticate with a password or trust"
                )));
            }
            _ => kept.push(kv),
        }
    }
    let url = if kept.is_empty() {
        base.to_owned()
    } else {
        format!("{base}?{}", kept.join("&"))
    };
    let root_cert = root_cert.filter(|r| r != "system");
    let settings = Settings {
        mode: mode.unwrap_or(Mode::Prefer),
        root_cert,
    };
    Ok((url, settings))
}

/// The TLS connector for `s`; `None` when TLS is never used.
pub(crate) fn connector(s: &Settings) -> Result<Option<MakeRustlsConnect>> {
    if s.mode == Mode::Disable {
        return Ok(None);
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let lenient = |chain| Lenient {
        chain,
        algorithms: provider.signature_verification_algorithms,
    };
    let verifier: Arc<dyn ServerCertVerifier> = match (s.mode, &s.root_cert) {
        (Mode::Prefer | Mode::Require, None) => Arc::new(lenient(None)),
        (Mode::VerifyFull, roots) => web_pki(roots.as_deref(), &provider)?,
        (_, roots) => Arc::new(lenient(Some(web_pki(roots.as_deref(), &provider)?))),
    };
    let config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| LedgerError::Unsupported(format!("TLS: {e}")))?
        .dangerous()
        .with_custom_certificate_verifier(verifier)
        .with_no_client_auth();
    Ok(Some(MakeRustlsConnect::new(config)))
}

/// The CAs of `file` (PEM), or the system's.
fn roots(file: Option<&str>) -> Result<RootCertStore> {
    let mut store = RootCertStore::empty();
    let certs: Vec<CertificateDer<'static>> = match file {
        Some(f) => CertificateDer::pem_file_iter(f)
            .and_then(|it| it.collect::<std::result::Result<_, _>>())
            .map_err(|e| {
                LedgerError::Unsupported(format!("sslrootcert {f}: not a readable PEM file ({e})"))
            })?,
        None => rustls_native_certs::load_native_certs().certs,
    };
    let (_, refused) = store.add_parsable_certificates(certs);
    if store.is_empty() {
        return Err(LedgerError::Unsupported(match file {
            Some(f) => format!("sslrootcert {f}: no CA certificate in it ({refused} refused)"),
            None => "no CA certificates on this system to verify PostgreSQL's against (install \
                     ca-certificates, set SSL_CERT_FILE, or give sslrootcert)"
                .to_owned(),
        }));
    }
    Ok(store)
}

fn web_pki(
    file: Option<&str>,
    provider: &Arc<CryptoProvider>,
) -> Result<Arc<WebPkiServerVerifier>> {
    WebPkiServerVerifier::builder_with_provider(Arc::new(roots(file)?), provider.clone())
        .build()
        .map_err(|e| LedgerError::Unsupported(format!("TLS: {e}")))
}

/// `verify-ca` (the chain to a trusted CA is checked, the name is not: `chain`), and `prefer`
/// and `require` without `sslrootcert` (nothing is, as libpq: no `chain`). Either way the
/// handshake's signatures are checked, against the key the server presents.
#[derive(Debug)]
struct Lenient {
    chain: Option<Arc<WebPkiServerVerifier>>,
    algorithms: WebPkiSupportedAlgorithms,
}

impl ServerCertVerifier for Lenient {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp: &[u8],
        now: UnixTime,
    ) -> std::result::Result<ServerCertVerified, rustls::Error> {
        let Some(chain) = &self.chain else {
            return Ok(ServerCertVerified::assertion());
        };
        match chain.verify_server_cert(end_entity, intermediates, server_name, ocsp, now) {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            r => r,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tls_settings_are_taken_out_of_the_url() {
        let (url, s) = split("postgres://u:p@h/db?sslmode=verify-full&sslrootcert=%2Fetc%2Fca.pem&application_name=x")
            .expect("split");
        assert_eq!(url, "postgres://u:p@h/db?application_name=x");
        assert_eq!(s.mode, Mode::VerifyFull);
        assert_eq!(s.root_cert.as_deref(), Some("/etc/ca.pem"));
        let (url, s) = split("postgres://u@h/db").expect("split");
        assert_eq!(
            (url.as_str(), s.mode, s.root_cert),
            ("postgres://u@h/db", Mode::Prefer, None)
        );
        let (url, s) =
            split("postgres://u@h/db?sslmode=require&sslrootcert=system").expect("split");
        assert_eq!(
            (url.as_str(), s.mode, s.root_cert),
            ("postgres://u@h/db", Mode::Require, None)
        );
        for bad in [
            "postgres://u:secret@h/db?sslmode=verify",
            "postgres://u:secret@h/db?sslcert=/c.pem",
            "postgres://u:secret@h/db?sslrootcert=%ff",
        ] {
            let e = split(bad).expect_err(bad).to_string();
            assert!(!e.contains("secret"), "{e}");
            assert!(e.contains("ssl"), "{e}");
        }
    }

    #[test]
    fn a_root_file_without_a_certificate_is_refused_by_name() {
        let dir = tempfile::tempdir().expect("tempdir");
        let f = dir.path().join("ca.pem");
        std::fs::write(&f, "not a certificate\n").expect("write");
        let s = Settings {
            mode: Mode::VerifyFull,
            root_cert: Some(f.display().to_string()),
        };
        let e = connector(&s).map(|_| ()).expect_err("refused").to_string();
        assert!(e.contains("sslrootcert") && e.contains("ca.pem"), "{e}");
        let missing = Settings {
            mode: Mode::VerifyCa,
            root_cert: Some("/nonexistent/ca.pem".into()),
        };
        assert!(connector(&missing).is_err());
        assert!(connector(&Settings {
            mode: Mode::Disable,
            root_cert: None
        })
        .expect("disable")
        .is_none());
        assert!(connector(&Settings {
            mode: Mode::Require,
            root_cert: None
        })
        .expect("require")
        .is_some());
    }
}
