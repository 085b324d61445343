"""The settings as documents show them: the parameters of the shipped config.pbtxt files and the
table of docs/configuration.md, both made from the one declaration in settings.py."""

from __future__ import annotations

from .settings import parameter_fields


def config_value(spec) -> str:
    """A setting's default as `config.pbtxt` writes it."""
    if isinstance(spec.default, bool):
        return "true" if spec.default else "false"
    if isinstance(spec.default, float) and spec.default.is_integer():
        return str(int(spec.default))
    return str(spec.default)


def shipped_parameters() -> str:
    """The `parameters` lines of the shipped config.pbtxt files: the settings most deployments
    set, at their defaults (the rest keep their defaults unless added)."""
    return "".join(
        f'parameters {{ key: "{spec.name}", value: {{ string_value: "{config_value(spec)}" }} }}\n'
        for spec in parameter_fields()
        if spec.metadata["user"]
    )


def markdown_table() -> str:
    """The table of parameters of docs/configuration.md."""
    lines = ["| parameter | default | meaning |", "|---|---|---|"]
    for spec in parameter_fields():
        value = config_value(spec)
        lines.append(f"| `{spec.name}` | {f'`{value}`' if value else 'empty'} | {spec.metadata['meaning']} |")
    return "\n".join(lines) + "\n"
