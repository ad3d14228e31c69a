#!/usr/bin/env python3
"""Writes the seed corpus (fuzz/corpus/<target>/) from the repository's real inputs: the test
manifests, the protobuf fixtures, the example app, and small DNS queries, image documents and
archives built here the way registries, `docker save` and `skopeo` write them. Run it from the
repository root after the inputs change; the fuzzers' finds and crash reproducers are added
beside these seeds by hand (named after what they found)."""

import gzip
import hashlib
import io
import json
import os
import struct
import tarfile
import glob

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CORPUS = os.path.join(ROOT, "fuzz", "corpus")


def put(target, name, data):
    d = os.path.join(CORPUS, target)
    os.makedirs(d, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def rel(p):
    return os.path.join(ROOT, p)


# Request bodies: every test manifest, as YAML and as JSON.
docs = []
for path in sorted(glob.glob(rel("api/tests/manifests/*")) + [rel("examples/hello/app.yaml")]):
    name = os.path.basename(path)
    text = open(path, "rb").read()
    if path.endswith(".json"):
        put("json_decode", name, text)
        put("yaml_decode", name, text)
        docs.append(json.loads(text))
        continue
    put("yaml_decode", name, text)
    for i, d in enumerate(yaml.safe_load_all(text)):
        if d is None:
            continue
        docs.append(d)
        put("json_decode", f"{name[:-5]}-{i}.json", json.dumps(d, separators=(",", ":"), default=str))
for path in sorted(glob.glob(rel("control/tests/fixtures/protobuf/*"))):
    name = os.path.basename(path)
    if name.endswith(".pb"):
        put("protobuf_decode", name, open(path, "rb").read())
    elif name.endswith(".json"):
        put("json_decode", "protobuf-fixture-" + name, open(path, "rb").read())

# Selectors and quantities as kubectl sends them.
for i, s in enumerate([
    "app=web", "app==web,tier!=db", "env in (prod,staging),!canary", "app notin (a,b),x",
    "k8s.io/app=web-1", "a>1,b<10", "", "!a", "app in ()", "a=b,c=d,e=f,g in (h),i notin (j)",
]):
    put("label_selector", f"seed-{i}", s)
for i, s in enumerate([
    "metadata.name=web", "spec.nodeName=node-1,status.phase!=Succeeded", "metadata.namespace==default",
    "involvedObject.name=web,involvedObject.namespace=default,involvedObject.uid=1234", "spec.nodeName=",
    "status.phase!=Failed,status.phase!=Succeeded", "type=Warning", "a\\,b=c",
]):
    put("field_selector", f"seed-{i}", s)
for i, s in enumerate([
    "100m 0.1", "1Gi 1024Mi", "2e3 2k", "500Mi 0.5Gi", "1.5 1500m", "-1 0", "0.000001 1u",
    "12345678901234567890 1", "1E 1Ei", "3n 1m", "+5.e2 500", "1e-9 1n",
]):
    put("quantity", f"seed-{i}", s)

# Patches: the current object on the first line, then the body as kubectl sends it.
deployment = next(d for d in docs if d.get("kind") == "Deployment")
pod = next(d for d in docs if d.get("kind") == "Pod")
cur_d = json.dumps(deployment, separators=(",", ":"), default=str)
cur_p = json.dumps(pod, separators=(",", ":"), default=str)
strategic = [
    (cur_d, {"spec": {"replicas": 5}}),
    (cur_d, {"spec": {"template": {"spec": {"containers": [{"name": deployment["spec"]["template"]["spec"]["containers"][0]["name"], "image": "nginx:1.27"}]}}}}),
    (cur_d, {"spec": {"template": {"metadata": {"annotations": {"kubectl.kubernetes.io/restartedAt": "2026-01-01T00:00:00Z"}}}}}),
    (cur_d, {"spec": {"template": {"spec": {"$setElementOrder/containers": [{"name": "b"}, {"name": "a"}], "containers": [{"name": "b", "image": "x"}, {"name": "a", "$patch": "delete"}]}}}}),
    (cur_d, {"spec": {"strategy": {"$retainKeys": ["type"], "type": "Recreate"}}}),
    (cur_p, {"metadata": {"finalizers": ["a"], "$deleteFromPrimitiveList/finalizers": ["b"], "labels": {"x": None}}}),
    (cur_p, {"spec": {"containers": [{"name": "c", "env": [{"name": "A", "value": "1"}], "ports": [{"containerPort": 80, "$patch": "replace"}]}]}}),
    (cur_p, {"$patch": "replace", "metadata": {"name": "x"}}),
]
for i, (cur, p) in enumerate(strategic):
    put("strategic_merge_patch", f"seed-{i}", cur + "\n" + json.dumps(p))
put("strategic_merge_patch", "apply-yaml", cur_d + "\n" + "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\nspec:\n  replicas: 3\n")
jsonpatch = [
    (cur_d, [{"op": "replace", "path": "/spec/replicas", "value": 4}]),
    (cur_d, [{"op": "add", "path": "/metadata/labels/x", "value": "y"}, {"op": "remove", "path": "/metadata/labels/x"}]),
    (cur_d, [{"op": "test", "path": "/kind", "value": "Deployment"}, {"op": "copy", "from": "/metadata/name", "path": "/metadata/labels/n"}]),
    (cur_p, [{"op": "move", "from": "/metadata/labels", "path": "/metadata/annotations"}]),
    (cur_p, [{"op": "add", "path": "/spec/containers/-", "value": {"name": "side", "image": "busybox"}}]),
    (cur_p, [{"op": "replace", "path": "/spec/containers/0/image", "value": "busybox:1"}]),
    (cur_p, {"metadata": {"labels": {"a": None, "b": "c"}}}),
    (cur_d, {"spec": {"replicas": 0}}),
]
for i, (cur, p) in enumerate(jsonpatch):
    put("json_patch", f"seed-{i}", cur + "\n" + json.dumps(p))


# DNS queries as resolvers send them (RFC 1035 wire format).
def query(name, qtype, qid=0x1234, opt=None, qclass=1, flags=0x0100):
    q = struct.pack(">HHHHHH", qid, flags, 1, 0, 0, 1 if opt else 0)
    for label in name.strip(".").split("."):
        if label:
            q += bytes([len(label)]) + label.encode()
    q += b"\0" + struct.pack(">HH", qtype, qclass)
    if opt:
        q += b"\0" + struct.pack(">HHIH", 41, opt, 0, 0)
    return q


for i, (name, qtype, opt) in enumerate([
    ("web.default.svc.cluster.local", 1, None), ("web.default.svc.cluster.local", 28, 1232),
    ("_http._tcp.web.default.svc.cluster.local", 33, None), ("db.prod.svc.cluster.local", 1, 4096),
    ("db-0.db.prod.svc.cluster.local", 1, None), ("10.0.43.10.in-addr.arpa", 12, None),
    ("cluster.local", 6, None), ("missing.default.svc.cluster.local", 1, None),
    ("example.com", 1, None), ("web.default.svc.cluster.local", 255, None),
]):
    put("dns_wire", f"seed-{i}", query(name, qtype, opt=opt))
compressed = query("web.default.svc.cluster.local", 1)[:-4]
put("dns_wire", "pointer", struct.pack(">HHHHHH", 7, 0x0100, 1, 0, 0, 0) + b"\xc0\x0c" + struct.pack(">HH", 1, 1))
put("dns_wire", "notimp", query("web.default.svc.cluster.local", 1, flags=0x2800))


# Image documents as registries serve them.
def digest(b):
    return "sha256:" + hashlib.sha256(b).hexdigest()


def tar_of(files):
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.GNU_FORMAT) as t:
        for name, kind, data in files:
            info = tarfile.TarInfo(name)
            info.mtime = 1700000000
            if kind == "dir":
                info.type = tarfile.DIRTYPE
                info.mode = 0o755
                t.addfile(info)
            elif kind == "symlink":
                info.type = tarfile.SYMTYPE
                info.linkname = data
                t.addfile(info)
            elif kind == "hardlink":
                info.type = tarfile.LNKTYPE
                info.linkname = data
                t.addfile(info)
            else:
                info.size = len(data)
                info.mode = 0o644
                t.addfile(info, io.BytesIO(data))
    return out.getvalue()


