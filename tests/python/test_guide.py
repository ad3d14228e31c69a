"""Runs the user guide's command blocks (docs/guide/NN-*.md) against a fresh server.

Every ```sh block of a guide page is run with bash, in page order, unless the line just
above it is `<!-- not-run: REASON -->` (docs/guide/README.md describes the convention and
the variables below). A block fails the test when it exits non-zero.

The server is a real `skiff server` with its own node (the in-process agent: real
containers, the pod network, the Service proxy, the cluster DNS and the ingress proxy), so
this test needs root and busybox-static, as the Rust tests with a host agent do. Its node's
bridge, pod and Service ranges and ingress ports are its own, so that it does not collide
with a demo server on the same machine.

Blocks see:
  PATH           `skiff` and `skiff-agent` (the binaries under test) first
  KUBECONFIG     the admin kubeconfig
  SKIFF, SKIFF_AGENT        the two binaries' paths
  SERVER         the API's URL
  SKIFF_DATA_DIR the server's data dir (what `skiff certs check` reads)
  SKIFF_AGENT_DATA_DIR      its node's agent data dir (what `skiff-agent image ...` reads)
  NODE           the node's address, where NodePort and LoadBalancer Services answer
  INGRESS_HTTP, INGRESS_HTTPS   HOST:PORT of the node's ingress proxy
and run in a fresh directory per page that links to the checkout's scripts/ and examples/.
The node has skiff.local/busybox:1.35 and :latest (scripts/busybox-image.py) imported.
"""

import os
import re
import shutil
import socket
import subprocess
import tempfile
import textwrap
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
GUIDE = ROOT / "docs" / "guide"
PAGES = sorted(GUIDE.glob("[0-9][0-9]-*.md"))
IMAGES = ["skiff.local/busybox:1.35", "skiff.local/busybox:latest"]
NODE_NAME = "guide"
BRIDGE = "skiffguide0"
CGROUP = "skiff-guide"
BLOCK_TIMEOUT = 180

FENCE = re.compile(r"^\s*```(\S*)\s*$")
NOT_RUN = re.compile(r"^\s*<!--\s*not-run:\s*(.*?)\s*-->\s*$")


def blocks(page):
    """(line, text, not_run_reason or None) of each ```sh block of `page`."""
    out = []
    lines = page.read_text().splitlines()
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        lang = m.group(1)
        start = i
        j = i + 1
        while j < len(lines) and not lines[j].lstrip().startswith("```"):
            j += 1
        if lang == "sh":
            reason = None
            k = start - 1
            while k >= 0 and not lines[k].strip():
                k -= 1
            if k >= 0:
                nr = NOT_RUN.match(lines[k])
                if nr:
                    reason = nr.group(1)
            out.append((start + 1, textwrap.dedent("\n".join(lines[start + 1 : j])), reason))
        i = j + 1
    return out


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _node_ip():
    """This machine's address on its default route: NodePorts and LoadBalancer Services are
    DNATed to pods, which a loopback source cannot reach (as with kube-proxy)."""
    out = subprocess.run(["ip", "-4", "route", "get", "1.1.1.1"], capture_output=True, text=True)
    m = re.search(r"\bsrc (\S+)", out.stdout)
    return m.group(1) if m else "127.0.0.1"


def _wait(what, timeout, check):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if check():
            return
        time.sleep(0.2)
    raise RuntimeError(f"timed out waiting for {what}")


