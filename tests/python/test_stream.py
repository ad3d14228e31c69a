"""The Python client's `stream()` exec and port-forward against a real skiff server that runs
its own node, with a real busybox container. Needs root, /bin/busybox and `skiff-agent` next
to `skiff` (to import the image)."""

import hashlib
import io
import json
import os
import platform
import shutil
import socket
import subprocess
import tarfile
import tempfile
import time
from pathlib import Path

import pytest
from kubernetes import client, config
from kubernetes.stream import portforward, stream

from conftest import ROOT, _free_port

IMAGE = "skiff.test/py-stream:v1"
POD = "py-stream"
APPLETS = ["sh", "cat", "echo", "httpd", "wc", "sleep", "true"]


def _add(tar, name, data=None, link=None, mode=0o644, directory=False):
    info = tarfile.TarInfo(name)
    info.mode = mode
    if directory:
        info.type = tarfile.DIRTYPE
    elif link is not None:
        info.type = tarfile.SYMTYPE
        info.linkname = link
    else:
        info.size = len(data)
    tar.addfile(info, io.BytesIO(data) if data is not None else None)


def _docker_archive(path):
    """A docker-save archive with one layer: busybox, its applets as links, a page."""
    layer = io.BytesIO()
    with tarfile.open(fileobj=layer, mode="w") as t:
        _add(t, "bin", directory=True, mode=0o755)
        _add(t, "bin/busybox", Path("/bin/busybox").read_bytes(), mode=0o755)
        for applet in APPLETS:
            _add(t, f"bin/{applet}", link="busybox", mode=0o777)
        _add(t, "www", directory=True, mode=0o755)
        _add(t, "www/index.html", b"hello from the pod\n")
        _add(t, "tmp", directory=True, mode=0o1777)
    layer = layer.getvalue()
    arch = {"x86_64": "amd64", "aarch64": "arm64"}.get(platform.machine(), platform.machine())
    cfg = json.dumps(
        {
            "architecture": arch,
            "os": "linux",
            "config": {"Cmd": ["sh"], "Env": ["PATH=/bin"]},
            "rootfs": {"type": "layers", "diff_ids": ["sha256:" + hashlib.sha256(layer).hexdigest()]},
        }
    ).encode()
    cfg_name = hashlib.sha256(cfg).hexdigest() + ".json"
    manifest = json.dumps([{"Config": cfg_name, "RepoTags": [IMAGE], "Layers": ["layer0/layer.tar"]}]).encode()
    with tarfile.open(path, "w") as t:
        _add(t, "layer0/layer.tar", layer)
        _add(t, cfg_name, cfg)
        _add(t, "manifest.json", manifest)


