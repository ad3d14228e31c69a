//! Renewing the node's certificate before it expires, as the kubelet's client-certificate
//! rotation (client-go's certificate manager) does it.
//!
//! At a deadline chosen at random between 70% and 90% of the certificate's lifetime (so a
//! fleet joined at once does not renew at once), the agent makes a new key and asks for a
//! certificate of its own identity with a CertificateSigningRequest (signer
//! `kubernetes.io/kube-apiserver-client-kubelet`), authenticated by the certificate it still
//! holds: no join token. The server approves a node's request for itself and signs it. The
//! new pair is kept beside the old one ([`Credentials::store_renewed`]) and swapped into the
//! one [`LiveCertificate`] that both the API client and the agent's endpoint use, so new
//! connections carry it without a restart; the client's pooled connections are closed so
//! the server sees the new certificate on the next request. A failed attempt is retried
//! with back-off. A certificate that has expired cannot be renewed this way (the server no
//! longer accepts it): the node needs a new join token.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use api::certificates::{
    CertificateSigningRequest, CertificateSigningRequestSpec, KUBE_APISERVER_CLIENT_KUBELET_SIGNER,
};
use api::client::Client;
use api::core::ByteString;
use api::meta::ObjectMeta;
use api::tls::LiveCertificate;
use ring::rand::SecureRandom as _;
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::CertificateDer;

use super::credentials::{self, Credentials};

/// The share of the lifetime the deadline is at least (client-go: 70%) ...
const EARLIEST: f64 = 0.7;
/// ... plus up to this much more at random (to 90%).
const JITTER: f64 = 0.2;
/// How long the agent waits for its request to be approved and signed.
const ISSUE_TIMEOUT: Duration = Duration::from_secs(15 * 60);
/// The first and the longest wait between failed attempts.
const FIRST_RETRY: Duration = Duration::from_secs(1);
const LONGEST_RETRY: Duration = Duration::from_secs(5 * 60);

