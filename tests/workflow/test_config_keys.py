"""Every config key has one source of truth and one place that reads it.

- The schema (``config/schema.yaml``) and ``config/README.md`` list the same keys.
- Each schema key is read in its wing: ``src/pillm/<wing>/`` (outside the dataclass that
  declares it) or the wing's rules file, so `grep -rn <key> src/pillm/<wing> workflow/rules`
  leads from the key to the code that uses it in one hop.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
SCHEMA = yaml.safe_load((REPO / "config" / "schema.yaml").read_text())

# top-level section -> the wing that reads it
OWNER = {
    "name": "centre",
    "device": "centre",
    "pdf": "centre",
    "data": "data",
    "tokenizer": "data",
    "model": "lm",
    "train": "lm",
    "lm": "lm",
    "sensitivity": "lm",
    "pil": "lm",
    "lambada": "lm",
    "samples": "lm",
    "probe": "probe",
    "generative": "generative",
    "lora": "lora",
    "saffu": "saffu",
    "scaling": "lm",
}
RULES = {
    "lm": ["lm.smk", "sensitivity.smk", "scaling.smk"],
    "data": ["data.smk"],
    "centre": ["common.smk"],
}
# the model a wing builds reads its shape keys (``model.*``) in pillm.models
EXTRA = {"lm": ["models"]}


def leaf_keys(node: dict, prefix: str = "", sections: bool = True) -> list[str]:
    """Dotted paths of every key the schema declares (with ``sections``, the sections too)."""
    out = []
    for key, sub in node.get("properties", {}).items():
        path = f"{prefix}{key}"
        if sections or "properties" not in sub:
            out.append(path)
        out += leaf_keys(sub, f"{path}.", sections)
        if isinstance(sub.get("items"), dict):
            out += leaf_keys(sub["items"], f"{path}[].")
    return out


KEYS = leaf_keys(SCHEMA)


def wing_text(wing: str) -> str:
    """The wing's code as one text, its config dataclasses' field lines left out (a
    declaration is not a read)."""
    if wing == "centre":
        files = [*sorted((REPO / "src" / "pillm").glob("*.py")), REPO / "Snakefile"]
    else:
        files = [
            p
            for d in (wing, *EXTRA.get(wing, []))
            for p in sorted((REPO / "src" / "pillm" / d).rglob("*.py"))
        ]
    files += [REPO / "workflow" / "rules" / r for r in RULES.get(wing, [f"{wing}.smk"])]
    text = []
    for f in files:
        lines = f.read_text().splitlines()
        if f.name == "config.py":
            lines = [
                ln for ln in lines if not re.match(r"\s+\w+: [\w\[\], .|]+( = .*)?(  #.*)?$", ln)
            ]
        text += lines
    return "\n".join(text)


TEXTS = {w: wing_text(w) for w in set(OWNER.values())}


def test_every_section_has_an_owner():
    assert set(SCHEMA["properties"]) == set(OWNER), "add the section to OWNER with its wing"


@pytest.mark.parametrize("key", KEYS)
def test_key_is_read_in_its_wing(key: str):
    section, *_ = key.split(".")
    name = key.replace("[]", "").split(".")[-1]
    wing = OWNER[section]
    read = re.compile(rf"""\.{name}\b|\[["']{name}["']\]|["']{name}["']|\b{name}=""")
    assert read.search(TEXTS[wing]), (
        f"config key {key} is not read in its wing ({wing}): "
        f"src/pillm/{wing}/ or its rules file should use it, or the key should go"
    )


def readme_keys() -> set[str]:
    text = (REPO / "config" / "README.md").read_text()
    return {k for k in re.findall(r"`([a-z_][a-z_0-9]*(?:\.[a-z_0-9]+)*)`", text) if "." not in k or
            not k.endswith((".json", ".yaml", ".parquet", ".py", ".tex"))}  # fmt: skip


@pytest.mark.parametrize("key", [k for k in leaf_keys(SCHEMA, sections=False) if "[]" not in k])
def test_key_is_documented(key: str):
    """config/README.md names every schema key (as `section.key`, or as `key` in the row of
    its section's `section.*`)."""
    names = readme_keys()
    last = key.split(".")[-1]
    assert key in names or last in names, f"config/README.md does not document {key}"


def test_documented_keys_exist():
    """Every dotted key config/README.md names is in the schema (no stale rows)."""
    known = {k.replace("[]", "") for k in KEYS}
    stale = sorted(
        k for k in readme_keys() if "." in k and k.split(".")[0] in OWNER and k not in known
    )
    assert not stale, f"config/README.md documents keys the schema does not have: {stale}"
