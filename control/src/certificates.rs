//! The signers and the node-client approver of CertificateSigningRequests, as
//! kube-controller-manager's csrsigning and csrapproving controllers.
//!
//! * kubernetes.io/kube-apiserver-client issues client certificates for approved requests.
//!   The certificate carries the subject the request asks for (CN the user, O the groups):
//!   the approver, not the signer, decides whether that is acceptable.
//! * kubernetes.io/kube-apiserver-client-kubelet issues node certificates (CN
//!   system:node:NAME, O system:nodes). A node asking for a certificate of its own identity
//!   with its current certificate is approved automatically (Kubernetes' `selfnodeclient`
//!   rule, which the default `system:nodes` binding grants): that is how agents renew their
//!   certificates before they expire, without a join token. A node whose certificate has
//!   expired cannot authenticate to ask, and needs a new token, as in Kubernetes. skiff's
//!   node certificate is also the serving certificate of the agent's endpoint, so it is
//!   issued as the join issues it: with the node's name as DNS name and server auth too.
//!
//! Lifetimes: at most `--cluster-signing-duration`, node certificates `--node-cert-ttl`,
//! shorter when the request's `expirationSeconds` asks for less.

use std::sync::Arc;
use std::time::Duration;

use api::certificates::{
    CertificateSigningRequest, CertificateSigningRequestCondition,
    KUBE_APISERVER_CLIENT_KUBELET_SIGNER, KUBE_APISERVER_CLIENT_SIGNER,
};
use api::core::ByteString;
use api::Kind;
use x509_parser::prelude::FromDer as _;

use crate::auth::User;
use crate::error::ApiError;
use crate::machinery::Context;
use crate::pki::Pki;
use crate::rbac::{Attributes, Authorizer};
use crate::registry::{Part, RequesterAdmission};

/// The subject a PEM certificate request asks for: (CN, every O).
pub fn requested_subject(pem: &[u8]) -> Result<(String, Vec<String>), String> {
    Ok(requested(pem)?.subject)
}

/// What a PEM certificate request asks for.
struct Requested {
    /// (CN, every O).
    subject: (String, Vec<String>),
    /// Whether it asks for subject alternative names of any kind.
    has_alt_names: bool,
}

fn requested(pem: &[u8]) -> Result<Requested, String> {
    let (_, block) = x509_parser::pem::parse_x509_pem(pem).map_err(|e| e.to_string())?;
    let (_, csr) =
        x509_parser::certification_request::X509CertificationRequest::from_der(&block.contents)
            .map_err(|e| e.to_string())?;
    let has_alt_names = csr.requested_extensions().is_some_and(|mut exts| {
        exts.any(|e| {
            matches!(
                e,
                x509_parser::extensions::ParsedExtension::SubjectAlternativeName(_)
            )
        })
    });
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
    Ok(Requested {
        subject: (cn, groups),
        has_alt_names,
    })
}

/// Why a request is not a node client certificate request (Kubernetes'
/// `ValidateKubeletClientCSR`): O exactly system:nodes, CN system:node:NAME, no alternative
/// names, usages client auth with at most digital signature and key encipherment.
fn kubelet_client_problem(csr: &CertificateSigningRequest, req: &Requested) -> Option<String> {
    let (cn, groups) = &req.subject;
    if groups != &[crate::auth::NODES_GROUP.to_string()] {
        return Some(format!(
            "subject organization is not system:nodes: {groups:?}"
        ));
    }
    if cn
        .strip_prefix(crate::auth::NODE_PREFIX)
        .is_none_or(str::is_empty)
    {
        return Some(format!(
            "subject common name does not begin with system:node: {cn:?}"
        ));
    }
    if req.has_alt_names {
        return Some("subject alternative names are not allowed".into());
    }
    let usages = &csr.spec.usages;
    if !usages.iter().any(|u| u == "client auth")
        || usages.iter().any(|u| {
            !matches!(
                u.as_str(),
                "client auth" | "digital signature" | "key encipherment"
            )
        })
    {
        return Some(format!(
            "usages did not match [client auth] with optional [digital signature key encipherment]: {usages:?}"
        ));
    }
    None
}

