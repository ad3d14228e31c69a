"""Discovery with the official Python `kubernetes` client: it asks `/api` and `/apis` for JSON
(not the aggregated apidiscovery.k8s.io/v2 document kubectl asks for) and gets the
APIVersions and APIGroupList, the groups in kube-apiserver's order."""

import pytest
from kubernetes import client, config, dynamic


@pytest.fixture(scope="module")
def api(server):
    cfg = client.Configuration()
    config.load_kube_config(config_file=server, client_configuration=cfg)
    return client.ApiClient(cfg)


def test_api_group_list(api):
    groups = client.ApisApi(api).get_api_versions()
    names = [g.name for g in groups.groups]
    # As kube-apiserver lists them: the aggregator's own group first, then apps.
    assert names[:2] == ["apiregistration.k8s.io", "apps"]
    assert names[-1] == "metrics.k8s.io"
    assert names.index("authentication.k8s.io") < names.index("autoscaling")
    autoscaling = next(g for g in groups.groups if g.name == "autoscaling")
    assert autoscaling.preferred_version.version == "v2"
    assert [v.version for v in autoscaling.versions] == ["v2", "v1"]


def test_core_versions(api):
    assert client.CoreApi(api).get_api_versions().versions == ["v1"]


def test_group_resources(api):
    resources = client.AppsV1Api(api).get_api_resources()
    names = {r.name for r in resources.resources}
    assert {"deployments", "deployments/scale", "deployments/status"} <= names


def test_dynamic_client(api):
    dyn = dynamic.DynamicClient(api)
    deployments = dyn.resources.get(api_version="apps/v1", kind="Deployment")
    assert deployments.namespaced
    hpa = dyn.resources.get(api_version="autoscaling/v2", kind="HorizontalPodAutoscaler")
    assert hpa.name == "horizontalpodautoscalers"
    namespaces = dyn.resources.get(api_version="v1", kind="Namespace").get()
    assert "default" in [n.metadata.name for n in namespaces.items]
