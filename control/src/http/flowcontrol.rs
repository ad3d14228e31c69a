//! API Priority and Fairness at the edge (kube's WithPriorityAndFairness filter): after
//! authentication and impersonation, before authorization, every request is classified and
//! waits for a seat of its priority level; the seat is held until the handler answers. A
//! watch holds one only while it starts (until its handler returns the streaming answer);
//! other long-running requests (exec, attach, port-forward, logs, proxy) are not held at all,
//! as in kube. Answers carry the UIDs of the FlowSchema and priority level; a request turned
//! away is answered 429 with `Retry-After`, in the plain text kube-apiserver writes. The
//! `/debug/api_priority_and_fairness/` dumps are answered here too.

use std::time::{Duration, Instant};

use api::flowcontrol::{HEADER_FLOW_SCHEMA_UID, HEADER_PRIORITY_LEVEL_UID};
use tide::http::StatusCode;

use super::route::Route;
use super::State;
use crate::auth::User;
use crate::flowcontrol::{Admitted, Controller, RequestDigest, ResourceInfo};

/// When the request came in (its wait is counted from then).
#[derive(Clone, Copy)]
pub(super) struct Received(pub Instant);

/// The dumps' paths.
pub const DUMP_PRIORITY_LEVELS: &str = "/debug/api_priority_and_fairness/dump_priority_levels";
pub const DUMP_QUEUES: &str = "/debug/api_priority_and_fairness/dump_queues";
pub const DUMP_REQUESTS: &str = "/debug/api_priority_and_fairness/dump_requests";

/// kube-apiserver's long-running requests (its BasicLongRunningRequestCheck): the verbs
/// watch and proxy, and the attach, exec, log, portforward and proxy subresources.
fn long_running(a: &crate::rbac::Attributes) -> bool {
    matches!(a.verb.as_str(), "watch" | "proxy")
        || a.resource.as_ref().is_some_and(|r| {
            matches!(
                r.subresource.as_str(),
                "attach" | "exec" | "log" | "portforward" | "proxy"
            )
        })
        || (a.resource.is_none() && a.path.starts_with("/debug/pprof/"))
}

/// Admits the request through its priority level: `Ok(None)` for a request that is not
/// held (long-running, or a route the authorizer does not see), `Err` with the 429 answer
/// for one turned away.
pub(super) async fn admit(
    fc: &Controller,
    req: &tide::Request<State>,
    route: &Result<Route, super::route::NoRoute>,
    user: &User,
) -> Result<Option<Admitted>, tide::Response> {
    let attributes = match route {
        Ok(r) => super::attributes(req, r),
        // An unknown path: a non-resource request for a path that does not exist.
        Err(_) => Some(crate::rbac::Attributes::non_resource(
            &req.method().to_string().to_ascii_lowercase(),
            super::request_path(req),
        )),
    };
    let Some(a) = attributes else {
        return Ok(None);
    };
    let watch = a.verb == "watch";
    if long_running(&a) && !watch {
        return Ok(None);
    }
    let version = match route {
        Ok(Route::Resource(p)) => p.version.clone(),
        Ok(Route::Aggregated { version, .. }) => version.clone(),
        Ok(Route::ResourceMetrics(_)) => super::route::METRICS_VERSION.to_string(),
        _ => String::new(),
    };
    let digest = RequestDigest {
        user: user.name.clone(),
        groups: user.groups.clone(),
        verb: a.verb.clone(),
        resource: a.resource.as_ref().map(|r| ResourceInfo {
            group: r.group.clone(),
            version,
            resource: r.resource.clone(),
            subresource: r.subresource.clone(),
            namespace: r.namespace.clone(),
            name: r.name.clone(),
        }),
        path: a.path.clone(),
    };
    let received = req.ext::<Received>().map_or_else(Instant::now, |r| r.0);
    let timeout = super::query(req, "timeout").and_then(|t| go_duration(&t));
    let deadline = received + crate::flowcontrol::wait_limit(timeout, watch);
    match fc.admit(&digest, deadline).await {
        Ok(admitted) => Ok(Some(admitted)),
        Err(rejected) => {
            tracing::debug!(user = %user.name, path = %a.path, "too many requests");
            let mut r = tide::Response::new(StatusCode::TooManyRequests);
            r.insert_header(
                HEADER_PRIORITY_LEVEL_UID,
                rejected.priority_level_uid.as_str(),
            );
            r.insert_header(HEADER_FLOW_SCHEMA_UID, rejected.flow_schema_uid.as_str());
            r.insert_header("Retry-After", rejected.retry_after.to_string());
            // Go's http.Error.
            r.insert_header("X-Content-Type-Options", "nosniff");
            r.set_body("Too many requests, please try again later.\n");
            // As Go writes it (tide's own would drop the space).
            r.insert_header("Content-Type", "text/plain; charset=utf-8");
            Err(r)
        }
    }
}

