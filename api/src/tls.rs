//! A certificate and key that can be replaced while connections are being made with them:
//! renewed client certificates (the agent's node certificate) and renewed serving
//! certificates (the API server's, the agent's endpoint) take effect for every new TLS
//! handshake without rebuilding the rustls configuration that holds them, as client-go's
//! certificate manager and kube-apiserver's dynamic serving certificates do.

use std::sync::{Arc, RwLock};

use rustls::client::ResolvesClientCert;
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls::SignatureScheme;

/// Why a certificate and key cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum LiveCertError {
    #[error("certificate: {0}")]
    Certificate(String),
    #[error("private key: {0}")]
    Key(String),
}

/// The current certificate chain and key; [`LiveCertificate::replace`] swaps them for the
/// handshakes that follow (connections already open keep theirs).
#[derive(Debug)]
pub struct LiveCertificate {
    current: RwLock<Arc<CertifiedKey>>,
}

/// A certificate chain and its key (PEM) in the form rustls signs with.
pub fn certified_key(cert_pem: &str, key_pem: &str) -> Result<Arc<CertifiedKey>, LiveCertError> {
    let chain = CertificateDer::pem_slice_iter(cert_pem.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| LiveCertError::Certificate(e.to_string()))?;
    if chain.is_empty() {
        return Err(LiveCertError::Certificate(
            "no certificate in the PEM".into(),
        ));
    }
    let key = PrivateKeyDer::from_pem_slice(key_pem.as_bytes())
        .map_err(|e| LiveCertError::Key(e.to_string()))?;
    let provider = rustls::crypto::ring::default_provider();
    let certified = CertifiedKey::from_der(chain, key, &provider)
        .map_err(|e| LiveCertError::Key(e.to_string()))?;
    Ok(Arc::new(certified))
}

impl LiveCertificate {
    pub fn new(cert_pem: &str, key_pem: &str) -> Result<Arc<LiveCertificate>, LiveCertError> {
        Ok(Arc::new(LiveCertificate {
            current: RwLock::new(certified_key(cert_pem, key_pem)?),
        }))
    }

    /// Makes `cert_pem` and `key_pem` the ones new handshakes use. Refused (and the current
    /// pair kept) when they do not belong together or do not parse.
    pub fn replace(&self, cert_pem: &str, key_pem: &str) -> Result<(), LiveCertError> {
        let next = certified_key(cert_pem, key_pem)?;
        *self.current.write().unwrap_or_else(|e| e.into_inner()) = next;
        Ok(())
    }

    /// The pair in use now.
    pub fn current(&self) -> Arc<CertifiedKey> {
        self.current
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

impl ResolvesClientCert for LiveCertificate {
    fn resolve(
        &self,
        _root_hint_subjects: &[&[u8]],
        sigschemes: &[SignatureScheme],
    ) -> Option<Arc<CertifiedKey>> {
        let current = self.current();
        current
            .key
            .choose_scheme(sigschemes)
            .is_some()
            .then_some(current)
    }

    fn has_certs(&self) -> bool {
        true
    }
}

impl ResolvesServerCert for LiveCertificate {
    fn resolve(&self, _client_hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair(name: &str) -> (String, String) {
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec![name.to_string()])
            .unwrap()
            .self_signed(&key)
            .unwrap();
        (cert.pem(), key.serialize_pem())
    }

    #[test]
    fn a_replaced_pair_is_served_and_a_mismatched_one_refused() {
        let (c1, k1) = pair("one");
        let (c2, k2) = pair("two");
        let live = LiveCertificate::new(&c1, &k1).unwrap();
        let first = live.current().cert[0].clone();
        live.replace(&c2, &k2).unwrap();
        let second = live.current().cert[0].clone();
        assert_ne!(first, second);
        // A certificate with another certificate's key is refused; the current pair stays.
        assert!(live.replace(&c1, &k2).is_err());
        assert_eq!(live.current().cert[0], second);
        assert!(LiveCertificate::new("junk", &k1).is_err());
    }
}
