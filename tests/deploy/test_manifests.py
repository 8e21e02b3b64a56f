"""deploy/kubernetes (issue 18): every YAML document parses, carries the fields the Kubernetes API and the Prometheus
Operator require, and keeps the promises docs/kubernetes.md makes (host PID, read-only /proc and /sys, a non-root
main container without privileges, a ServiceMonitor whose port is the Service's)."""
import pathlib
import re
import shutil
import subprocess
import sys

import pytest
import yaml

ROOT = pathlib.Path(__file__).resolve().parents[2]
K8S = ROOT / "deploy" / "kubernetes"
NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")  # RFC 1123 label: names of objects, ports, containers


def documents():
    docs = []
    for path in sorted(K8S.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc is not None:
                docs.append((path.name, doc))
    return docs


def kinds():
    out = {}
    for name, doc in documents():
        if name == "kustomization.yaml":
            continue
        out.setdefault(doc["kind"], []).append(doc)
    return out


def one(kind):
    found = kinds().get(kind, [])
    assert len(found) == 1, f"expected one {kind}, found {len(found)}"
    return found[0]


def test_every_document_parses_and_names_itself():
    docs = documents()
    assert len(docs) >= 6
    for name, doc in docs:
        assert isinstance(doc, dict), name
        assert isinstance(doc.get("apiVersion"), str) and doc["apiVersion"], f"{name}: apiVersion"
        assert isinstance(doc.get("kind"), str) and doc["kind"], f"{name}: kind"
        if doc["kind"] == "Kustomization":
            continue
        md = doc.get("metadata") or {}
        assert NAME.match(md.get("name", "")), f"{name}: metadata.name {md.get('name')!r}"
        if doc["kind"] != "Namespace":
            assert md.get("namespace") == "wattscope", f"{name}: namespace"


def test_api_versions_are_the_served_ones():
    want = {"Namespace": "v1", "ServiceAccount": "v1", "Service": "v1", "DaemonSet": "apps/v1",
            "ServiceMonitor": "monitoring.coreos.com/v1", "PrometheusRule": "monitoring.coreos.com/v1"}
    for kind, docs in kinds().items():
        assert kind in want, f"unexpected kind {kind}"
        for d in docs:
            assert d["apiVersion"] == want[kind], kind


def test_kustomization_lists_every_manifest():
    k = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    assert k["apiVersion"] == "kustomize.config.k8s.io/v1beta1" and k["kind"] == "Kustomization"
    listed = set(k["resources"])
    present = {p.name for p in K8S.glob("*.yaml")} - {"kustomization.yaml"}
    assert listed == present
    assert k["namespace"] == one("Namespace")["metadata"]["name"]


def pod_spec():
    ds = one("DaemonSet")
    return ds, ds["spec"]["template"]["spec"]


def test_daemonset_selector_matches_its_template():
    ds, _ = pod_spec()
    sel = ds["spec"]["selector"]["matchLabels"]
    labels = ds["spec"]["template"]["metadata"]["labels"]
    assert sel and all(labels.get(k) == v for k, v in sel.items())


def test_daemonset_sees_the_host_read_only():
    _, spec = pod_spec()
    assert spec["hostPID"] is True
    assert not spec.get("hostNetwork"), "serve listens in the pod's own network namespace"
    volumes = {v["name"]: v for v in spec["volumes"]}
    main = spec["containers"][0]
    mounts = {m["name"]: m for m in main["volumeMounts"]}
    for host_path, flag in (("/proc", "--procfs-root"), ("/sys", "--sysfs-root")):
        vol = [n for n, v in volumes.items() if v.get("hostPath", {}).get("path") == host_path]
        assert len(vol) == 1, host_path
        m = mounts[vol[0]]
        assert m.get("readOnly") is True, f"{host_path} must be mounted read-only"
        assert f"{flag}={m['mountPath']}" in main["args"], f"{flag} must point at {m['mountPath']}"
    for m in main["volumeMounts"]:
        assert m.get("readOnly") is True, f"the main container writes nowhere: {m['name']}"


def test_daemonset_main_container_is_non_root_without_privileges():
    _, spec = pod_spec()
    assert len(spec["containers"]) == 1
    c = spec["containers"][0]
    assert c["image"]
    sc = c["securityContext"]
    assert sc["runAsNonRoot"] is True and sc["runAsUser"] != 0
    assert sc.get("privileged") is False and sc.get("allowPrivilegeEscalation") is False
    assert sc["capabilities"]["drop"] == ["ALL"] and not sc["capabilities"].get("add")
    assert sc.get("readOnlyRootFilesystem") is True
    assert not (spec.get("securityContext") or {}).get("privileged")


def test_rapl_access_is_granted_by_a_narrow_root_init_container():
    _, spec = pod_spec()
    (init,) = spec["initContainers"]
    sc = init["securityContext"]
    assert sc.get("privileged") is False and sc.get("allowPrivilegeEscalation") is False
    assert sc["capabilities"]["drop"] == ["ALL"]
    assert set(sc["capabilities"].get("add", [])) <= {"CHOWN", "FOWNER"}
    volumes = {v["name"]: v for v in spec["volumes"]}
    (m,) = init["volumeMounts"]
    # Writable, but only the powercap tree, never all of /sys.
    assert volumes[m["name"]]["hostPath"]["path"] == "/sys/devices/virtual/powercap"
    script = " ".join(init["command"])
    gid = spec["containers"][0]["securityContext"]["runAsGroup"]
    assert f"chgrp {gid}" in script and "energy_uj" in script and "chmod 0440" in script
    assert init["image"] == spec["containers"][0]["image"]


def env(container):
    return {e["name"]: e for e in container.get("env", [])}


def test_nvidia_runtime_conventions():
    _, spec = pod_spec()
    assert spec["runtimeClassName"] == "nvidia"
    e = env(spec["containers"][0])
    assert e["NVIDIA_VISIBLE_DEVICES"]["value"] == "all"
    assert e["NVIDIA_DRIVER_CAPABILITIES"]["value"] == "utility"
    limits = spec["containers"][0].get("resources", {}).get("limits", {})
    assert "nvidia.com/gpu" not in limits, "a monitor must not take GPUs away from workloads"


def test_host_label_and_kubelet_come_from_the_downward_api():
    _, spec = pod_spec()
    e = env(spec["containers"][0])
    assert e["WATTSCOPE_HOST"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    assert e["NODE_IP"]["valueFrom"]["fieldRef"]["fieldPath"] == "status.hostIP"
    names = [x["name"] for x in spec["containers"][0]["env"]]
    # $(NODE_IP) expands only when it is defined earlier in the list.
    assert names.index("NODE_IP") < names.index("WATTSCOPE_KUBELET_URL")
    assert e["WATTSCOPE_KUBELET_URL"]["value"] == "http://$(NODE_IP):10255/pods"


def test_serve_listens_beyond_loopback_only_with_its_token():
    _, spec = pod_spec()
    c = spec["containers"][0]
    args = c["args"]
    assert args[0] == "serve" and "--listen=0.0.0.0:9400" in args
    token = [a for a in args if a.startswith("--token-file=")]
    assert len(token) == 1
    path = pathlib.PurePosixPath(token[0].split("=", 1)[1])
    mount = [m for m in c["volumeMounts"] if pathlib.PurePosixPath(m["mountPath"]) == path.parent]
    assert len(mount) == 1
    vol = {v["name"]: v for v in spec["volumes"]}[mount[0]["name"]]
    assert vol["secret"]["secretName"] == "wattscope-token"
    assert vol["secret"]["defaultMode"] & 0o022 == 0, "serve refuses a token file others could write"
    (port,) = c["ports"]
    assert port["containerPort"] == 9400 and NAME.match(port["name"]) and len(port["name"]) <= 15
    for probe in ("readinessProbe", "livenessProbe"):
        assert c[probe]["tcpSocket"]["port"] == port["name"], "every HTTP endpoint needs the token"


def test_service_selects_the_pods_and_names_the_port():
    ds, _ = pod_spec()
    svc = one("Service")
    labels = ds["spec"]["template"]["metadata"]["labels"]
    assert all(labels.get(k) == v for k, v in svc["spec"]["selector"].items())
    (port,) = svc["spec"]["ports"]
    container_ports = {p["name"]: p["containerPort"] for p in ds["spec"]["template"]["spec"]["containers"][0]["ports"]}
    assert port["targetPort"] in container_ports
    assert port["port"] == container_ports[port["targetPort"]]


def test_servicemonitor_scrapes_the_services_port_with_the_token():
    svc = one("Service")
    sm = one("ServiceMonitor")
    assert all(svc["metadata"]["labels"].get(k) == v for k, v in sm["spec"]["selector"]["matchLabels"].items())
    assert svc["metadata"]["namespace"] in sm["spec"]["namespaceSelector"]["matchNames"]
    (ep,) = sm["spec"]["endpoints"]
    assert ep["port"] in {p["name"] for p in svc["spec"]["ports"]}
    assert ep["path"] == "/metrics"
    assert ep["authorization"]["type"] == "Bearer"
    assert ep["authorization"]["credentials"] == {"name": "wattscope-token", "key": "token"}


def test_service_account_and_namespace():
    ds, spec = pod_spec()
    sa = one("ServiceAccount")
    assert spec["serviceAccountName"] == sa["metadata"]["name"]
    assert sa.get("automountServiceAccountToken") is False and spec.get("automountServiceAccountToken") is False
    ns = one("Namespace")
    assert ns["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "privileged"


@pytest.mark.parametrize("bad", ["selector", "readonly", "port"])
def test_the_checks_catch_a_broken_manifest(bad, monkeypatch):
    """The checks above must fail on a manifest that breaks what they check (a test that cannot fail is a defect)."""
    real = documents()

    def broken():
        out = []
        for name, doc in real:
            doc = yaml.safe_load(yaml.safe_dump(doc))
            if doc.get("kind") == "DaemonSet" and bad == "selector":
                doc["spec"]["selector"]["matchLabels"]["app.kubernetes.io/name"] = "other"
            if doc.get("kind") == "DaemonSet" and bad == "readonly":
                doc["spec"]["template"]["spec"]["containers"][0]["volumeMounts"][0]["readOnly"] = False
            if doc.get("kind") == "ServiceMonitor" and bad == "port":
                doc["spec"]["endpoints"][0]["port"] = "http"
            out.append((name, doc))
        return out

    monkeypatch.setattr(__import__(__name__), "documents", broken)
    check = {"selector": test_daemonset_selector_matches_its_template, "readonly": test_daemonset_sees_the_host_read_only,
             "port": test_servicemonitor_scrapes_the_services_port_with_the_token}[bad]
    with pytest.raises(AssertionError):
        check()


def test_prometheusrule_is_deploy_alerts_yml_and_promtool_accepts_its_rules(tmp_path):
    """The PrometheusRule is generated from deploy/alerts.yml (scripts/gen_prometheusrule.py) and must not drift from
    it: the same groups, and rules promtool accepts."""
    r = subprocess.run([sys.executable, str(ROOT / "scripts" / "gen_prometheusrule.py"), "--check"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    rule = one("PrometheusRule")
    assert rule["spec"]["groups"] == yaml.safe_load((ROOT / "deploy" / "alerts.yml").read_text())["groups"]
    assert rule["metadata"]["labels"]["app.kubernetes.io/name"] == "wattscope"
    if not shutil.which("promtool"):
        pytest.skip("promtool is not installed (Debian: prometheus)")
    groups = tmp_path / "rules.yml"
    groups.write_text(yaml.safe_dump({"groups": rule["spec"]["groups"]}, allow_unicode=True))
    r = subprocess.run(["promtool", "check", "rules", str(groups)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
