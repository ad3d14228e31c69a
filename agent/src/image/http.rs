//! The registry client's HTTP: skiff's one client transport ([`api::transport`]), with the
//! registry's trust and timeouts.
//!
//! TLS trusts the Mozilla roots of `webpki-roots` plus any extra CA given (PEM). Connections
//! are kept alive between the requests of a pull (manifest, config, layers); response bodies
//! are read in pieces so large blobs stream to disk.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use api::transport::{Options, Transport};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::CertificateDer;

pub use api::transport::{Response, TransportError as HttpError, Url};

const CONNECT_TIMEOUT: Duration = Duration::from_secs(20);
/// Longest wait for the next bytes of an answer.
const READ_TIMEOUT: Duration = Duration::from_secs(60);

/// A CA file or TLS setting that cannot be used.
#[derive(Debug, thiserror::Error)]
#[error("invalid TLS configuration: {0}")]
pub struct TlsConfigError(String);

/// The registry client's transport, trusting what `tls` trusts.
pub fn client(tls: rustls::ClientConfig) -> Transport {
    Transport::new(
        Arc::new(tls),
        Options {
            connect_timeout: CONNECT_TIMEOUT,
            read_timeout: Some(READ_TIMEOUT),
            user_agent: "skiff-agent".into(),
            ..Default::default()
        },
    )
}

/// Builds a rustls configuration trusting the webpki roots and, if given, the CAs in
/// `extra_ca_pem`.
pub fn tls_config(extra_ca_pem: Option<&[u8]>) -> Result<rustls::ClientConfig, TlsConfigError> {
    let config = TlsConfigError;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
    if let Some(pem) = extra_ca_pem {
        let mut n = 0;
        for cert in CertificateDer::pem_slice_iter(pem) {
            let cert = cert.map_err(|e| config(format!("CA certificate: {e}")))?;
            roots
                .add(cert)
                .map_err(|e| config(format!("CA certificate: {e}")))?;
            n += 1;
        }
        if n == 0 {
            return Err(config("the CA file holds no certificate".into()));
        }
    }
    let mut tls = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| config(e.to_string()))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    tls.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(tls)
}

/// Reads a PEM CA file for [`tls_config`].
pub fn read_ca_file(path: &Path) -> Result<Vec<u8>, TlsConfigError> {
    std::fs::read(path)
        .map_err(|e| TlsConfigError(format!("cannot read CA file {}: {e}", path.display())))
}
