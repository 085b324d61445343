"""The Kubernetes manifests: valid against Kubernetes' own schemas (kubernetes-validate, strict:
unknown fields fail), and consistent with the image, the ports and the metrics tritonchat has."""

from __future__ import annotations

import copy
from pathlib import Path

import dockerfile
import kubernetes_validate
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
MANIFESTS = sorted((ROOT / "deploy" / "kubernetes").glob("*.yaml"))
VERSIONS = ["1.30.0", "1.37.0"]  # a cluster from 2024, and the newest schemas known


def resources() -> list[dict]:
    return [doc for path in MANIFESTS for doc in yaml.safe_load_all(path.read_text()) if doc]


def find(kind: str, name: str) -> dict:
    return next(r for r in resources() if r["kind"] == kind and r["metadata"]["name"] == name)


@pytest.mark.parametrize("version", VERSIONS)
def test_every_manifest_is_valid(version):
    assert len(MANIFESTS) >= 4
    for resource in resources():
        kubernetes_validate.validate(resource, version, strict=True)


def test_the_validator_rejects_a_misspelt_field():
    deployment = copy.deepcopy(find("Deployment", "tritonchat"))
    deployment["spec"]["template"]["spec"]["containers"][0]["readinessProbes"] = {}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, VERSIONS[-1], strict=True)


def test_triton_deployment_serves_the_repository_and_is_ready_with_openai_chat():
    deployment = find("Deployment", "tritonchat")
    pod = deployment["spec"]["template"]
    [container] = pod["spec"]["containers"]
    assert container["readinessProbe"]["httpGet"]["path"] == "/v2/models/openai_chat/ready"
    workdir = next(c.value[0] for c in dockerfile.parse_file(str(ROOT / "Dockerfile")) if c.cmd == "WORKDIR")
    script = container["args"][0]
    assert f"--src {workdir}/model_repository" in script and "exec tritonserver" in script
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"http": 8000, "grpc": 8001, "metrics": 8002}
    assert pod["metadata"]["annotations"]["prometheus.io/port"] == str(ports["metrics"])
    service = find("Service", "tritonchat")
    assert service["spec"]["selector"] == pod["metadata"]["labels"]


def test_autoscaler_scales_the_deployment_on_a_metric_tritonchat_exports():
    hpa = find("HorizontalPodAutoscaler", "tritonchat")
    assert hpa["spec"]["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": "tritonchat"}
    [metric] = hpa["spec"]["metrics"]
    name = metric["pods"]["metric"]["name"]
    assert f'"{name}"' in (ROOT / "src" / "tritonchat" / "triton" / "metrics.py").read_text()


def test_gateway_reaches_the_triton_service():
    gateway = find("Deployment", "tritonchat-gateway")
    [container] = gateway["spec"]["template"]["spec"]["containers"]
    command = container["command"]
    assert command[:3] == ["python3", "-m", "tritonchat.clients.gateway"]
    assert command[command.index("--http-url") + 1] == "tritonchat:8000"
    assert find("Service", "tritonchat-gateway")["spec"]["selector"] == gateway["spec"]["template"]["metadata"]["labels"]