/// The certificate for an approved request, or why it cannot be issued.
fn issue(pki: &Pki, csr: &CertificateSigningRequest) -> Result<String, String> {
    let pem = std::str::from_utf8(&csr.spec.request.0).map_err(|e| e.to_string())?;
    let req = requested(csr.spec.request.0.as_slice())?;
    let (cn, groups) = &req.subject;
    if cn.is_empty() {
        return Err("the request's subject has no common name".into());
    }
    let asked = csr
        .spec
        .expiration_seconds
        .map(|s| Duration::from_secs(s.max(600) as u64));
    if csr.spec.signer_name == KUBE_APISERVER_CLIENT_KUBELET_SIGNER {
        if let Some(why) = kubelet_client_problem(csr, &req) {
            return Err(why);
        }
        let node = cn.strip_prefix(crate::auth::NODE_PREFIX).unwrap_or(cn);
        let lifetimes = pki.lifetimes();
        let validity = asked.map_or(lifetimes.node(), |a| a.min(lifetimes.node()));
        return pki
            .sign_node_csr(pem, node, validity)
            .map_err(|e| e.to_string());
    }
    // Refused at create since CertificateSubjectRestriction; a request stored before it
    // must not be signed either.
    if groups.iter().any(|g| g == MASTERS_GROUP) {
        return Err(format!(
            "use of {KUBE_APISERVER_CLIENT_SIGNER} signer with {MASTERS_GROUP} group is not allowed"
        ));
    }
    pki.sign_user_csr(pem, cn, groups, pki.lifetimes().client(asked))
        .map_err(|e| e.to_string())
}

// ---------------------------------------------------------------------------------------
// Admission (kube-apiserver's CertificateSubjectRestriction, CertificateApproval and
// CertificateSigning plugins)

/// The group no `kube-apiserver-client` certificate may name: whoever holds one is
/// cluster-admin for its whole lifetime, and a certificate cannot be revoked.
pub const MASTERS_GROUP: &str = crate::auth::MASTERS_GROUP;

/// CertificateSubjectRestriction: a request to the kube-apiserver-client signer may not ask
/// for `O=system:masters` (refused at create, 403).
pub fn admit_create(csr: &CertificateSigningRequest) -> Result<(), ApiError> {
    if csr.spec.signer_name != KUBE_APISERVER_CLIENT_SIGNER {
        return Ok(());
    }
    let forbidden = |why: &str| {
        ApiError::forbidden_object(Kind::CertificateSigningRequest, &csr.metadata.name, why)
    };
    let req = requested(&csr.spec.request.0)
        .map_err(|e| forbidden(&format!("failed to parse CSR: {e}")))?;
    if req.subject.1.iter().any(|g| g == MASTERS_GROUP) {
        return Err(forbidden(&format!(
            "use of {KUBE_APISERVER_CLIENT_SIGNER} signer with {MASTERS_GROUP} group is not allowed"
        )));
    }
    Ok(())
}

/// Whether `user` may `verb` (approve, sign) for `signer`: on the `signers` resource of
/// certificates.k8s.io named for the signer, or for every signer of its domain (`DOMAIN/*`),
/// as Kubernetes' IsAuthorizedForSignerName asks.
pub fn may_act_for_signer(authorizer: &Authorizer, user: &User, verb: &str, signer: &str) -> bool {
    let ask = |name: &str| {
        authorizer
            .authorize(
                user,
                &Attributes::resource(verb, api::certificates::GROUP, "signers", "", "", name),
            )
            .allowed
    };
    let domain = signer.split('/').next().unwrap_or(signer);
    ask(signer) || ask(&format!("{domain}/*"))
}

/// CertificateApproval and CertificateSigning for one request: who asks, and through which
/// subresource. Also the two subresources' strategies: an approval changes only the
/// conditions; a status write keeps the spec and the Approved and Denied conditions.
#[derive(Debug)]
pub struct SignerAdmission {
    pub user: User,
    pub authorizer: Arc<Authorizer>,
    /// `approval` or `status`.
    pub subresource: String,
}

