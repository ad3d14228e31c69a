#!/usr/bin/env python3
"""Builds a one-layer container image from the machine's static busybox (apt
busybox-static) as a `docker save` archive, which `skiff-agent image import`, `podman load`
and `docker load` all read. There is no registry on the internet here, so the example app,
the demo and the benchmarks use this image.

usage: busybox-image.py OUT.tar NAME[:TAG] [--rootfs DIR]

With --rootfs, the layer is also unpacked into DIR (a root filesystem for `runc run`).
"""
import hashlib
import io
import json
import os
import sys
import tarfile

BUSYBOX = "/bin/busybox"
APPLETS = ["sh", "sleep", "httpd", "echo", "cat", "ls", "nc", "wget", "hostname", "env",
           "true", "false", "date", "ps", "mkdir", "rm", "touch", "test", "grep", "id",
           "nslookup", "ip", "ifconfig", "seq",
           # kubectl cp runs `tar` in the container.
           "tar"]


def layer_tar():
    with open(BUSYBOX, "rb") as f:
        busybox = f.read()
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as t:
        def add(name, kind, data=b"", mode=0o755, link=""):
            info = tarfile.TarInfo(name)
            info.type = kind
            info.mode = mode
            info.mtime = 0
            info.uid = info.gid = 0
            if kind == tarfile.REGTYPE:
                info.size = len(data)
                t.addfile(info, io.BytesIO(data))
            else:
                info.linkname = link
                t.addfile(info)
        for d in ["bin/", "etc/", "tmp/", "www/", "proc/", "sys/", "dev/"]:
            add(d, tarfile.DIRTYPE, mode=0o1777 if d == "tmp/" else 0o755)
        add("bin/busybox", tarfile.REGTYPE, busybox)
        for a in APPLETS:
            add(f"bin/{a}", tarfile.SYMTYPE, link="busybox")
        add("etc/passwd", tarfile.REGTYPE,
            b"root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n", 0o644)
        add("etc/group", tarfile.REGTYPE, b"root:x:0:\nnobody:x:65534:\n", 0o644)
        add("www/index.html", tarfile.REGTYPE, b"hello from skiff\n", 0o644)
    return buf.getvalue()


def main():
    args = sys.argv[1:]
    rootfs = None
    if "--rootfs" in args:
        i = args.index("--rootfs")
        rootfs = args[i + 1]
        del args[i:i + 2]
    if len(args) != 2:
        sys.exit(__doc__.strip().splitlines()[-3])
    out, name = args
    if ":" not in name.rsplit("/", 1)[-1]:
        name += ":latest"
    if not os.path.isfile(BUSYBOX):
        sys.exit(f"{BUSYBOX} is missing: apt-get install busybox-static")
    layer = layer_tar()
    diff_id = "sha256:" + hashlib.sha256(layer).hexdigest()
    arch = {"x86_64": "amd64", "aarch64": "arm64", "armv7l": "arm"}.get(os.uname().machine,
                                                                        os.uname().machine)
    config = json.dumps({
        "architecture": arch,
        "os": "linux",
        "config": {"Cmd": ["sh"], "Env": ["PATH=/bin"], "WorkingDir": "/"},
        "rootfs": {"type": "layers", "diff_ids": [diff_id]},
    }, sort_keys=True).encode()
    config_name = hashlib.sha256(config).hexdigest() + ".json"
    manifest = json.dumps([{"Config": config_name, "RepoTags": [name],
                            "Layers": ["layer/layer.tar"]}]).encode()
    with tarfile.open(out, "w") as t:
        for member, data in [("layer/layer.tar", layer), (config_name, config),
                             ("manifest.json", manifest)]:
            info = tarfile.TarInfo(member)
            info.size = len(data)
            info.mode = 0o644
            t.addfile(info, io.BytesIO(data))
    if rootfs:
        os.makedirs(rootfs, exist_ok=True)
        with tarfile.open(fileobj=io.BytesIO(layer)) as t:
            t.extractall(rootfs)
    print(f"{out}: {name} ({config_name[:12]})")


if __name__ == "__main__":
    main()
