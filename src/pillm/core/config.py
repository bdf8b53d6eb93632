"""Config sections and the schema, torch-free: what every study's config module builds on.

``ConfigError`` is the one error a bad config key raises (the CLI prints it as one line, exit 2).
``Section`` turns a job's JSON section into a frozen dataclass, naming any unknown or missing
key by its dotted path (``train.lr``). ``apply_schema`` types command-line overrides and fills
the defaults ``config/schema.yaml`` declares; ``validate_config`` names every key the schema
rejects.
"""

from __future__ import annotations

import copy
import dataclasses
import typing
from pathlib import Path
from typing import TYPE_CHECKING, Any, Self

import yaml

if TYPE_CHECKING:
    import jsonschema


class ConfigError(ValueError):
    """A config key with a bad value: the message names the dotted key and the fix."""


class Section:
    """Mixin: ``from_dict`` for a frozen dataclass of config values."""

    @classmethod
    def from_dict(cls, d: dict[str, Any], path: str = "") -> Self:
        """The section from its dict; ``path`` is its dotted name, for error messages."""
        if not isinstance(d, dict):
            raise ConfigError(f"{path or cls.__name__}: expected a mapping, got {type(d).__name__}")
        fields = {f.name: f for f in dataclasses.fields(cls)}
        hints = typing.get_type_hints(cls)
        where = f"{path}." if path else ""
        unknown = sorted(set(d) - set(fields))
        if unknown:
            raise ConfigError(
                f"unknown config key(s) {', '.join(where + k for k in unknown)}: remove them "
                f"or add them to config/schema.yaml and the study's config module ({cls.__module__}.{cls.__name__})"
            )
        missing = [
            where + name
            for name, f in fields.items()
            if name not in d
            and f.default is dataclasses.MISSING
            and f.default_factory is dataclasses.MISSING
        ]
        if missing:
            raise ConfigError(f"missing config key(s) {', '.join(missing)}: set them in the config")
        return cls(**{k: _convert(hints[k], v, where + k) for k, v in d.items()})


def _convert(hint: Any, value: Any, path: str) -> Any:
    """Lists become tuples (sections are frozen); sub-sections become their dataclass."""
    if isinstance(hint, type) and issubclass(hint, Section):
        return hint.from_dict(value, path)
    sections = [a for a in typing.get_args(hint) if isinstance(a, type) and issubclass(a, Section)]
    if sections and value is not None:  # an optional sub-section: Section | None
        return sections[0].from_dict(value, path)
    origin = typing.get_origin(hint)
    if origin is tuple and isinstance(value, list):
        item = typing.get_args(hint)[0]
        return tuple(_convert(item, v, f"{path}[{i}]") for i, v in enumerate(value))
    return value


def load_schema(schema_path: str | Path) -> dict[str, Any]:
    """The schema as a dict (``config/schema.yaml``); libyaml's parser where PyYAML has it
    (the same dict, a tenth of the pure-Python parser's time: every Snakemake start reads it)."""
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    return yaml.load(Path(schema_path).read_text(), Loader=loader)  # noqa: S506 (a safe loader)


def _key_path(err: jsonschema.ValidationError) -> str:
    return ".".join(str(p) for p in err.absolute_path) or "<top level>"


def validate_config(config: dict[str, Any], schema: dict[str, Any], where: str | Path) -> None:
    """Raise ConfigError listing every violation of ``schema``, each with its dotted key;
    ``where`` names the schema file in the message."""
    import jsonschema  # here, not at the top: every job imports this module, few validate

    validator = jsonschema.Draft202012Validator(schema)
    errors = sorted(validator.iter_errors(config), key=lambda e: list(e.absolute_path))
    if errors:
        lines = [f"  - {_key_path(e)}: {e.message}" for e in errors]
        raise ConfigError(
            f"invalid config (checked against {where}):\n"
            + "\n".join(lines)
            + "\nFix these keys in your config file (see config/README.md)."
        )


def _types(node: dict[str, Any]) -> list[str]:
    t = node.get("type", [])
    return [t] if isinstance(t, str) else list(t)


def _typed(value: Any, node: dict[str, Any]) -> Any:
    """``value`` typed by its schema node: Snakemake's ``--config`` reads every scalar of a YAML
    value as a string (``train='{lr: 0.002}'`` gives ``{"lr": "0.002"}``), so a string where the
    schema wants a number, integer, boolean, null, array or object is read as YAML; a value that
    still has the wrong type is left for the validator to name."""
    types = _types(node)
    if isinstance(value, str) and "enum" in node and value not in node["enum"]:
        try:  # an enum of non-strings (pdf: [auto, true, false]) given as text
            parsed = yaml.safe_load(value)
        except yaml.YAMLError:
            parsed = value
        if parsed in node["enum"]:
            return parsed
    if isinstance(value, str) and types and "string" not in types:
        try:
            parsed = yaml.safe_load(value)
        except yaml.YAMLError:
            return value
        if parsed is not None or "null" in types:
            value = parsed
    if isinstance(value, dict) and "properties" in node:
        props = node["properties"]
        extra = node.get("additionalProperties")
        for key, item in value.items():
            sub = props.get(key, extra if isinstance(extra, dict) else None)
            if sub is not None:
                value[key] = _typed(item, sub)
    elif isinstance(value, list) and isinstance(node.get("items"), dict):
        value[:] = [_typed(item, node["items"]) for item in value]
    return value


def _fill_defaults(config: dict[str, Any], node: dict[str, Any]) -> None:
    """Fill each absent key that the schema gives a ``default:``, section by section."""
    for key, sub in node.get("properties", {}).items():
        if key not in config and "default" in sub:
            config[key] = copy.deepcopy(sub["default"])
        if isinstance(config.get(key), dict):
            _fill_defaults(config[key], sub)
        elif isinstance(config.get(key), list) and isinstance(sub.get("items"), dict):
            for item in config[key]:
                if isinstance(item, dict):
                    _fill_defaults(item, sub["items"])


def apply_schema(config: dict[str, Any], schema_path: str | Path) -> dict[str, Any]:
    """Type command-line overrides by the schema and fill its defaults, in place (the config
    Snakemake hands to every rule); the validator then names any key that is still wrong."""
    schema = load_schema(schema_path)
    _typed(config, schema)
    _fill_defaults(config, schema)
    return config
