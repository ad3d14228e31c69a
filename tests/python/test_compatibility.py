"""Generates docs/compatibility.md's resource table from a real server's discovery.

The `server` fixture (conftest.py) starts `skiff server --disable-agent` on a free port with
a fresh data dir. This test reads its discovery documents (`/api/v1`, `/apis` and every
`/apis/GROUP/VERSION`) with the admin kubeconfig and compares them with what kube-apiserver
1.32 serves with its default settings (k8s_1_32_resources.json beside this file). The
Markdown it writes must equal what is between the markers of docs/compatibility.md; with
SKIFF_REGEN_DOCS=1 it rewrites that section instead.
"""

import difflib
import json
import os
import ssl
import urllib.request
from pathlib import Path

import pytest
from kubernetes import client, config

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "compatibility.md"
REFERENCE = Path(__file__).resolve().parent / "k8s_1_32_resources.json"
BEGIN = "<!-- BEGIN GENERATED: tests/python/test_compatibility.py -->\n"
END = "<!-- END GENERATED -->"
REGEN = (
    "SKIFF_REGEN_DOCS=1 SKIFF_BIN=target/debug/skiff ~/.cache/skiff/pyenv/bin/python "
    "-m pytest -q tests/python/test_compatibility.py"
)
VERBS = {"create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"}
ALL_VERBS = sorted(VERBS)


def reference():
    """kube-apiserver 1.32's resources: {(group, version, resource): entry}."""
    entries = json.loads(REFERENCE.read_text())["resources"]
    out = {}
    for e in entries:
        key = (e["group"], e["version"], e["resource"])
        assert key not in out, f"{REFERENCE.name}: {key} twice"
        out[key] = e
    return out


def discovery(kubeconfig):
    """What the server serves: {(group, version, resource): {kind, namespaced, verbs}}."""
    cfg = client.Configuration()
    config.load_kube_config(config_file=kubeconfig, client_configuration=cfg)
    ctx = ssl.create_default_context(cafile=cfg.ssl_ca_cert)
    if cfg.cert_file:
        ctx.load_cert_chain(cfg.cert_file, cfg.key_file)
    headers = {"Accept": "application/json"}
    token = cfg.api_key.get("BearerToken") or cfg.api_key.get("authorization")
    if token:
        headers["Authorization"] = token

    def get(path):
        req = urllib.request.Request(cfg.host + path, headers=headers)
        with urllib.request.urlopen(req, context=ctx, timeout=30) as resp:
            return json.load(resp)

    versions = [("", "v1", "/api/v1")]
    for group in get("/apis")["groups"]:
        for v in group["versions"]:
            versions.append((group["name"], v["version"], f"/apis/{v['groupVersion']}"))
    out = {}
    for group, version, path in versions:
        for r in get(path)["resources"]:
            out[(group, version, r["name"])] = {
                "kind": r["kind"],
                "namespaced": r["namespaced"],
                "verbs": sorted(r.get("verbs") or []),
            }
    return out


def sort_key(key):
    group, version, resource = key
    # The core group first, then groups by name; `pods` before `pods/log` before `podtemplates`.
    return (group != "", group, version, resource.split("/"))


def verbs_text(verbs):
    return ", ".join(verbs) if verbs else "(none)"


def status(key, ref, served):
    """("served" | "partly" | "not served", note) of one of Kubernetes' resources."""
    group, version, resource = key
    got = served.get(key)
    notes = []
    if got is None:
        elsewhere = sorted(v for (g, v, r) in served if g == group and r == resource)
        if not elsewhere:
            return "not served", ""
        got = served[(group, elsewhere[0], resource)]
        notes.append("only at " + ", ".join(elsewhere))
    missing = [v for v in ref["verbs"] if v not in got["verbs"]]
    extra = [v for v in got["verbs"] if v not in ref["verbs"]]
    if missing:
        notes.append("no " + ", ".join(missing))
    if got["namespaced"] != ref["namespaced"]:
        notes.append("namespaced" if got["namespaced"] else "cluster-scoped")
    if got["kind"] != ref["kind"]:
        notes.append(f"kind {got['kind']}")
    if notes:
        if extra:
            notes.append("also " + ", ".join(extra))
        return "partly", "; ".join(notes)
    return "served", ("also " + ", ".join(extra)) if extra else ""