layer1 = tar_of([("bin/", "dir", None), ("bin/sh", "file", b"#!/bin/true\n"), ("bin/busybox", "hardlink", "bin/sh"),
                 ("etc/", "dir", None), ("etc/hostname", "file", b"skiff\n"), ("usr/bin", "symlink", "../bin")])
layer2 = tar_of([("etc/", "dir", None), ("etc/.wh.hostname", "file", b""), ("var/", "dir", None),
                 ("var/.wh..wh..opq", "file", b""), ("var/www/index.html", "file", b"hello\n")])
layer2_gz = gzip.compress(layer2, mtime=0)
put("image_layer", "plain.tar", layer1)
put("image_layer", "whiteouts.tar.gz", layer2_gz)
put("image_layer", "escape-attempts.tar", tar_of([("../outside", "file", b"x"), ("/abs", "file", b"y"),
                                                   ("link", "symlink", "/etc"), ("link/passwd", "file", b"z")]))
config = {"architecture": "amd64", "os": "linux",
          "config": {"Entrypoint": ["/bin/sh"], "Cmd": ["-c", "true"], "Env": ["PATH=/bin"], "WorkingDir": "/",
                     "User": "1000:1000", "ExposedPorts": {"80/tcp": {}}, "Labels": {"a": "b"}, "StopSignal": "SIGTERM"},
          "rootfs": {"type": "layers", "diff_ids": [digest(layer1), digest(layer2)]}}