@pytest.fixture(scope="module")
def site():
    if os.geteuid() != 0:
        pytest.skip("the guide's blocks run real containers: run as root")
    for need in ["/bin/busybox", shutil.which("kubectl") or "/nonexistent/kubectl"]:
        if not Path(need).exists():
            pytest.skip(f"{need} is missing (scripts/setup.sh installs it)")
    skiff = Path(os.environ.get("SKIFF_BIN", ROOT / "target" / "debug" / "skiff")).resolve()
    agent = Path(os.environ.get("SKIFF_AGENT_BIN", skiff.parent / "skiff-agent")).resolve()
    tmp = Path(tempfile.mkdtemp(prefix="skiff-guide-"))
    data, run, bindir, home = tmp / "server", tmp / "run", tmp / "bin", tmp / "home"
    for d in (bindir, home):
        d.mkdir()
    (bindir / "skiff").symlink_to(skiff)
    (bindir / "skiff-agent").symlink_to(agent)
    # The guide's image (page 01 builds and imports it too), so that a page also runs alone.
    for i, image in enumerate(IMAGES):
        tar = tmp / f"image{i}.tar"
        subprocess.run(
            ["python3", str(ROOT / "scripts" / "busybox-image.py"), str(tar), image],
            check=True,
            stdout=subprocess.DEVNULL,
        )
        subprocess.run(
            [str(agent), "image", "import", str(tar), "--data-dir", str(data / "agent")],
            check=True,
            stdout=subprocess.DEVNULL,
        )
    node_ip = _node_ip()
    port, http, https = _free_port(), _free_port(), _free_port()
    log = open(tmp / "server.log", "w")
    cmd = [
        str(skiff), "server",
        "--data-dir", str(data),
        "--listen", f"127.0.0.1:{port}",
        "--node-name", NODE_NAME,
        "--node-ip", node_ip,
        "--agent-port", "0",
        "--agent-run-dir", str(run),
        "--cgroup-parent", CGROUP,
        "--bridge-name", BRIDGE,
        "--cluster-cidr", "10.211.0.0/16",
        "--service-cidr", "10.212.0.0/16",
        "--ingress-http-address", f"127.0.0.1:{http}",
        "--ingress-https-address", f"127.0.0.1:{https}",
    ]
    env = {k: v for k, v in os.environ.items() if not k.startswith("SKIFF_")}
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                            env={**env, "SKIFF_LOG": "warn"})
    kubeconfig = data / "admin.kubeconfig"
    block_env = {
        **env,
        "PATH": f"{bindir}:{os.environ.get('PATH', '/usr/bin:/bin')}",
        "HOME": str(home),
        "KUBECONFIG": str(kubeconfig),
        "SKIFF": str(skiff),
        "SKIFF_AGENT": str(agent),
        "SERVER": f"https://127.0.0.1:{port}",
        "SKIFF_DATA_DIR": str(data),
        "SKIFF_AGENT_DATA_DIR": str(data / "agent"),
        "NODE": node_ip,
        "INGRESS_HTTP": f"127.0.0.1:{http}",
        "INGRESS_HTTPS": f"127.0.0.1:{https}",
    }

    def node_ready():
        if proc.poll() is not None:
            raise RuntimeError(f"skiff server exited: {(tmp / 'server.log').read_text()[-3000:]}")
        if not kubeconfig.exists():
            return False
        out = subprocess.run(
            ["kubectl", "get", "node", NODE_NAME, "-o",
             "jsonpath={.status.conditions[?(@.type=='Ready')].status}"],
            env=block_env, capture_output=True, text=True,
        )
        return out.stdout.strip() == "True"

    try:
        _wait("the server's own node to be Ready", 90, node_ready)
        yield {"env": block_env, "tmp": tmp, "log": tmp / "server.log"}
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
        # The node's pods outlive their agent (as on a real node): remove them, then the
        # node's bridge.
        subprocess.run(
            [str(agent), "--data-dir", str(data / "agent"), "--run-dir", str(run),
             "--cgroup-parent", CGROUP, "reset"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        subprocess.run(["ip", "link", "del", BRIDGE], stderr=subprocess.DEVNULL)
        shutil.rmtree(tmp, ignore_errors=True)


def test_every_block_is_marked():
    """Each ```sh block either runs or says why not; most blocks run."""
    total = runnable = 0
    for page in PAGES:
        for line, text, reason in blocks(page):
            total += 1
            assert reason != "", f"{page.name}:{line}: not-run needs a reason"
            if reason is None:
                runnable += 1
    assert PAGES, "no guide pages"
    assert runnable * 2 > total, f"only {runnable} of {total} blocks run"


@pytest.mark.parametrize("page", PAGES, ids=[p.stem for p in PAGES])
def test_page(site, page):
    workdir = site["tmp"] / "pages" / page.stem
    workdir.mkdir(parents=True)
    # As in a checkout: the blocks use scripts/, examples/ and systemd/.
    for d in ("scripts", "examples", "systemd"):
        (workdir / d).symlink_to(ROOT / d)
    ran, skipped, took = 0, 0, []
    for line, text, reason in blocks(page):
        if reason is not None:
            skipped += 1
            continue
        started = time.time()
        try:
            out = subprocess.run(
                ["bash", "-euo", "pipefail", "-c", text],
                cwd=workdir, env=site["env"], capture_output=True, text=True,
                timeout=BLOCK_TIMEOUT, stdin=subprocess.DEVNULL,
            )
        except subprocess.TimeoutExpired as e:
            pytest.fail(f"{page.name}:{line}: timed out after {BLOCK_TIMEOUT} s\n{text}\n"
                        f"--- stdout\n{e.stdout}\n--- stderr\n{e.stderr}")
        if out.returncode != 0:
            pytest.fail(
                f"{page.name}:{line}: exit {out.returncode} after {time.time() - started:.1f} s\n"
                f"{text}\n--- stdout\n{out.stdout[-4000:]}\n--- stderr\n{out.stderr[-4000:]}\n"
                f"--- server log\n{site['log'].read_text()[-2000:]}"
            )
        ran += 1
        took.append(f"{line}:{time.time() - started:.1f}s")
    # Shown with `pytest -s`: what ran, and where the time went.
    print(f"\n{page.name}: {ran} blocks run, {skipped} not run; {' '.join(took)}")


def _commands(binary, path=()):
    """Every command path of `binary` (clap's `Commands:` sections, `help` left out)."""
    text = subprocess.run([binary, *path, "--help"], capture_output=True, text=True).stdout
    found = [path]
    if "Commands:" in text:
        section = text.split("Commands:", 1)[1].split("\n\n", 1)[0]
        for line in section.splitlines():
            m = re.match(r"^  (\S+)", line)
            if m and m.group(1) != "help":
                found += _commands(binary, (*path, m.group(1)))
    return found


def test_reference_names_every_option():
    """16-reference.md names every command and every option the binaries' --help prints."""
    skiff = Path(os.environ.get("SKIFF_BIN", ROOT / "target" / "debug" / "skiff")).resolve()
    agent = Path(os.environ.get("SKIFF_AGENT_BIN", skiff.parent / "skiff-agent")).resolve()
    page = (GUIDE / "16-reference.md").read_text()
    missing = []
    for binary, name in ((skiff, "skiff"), (agent, "skiff-agent")):
        for path in _commands(str(binary)):
            command = " ".join((name, *path))
            text = subprocess.run([str(binary), *path, "--help"], capture_output=True,
                                  text=True).stdout
            # Each command that does something has its section (groups such as `skiff
            # rollout` only hold them).
            if path and "Commands:" not in text and f"`{command}`" not in page:
                missing.append(command)
            for flag in re.findall(r"^\s+(?:-\w, )?(--[\w-]+)", text, re.M):
                if f"`{flag}`" not in page:
                    missing.append(f"{command} {flag}")
    assert not missing, f"16-reference.md does not name: {', '.join(sorted(set(missing)))}"
