use super::*;
use api::flowcontrol::bootstrap;

fn all_bootstrap() -> (Vec<PriorityLevelConfiguration>, Vec<FlowSchema>) {
    let pls = bootstrap::mandatory_priority_levels()
        .into_iter()
        .chain(bootstrap::suggested_priority_levels())
        .collect();
    let fss = bootstrap::mandatory_flow_schemas()
        .into_iter()
        .chain(bootstrap::suggested_flow_schemas())
        .collect();
    (pls, fss)
}

fn controller(limit: usize) -> Controller {
    let c = Controller::new(limit);
    let (pls, fss) = all_bootstrap();
    c.digest(pls, fss);
    c
}

fn digest(
    user: &str,
    groups: &[&str],
    verb: &str,
    res: Option<(&str, &str, &str)>,
) -> RequestDigest {
    let mut groups: Vec<String> = groups.iter().map(|g| g.to_string()).collect();
    groups.push("system:authenticated".into());
    RequestDigest {
        user: user.into(),
        groups,
        verb: verb.into(),
        resource: res.map(|(group, resource, namespace)| ResourceInfo {
            group: group.into(),
            version: "v1".into(),
            resource: resource.into(),
            namespace: namespace.into(),
            ..Default::default()
        }),
        path: "/api/v1/pods".into(),
    }
}

fn level_of(c: &Controller, d: &RequestDigest) -> (String, String) {
    let k = c.classify(d);
    (
        k.flow_schema.metadata.name.clone(),
        k.level.config.metadata.name.clone(),
    )
}

#[test]
fn classification_follows_matching_precedence() {
    let c = controller(600);
    let admin = digest("admin", &["system:masters"], "list", Some(("", "pods", "")));
    assert_eq!(level_of(&c, &admin), ("exempt".into(), "exempt".into()));
    let lease = digest(
        "system:node:pi1",
        &["system:nodes"],
        "update",
        Some(("coordination.k8s.io", "leases", "kube-node-lease")),
    );
    assert_eq!(
        level_of(&c, &lease),
        ("system-node-high".into(), "node-high".into())
    );
    let node_pods = digest(
        "system:node:pi1",
        &["system:nodes"],
        "list",
        Some(("", "pods", "")),
    );
    assert_eq!(
        level_of(&c, &node_pods),
        ("system-nodes".into(), "system".into())
    );
    let sa = digest(
        "system:serviceaccount:apps:builder",
        &["system:serviceaccounts", "system:serviceaccounts:apps"],
        "create",
        Some(("", "configmaps", "apps")),
    );
    assert_eq!(
        level_of(&c, &sa),
        ("service-accounts".into(), "workload-low".into())
    );
    let user = digest("alice", &[], "list", Some(("", "configmaps", "default")));
    assert_eq!(
        level_of(&c, &user),
        ("global-default".into(), "global-default".into())
    );
    let mut probe = digest("alice", &[], "get", None);
    probe.path = "/readyz".into();
    assert_eq!(level_of(&c, &probe), ("probes".into(), "exempt".into()));
    // ByUser: the flow is the user's.
    let k = c.classify(&user);
    assert_eq!(k.distinguisher, "alice");
    assert_eq!(k.hash, flow_hash("global-default", "alice"));
    assert_ne!(k.hash, flow_hash("global-default", "bob"));
    // ByNamespace: the namespace's.
    let kcm = digest(
        "system:kube-controller-manager",
        &[],
        "update",
        Some(("apps", "deployments", "web")),
    );
    let k = c.classify(&kcm);
    assert_eq!(k.flow_schema.metadata.name, "kube-controller-manager");
    assert_eq!(k.distinguisher, "web");
}

#[test]
fn seats_divide_the_server_limit_by_shares() {
    let c = controller(150);
    let config = c.snapshot();
    let limits: Vec<(&str, usize)> = config
        .levels
        .iter()
        .map(|(n, l)| (n.as_str(), l.limit))
        .collect();
    // Shares: catch-all 5, exempt 0, system 30, node-high 40, leader-election 10,
    // workload-high 40, workload-low 100, global-default 20 (245 in all).
    assert_eq!(
        limits,
        [
            ("catch-all", 4),
            ("exempt", 0),
            ("global-default", 13),
            ("leader-election", 7),
            ("node-high", 25),
            ("system", 19),
            ("workload-high", 25),
            ("workload-low", 62),
        ]
    );
}