impl RequesterAdmission for SignerAdmission {
    fn admit_update(
        &self,
        kind: Kind,
        old: &dyn std::any::Any,
        new: &mut dyn std::any::Any,
    ) -> Result<(), ApiError> {
        let (Some(old), Some(new)) = (
            old.downcast_ref::<CertificateSigningRequest>(),
            new.downcast_mut::<CertificateSigningRequest>(),
        ) else {
            return Ok(());
        };
        debug_assert_eq!(kind, Kind::CertificateSigningRequest);
        let signer = &old.spec.signer_name;
        let refuse = |verb: &str| {
            ApiError::forbidden_object(
                Kind::CertificateSigningRequest,
                &old.metadata.name,
                &format!("user not permitted to {verb} requests with signerName {signer:?}"),
            )
        };
        match self.subresource.as_str() {
            "approval" => {
                new.status.certificate = old.status.certificate.clone();
                if !may_act_for_signer(&self.authorizer, &self.user, "approve", signer) {
                    return Err(refuse("approve"));
                }
            }
            "status" => {
                for decided in ["Approved", "Denied"] {
                    new.status.conditions.retain(|c| c.type_ != decided);
                    new.status.conditions.extend(
                        old.status
                            .conditions
                            .iter()
                            .filter(|c| c.type_ == decided)
                            .cloned(),
                    );
                }
                let changed = new.status.certificate != old.status.certificate
                    || new.status.conditions != old.status.conditions;
                if changed && !may_act_for_signer(&self.authorizer, &self.user, "sign", signer) {
                    return Err(refuse("sign"));
                }
            }
            _ => {}
        }
        Ok(())
    }
}

/// Whether a node asks for a certificate of its own identity (Kubernetes' `selfnodeclient`
/// approval rule): the requestor is system:node:NAME in system:nodes, and the request is
/// a node client request for exactly that name.
fn is_self_node_client(csr: &CertificateSigningRequest) -> bool {
    if csr.spec.signer_name != KUBE_APISERVER_CLIENT_KUBELET_SIGNER {
        return false;
    }
    let requestor = crate::auth::User::new(
        csr.spec.username.clone().unwrap_or_default(),
        "",
        csr.spec.groups.clone(),
    );
    if requestor.node_name().is_none() {
        return false;
    }
    let Ok(req) = requested(csr.spec.request.0.as_slice()) else {
        return false;
    };
    req.subject.0 == requestor.name && kubelet_client_problem(csr, &req).is_none()
}

/// Whether the approver has work on `csr`: no Approved, Denied or Failed condition yet.
fn undecided(csr: &CertificateSigningRequest) -> bool {
    !csr.has_condition("Approved") && !csr.has_condition("Denied") && !csr.has_condition("Failed")
}

/// Whether a signer has work on `csr`: approved, for a signer of this server, not denied,
/// failed or issued yet.
fn due(csr: &CertificateSigningRequest) -> bool {
    (csr.spec.signer_name == KUBE_APISERVER_CLIENT_SIGNER
        || csr.spec.signer_name == KUBE_APISERVER_CLIENT_KUBELET_SIGNER)
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
        let approver = ctx
            .registry
            .with_manager("certificatesigningrequest-approving-controller");
        loop {
            let to_approve: Vec<String> = ctx
                .informers
                .cache()
                .read()
                .iter::<CertificateSigningRequest>(None)
                .filter(|c| undecided(c) && is_self_node_client(c))
                .map(|c| c.metadata.name.clone())
                .collect();
            for name in to_approve {
                let result = approver
                    .mutate::<CertificateSigningRequest>("", &name, Part::Status, |c| {
                        if !undecided(c) || !is_self_node_client(c) {
                            return Ok(());
                        }
                        let now = api::meta::Time::now();
                        c.status
                            .conditions
                            .push(CertificateSigningRequestCondition {
                                type_: "Approved".into(),
                                status: "True".into(),
                                reason: Some("AutoApproved".into()),
                                message: Some(
                                    "Auto approving self kubelet client certificate after SubjectAccessReview."
                                        .into(),
                                ),
                                last_update_time: Some(now),
                                last_transition_time: Some(now),
                            });
                        Ok(())
                    })
                    .await;
                match result {
                    Ok(_) => tracing::info!(csr = %name, "approved a node's renewal"),
                    Err(e) => tracing::warn!(csr = %name, "approving: {e}"),
                }
            }
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