/// The classification's headers on an answer.
pub(super) fn set_headers(r: &mut tide::Response, a: &Admitted) {
    r.insert_header(HEADER_PRIORITY_LEVEL_UID, a.priority_level_uid.as_str());
    r.insert_header(HEADER_FLOW_SCHEMA_UID, a.flow_schema_uid.as_str());
}

/// The dump of `path` (a text table, as kube writes it).
pub(super) fn dump(fc: &Controller, path: &str, req: &tide::Request<State>) -> tide::Response {
    let text = match path {
        DUMP_PRIORITY_LEVELS => fc.dump_priority_levels(),
        DUMP_QUEUES => fc.dump_queues(),
        _ => {
            let details = super::query(req, "includeRequestDetails").is_some_and(|v| !v.is_empty());
            fc.dump_requests(details)
        }
    };
    let mut r = tide::Response::new(StatusCode::Ok);
    r.set_body(text);
    r.insert_header("Content-Type", "text/plain; charset=utf-8");
    r
}

/// A Go duration (`8s`, `1m30s`, `1.5s`, `250ms`), as the `timeout` parameter is written;
/// None when it is not one.
pub fn go_duration(s: &str) -> Option<Duration> {
    if s == "0" {
        return Some(Duration::ZERO);
    }
    let mut rest = s;
    let mut total = 0f64;
    while !rest.is_empty() {
        let end = rest.find(|c: char| !(c.is_ascii_digit() || c == '.'))?;
        let number: f64 = rest[..end].parse().ok()?;
        rest = &rest[end..];
        let unit_end = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let scale = match &rest[..unit_end] {
            "ns" => 1e-9,
            "us" | "µs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            _ => return None,
        };
        total += number * scale;
        rest = &rest[unit_end..];
    }
    Duration::try_from_secs_f64(total).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_durations() {
        assert_eq!(go_duration("32s"), Some(Duration::from_secs(32)));
        assert_eq!(go_duration("1m30s"), Some(Duration::from_secs(90)));
        assert_eq!(go_duration("1.5s"), Some(Duration::from_millis(1500)));
        assert_eq!(go_duration("250ms"), Some(Duration::from_millis(250)));
        assert_eq!(go_duration("0"), Some(Duration::ZERO));
        assert_eq!(go_duration("soon"), None);
        assert_eq!(go_duration("5"), None);
    }

    #[test]
    fn long_running_as_kube() {
        use crate::rbac::Attributes;
        let r = |verb: &str, sub: &str| Attributes::resource(verb, "", "pods", sub, "ns", "p");
        assert!(long_running(&r("watch", "")));
        assert!(long_running(&r("get", "log")));
        assert!(long_running(&r("create", "exec")));
        assert!(long_running(&r("create", "portforward")));
        assert!(!long_running(&r("list", "")));
        assert!(!long_running(&r("update", "status")));
        assert!(!long_running(&Attributes::non_resource("get", "/healthz")));
    }
}
