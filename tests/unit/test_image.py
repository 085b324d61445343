"""The container image: the Dockerfile's syntax (parsed with BuildKit's own parser) and
contents, the install guard that keeps NVIDIA's packages as they are, and the constraints."""

from __future__ import annotations

import importlib.metadata
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import dockerfile
import pytest
import yaml
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "docker"))
import install  # noqa: E402


def instructions() -> list:
    return dockerfile.parse_file(str(ROOT / "Dockerfile"))


def test_dockerfile_builds_from_nvidias_containers_and_installs_with_the_guard():
    commands = instructions()
    froms = [c.value[0] for c in commands if c.cmd == "FROM"]
    assert froms == ["nvcr.io/nvidia/tritonserver:${TRITON_VERSION}-${FLAVOR}-python-py3"]
    args = {c.value[0].split("=")[0]: c.value[0] for c in commands if c.cmd == "ARG"}
    assert args["TRITON_VERSION"] == "TRITON_VERSION=25.12" and args["FLAVOR"] == "FLAVOR=vllm"
    for copy in (c for c in commands if c.cmd == "COPY"):
        for source in copy.value[:-1]:
            assert (ROOT / source).exists(), source
    [run] = [c.value[0] for c in commands if c.cmd == "RUN"]
    assert "docker/install.py --constraints docker/constraints.txt" in run
    assert "import tritonchat.service" in run
    ignored = (ROOT / ".dockerignore").read_text().split()
    assert {".venv", "build", "tests"} <= set(ignored)


def test_compose_services_use_the_image():
    services = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]
    for name, flavor in (("triton", "vllm"), ("triton-trtllm", "trtllm")):
        service = services[name]
        assert service["build"]["context"] == "."
        assert service["build"]["args"]["FLAVOR"] == flavor
        assert service["image"] == "tritonchat:${TRITON_VERSION:-25.12}-" + flavor
        script = service["command"][-1]
        assert "pip install" not in script
        assert "--src /opt/tritonchat/model_repository" in script


def _constraints() -> dict[str, Requirement]:
    lines = (ROOT / "docker" / "constraints.txt").read_text().splitlines()
    requirements = [Requirement(line) for line in lines if line.strip() and not line.startswith("#")]
    return {r.name: r for r in requirements}


def test_constraints_cover_the_runtime_and_admit_the_tested_versions():
    constraints = _constraints()
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = [r for group in project["optional-dependencies"].values() for r in group]
    needed = [Requirement(r) for r in project["dependencies"] + extras]
    for requirement in needed:
        assert requirement.name in constraints, requirement.name
        tested = importlib.metadata.version(requirement.name)
        assert constraints[requirement.name].specifier.contains(tested, prereleases=True), (requirement.name, tested)
        assert requirement.specifier.contains(tested, prereleases=True), (requirement.name, tested)


def test_changed_names_what_moved_or_vanished():
    before = {"numpy": "1.26.4", "protobuf": "5.29.0", "vllm": "0.11.0"}
    after = {"numpy": "1.26.4", "protobuf": "6.31.1", "tritonchat": "0.1.0"}
    assert install.changed(before, after) == ["protobuf 5.29.0 -> 6.31.1", "vllm 0.11.0 -> removed"]
    assert install.changed(before, {**before, "new": "1"}) == []


def _package(root: Path, name: str, version: str, requires: list[str]) -> Path:
    src = root / f"{name}-{version}"
    (src / name).mkdir(parents=True)
    (src / name / "__init__.py").write_text("")
    deps = ", ".join(f'"{r}"' for r in requires)
    (src / "pyproject.toml").write_text(
        f'[build-system]\nrequires = ["setuptools"]\nbuild-backend = "setuptools.build_meta"\n'
        f'[project]\nname = "{name}"\nversion = "{version}"\ndependencies = [{deps}]\n')
    return src


@pytest.fixture(scope="module")
def wheels(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("packages")
    out = root / "wheels"
    sources = [_package(root, "shipped", "2.0", []), _package(root, "shipped", "1.0", []),
               _package(root, "extra", "1.0", []),
               _package(root, "polite", "1.0", ["shipped>=1", "extra"]), _package(root, "greedy", "1.0", ["shipped<2"])]
    for source in sources:  # one at a time: pip refuses two versions of a name in one call
        subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(out),
                        str(source)], check=True)
    return out


@pytest.mark.parametrize(("package", "code", "added"), [("polite", 0, "extra 1.0, polite 1.0"), ("greedy", 1, None)])
def test_install_adds_what_is_missing_and_refuses_to_change_what_is_there(tmp_path, wheels, package, code, added):
    """In a fresh environment holding `shipped` 2.0 (standing for a container's package):
    a requirement it satisfies installs only the missing ones; one that needs another
    version fails, naming it, instead of replacing it."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = str(venv / "bin" / "python")
    local = ["--no-index", "--find-links", str(wheels)]
    subprocess.run([python, "-m", "pip", "install", "-q", *local, "shipped==2.0"], check=True)
    constraints = tmp_path / "constraints.txt"
    constraints.write_text("extra<2\n")
    result = subprocess.run([python, str(ROOT / "docker" / "install.py"), "--constraints", str(constraints), *local,
                             package], capture_output=True, text=True)
    assert result.returncode == code, result.stderr
    if added:
        assert re.search(r"added (.*)", result.stdout).group(1) == added
    else:
        assert "shipped 2.0 -> 1.0" in result.stderr


def test_compose_gateway_service_calls_the_triton_service():
    services = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]
    gateway = services["gateway"]
    assert gateway["image"] == services["triton"]["image"]
    command = gateway["command"]
    assert command[:3] == ["python3", "-m", "tritonchat.clients.gateway"] and "9000:9000" in gateway["ports"]
    assert command[command.index("--http-url") + 1] == "triton:8000"
    assert gateway["depends_on"]["triton"]["condition"] == "service_healthy"