@pytest.fixture(scope="module")
def core():
    binary = Path(os.environ.get("SKIFF_BIN", str(ROOT / "target" / "debug" / "skiff")))
    agent = binary.with_name("skiff-agent")
    if os.geteuid() != 0 or not Path("/bin/busybox").exists() or not agent.exists():
        pytest.skip("needs root, /bin/busybox and skiff-agent next to skiff")
    data = Path(tempfile.mkdtemp(prefix="skiff-py-stream-"))
    run = Path(tempfile.mkdtemp(prefix="skiff-py-stream-run-"))
    archive = data / "image.tar"
    _docker_archive(archive)
    subprocess.run(
        [str(agent), "image", "import", str(archive), "--data-dir", str(data / "agent")],
        check=True,
    )
    port = _free_port()
    node = f"py-stream-{os.getpid()}"
    proc = subprocess.Popen(
        [
            str(binary), "server", "--data-dir", str(data), "--listen", f"127.0.0.1:{port}",
            "--node-name", node, "--node-ip", "127.0.0.1", "--cgroup-parent", f"skiff-py-{os.getpid()}",
            "--agent-port", "0", "--disable-proxy", "--agent-run-dir", str(run),
        ],
        env={**os.environ, "SKIFF_LOG": "warn"},
    )
    kubeconfig = data / "admin.kubeconfig"
    deadline = time.time() + 30
    while not kubeconfig.exists():
        assert time.time() < deadline, "skiff server did not start"
        time.sleep(0.05)
    cfg = client.Configuration()
    config.load_kube_config(config_file=str(kubeconfig), client_configuration=cfg)
    api = client.CoreV1Api(client.ApiClient(cfg))
    deadline = time.time() + 30
    while True:
        try:
            api.read_node(node)
            break
        except Exception:
            assert time.time() < deadline, "the server's node did not register"
            time.sleep(0.2)
    pod = client.V1Pod(
        metadata=client.V1ObjectMeta(name=POD),
        spec=client.V1PodSpec(
            node_name=node,
            termination_grace_period_seconds=1,
            containers=[
                client.V1Container(name="main", image=IMAGE, command=["httpd", "-f", "-p", "8080", "-h", "/www"])
            ],
        ),
    )
    api.create_namespaced_pod("default", pod)
    deadline = time.time() + 60
    while api.read_namespaced_pod(POD, "default").status.phase != "Running":
        assert time.time() < deadline, "the pod did not start"
        time.sleep(0.2)
    yield api
    api.delete_namespaced_pod(POD, "default")
    deadline = time.time() + 30
    while time.time() < deadline:
        try:
            api.read_namespaced_pod(POD, "default")
            time.sleep(0.2)
        except client.exceptions.ApiException:
            break
    proc.terminate()
    proc.wait(timeout=10)
    shutil.rmtree(data, ignore_errors=True)
    shutil.rmtree(run, ignore_errors=True)


def test_exec_output(core):
    out = stream(
        core.connect_get_namespaced_pod_exec, POD, "default",
        command=["sh", "-c", "echo to-stdout; echo to-stderr >&2"],
        stderr=True, stdin=False, stdout=True, tty=False,
    )
    assert "to-stdout" in out and "to-stderr" in out


def test_exec_returncode(core):
    resp = stream(
        core.connect_get_namespaced_pod_exec, POD, "default",
        command=["sh", "-c", "echo bye >&2; exit 3"],
        stderr=True, stdin=False, stdout=True, tty=False, _preload_content=False,
    )
    resp.run_forever(timeout=20)
    assert resp.read_stderr() == "bye\n"
    assert resp.returncode == 3
    resp.close()
    ok = stream(
        core.connect_get_namespaced_pod_exec, POD, "default",
        command=["true"], stderr=True, stdin=False, stdout=True, tty=False, _preload_content=False,
    )
    ok.run_forever(timeout=20)
    assert ok.returncode == 0
    ok.close()


def test_exec_stdin(core):
    resp = stream(
        core.connect_get_namespaced_pod_exec, POD, "default",
        command=["cat"], stderr=True, stdin=True, stdout=True, tty=False, _preload_content=False,
    )
    resp.write_stdin("hello over stdin\n")
    seen = ""
    deadline = time.time() + 20
    while "hello over stdin" not in seen:
        assert time.time() < deadline, f"no echo: {seen!r}"
        resp.update(timeout=1)
        seen += resp.read_stdout() if resp.peek_stdout() else ""
    resp.close()


def test_portforward(core):
    pf = portforward(core.connect_get_namespaced_pod_portforward, POD, "default", ports="8080")
    sock = pf.socket(8080)
    sock.setblocking(True)
    sock.settimeout(20)
    sock.sendall(b"GET / HTTP/1.0\r\nHost: pod\r\n\r\n")
    reply = b""
    while True:
        try:
            chunk = sock.recv(4096)
        except socket.timeout:
            break
        if not chunk:
            break
        reply += chunk
    sock.close()
    assert b"200 OK" in reply and b"hello from the pod" in reply, reply
    assert pf.error(8080) is None