#[test]
fn mandatory_objects_are_imagined_and_dangling_schemas_skipped() {
    let c = Controller::new(100);
    let config = c.snapshot();
    assert_eq!(
        config.levels.keys().collect::<Vec<_>>(),
        ["catch-all", "exempt"]
    );
    assert_eq!(config.schemas.len(), 2);
    // A schema naming a level that does not exist is left out (and dangles).
    let mut fs = bootstrap::suggested_flow_schemas().remove(10);
    fs.spec.priority_level_configuration.name = "nowhere".into();
    c.digest(bootstrap::mandatory_priority_levels(), vec![fs.clone()]);
    let user = digest("alice", &[], "list", Some(("", "pods", "ns")));
    assert_eq!(
        level_of(&c, &user),
        ("catch-all".into(), "catch-all".into())
    );
    let condition = dangling_condition(&fs, &bootstrap::mandatory_priority_levels())
        .expect("a condition to write");
    assert_eq!(condition.status.as_deref(), Some("True"));
    assert_eq!(condition.reason.as_deref(), Some("NotFound"));
    assert_eq!(
        condition.message.as_deref(),
        Some("This FlowSchema references the PriorityLevelConfiguration object named \"nowhere\" but there is no such object")
    );
    let mut written = fs.clone();
    written.status.conditions.push(condition);
    assert!(dangling_condition(&written, &bootstrap::mandatory_priority_levels()).is_none());
    let found = dangling_condition(
        &bootstrap::mandatory_flow_schemas()[0],
        &bootstrap::mandatory_priority_levels(),
    )
    .expect("a condition");
    assert_eq!(
        (found.status.as_deref(), found.reason.as_deref()),
        (Some("False"), Some("Found"))
    );
}

#[test]
fn a_level_that_goes_away_drains_first() {
    let c = controller(600);
    let user = digest("alice", &[], "list", Some(("", "pods", "ns")));
    let admitted =
        smol::block_on(c.admit(&user, Instant::now() + Duration::from_secs(1))).expect("a seat");
    // global-default deleted while a request of it executes.
    let (pls, fss) = all_bootstrap();
    let pls: Vec<_> = pls
        .into_iter()
        .filter(|p| p.metadata.name != "global-default")
        .collect();
    c.digest(pls.clone(), fss.clone());
    let level = c
        .snapshot()
        .levels
        .get("global-default")
        .cloned()
        .expect("kept");
    assert!(level.quiescing);
    assert_eq!(
        level_of(&c, &user).1,
        "catch-all",
        "new requests go elsewhere"
    );
    drop(admitted);
    assert!(
        c.reap.1.try_recv().is_ok(),
        "an idle quiescing level asks to be reaped"
    );
    c.digest(pls, fss);
    assert!(!c.snapshot().levels.contains_key("global-default"));
}

#[test]
fn rejections_answer_with_the_uids_and_retry_after() {
    let c = Controller::new(1);
    // Only the mandatory objects: catch-all, a Reject level, takes everyone but admins.
    let mut levels = bootstrap::mandatory_priority_levels();
    levels[0].metadata.uid = "catch-all-uid".into();
    let mut schemas = bootstrap::mandatory_flow_schemas();
    schemas[1].metadata.uid = "catch-all-fs-uid".into();
    c.digest(levels, schemas);
    let user = digest("alice", &[], "list", Some(("", "pods", "ns")));
    let deadline = Instant::now() + Duration::from_secs(1);
    let first = smol::block_on(c.admit(&user, deadline)).expect("the only seat");
    assert_eq!(first.flow_schema_uid, "catch-all-fs-uid");
    assert_eq!(first.priority_level_uid, "catch-all-uid");
    let second = smol::block_on(c.admit(&user, deadline))
        .err()
        .expect("rejected");
    assert_eq!(second.priority_level_uid, "catch-all-uid");
    assert_eq!(second.retry_after, 1);
    // Admins are exempt.
    let admin = digest("admin", &["system:masters"], "list", Some(("", "pods", "")));
    let _exempt = smol::block_on(c.admit(&admin, deadline)).expect("exempt");
    let dump = c.dump_priority_levels();
    assert!(
        dump.starts_with("PriorityLevelName, ActiveQueues, IsIdle, IsQuiescing, WaitingRequests, ExecutingRequests, DispatchedRequests, RejectedRequests, TimedoutRequests, CancelledRequests\n"),
        "{dump}"
    );
    assert!(dump.contains("\ncatch-all,         0,            false,  false,       0,               1,                 1,                  1,                0,                0\n"), "{dump}");
    assert!(dump.contains("\nexempt,            0,            false,  false,       0,               1,                 1,                  0,                0,                0\n"), "{dump}");
    drop(first);
    assert!(smol::block_on(c.admit(&user, deadline)).is_ok());
}