def generate(ref, served):
    """The Markdown between the markers (ends with a blank line)."""
    rows = {}
    counts = {"served": 0, "partly": 0, "not served": 0}
    for key in sorted(ref, key=sort_key):
        state, note = status(key, ref[key], served)
        counts[state] += 1
        rows.setdefault(key[0], []).append((key, state, note))
    extras = sorted((k for k in served if k not in ref), key=sort_key)

    out = []
    total = len(ref)
    out.append(
        f"skiff serves {counts['served']} of the {total} resources and subresources of "
        f"kube-apiserver 1.32 fully, {counts['partly']} partly, and {counts['not served']} not "
        f"at all; it also serves {len(extras)} that kube-apiserver 1.32 does not."
    )
    out.append("")
    out.append("| API group | Kubernetes 1.32 | served | partly | not served |")
    out.append("| --- | --: | --: | --: | --: |")
    for group, items in rows.items():
        c = {s: sum(1 for _, st, _ in items if st == s) for s in counts}
        name = group or "core"
        out.append(
            f"| [{name}](#{anchor(name)}) | {len(items)} | {c['served']} | {c['partly']} | "
            f"{c['not served']} |"
        )
    out.append("")
    out.append(
        "*all 8*: create, delete, deletecollection, get, list, patch, update, watch. *partly*: "
        "served, but with fewer verbs (named), at another version, or with another scope or "
        "kind. *also*: verbs skiff serves that kube-apiserver 1.32 does not."
    )
    for group, items in rows.items():
        name = group or "core"
        out.append("")
        out.append(f"### {name}")
        out.append("")
        out.append("| resource | version | Kubernetes 1.32 verbs | skiff |")
        out.append("| --- | --- | --- | --- |")
        for (g, version, resource), state, note in items:
            if state == "not served":
                cell = "**not served**"
            elif state == "partly":
                cell = f"*partly*: {note}"
            else:
                cell = f"served ({note})" if note else "served"
            verbs = ref[(g, version, resource)]["verbs"]
            shown = "all 8" if verbs == ALL_VERBS else verbs_text(verbs)
            out.append(f"| `{resource}` | {version} | {shown} | {cell} |")
    out.append("")
    out.append("### served by skiff only")
    out.append("")
    if extras:
        out.append("| resource | version | verbs | note |")
        out.append("| --- | --- | --- | --- |")
        for g, version, resource in extras:
            got = served[(g, version, resource)]
            gv = f"{g}/{version}" if g else version
            note = ""
            if g == "metrics.k8s.io":
                note = "metrics-server's API on Kubernetes"
            elif any(k[0] == g and k[2] == resource for k in ref):
                note = "a version kube-apiserver 1.32 does not serve"
            out.append(f"| `{resource}` | {gv} | {verbs_text(got['verbs'])} | {note} |")
    else:
        out.append("None.")
    # A blank line ends the last table before the END marker.
    return "\n".join(out) + "\n\n"


def anchor(title):
    """GitHub's heading anchor: lower case, spaces to dashes, punctuation but - and _ dropped."""
    return "".join(c for c in title.lower().replace(" ", "-") if c.isalnum() or c in "-_")


def split_doc(text):
    start = text.index(BEGIN) + len(BEGIN)
    end = text.index(END, start)
    return text[:start], text[start:end], text[end:]


def test_reference_data():
    ref = reference()
    for key, e in ref.items():
        assert set(e["verbs"]) <= VERBS, (key, e["verbs"])
        assert e["verbs"] == sorted(e["verbs"]), key
        assert key[0] != "metrics.k8s.io", "metrics.k8s.io is metrics-server's, not kube-apiserver's"
        if "/" in key[2]:
            parent = (key[0], key[1], key[2].split("/")[0])
            assert parent in ref, f"{key[2]} has no parent resource {parent}"


def test_compatibility_page(server):
    text = generate(reference(), discovery(server))
    doc = DOC.read_text()
    assert BEGIN in doc and END in doc, f"{DOC} lost its markers {BEGIN.strip()} / {END}"
    head, current, tail = split_doc(doc)
    if os.environ.get("SKIFF_REGEN_DOCS") == "1":
        if current != text:
            DOC.write_text(head + text + tail)
        return
    if current != text:
        diff = "".join(
            difflib.unified_diff(
                current.splitlines(keepends=True),
                text.splitlines(keepends=True),
                "docs/compatibility.md (committed)",
                "generated from the server's discovery",
            )
        )
        if len(diff) > 6000:
            diff = diff[:6000] + "\n... (diff cut)\n"
        pytest.fail(
            "docs/compatibility.md's generated section differs from the server's discovery.\n"
            f"Regenerate it with:\n    {REGEN}\nand review and commit the result.\n\n{diff}",
            pytrace=False,
        )
