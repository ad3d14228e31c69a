//! The kubernetes.io/kube-apiserver-client signer: issues client certificates for approved
//! CertificateSigningRequests, as kube-controller-manager's csrsigning controller does.
//! The certificate carries the subject the request asks for (CN the user, O the groups): the
//! approver, not the signer, decides whether that is acceptable.

use std::sync::Arc;
use std::time::Duration;

use api::certificates::{
    CertificateSigningRequest, CertificateSigningRequestCondition, KUBE_APISERVER_CLIENT_SIGNER,
};
use api::core::ByteString;
use api::Kind;
use x509_parser::prelude::FromDer as _;

use crate::machinery::Context;
use crate::pki::Pki;
use crate::registry::Part;

/// How long issued certificates are valid when the request names no duration.
pub const DEFAULT_VALIDITY: Duration = Duration::from_secs(365 * 24 * 3600);

/// The subject a PEM certificate request asks for: (CN, every O).
pub fn requested_subject(pem: &[u8]) -> Result<(String, Vec<String>), String> {
    let (_, block) = x509_parser::pem::parse_x509_pem(pem).map_err(|e| e.to_string())?;
    let (_, csr) =
        x509_parser::certification_request::X509CertificationRequest::from_der(&block.contents)
            .map_err(|e| e.to_string())?;
    let subject = &csr.certification_request_info.subject;
    let cn = subject
        .iter_common_name()
        .next()
        .and_then(|c| c.as_str().ok())
        .unwrap_or("")
        .to_string();
    let groups = subject
        .iter_organization()
        .filter_map(|o| o.as_str().ok())
        .map(String::from)
        .collect();
    Ok((cn, groups))
}

/// The certificate for an approved request, or why it cannot be issued.
fn issue(pki: &Pki, csr: &CertificateSigningRequest) -> Result<String, String> {
    let pem = std::str::from_utf8(&csr.spec.request.0).map_err(|e| e.to_string())?;
    let (cn, groups) = requested_subject(csr.spec.request.0.as_slice())?;
    if cn.is_empty() {
        return Err("the request's subject has no common name".into());
    }
    let validity = csr
        .spec
        .expiration_seconds
        .map(|s| Duration::from_secs(s.max(600) as u64))
        .unwrap_or(DEFAULT_VALIDITY)
        .min(DEFAULT_VALIDITY);
    pki.sign_user_csr(pem, &cn, &groups, validity)
        .map_err(|e| e.to_string())
}

/// Whether the signer has work on `csr`: approved, for this signer, not denied, failed or
/// issued yet.
fn due(csr: &CertificateSigningRequest) -> bool {
    csr.spec.signer_name == KUBE_APISERVER_CLIENT_SIGNER
        && csr.has_condition("Approved")
        && !csr.has_condition("Denied")
        && !csr.has_condition("Failed")
        && csr
            .status
            .certificate
            .as_ref()
            .is_none_or(|c| c.0.is_empty())
}

/// Starts the signer.
pub fn start(ctx: &Context, pki: Arc<Pki>) {
    let changes = ctx.informers.subscribe(&[Kind::CertificateSigningRequest]);
    let ctx = ctx.clone();
    smol::spawn(async move {
        let registry = ctx
            .registry
            .with_manager("certificatesigningrequest-signing-controller");
        loop {
            let todo: Vec<CertificateSigningRequest> = ctx
                .informers
                .cache()
                .read()
                .iter::<CertificateSigningRequest>(None)
                .filter(due)
                .collect();
            for csr in todo {
                let name = csr.metadata.name.clone();
                let pki = pki.clone();
                let issued = smol::unblock(move || issue(&pki, &csr)).await;
                let result = registry
                    .mutate::<CertificateSigningRequest>("", &name, Part::Status, move |c| {
                        if !due(c) {
                            return Ok(());
                        }
                        match issued.clone() {
                            Ok(cert) => c.status.certificate = Some(ByteString(cert.into_bytes())),
                            Err(why) => {
                                let now = api::meta::Time::now();
                                c.status
                                    .conditions
                                    .push(CertificateSigningRequestCondition {
                                        type_: "Failed".into(),
                                        status: "True".into(),
                                        reason: Some("SignerValidationFailure".into()),
                                        message: Some(why),
                                        last_update_time: Some(now),
                                        last_transition_time: Some(now),
                                    });
                            }
                        }
                        Ok(())
                    })
                    .await;
                if let Err(e) = result {
                    tracing::warn!(csr = %name, "signing: {e}");
                }
            }
            if changes.recv().await.is_err() {
                return;
            }
            while changes.try_recv().is_ok() {}
        }
    })
    .detach();
}
