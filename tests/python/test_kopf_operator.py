"""A controller written with a maintained operator framework (kopf, on the official Python
client) reconciling a custom resource on skiff, as it would on Kubernetes: kopf watches the
custom resource (with bookmarks), puts its finalizer and its progress annotations on each
object, writes the handler's result into `status` through the status subresource, posts
Events, and the ConfigMap it makes (adopted with an ownerReference) follows the object's spec
and is garbage-collected with it."""

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from kubernetes import client, config

GROUP, VERSION, PLURAL = "demo.skiff.dev", "v1", "greetings"

CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": f"{PLURAL}.{GROUP}"},
    "spec": {
        "group": GROUP,
        "scope": "Namespaced",
        "names": {"plural": PLURAL, "singular": "greeting", "kind": "Greeting"},
        "versions": [{
            "name": VERSION, "served": True, "storage": True,
            "subresources": {"status": {}},
            "schema": {"openAPIV3Schema": {
                "type": "object",
                "properties": {
                    "spec": {"type": "object", "properties": {"message": {"type": "string"}}},
                    "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                },
            }},
        }],
    },
}

OPERATOR = textwrap.dedent('''
    import kopf
    import kubernetes

    kubernetes.config.load_kube_config()

    @kopf.on.startup()
    def settings(settings, **_):
        settings.watching.server_timeout = 30

    def configmap(name, message):
        return {"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": f"{name}-greeting"}, "data": {"message": message}}

    @kopf.on.create("demo.skiff.dev", "v1", "greetings")
    def create(spec, name, namespace, body, **_):
        cm = configmap(name, spec.get("message", ""))
        kopf.adopt(cm)
        kubernetes.client.CoreV1Api().create_namespaced_config_map(namespace, cm)
        kopf.info(body, reason="Greeted", message=f"made ConfigMap {cm['metadata']['name']}")
        return {"configmap": cm["metadata"]["name"]}

    @kopf.on.update("demo.skiff.dev", "v1", "greetings")
    def update(spec, name, namespace, **_):
        kubernetes.client.CoreV1Api().patch_namespaced_config_map(
            f"{name}-greeting", namespace, {"data": {"message": spec.get("message", "")}})
        return {"updated": True}

    @kopf.on.delete("demo.skiff.dev", "v1", "greetings")
    def delete(name, logger, **_):
        logger.info(f"{name} is going")
''')


def wait(what, seconds, fn):
    deadline = time.time() + seconds
    while time.time() < deadline:
        value = fn()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out: {what}")


@pytest.fixture(scope="module")
def api(server):
    cfg = client.Configuration()
    config.load_kube_config(config_file=server, client_configuration=cfg)
    return client.ApiClient(cfg)


@pytest.fixture(scope="module")
def operator(server, api, tmp_path_factory):
    ext = client.ApiextensionsV1Api(api)
    ext.create_custom_resource_definition(CRD)

    def established():
        crd = ext.read_custom_resource_definition(f"{PLURAL}.{GROUP}")
        return any(c.type == "Established" and c.status == "True"
                   for c in (crd.status.conditions or []))
    wait("the definition is established", 20, established)
    tmp = tmp_path_factory.mktemp("kopf")
    script = tmp / "operator.py"
    script.write_text(OPERATOR)
    log = open(tmp / "kopf.log", "w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "kopf", "run", "--standalone", "--namespace=default", str(script)],
        env={**os.environ, "KUBECONFIG": server},
        stdout=log, stderr=subprocess.STDOUT,
    )
    yield tmp / "kopf.log"
    proc.terminate()
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        proc.kill()
    log.close()


def test_kopf_reconciles_a_custom_resource(api, operator):
    custom = client.CustomObjectsApi(api)
    core = client.CoreV1Api(api)
    custom.create_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "Greeting",
        "metadata": {"name": "hello"}, "spec": {"message": "hi"},
    })

    def made():
        try:
            return core.read_namespaced_config_map("hello-greeting", "default")
        except client.ApiException as e:
            if e.status == 404:
                return None
            raise
    try:
        cm = wait("kopf makes the ConfigMap", 60, made)
    except AssertionError:
        raise AssertionError(Path(operator).read_text()[-4000:])
    assert cm.data == {"message": "hi"}
    owner = cm.metadata.owner_references[0]
    assert (owner.kind, owner.name, owner.controller) == ("Greeting", "hello", True)

    # kopf's bookkeeping on the object: its finalizer, and the handler's result in status.
    def reconciled():
        obj = custom.get_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, "hello")
        done = obj.get("status", {}).get("create", {}).get("configmap") == "hello-greeting"
        return obj if done else None
    obj = wait("kopf writes the handler's result into status", 30, reconciled)
    assert "kopf.zalando.org/KopfFinalizerMarker" in obj["metadata"]["finalizers"]

    # A spec change reaches the ConfigMap through the update handler.
    custom.patch_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, "hello",
                                          {"spec": {"message": "hello again"}})
    wait("kopf updates the ConfigMap", 60,
         lambda: core.read_namespaced_config_map("hello-greeting", "default").data
         == {"message": "hello again"})

    # kopf posts Events about its handlers.
    def posted():
        return any(e.involved_object.name == "hello" and e.involved_object.kind == "Greeting"
                   and e.reason == "Greeted" and e.message == "made ConfigMap hello-greeting"
                   for e in core.list_namespaced_event("default").items)
    wait("kopf posts Events about the object", 30, posted)

    # Deleting the object: kopf lets go of its finalizer, the ConfigMap is collected.
    custom.delete_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, "hello")

    def gone():
        try:
            custom.get_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, "hello")
            return False
        except client.ApiException as e:
            return e.status == 404
    wait("the object is deleted once kopf releases it", 60, gone)
    wait("the ConfigMap is garbage-collected", 30, lambda: made() is None)
