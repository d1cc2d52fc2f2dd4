//! TLS termination (rustls, with *ring*): the certificate chain and key of `[tls]`, read from
//! PEM files at start and again at each reload (a renewed certificate needs no restart).

use std::sync::Arc;

use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::TlsAcceptor;

use crate::config::{ConfigError, TlsFile};

/// An acceptor for `tls`'s certificate and key; ALPN offers HTTP/1.1.
///
/// # Errors
/// [`ConfigError::Invalid`] when a file cannot be read or the key does not fit the certificate.
pub fn acceptor(tls: &TlsFile) -> Result<TlsAcceptor, ConfigError> {
    let invalid = |what: &str, e: &dyn std::fmt::Display| ConfigError::Invalid(format!("tls.{what}: {e}"));
    let chain = CertificateDer::pem_file_iter(&tls.cert_file)
        .map_err(|e| invalid("cert_file", &e))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| invalid("cert_file", &e))?;
    if chain.is_empty() {
        return Err(invalid("cert_file", &"no certificate in the file"));
    }
    let key = PrivateKeyDer::from_pem_file(&tls.key_file).map_err(|e| invalid("key_file", &e))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| invalid("cert_file", &e))?
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .map_err(|e| invalid("key_file", &e))?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(TlsAcceptor::from(Arc::new(config)))
}
