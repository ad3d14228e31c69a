//! `POST pods/<name>/eviction` with a policy/v1 Eviction: the pod is deleted unless the
//! PodDisruptionBudget that covers it allows no disruption now, which is a 429 the client
//! (`kubectl drain`) retries. Each allowed eviction takes one disruption from the budget's
//! status and records the pod as disrupted until the disruption controller sees it go.

use api::core::Pod;
use api::meta::{DeleteOptions, Status, StatusCause, StatusDetails, Time};
use api::policy::{Eviction, PodDisruptionBudget};
use api::Resource;
use serde_json::json;
use tide::StatusCode;

use super::{dry_run, json_response, parse_object_body, State};
use crate::controllers::disruption::selects;
use crate::controllers::workload::pod_ready;
use crate::error::ApiError;
use crate::registry::Part;

const VIOLATES: &str = "Cannot evict pod as it would violate the pod's disruption budget.";

/// kube-apiserver's refusal: 429 TooManyRequests with the budget's reason as the cause.
fn too_many_requests(cause: String) -> ApiError {
    ApiError::from_status(
        Status::failure(429, "TooManyRequests", VIOLATES).with_details(StatusDetails {
            causes: vec![StatusCause {
                reason: "DisruptionBudget".into(),
                message: cause,
                ..Default::default()
            }],
            ..Default::default()
        }),
    )
}

pub async fn serve(
    state: &State,
    req: &tide::Request<State>,
    ns: &str,
    name: &str,
    body: &[u8],
) -> Result<tide::Response, ApiError> {
    if req.method() != tide::http::Method::Post {
        return Err(ApiError::method_not_allowed(format!(
            "the server does not allow this method on the requested resource ({} pods/eviction)",
            req.method()
        )));
    }
    let value = parse_object_body(req, body)?;
    let eviction: Eviction = serde_json::from_value(value)
        .map_err(|e| ApiError::bad_request(format!("invalid Eviction: {e}")))?;
    if eviction.metadata.name != name {
        return Err(ApiError::bad_request(
            "name in URL does not match name in Eviction object",
        ));
    }
    let opts: DeleteOptions = eviction.delete_options.unwrap_or_default();
    let dry = dry_run(req, &opts.dry_run)?;
    let pod: Pod = state.registry.get(ns, name).await?;
    if must_check_budget(&pod) {
        check_budget(state, ns, &pod, dry).await?;
    }
    state
        .registry
        .dry_run(dry)
        .delete::<Pod>(ns, name, opts)
        .await?;
    let mut ok = serde_json::to_value(Status::success()).unwrap_or_default();
    ok["code"] = json!(201);
    api::codec::strip_nulls(&mut ok);
    Ok(json_response(StatusCode::Created, &ok))
}

/// Pods that are finished, not started yet, or already going need no budget (Kubernetes'
/// canIgnorePDB).
fn must_check_budget(pod: &Pod) -> bool {
    let phase = pod.status.phase.as_deref().unwrap_or("Pending");
    pod.metadata.deletion_timestamp.is_none()
        && !matches!(phase, "Succeeded" | "Failed" | "Pending")
}

async fn check_budget(state: &State, ns: &str, pod: &Pod, dry: bool) -> Result<(), ApiError> {
    let (stored, _) = state
        .store
        .list(api::Kind::PodDisruptionBudget, Some(ns))
        .await?;
    let budgets: Vec<PodDisruptionBudget> = stored
        .into_iter()
        .filter_map(PodDisruptionBudget::from_any)
        .filter(|b| selects(&b.spec.selector, pod))
        .collect();
    let pdb = match budgets.as_slice() {
        [] => return Ok(()),
        [one] => one,
        _ => {
            return Err(ApiError::internal(
                "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support.",
            ))
        }
    };
    let s = &pdb.status;
    let name = &pdb.metadata.name;
    if s.observed_generation.unwrap_or(0) < pdb.metadata.generation.unwrap_or(0) {
        return Err(too_many_requests(format!(
            "The disruption budget {name} is still being processed by the server."
        )));
    }
    if !pod_ready(pod) {
        // An unhealthy pod may go when the budget is met anyway (IfHealthyBudget), or
        // always (AlwaysAllow); taking it costs no disruption.
        let always = pdb.spec.unhealthy_pod_eviction_policy.as_deref() == Some("AlwaysAllow");
        if always || (s.current_healthy >= s.desired_healthy && s.desired_healthy > 0) {
            return Ok(());
        }
    }
    if s.disruptions_allowed < 0 {
        return Err(ApiError::forbidden("pdb disruptions allowed is negative"));
    }
    if s.disruptions_allowed == 0 {
        return Err(too_many_requests(format!(
            "The disruption budget {name} needs {} healthy pods and has {} currently",
            s.desired_healthy, s.current_healthy
        )));
    }
    if dry {
        return Ok(());
    }
    // Take the disruption from the budget as it is stored now: two evictions racing for the
    // last one cannot both have it.
    let pod_name = pod.metadata.name.clone();
    let (desired, current) = (s.desired_healthy, s.current_healthy);
    let budget_name = name.clone();
    state
        .registry
        .mutate::<PodDisruptionBudget>(ns, name, Part::Status, move |b| {
            if b.status.disruptions_allowed <= 0 {
                return Err(too_many_requests(format!(
                    "The disruption budget {budget_name} needs {desired} healthy pods and has {current} currently"
                )));
            }
            b.status.disruptions_allowed -= 1;
            b.status.disrupted_pods.insert(pod_name.clone(), Time::now());
            Ok(())
        })
        .await?;
    Ok(())
}
