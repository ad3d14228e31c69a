"""The official Python `kubernetes` client against a real skiff server."""

import threading
import time

import pytest
from kubernetes import client, config, watch
from kubernetes.client.rest import ApiException


@pytest.fixture(scope="module")
def api(server):
    cfg = client.Configuration()
    config.load_kube_config(config_file=server, client_configuration=cfg)
    return client.ApiClient(cfg)


def deployment(name, replicas=1):
    return client.V1Deployment(
        metadata=client.V1ObjectMeta(name=name, labels={"app": name}),
        spec=client.V1DeploymentSpec(
            replicas=replicas,
            selector=client.V1LabelSelector(match_labels={"app": name}),
            template=client.V1PodTemplateSpec(
                metadata=client.V1ObjectMeta(labels={"app": name}),
                spec=client.V1PodSpec(containers=[client.V1Container(name="c", image="busybox:1.36")]),
            ),
        ),
    )


def test_list_namespaces(api):
    names = [n.metadata.name for n in client.CoreV1Api(api).list_namespace().items]
    assert "default" in names and "kube-system" in names


def test_create_replace_conflict_delete(api):
    apps = client.AppsV1Api(api)
    created = apps.create_namespaced_deployment("default", deployment("py-web"))
    assert created.metadata.uid
    assert created.spec.strategy.type == "RollingUpdate"
    stale = apps.read_namespaced_deployment("py-web", "default")
    # The Deployment controller writes the object too (revision annotation, status), so a
    # read-modify-replace retries on conflict, as client code against Kubernetes does.
    for _ in range(20):
        fresh = apps.read_namespaced_deployment("py-web", "default")
        fresh.spec.replicas = 3
        try:
            replaced = apps.replace_namespaced_deployment("py-web", "default", fresh)
            break
        except ApiException as e:
            if e.status != 409:
                raise
            time.sleep(0.1)
    assert replaced.spec.replicas == 3
    assert replaced.metadata.generation == 2
    stale.spec.replicas = 5
    with pytest.raises(ApiException) as err:
        apps.replace_namespaced_deployment("py-web", "default", stale)
    assert err.value.status == 409
    assert "the object has been modified" in err.value.body
    apps.delete_namespaced_deployment("py-web", "default")
    with pytest.raises(ApiException) as err:
        apps.read_namespaced_deployment("py-web", "default")
    assert err.value.status == 404


def test_patch_and_label_selector(api):
    core = client.CoreV1Api(api)
    for i, env in enumerate(["prod", "dev"]):
        core.create_namespaced_config_map(
            "default",
            client.V1ConfigMap(metadata=client.V1ObjectMeta(name=f"py-cm-{i}", labels={"env": env}), data={"k": "v"}),
        )
    prod = core.list_namespaced_config_map("default", label_selector="env=prod").items
    assert [c.metadata.name for c in prod] == ["py-cm-0"]
    patched = core.patch_namespaced_config_map("py-cm-1", "default", {"metadata": {"labels": {"env": "prod"}}})
    assert patched.metadata.labels["env"] == "prod"
    prod = core.list_namespaced_config_map("default", label_selector="env=prod").items
    assert sorted(c.metadata.name for c in prod) == ["py-cm-0", "py-cm-1"]


def test_watch_sees_changes(api):
    core = client.CoreV1Api(api)
    start = core.list_namespaced_config_map("default").metadata.resource_version

    def later():
        time.sleep(0.5)
        core.create_namespaced_config_map(
            "default", client.V1ConfigMap(metadata=client.V1ObjectMeta(name="py-watched"), data={"a": "1"})
        )
        core.delete_namespaced_config_map("py-watched", "default")

    threading.Thread(target=later).start()
    seen = []
    w = watch.Watch()
    for event in w.stream(core.list_namespaced_config_map, "default", resource_version=start, timeout_seconds=10):
        seen.append((event["type"], event["object"].metadata.name))
        if ("DELETED", "py-watched") in seen:
            w.stop()
    assert ("ADDED", "py-watched") in seen
    assert ("DELETED", "py-watched") in seen


def test_errors_are_statuses(api):
    core = client.CoreV1Api(api)
    bad = client.V1Pod(metadata=client.V1ObjectMeta(name="Not_Valid"), spec=client.V1PodSpec(containers=[]))
    with pytest.raises(ApiException) as err:
        core.create_namespaced_pod("default", bad)
    assert err.value.status == 422
    with pytest.raises(ApiException) as err:
        core.read_namespaced_pod("absent", "default")
    assert err.value.status == 404
