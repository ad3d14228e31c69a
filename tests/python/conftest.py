"""Starts a real `skiff server` for the Python client tests."""

import os
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server():
    binary = os.environ.get("SKIFF_BIN", str(ROOT / "target" / "debug" / "skiff"))
    data = tempfile.mkdtemp(prefix="skiff-py-")
    port = _free_port()
    proc = subprocess.Popen(
        [binary, "server", "--data-dir", data, "--listen", f"127.0.0.1:{port}", "--disable-agent"],
        env={**os.environ, "SKIFF_LOG": "warn"},
    )
    kubeconfig = Path(data) / "admin.kubeconfig"
    deadline = time.time() + 30
    while time.time() < deadline:
        if kubeconfig.exists():
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                pass
        time.sleep(0.05)
    else:
        proc.kill()
        raise RuntimeError("skiff server did not start")
    yield str(kubeconfig)
    proc.terminate()
    proc.wait(timeout=10)
