//! TLS roots for `rediss://` addresses.
//!
//! fred trusts the system's root certificates by default; a deployment with
//! its own CA names a PEM file instead ([`crate::Config::tls_ca_file`]).

use fred::types::config::TlsConnector;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::CertificateDer;

use crate::error::{Error, Result};

/// A rustls connector that trusts exactly the certificates in `path` (PEM).
pub(crate) fn connector_trusting(path: &str) -> Result<TlsConnector> {
    let bad = |why: String| Error::Config(format!("tlsCaFile {path}: {why}"));
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(path).map_err(|e| bad(e.to_string()))? {
        let cert = cert.map_err(|e| bad(e.to_string()))?;
        roots.add(cert).map_err(|e| bad(e.to_string()))?;
    }
    if roots.is_empty() {
        return Err(bad("no certificate in the file".into()));
    }
    let config = rustls::ClientConfig::builder_with_provider(
        rustls::crypto::ring::default_provider().into(),
    )
    .with_safe_default_protocol_versions()
    .map_err(|e| bad(e.to_string()))?
    .with_root_certificates(roots)
    .with_no_client_auth();
    Ok(config.into())
}
