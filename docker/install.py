"""Install tritonchat into one of NVIDIA's Triton containers, changing nothing NVIDIA installed.

The containers' vLLM and TensorRT-LLM were built against the numpy, protobuf, grpcio,
transformers and pydantic they ship with; an upgrade pulled in by a dependency can break them
at run time. So pip installs only what is missing (`--upgrade-strategy only-if-needed`, within
docker/constraints.txt), and afterwards every distribution present before must still have its
version: otherwise this exits 1 naming them, and the image is not built.

    python3 docker/install.py [--constraints docker/constraints.txt] <requirement or pip option ...>
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys


def installed() -> dict[str, str]:
    """Distribution name (normalized) -> version, as pip sees them."""
    out = subprocess.run([sys.executable, "-m", "pip", "list", "--format=json"], check=True, capture_output=True,
                         text=True).stdout
    return {entry["name"].lower().replace("_", "-"): entry["version"] for entry in json.loads(out)}


def changed(before: dict[str, str], after: dict[str, str]) -> list[str]:
    """What was installed before and now has another version, or is gone."""
    return sorted(f"{name} {version} -> {after.get(name, 'removed')}"
                  for name, version in before.items() if after.get(name) != version)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--constraints", default="docker/constraints.txt")
    args, requirements = parser.parse_known_args(argv)
    if not requirements:
        parser.error("nothing to install")
    before = installed()
    subprocess.run([sys.executable, "-m", "pip", "install", "--upgrade-strategy", "only-if-needed",
                    "-c", args.constraints, *requirements], check=True)
    after = installed()
    broken = changed(before, after)
    if broken:
        print("docker/install.py: installing tritonchat changed packages this container shipped with:\n  "
              + "\n  ".join(broken) + "\nBuild without the `grpc` extra (the HTTP transport needs none of them), or "
              "pick a container release whose packages satisfy docker/constraints.txt.", file=sys.stderr)
        return 1
    added = sorted(set(after) - set(before))
    print("docker/install.py: added " + (", ".join(f"{name} {after[name]}" for name in added) or "nothing"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