#[test]
fn queued_requests_in_the_dumps() {
    let c = controller(10);
    let user = digest("alice", &[], "list", Some(("", "pods", "ns")));
    // global-default has 1 seat of 10 (20/245 of it, rounded up).
    let deadline = Instant::now() + Duration::from_millis(50);
    let held = smol::block_on(c.admit(&user, deadline)).expect("its seat");
    let waiting = smol::block_on(c.admit(&user, deadline));
    assert!(waiting.is_err(), "no seat within the wait");
    let requests = c.dump_requests(true);
    let mut lines = requests.lines();
    let header = lines.next().expect("a header");
    assert!(header.starts_with("PriorityLevelName, FlowSchemaName, QueueIndex, RequestIndexInQueue, FlowDistingsher, ArriveTime,"), "{requests}");
    assert!(
        header.ends_with("APIVersion, Resource, SubResource"),
        "{requests}"
    );
    let row: Vec<&str> = lines
        .next()
        .expect("the held request")
        .split(',')
        .map(str::trim)
        .collect();
    assert_eq!(
        &row[..5],
        ["global-default", "global-default", row[2], "-1", "alice"]
    );
    assert_eq!(&row[6..9], ["1", "0", "0s"]);
    assert_eq!(
        &row[10..],
        ["alice", "list", "/api/v1/pods", "ns", "", "v1", "pods", ""]
    );
    let queues = c.dump_queues();
    let header: Vec<&str> = queues
        .lines()
        .next()
        .expect("a header")
        .split(',')
        .map(str::trim)
        .collect();
    assert_eq!(
        header,
        [
            "PriorityLevelName",
            "Index",
            "PendingRequests",
            "ExecutingRequests",
            "SeatsInUse",
            "NextDispatchR",
            "InitialSeatsSum",
            "MaxSeatsSum",
            "TotalWorkSum"
        ]
    );
    assert!(queues.contains("0.00000000ss"), "{queues}");
    let levels = c.dump_priority_levels();
    let line = levels
        .lines()
        .find(|l| l.starts_with("global-default"))
        .expect("global-default");
    let cells: Vec<&str> = line.split(',').map(str::trim).collect();
    // Executing 1, rejected 1 (the wait ran out), cancelled 1.
    assert_eq!(cells[5], "1");
    assert_eq!(cells[7], "1");
    assert_eq!(cells[9], "1");
    drop(held);
}

#[test]
fn waits_are_a_quarter_of_the_timeout() {
    assert_eq!(wait_limit(None, false), Duration::from_secs(15));
    assert_eq!(
        wait_limit(Some(Duration::from_secs(8)), false),
        Duration::from_secs(2)
    );
    assert_eq!(
        wait_limit(Some(Duration::from_secs(600)), false),
        Duration::from_secs(15)
    );
    assert_eq!(
        wait_limit(Some(Duration::ZERO), false),
        Duration::from_secs(15)
    );
    assert_eq!(
        wait_limit(Some(Duration::from_secs(8)), true),
        Duration::from_secs(15)
    );
}

#[test]
fn retry_after_grows_with_rejections() {
    let mut d = Dropped::default();
    for _ in 0..5 {
        d.record(100);
    }
    assert_eq!(d.retry_after, 1);
    d.record(101);
    assert_eq!(
        d.retry_after, 2,
        "five rejections in the last second: doubled"
    );
    d.record(110);
    assert_eq!(d.retry_after, 1, "quiet since: back down");
}
