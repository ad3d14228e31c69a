#!/usr/bin/env python3
"""Runs the workspace's test binaries as `cargo test --workspace --no-fail-fast` does, but in two
lanes at once instead of one binary after another.

Most test binaries spend their time waiting (for a server to answer, a container to start, a
probe to fire), so one binary at a time leaves the machine idle. They cannot all run at once
either: the tests that run a real agent on the host share its bridge (skiff0), port 53 and
iptables chains. So:

- the `host` lane runs, one at a time, every binary of skiff-agent (real containers, real
  networking) and the control tests named in HOST below;
- the `server` lane runs, one at a time, every other binary (servers without a host agent, the
  simulated nodes, the API client, the unit tests).

Each binary runs as cargo runs it: from its package's directory, with the CARGO_* variables
cargo sets, and with the arguments given after `--` (e.g. a test-name filter). Its output is
printed whole when it ends, with its wall time. Doc tests are left to `cargo test --doc`.

    scripts/run-tests.py [--lanes host,server] [-- TEST-ARGS...]
"""

import json
import os
import subprocess
import sys
import threading
import time

# Control tests that run a real agent on the host (containers, its bridge, iptables).
HOST = {("skiff-control", "install"), ("skiff-control", "upgrade"), ("skiff-control", "server_join")}


def test_binaries():
    """(package, target name, kind, executable, package dir) of every test binary, built first."""
    out = subprocess.run(
        ["cargo", "test", "--workspace", "--no-run", "--message-format=json-render-diagnostics"],
        stdout=subprocess.PIPE,
        check=True,
    ).stdout
    found = []
    for line in out.splitlines():
        msg = json.loads(line)
        if msg.get("reason") != "compiler-artifact" or not msg.get("executable"):
            continue
        if not msg["profile"]["test"]:
            continue
        pkg = msg["package_id"]
        name = msg["target"]["name"]
        kind = msg["target"]["kind"][0]
        manifest = msg["manifest_path"]
        found.append((package_name(pkg, manifest), name, kind, msg["executable"], os.path.dirname(manifest)))
    return found


def package_name(package_id, manifest):
    # package_id is "path+file:///dir#name@version" (or "name version (...)" on old cargo).
    if "#" in package_id:
        tail = package_id.rsplit("#", 1)[1]
        name = tail.split("@", 1)[0]
        if not name[0].isdigit():
            return name
    with open(manifest) as f:
        for line in f:
            if line.startswith("name"):
                return line.split("=", 1)[1].strip().strip('"')
    return package_id


def lane_of(pkg, name):
    if pkg == "skiff-agent" or (pkg, name) in HOST:
        return "host"
    return "server"


def main():
    args = sys.argv[1:]
    extra = []
    if "--" in args:
        i = args.index("--")
        args, extra = args[:i], args[i + 1 :]
    lanes = ["host", "server"]
    if args[:1] == ["--lanes"]:
        lanes = args[1].split(",")
    binaries = [b for b in test_binaries() if lane_of(b[0], b[1]) in lanes]
    queues = {lane: [b for b in binaries if lane_of(b[0], b[1]) == lane] for lane in lanes}
    lock = threading.Lock()
    failed = []
    timings = []
    start = time.monotonic()

    def run_lane(lane):
        for pkg, name, kind, exe, pkg_dir in queues[lane]:
            env = dict(os.environ)
            env["CARGO_MANIFEST_DIR"] = pkg_dir
            env["CARGO_PKG_NAME"] = pkg
            env["CARGO_CRATE_NAME"] = name.replace("-", "_")
            t0 = time.monotonic()
            p = subprocess.run([exe, *extra], cwd=pkg_dir, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
            took = time.monotonic() - t0
            what = f"{pkg} {kind} {name}"
            with lock:
                sys.stdout.write(f"\n===== [{lane}] {what}: {'ok' if p.returncode == 0 else 'FAILED'} in {took:.1f}s\n")
                sys.stdout.write(p.stdout.decode(errors="replace"))
                sys.stdout.flush()
                timings.append((took, lane, what))
                if p.returncode != 0:
                    failed.append(what)

    threads = [threading.Thread(target=run_lane, args=(lane,)) for lane in lanes]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print(f"\n===== {len(binaries)} test binaries in {time.monotonic() - start:.0f}s; the slowest:")
    for took, lane, what in sorted(timings, reverse=True)[:10]:
        print(f"  {took:6.1f}s  [{lane}] {what}")
    if failed:
        print(f"===== FAILED: {', '.join(failed)}")
        sys.exit(1)


if __name__ == "__main__":
    main()
