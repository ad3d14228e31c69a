//! certificates.k8s.io/v1 CertificateSigningRequest: a client asks for a certificate, an
//! approver approves or denies it (`kubectl certificate approve|deny`, the `approval`
//! subresource), and the signer named by `signerName` issues it into `status.certificate`.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::core::{spec_and_status, ByteString};
use crate::meta::{ObjectMeta, Time};
use crate::object::{Kind, Resource};
use crate::validation::{self, FieldError};

/// The API group of CertificateSigningRequest.
pub const GROUP: &str = "certificates.k8s.io";
/// The signer of client certificates for the API server, the one skiff's server runs.
pub const KUBE_APISERVER_CLIENT_SIGNER: &str = "kubernetes.io/kube-apiserver-client";
/// The signer of nodes' client certificates (CN system:node:NAME, O system:nodes), which
/// agents renew theirs through.
pub const KUBE_APISERVER_CLIENT_KUBELET_SIGNER: &str =
    "kubernetes.io/kube-apiserver-client-kubelet";

/// certificates/v1 CertificateSigningRequest.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.certificates.v1.CertificateSigningRequest")]
#[schemars(
    description = "CertificateSigningRequest objects provide a mechanism to obtain x509 certificates by submitting a certificate signing request, and having it asynchronously approved and issued."
)]
pub struct CertificateSigningRequest {
    /// Standard object metadata.
    pub metadata: ObjectMeta,
    /// The certificate request, and who made it (set by the server). Immutable.
    pub spec: CertificateSigningRequestSpec,
    /// Approval conditions and the issued certificate.
    pub status: CertificateSigningRequestStatus,
}

/// certificates/v1 CertificateSigningRequestSpec.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.certificates.v1.CertificateSigningRequestSpec")]
#[schemars(description = "CertificateSigningRequestSpec contains the certificate request.")]
pub struct CertificateSigningRequestSpec {
    /// A PEM-encoded PKCS#10 certificate request (base64 in JSON).
    pub request: ByteString,
    /// The signer that should issue the certificate, as
    /// kubernetes.io/kube-apiserver-client.
    pub signer_name: String,
    /// Requested validity of the certificate, in seconds (at least 600).
    pub expiration_seconds: Option<i32>,
    /// Key usages requested: "digital signature", "key encipherment", "client auth", ...
    pub usages: Vec<String>,
    /// The user who created the request (set by the server).
    pub username: Option<String>,
    /// The uid of the user who created the request (set by the server).
    pub uid: Option<String>,
    /// The groups of the user who created the request (set by the server).
    pub groups: Vec<String>,
}

/// certificates/v1 CertificateSigningRequestStatus.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.certificates.v1.CertificateSigningRequestStatus")]
#[schemars(
    description = "CertificateSigningRequestStatus contains conditions used to indicate approved/denied/failed status of the request, and the issued certificate."
)]
pub struct CertificateSigningRequestStatus {
    /// Approved, Denied or Failed conditions.
    pub conditions: Vec<CertificateSigningRequestCondition>,
    /// The issued certificate (PEM, base64 in JSON), once the signer issued it.
    pub certificate: Option<ByteString>,
}

/// certificates/v1 CertificateSigningRequestCondition.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.certificates.v1.CertificateSigningRequestCondition")]
#[schemars(
    description = "CertificateSigningRequestCondition describes a condition of a CertificateSigningRequest object"
)]
pub struct CertificateSigningRequestCondition {
    /// Approved, Denied or Failed.
    #[serde(rename = "type")]
    pub type_: String,
    /// True, False or Unknown.
    pub status: String,
    /// Brief CamelCase reason.
    pub reason: Option<String>,
    /// Human-readable details.
    pub message: Option<String>,
    /// When the condition was last updated.
    pub last_update_time: Option<Time>,
    /// When the condition last changed status.
    pub last_transition_time: Option<Time>,
}

impl CertificateSigningRequest {
    /// Whether a condition of `type_` is True.
    pub fn has_condition(&self, type_: &str) -> bool {
        self.status
            .conditions
            .iter()
            .any(|c| c.type_ == type_ && c.status == "True")
    }
}

/// kube-apiserver's CONDITION column: Pending/Approved/Denied, then Failed and Issued.
pub fn condition_summary(csr: &CertificateSigningRequest) -> String {
    let mut s = if csr.has_condition("Denied") {
        "Denied".to_string()
    } else if csr.has_condition("Approved") {
        "Approved".to_string()
    } else {
        "Pending".to_string()
    };
    if csr.has_condition("Failed") {
        s.push_str(",Failed");
    }
    if csr
        .status
        .certificate
        .as_ref()
        .is_some_and(|c| !c.0.is_empty())
    {
        s.push_str(",Issued");
    }
    s
}

impl Resource for CertificateSigningRequest {
    const KIND: Kind = Kind::CertificateSigningRequest;
    crate::resource_basics!(CertificateSigningRequest);
    spec_and_status!();

    fn set_defaults(&mut self) {
        for c in &mut self.status.conditions {
            if c.status.is_empty() {
                c.status = "True".into();
            }
        }
    }

    fn validate(&self) -> Vec<FieldError> {
        let mut errs = validation::validate_meta(&self.metadata, Kind::CertificateSigningRequest);
        let s = &self.spec;
        let pem = String::from_utf8_lossy(&s.request.0);
        if s.request.0.is_empty() {
            errs.push(FieldError::required("spec.request"));
        } else if !pem.contains("-----BEGIN CERTIFICATE REQUEST-----") {
            errs.push(FieldError::invalid(
                "spec.request",
                "[]byte{...}",
                "PEM block type must be CERTIFICATE REQUEST",
            ));
        }
        if s.signer_name.is_empty() {
            errs.push(FieldError::required("spec.signerName"));
        }
        if s.usages.is_empty() {
            errs.push(FieldError::required("spec.usages"));
        }
        if let Some(secs) = s.expiration_seconds {
            if secs < 600 {
                errs.push(FieldError::invalid(
                    "spec.expirationSeconds",
                    secs,
                    "may not specify a duration less than 600 seconds (10 minutes)",
                ));
            }
        }
        errs.extend(self.validate_status());
        errs
    }

    fn validate_status(&self) -> Vec<FieldError> {
        let mut errs = Vec::new();
        if self.has_condition("Approved") && self.has_condition("Denied") {
            errs.push(FieldError::invalid(
                "status.conditions",
                "Approved,Denied",
                "Approved and Denied conditions are mutually exclusive",
            ));
        }
        errs
    }
}
