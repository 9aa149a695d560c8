//! TLS roots for `rediss://` addresses.
//!
//! fred trusts the system's root certificates by default; a deployment with
//! its own CA names a PEM file instead ([`crate::Config::tls_ca_file`]). The
//! backend is the one fred is built with (features `rustls-ring`,
//! `rustls-aws-lc`, `native-tls`); with both kinds on, native-tls wins, as it
//! does in fred.

use std::path::Path;

use fred::types::config::Config as FredConfig;

use crate::error::{Error, Result};

/// Whether `address` asks for TLS (`rediss://`, `rediss-cluster://`, ...).
fn wants_tls(address: &str) -> bool {
    let scheme = address.split("://").next().unwrap_or("");
    scheme.starts_with("rediss") || scheme.starts_with("valkeys")
}

/// Applies the TLS settings to `fred`: a connector trusting `ca_file` when one
/// is named, or an error when TLS is asked for but not compiled in (fred would
/// connect in plain text after a warning).
pub(crate) fn apply(fred: &mut FredConfig, address: &str, ca_file: Option<&Path>) -> Result<()> {
    let redacted = || crate::naming::redact_url(address);
    if ca_file.is_some() && !wants_tls(address) {
        return Err(Error::Config(format!(
            "tlsCaFile is set but {} is not a TLS address (rediss://...)",
            redacted()
        )));
    }
    imp::apply(fred, address, ca_file)
}

#[cfg(any(
    feature = "rustls-ring",
    feature = "rustls-aws-lc",
    feature = "native-tls"
))]
mod imp {
    use super::*;
    use fred::types::config::TlsConnector;

    pub(super) fn apply(fred: &mut FredConfig, _: &str, ca_file: Option<&Path>) -> Result<()> {
        let (Some(ca), Some(tls)) = (ca_file, fred.tls.as_mut()) else {
            return Ok(());
        };
        tls.connector = connector_trusting(ca)?;
        Ok(())
    }

    fn bad(path: &Path, why: impl std::fmt::Display) -> Error {
        Error::Config(format!("tlsCaFile {}: {why}", path.display()))
    }

    /// A native-tls connector that trusts exactly the certificates in `path`.
    #[cfg(feature = "native-tls")]
    fn connector_trusting(path: &Path) -> Result<TlsConnector> {
        use fred::native_tls::{Certificate, TlsConnector as Native};
        let pem = std::fs::read(path).map_err(|e| bad(path, e))?;
        let certs = Certificate::stack_from_pem(&pem).map_err(|e| bad(path, e))?;
        if certs.is_empty() {
            return Err(bad(path, "no certificate in the file"));
        }
        let mut builder = Native::builder();
        builder.disable_built_in_roots(true);
        for cert in certs {
            builder.add_root_certificate(cert);
        }
        Ok(builder.build().map_err(|e| bad(path, e))?.into())
    }

    /// A rustls connector that trusts exactly the certificates in `path`.
    #[cfg(not(feature = "native-tls"))]
    fn connector_trusting(path: &Path) -> Result<TlsConnector> {
        use fred::rustls;
        use rustls::pki_types::pem::PemObject;
        use rustls::pki_types::CertificateDer;
        let mut roots = rustls::RootCertStore::empty();
        for cert in CertificateDer::pem_file_iter(path).map_err(|e| bad(path, e))? {
            roots
                .add(cert.map_err(|e| bad(path, e))?)
                .map_err(|e| bad(path, e))?;
        }
        if roots.is_empty() {
            return Err(bad(path, "no certificate in the file"));
        }
        #[cfg(feature = "rustls-ring")]
        let provider = rustls::crypto::ring::default_provider();
        #[cfg(not(feature = "rustls-ring"))]
        let provider = rustls::crypto::aws_lc_rs::default_provider();
        let config = rustls::ClientConfig::builder_with_provider(provider.into())
            .with_safe_default_protocol_versions()
            .map_err(|e| bad(path, e))?
            .with_root_certificates(roots)
            .with_no_client_auth();
        Ok(config.into())
    }
}

#[cfg(not(any(
    feature = "rustls-ring",
    feature = "rustls-aws-lc",
    feature = "native-tls"
)))]
mod imp {
    use super::*;

    pub(super) fn apply(_: &mut FredConfig, address: &str, _: Option<&Path>) -> Result<()> {
        if wants_tls(address) {
            return Err(Error::Config(format!(
                "{} asks for TLS, but redisson-lock was built without a TLS feature \
                 (rustls-ring, rustls-aws-lc or native-tls)",
                crate::naming::redact_url(address)
            )));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::wants_tls;

    #[test]
    fn tls_schemes_are_recognised() {
        assert!(wants_tls("rediss://h:1"));
        assert!(wants_tls("rediss-cluster://h:1"));
        assert!(wants_tls("rediss-sentinel://h:1"));
        assert!(!wants_tls("redis://h:1"));
        assert!(!wants_tls("redis-cluster://h:1"));
    }
}