/// Why a renewal failed.
#[derive(Debug, thiserror::Error)]
pub enum RotationError {
    #[error("cannot read the node certificate: {0}")]
    Certificate(String),
    #[error(transparent)]
    Key(#[from] credentials::JoinError),
    #[error("the certificate signing request failed: {0}")]
    Api(#[from] api::client::ClientError),
    #[error("the certificate signing request {name} was {condition}: {message}")]
    Refused {
        name: String,
        condition: String,
        message: String,
    },
    #[error("the certificate signing request {0} was not issued in time")]
    Timeout(String),
    #[error("the issued certificate cannot be used: {0}")]
    Unusable(String),
}

/// A certificate's notBefore and notAfter.
pub fn validity(cert_pem: &str) -> Result<(SystemTime, SystemTime), RotationError> {
    let bad = |e: &dyn std::fmt::Display| RotationError::Certificate(e.to_string());
    let der = CertificateDer::from_pem_slice(cert_pem.as_bytes()).map_err(|e| bad(&e))?;
    let (_, cert) = x509_parser::parse_x509_certificate(&der).map_err(|e| bad(&e))?;
    let at = |t: i64| UNIX_EPOCH + Duration::from_secs(u64::try_from(t).unwrap_or(0));
    Ok((
        at(cert.validity().not_before.timestamp()),
        at(cert.validity().not_after.timestamp()),
    ))
}

/// When to renew a certificate valid from `not_before` to `not_after`: at 70% of its
/// lifetime plus `jitter` (0 to 1) times 20% more, client-go's `nextRotationDeadline`.
pub fn rotation_deadline(not_before: SystemTime, not_after: SystemTime, jitter: f64) -> SystemTime {
    let total = not_after
        .duration_since(not_before)
        .unwrap_or(Duration::ZERO);
    not_before + total.mul_f64(EARLIEST + JITTER * jitter.clamp(0.0, 1.0))
}

/// The wait after the `failures`-th failed attempt in a row: doubling from a second, at
/// most five minutes.
pub fn retry_delay(failures: u32) -> Duration {
    FIRST_RETRY
        .saturating_mul(1u32 << failures.saturating_sub(1).min(20))
        .min(LONGEST_RETRY)
}

/// A number in [0, 1) from the system's random source (0.5 if it fails).
fn jitter() -> f64 {
    let mut b = [0u8; 4];
    match ring::rand::SystemRandom::new().fill(&mut b) {
        Ok(()) => f64::from(u32::from_le_bytes(b)) / (f64::from(u32::MAX) + 1.0),
        Err(_) => 0.5,
    }
}

/// What the renewal loop works with.
pub struct Rotation {
    pub data_dir: PathBuf,
    pub node_name: String,
    /// The node's API client (authenticating with `live`).
    pub client: Client,
    /// The pair in use by the client and the agent's endpoint.
    pub live: Arc<LiveCertificate>,
    /// The certificate in use, PEM.
    pub cert_pem: String,
}

impl Rotation {
    /// Renews the certificate at each deadline, forever.
    pub async fn run(mut self) {
        let mut failures = 0u32;
        loop {
            let (not_before, not_after) = match validity(&self.cert_pem) {
                Ok(v) => v,
                Err(e) => {
                    tracing::error!("certificate rotation stopped: {e}");
                    return;
                }
            };
            let deadline = rotation_deadline(not_before, not_after, jitter());
            if failures == 0 {
                let left = deadline
                    .duration_since(SystemTime::now())
                    .unwrap_or(Duration::ZERO);
                tracing::info!(
                    expires = %humantime_secs(not_after),
                    renew_in_seconds = left.as_secs(),
                    "node certificate rotation deadline"
                );
                smol::Timer::after(left).await;
            }
            if SystemTime::now() >= not_after {
                tracing::error!(
                    "the node certificate expired before it could be renewed: the server no \
                     longer accepts it; join the node again with a new token (`skiff token create`)"
                );
            }
            match self.renew().await {
                Ok(cert) => {
                    failures = 0;
                    self.cert_pem = cert;
                }
                Err(e) => {
                    failures += 1;
                    let wait = retry_delay(failures);
                    tracing::warn!(
                        retry_in_seconds = wait.as_secs(),
                        "renewing the node certificate failed: {e}"
                    );
                    smol::Timer::after(wait).await;
                }
            }
        }
    }

    /// One renewal: a new key, a request, its certificate; stored and put in use.
    async fn renew(&self) -> Result<String, RotationError> {
        let node = self.node_name.clone();
        let (key_pem, csr_pem) =
            smol::unblock(move || credentials::make_renewal_key_and_csr(&node)).await?;
        let request = CertificateSigningRequest {
            metadata: ObjectMeta {
                generate_name: Some("csr-".into()),
                ..Default::default()
            },
            spec: CertificateSigningRequestSpec {
                request: ByteString(csr_pem.into_bytes()),
                signer_name: KUBE_APISERVER_CLIENT_KUBELET_SIGNER.into(),
                usages: vec!["digital signature".into(), "client auth".into()],
                ..Default::default()
            },
            ..Default::default()
        };
        let created = self.client.create(&request).await?;
        let name = created.metadata.name.clone();
        tracing::info!(csr = %name, "asked for a renewed node certificate");
        let cert_pem = self.wait_for_certificate(&name).await?;
        let expected = format!("system:node:{}", self.node_name);
        let subject = common_name(&cert_pem).map_err(RotationError::Unusable)?;
        if subject != expected {
            return Err(RotationError::Unusable(format!(
                "it names {subject:?}, not {expected:?}"
            )));
        }
        // Checked before anything is written: the pair must belong together.
        LiveCertificate::new(&cert_pem, &key_pem)
            .map_err(|e| RotationError::Unusable(e.to_string()))?;
        let stamp = stamp(SystemTime::now());
        let (dir, c, k) = (self.data_dir.clone(), cert_pem.clone(), key_pem.clone());
        let file = smol::unblock(move || Credentials::store_renewed(&dir, &c, &k, &stamp)).await?;
        self.live
            .replace(&cert_pem, &key_pem)
            .map_err(|e| RotationError::Unusable(e.to_string()))?;
        self.client.close_idle_connections();
        let (_, not_after) = validity(&cert_pem)?;
        tracing::info!(
            csr = %name,
            file = %file.display(),
            expires = %humantime_secs(not_after),
            "node certificate renewed"
        );
        Ok(cert_pem)
    }

    /// Polls the request until it is issued, denied or failed.
    async fn wait_for_certificate(&self, name: &str) -> Result<String, RotationError> {
        let give_up = SystemTime::now() + ISSUE_TIMEOUT;
        let mut wait = Duration::from_millis(200);
        loop {
            let csr: CertificateSigningRequest = self.client.get("", name).await?;
            for condition in ["Denied", "Failed"] {
                if let Some(c) = csr
                    .status
                    .conditions
                    .iter()
                    .find(|c| c.type_ == condition && c.status == "True")
                {
                    return Err(RotationError::Refused {
                        name: name.to_string(),
                        condition: condition.to_ascii_lowercase(),
                        message: c.message.clone().unwrap_or_default(),
                    });
                }
            }
            if let Some(cert) = csr.status.certificate.filter(|c| !c.0.is_empty()) {
                return String::from_utf8(cert.0)
                    .map_err(|e| RotationError::Unusable(e.to_string()));
            }
            if SystemTime::now() >= give_up {
                return Err(RotationError::Timeout(name.to_string()));
            }
            smol::Timer::after(wait).await;
            wait = (wait * 2).min(Duration::from_secs(5));
        }
    }
}

fn common_name(cert_pem: &str) -> Result<String, String> {
    let der = CertificateDer::from_pem_slice(cert_pem.as_bytes()).map_err(|e| e.to_string())?;
    let (_, cert) = x509_parser::parse_x509_certificate(&der).map_err(|e| e.to_string())?;
    let cn = cert
        .subject()
        .iter_common_name()
        .next()
        .and_then(|c| c.as_str().ok())
        .unwrap_or_default();
    Ok(cn.to_string())
}

/// `2026-11-27-03-04-05`: the kubelet's names for its rotated pairs.
fn stamp(t: SystemTime) -> String {
    let s = humantime::format_rfc3339_seconds(t).to_string();
    s.trim_end_matches('Z').replace([':', 'T'], "-")
}

fn humantime_secs(t: SystemTime) -> String {
    humantime::format_rfc3339_seconds(t).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(secs: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(secs)
    }

    #[test]
    fn the_deadline_falls_between_70_and_90_percent_of_the_lifetime() {
        // A year's certificate issued at t=1000 (to the millisecond: floating point).
        let year = 365 * 24 * 3600;
        let (from, to) = (at(1000), at(1000 + year));
        let close = |got: SystemTime, share: f64| {
            let want = from + Duration::from_secs(year).mul_f64(share);
            let off = got
                .duration_since(want)
                .or_else(|_| want.duration_since(got))
                .unwrap();
            assert!(off < Duration::from_millis(1), "{got:?} vs {want:?}");
        };
        close(rotation_deadline(from, to, 0.0), 0.7);
        close(rotation_deadline(from, to, 1.0), 0.9);
        close(rotation_deadline(from, to, 0.5), 0.8);
        // Out-of-range jitter is clamped; a certificate whose dates are reversed is due at once.
        assert_eq!(
            rotation_deadline(from, to, 7.0),
            rotation_deadline(from, to, 1.0)
        );
        assert_eq!(rotation_deadline(to, from, 0.3), to);
        // A 40 s certificate backdated 4 s: due 24 to 32 s after it was issued.
        let issued = at(5000);
        let (from, to) = (
            issued - Duration::from_secs(4),
            issued + Duration::from_secs(40),
        );
        for j in [0.0, 0.25, 0.5, 0.75, 1.0] {
            let d = rotation_deadline(from, to, j)
                .duration_since(issued)
                .unwrap();
            assert!(
                d >= Duration::from_secs_f64(26.7) && d <= Duration::from_secs_f64(35.7),
                "{d:?}"
            );
        }
        for _ in 0..100 {
            let j = jitter();
            assert!((0.0..1.0).contains(&j));
        }
    }

    #[test]
    fn retries_back_off_to_five_minutes() {
        assert_eq!(retry_delay(1), Duration::from_secs(1));
        assert_eq!(retry_delay(2), Duration::from_secs(2));
        assert_eq!(retry_delay(5), Duration::from_secs(16));
        assert_eq!(retry_delay(9), Duration::from_secs(256));
        assert_eq!(retry_delay(10), LONGEST_RETRY);
        assert_eq!(retry_delay(u32::MAX), LONGEST_RETRY);
    }

    #[test]
    fn validity_reads_the_dates_and_stamps_name_files() {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(vec!["x".into()]).unwrap();
        params.not_before = rcgen::date_time_ymd(2026, 1, 1);
        params.not_after = rcgen::date_time_ymd(2027, 1, 1);
        let cert = params.self_signed(&key).unwrap();
        let (from, to) = validity(&cert.pem()).unwrap();
        assert_eq!(humantime_secs(from), "2026-01-01T00:00:00Z");
        assert_eq!(humantime_secs(to), "2027-01-01T00:00:00Z");
        assert!(validity("junk").is_err());
        assert_eq!(stamp(from), "2026-01-01-00-00-00");
    }
}