config_b = json.dumps(config).encode()
manifest = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": digest(config_b), "size": len(config_b)},
            "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": digest(layer1), "size": len(layer1)},
                       {"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", "digest": digest(layer2_gz), "size": len(layer2_gz)}]}
manifest_b = json.dumps(manifest).encode()
index = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json",
         "manifests": [{"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": digest(manifest_b), "size": len(manifest_b),
                        "platform": {"architecture": a, "os": "linux", **({"variant": v} if v else {})},
                        "annotations": {"org.opencontainers.image.ref.name": "latest"}}
                       for a, v in [("amd64", None), ("arm64", "v8"), ("arm", "v7")]]}
index_b = json.dumps(index).encode()
put("image_manifest", "oci-index.json", index_b)
put("image_manifest", "oci-manifest.json", manifest_b)
put("image_manifest", "config.json", config_b)
put("image_manifest", "docker-list.json", json.dumps({**index, "mediaType": "application/vnd.docker.distribution.manifest.list.v2+json"}))
for i, r in enumerate(["busybox", "docker.io/library/busybox:1.36", "registry.local:5000/team/app@" + digest(b"x"),
                       "localhost/app:v1.2.3", "ghcr.io/o/r:latest@" + digest(b"y")]):
    put("image_manifest", f"reference-{i}", r)


# Archives as `skopeo copy oci-archive:` and `docker save` write them.
def archive(files):
    return tar_of([(n, "file", d) for n, d in files])


blobs = {digest(b): b for b in [layer1, layer2_gz, config_b, manifest_b]}
oci_index = {"schemaVersion": 2, "manifests": [{"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": digest(manifest_b),
                                                 "size": len(manifest_b), "annotations": {"org.opencontainers.image.ref.name": "app:v1"}}]}
oci = archive([("oci-layout", b'{"imageLayoutVersion":"1.0.0"}'), ("index.json", json.dumps(oci_index).encode())]
              + [("blobs/sha256/" + d[7:], b) for d, b in blobs.items()])
put("image_archive", "oci-layout.tar", oci)
docker_manifest = [{"Config": "config.json", "RepoTags": ["app:v1"], "Layers": ["l1/layer.tar", "l2/layer.tar"]}]
docker = archive([("manifest.json", json.dumps(docker_manifest).encode()), ("config.json", config_b),
                  ("l1/layer.tar", layer1), ("l2/layer.tar", layer2)])
put("image_archive", "docker-save.tar", docker)
put("image_archive", "docker-save.tar.gz", gzip.compress(docker, mtime=0))

# Request targets and headers as kubectl, client-go and the Python client send them (the
# target on the first line, header lines, then after an empty line a DeleteOptions body), and
# the extreme values that overflowed.
KUBECTL_UA = "User-Agent: kubectl/v1.34.1 (linux/amd64) kubernetes/abcdef0"
for name, head in [
    ("list-paged", "/api/v1/namespaces/default/pods?limit=500\nAccept: application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json\n" + KUBECTL_UA),
    ("list-continue", "/apis/apps/v1/deployments?limit=2&continue=MTIzCmRlZmF1bHQvd2Vi&resourceVersion=0&resourceVersionMatch=NotOlderThan\nAccept: application/vnd.kubernetes.protobuf, */*"),
    ("watch", "/api/v1/namespaces/default/pods?watch=true&resourceVersion=42&timeoutSeconds=300&allowWatchBookmarks=true&fieldSelector=metadata.name%3Dweb-0\nAccept: application/json"),
    ("watch-huge-timeout", "/api/v1/pods?watch=1&timeoutSeconds=9223372036854775807"),
    ("watch-negative-timeout", "/api/v1/pods?watch=1&timeoutSeconds=-9223372036854775808&resourceVersion=18446744073709551615"),
    ("list-huge-limit", "/api/v1/pods?limit=9223372036854775807"),
    ("list-limit-past-int64", "/api/v1/pods?limit=18446744073709551615"),
    ("logs", "/api/v1/namespaces/default/pods/web-0/log?container=app&follow=true&timestamps=true&tailLines=10&limitBytes=1024&sinceSeconds=60"),
    ("logs-since-time", "/api/v1/namespaces/default/pods/web-0/log?previous=1&sinceTime=2026-11-21T10%3A00%3A00Z"),
    ("logs-huge", "/api/v1/namespaces/default/pods/web-0/log?tailLines=9223372036854775807&limitBytes=9223372036854775807&sinceSeconds=9223372036854775807"),
    ("logs-future-since-time", "/api/v1/namespaces/default/pods/web-0/log?sinceTime=9999-12-31T23%3A59%3A59Z"),
    ("delete-grace", "/api/v1/namespaces/default/pods/web-0?gracePeriodSeconds=0&propagationPolicy=Background&dryRun=All\nContent-Type: application/json\n\n{\"kind\":\"DeleteOptions\",\"apiVersion\":\"v1\",\"gracePeriodSeconds\":30,\"preconditions\":{\"uid\":\"u-1\"}}"),
    ("delete-huge-grace", "/api/v1/namespaces/default/pods/web-0?gracePeriodSeconds=9223372036854775807"),
    ("delete-body-min-grace", "/api/v1/namespaces/default/pods/web-0\nContent-Type: application/json\n\n{\"gracePeriodSeconds\":-9223372036854775808,\"dryRun\":[\"All\"]}"),
    ("apply", "/apis/apps/v1/namespaces/default/deployments/web?fieldManager=kubectl-client-side-apply&fieldValidation=Strict&force=true\nContent-Type: application/apply-patch+yaml\n" + KUBECTL_UA),
    ("patch-strategic", "/apis/apps/v1/namespaces/default/deployments/web/scale?fieldValidation=Warn\nContent-Type: application/strategic-merge-patch+json; charset=utf-8\nUser-Agent: python-kubernetes/31.0.0"),
    ("impersonate", "/api/v1/namespaces/default/pods\nImpersonate-User: system:serviceaccount:default:builder\nImpersonate-Group: system:authenticated\nImpersonate-Group: devs\nImpersonate-Uid: 1234\nImpersonate-Extra-Scopes: view\nImpersonate-Extra-acme.com%2Fproject: p1"),
    ("impersonate-groups-only", "/api/v1/pods\nImpersonate-Group: devs\nImpersonate-User: "),
    ("dotted-path", "/api/v1/namespaces/default/pods/%2E%2E?dryRun=All&dryRun=Some"),
    ("exec", "/api/v1/namespaces/default/pods/web-0/exec?command=sh&command=-c&command=echo%20hi&stdin=true&stdout=true&tty=true&container=app"),
    ("portforward", "/api/v1/namespaces/default/pods/web-0/portforward?ports=8080,65535&ports=0"),
]:
    put("query_headers", name, head)

# Kubeconfigs as skiff, kubectl and `skiff user create` write them.
put("kubeconfig", "token.yaml", """apiVersion: v1
kind: Config
clusters:
- name: skiff
  cluster:
    server: https://127.0.0.1:6443
    certificate-authority-data: LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCg==
users:
- name: admin
  user:
    token: abc123
contexts:
- name: skiff
  context: {cluster: skiff, user: admin, namespace: default}
current-context: skiff
preferences: {}
""")
put("kubeconfig", "client-cert.yaml", """apiVersion: v1
kind: Config
clusters:
- name: other
  cluster:
    server: https://10.0.0.1:6443
    insecure-skip-tls-verify: true
    tls-server-name: api.internal
users:
- name: node
  user:
    client-certificate-data: Y2VydA==
    client-key-data: a2V5
contexts:
- name: other
  context: {cluster: other, user: node, namespace: kube-system}
current-context: other
""")
put("kubeconfig", "json.json", json.dumps({"apiVersion": "v1", "kind": "Config", "current-context": "c",
                                           "clusters": [{"name": "k", "cluster": {"server": "https://[::1]:6443"}}],
                                           "users": [{"name": "u", "user": {"token": "t"}}],
                                           "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}]}))
