"""Generated reference docs: ``docs/configuration.md`` and the generated blocks of each
``docs/experiments/<study>.md``, so they cannot drift from their sources.

- ``docs/configuration.md``: every key of ``config/schema.yaml`` (with the studies' patches, e.g.
  the LM variant names), its allowed values and default, its value in ``config/config.yaml`` and
  ``config/smoke.yaml``, and its meaning from the hand-written table in ``config/README.md``.
- ``docs/experiments/<study>.md``: hand-written prose around blocks between
  ``<!-- BEGIN GENERATED: keys -->`` / ``claims`` and ``<!-- END GENERATED -->``: the study's
  config keys (links into configuration.md) and its declared claims (``paper/claims/<study>.yaml``).

``python -m pillm.docs_gen`` rewrites them; ``--check`` lists the stale ones and exits 1
(tests/docs/test_docs_generated.py runs it).
"""

from __future__ import annotations

import argparse
import html
import re
import sys
from pathlib import Path
from typing import Any

import yaml

from pillm import plan
from pillm.paper.html import latex_text

REPO = Path(__file__).resolve().parents[2]
COMMAND = "python -m pillm.docs_gen"
# Each study page's config sections (the rest are shared: name, device, data, tokenizer).
STUDY_SECTIONS = {
    "lm": ["model", "train", "lm", "pil", "lambada", "samples", "sensitivity"],
    "probe": ["probe"],
    "generative": ["generative"],
    "lora": ["lora"],
    "saffu": ["saffu"],
    "scaling": ["scaling"],
}
BLOCK = re.compile(r"(<!-- BEGIN GENERATED: (\w+) -->\n).*?(<!-- END GENERATED -->)", re.S)

# ---- the schema ---------------------------------------------------------------------------------


def leaves(node: dict[str, Any], prefix: str = "") -> list[tuple[str, dict[str, Any]]]:
    """(dotted key, schema node) of every key without sub-keys, in schema order; the keys of a
    list's objects as ``list[].key``."""
    out = []
    for key, sub in node.get("properties", {}).items():
        path = f"{prefix}{key}"
        if "properties" in sub:
            out += leaves(sub, f"{path}.")
            continue
        out.append((path, sub))
        if isinstance(sub.get("items"), dict) and "properties" in sub["items"]:
            out += leaves(sub["items"], f"{path}[].")
    return out


def _types(node: dict[str, Any]) -> list[str]:
    t = node.get("type", [])
    return [t] if isinstance(t, str) else list(t)


def fmt(value: Any) -> str:
    """A config value as YAML writes it inline."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if value == "":
        return '""'
    if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
        return f"{len(value)} entries"
    if isinstance(value, list | dict):
        return yaml.safe_dump(value, default_flow_style=True, width=10**6).strip()
    return str(value)


def allowed(node: dict[str, Any]) -> str:
    """What the schema accepts, in words: enum, type and bounds, pattern, list items, default."""
    parts: list[str] = []
    types = _types(node)
    if "enum" in node:
        parts.append("one of " + ", ".join(f"`{fmt(v)}`" for v in node["enum"]))
    elif "array" in types:
        items = node.get("items", {})
        parts.append("list of objects" if "properties" in items
                     else f"list, each {allowed(items) or 'any value'}")  # fmt: skip
        if node.get("minItems"):
            parts.append(f"at least {node['minItems']}")
        if node.get("uniqueItems"):
            parts.append("unique")
    elif "object" in types and isinstance(node.get("additionalProperties"), dict):
        parts.append("mapping of names to " + (allowed(node["additionalProperties"]) or "values"))
    else:
        parts += [t for t in types if t != "null"]
    for key, sign in (("minimum", "≥"), ("exclusiveMinimum", ">"), ("maximum", "≤"),
                      ("exclusiveMaximum", "<")):  # fmt: skip
        if key in node:
            parts.append(f"{sign} {fmt(node[key])}")
    if "pattern" in node:
        parts.append(f"matching `{node['pattern']}`")
    if "null" in types:
        parts.append("or null")
    if "default" in node:
        parts.append(f"default `{fmt(node['default'])}`")
    return ", ".join(parts)


def lookup(cfg: dict[str, Any], key: str) -> str:
    node: Any = cfg
    for part in key.split("."):
        if part.endswith("[]") or not isinstance(node, dict) or part not in node:
            return "–"
        node = node[part]
    return f"`{fmt(node)}`"


# ---- config/README.md ---------------------------------------------------------------------------


def readme_rows(text: str) -> list[tuple[list[str], str]]:
    """The key table of config/README.md: (keys named in the first cell, meaning) per row."""
    rows = []
    for line in text.splitlines():
        if line.startswith("| `"):
            first, meaning = line.strip().strip("|").split(" | ", 1)
            rows.append((re.findall(r"`([^`]+)`", first), meaning.strip()))
    return rows


def readme_prose(text: str) -> tuple[str, str]:
    """The paragraphs before the key table (without the title) and after it."""
    lines = text.splitlines()
    table = [i for i, ln in enumerate(lines) if ln.startswith("|")]
    before = "\n".join(ln for ln in lines[: table[0]] if not ln.startswith("# ")).strip()
    return before, "\n".join(lines[table[-1] + 1 :]).strip()


def row_of(key: str, rows: list[tuple[list[str], str]]) -> tuple[int | None, bool]:
    """The README row that documents ``key``, and whether it names the key itself (else a
    ``section.*`` row or the row of the list it belongs to)."""
    for i, (keys, _) in enumerate(rows):
        if key in keys:
            return i, True
    for i, (keys, _) in enumerate(rows):
        if any(k.endswith(".*") and key.startswith(k[:-1]) for k in keys):
            return i, False
    if "[]" in key:
        return row_of(key.split("[]")[0], rows)[0], False
    return None, False


# ---- docs/configuration.md ----------------------------------------------------------------------


def anchor(key: str) -> str:
    return key.replace("[]", "")


def configuration_md(repo: Path = REPO) -> str:
    schema = plan.schema(repo / "config" / "schema.yaml")
    readme = (repo / "config" / "README.md").read_text()
    rows = readme_rows(readme)
    configs = {
        n: yaml.safe_load((repo / "config" / n).read_text()) for n in ("config.yaml", "smoke.yaml")
    }
    before, after = readme_prose(readme)
    out = [
        "# Configuration reference",
        "",
        f"<!-- Generated by `{COMMAND}` from config/schema.yaml and config/README.md. Do not "
        "edit: change those and rerun it. -->",
        "",
        before,
        "",
        "Each key below: its meaning (`config/README.md`), what the schema accepts "
        "(`config/schema.yaml`; a default applies when the key is left out), and its value at "
        "the paper scale (`config/config.yaml`) and the CPU smoke scale (`config/smoke.yaml`). "
        "Override any of them on the command line, e.g. "
        "`snakemake --config 'train={lr: 0.002}'`.",
        "",
        "Sections: " + ", ".join(f"[`{s}`](#{s})" for s in schema["properties"]) + ".",
    ]
    all_leaves = leaves(schema)
    for section, node in schema["properties"].items():
        keys = [(k, n) for k, n in all_leaves if k == section or k.startswith(section + ".")]
        out += ["", f'<a id="{section}"></a>', "", f"## `{section}`", ""]
        if node.get("description") and "properties" in node:
            out += [node["description"][0].upper() + node["description"][1:] + ".", ""]
        out += ["| key | meaning | allowed | config.yaml | smoke.yaml |", "|---|---|---|---|---|"]
        groups: dict[Any, list[tuple[str, dict[str, Any], bool]]] = {}
        for key, sub in keys:
            i, own = row_of(key, rows)
            groups.setdefault(i if i is not None else key, []).append((key, sub, own))
        for gid, members in groups.items():
            meaning = rows[gid][1] if isinstance(gid, int) else ""
            notes = [
                f"`{k}`: {sub['description']}" if isinstance(gid, int) else sub["description"]
                for k, sub, own in members
                if sub.get("description") and (not own or not meaning)
            ]
            text = "<br>".join(p for p in [meaning, *notes] if p).replace("|", "\\|")
            cells = [
                "<br>".join(("" if k == section else f'<a id="{anchor(k)}"></a>') + f"`{k}`"
                            for k, _, _ in members),
                text,
                "<br>".join(allowed(sub) or "–" for _, sub, _ in members).replace("|", "\\|"),
                *("<br>".join(lookup(c, k) for k, _, _ in members).replace("|", "\\|")
                  for c in configs.values()),
            ]  # fmt: skip
            out.append("| " + " | ".join(cells) + " |")
    if after:
        out += ["", "## Writing values", "", after]
    return "\n".join(out) + "\n"


# ---- docs/experiments/<study>.md ----------------------------------------------------------------


def plain(tex: str) -> str:
    """A claims file's LaTeX name as Markdown text."""
    return html.unescape(re.sub(r"<[^>]+>", "", latex_text(tex).replace("<br>", " ")))


def keys_block(study: str, repo: Path = REPO) -> str:
    sections = STUDY_SECTIONS[study]
    if not sections:
        return "This study has no config section of its own yet.\n"
    schema = plan.schema(repo / "config" / "schema.yaml")
    lines = []
    for section in sections:
        keys = [k for k, _ in leaves(schema["properties"][section], f"{section}.")] or [section]
        links = ", ".join(f"[`{k.removeprefix(section + '.')}`](../configuration.md#{anchor(k)})"
                          for k in keys)  # fmt: skip
        lines.append(f"- [`{section}`](../configuration.md#{section}): {links}")
    return "\n".join(lines) + "\n"


def claim_headings(text: str) -> list[str]:
    """The ``# -- heading`` comment above each claim of a claims file ('' before the first)."""
    out, heading, inside = [], "", False
    for line in text.splitlines():
        if line.startswith("claims:"):
            inside = True
        elif inside and line[:1] not in ("", " ", "#"):
            break
        elif inside and line.strip().startswith("# --"):
            heading = line.strip().removeprefix("# --").strip()
        elif inside and line.startswith("  - "):
            out.append(heading)
    return out


def claims_block(study: str, repo: Path = REPO) -> str:
    path = repo / "paper" / "claims" / f"{study}.yaml"
    if not path.is_file():
        return f"No claims yet: `paper/claims/{study}.yaml` does not exist.\n"
    text = path.read_text()
    data = yaml.safe_load(text)
    names, metrics = data.get("names", {}), data.get("metrics", {})
    headings = claim_headings(text)
    out, last = [], None
    for claim, heading in zip(data["claims"], headings, strict=True):
        if heading != last:
            out += ["", f"*{heading[0].upper() + heading[1:]}*" if heading else "", ""]
            out += ["| claim | a | b | metric | test |", "|---|---|---|---|---|"]
            last = heading
        a, b = (plain(names.get(arm, arm)) for arm in claim["arms"])
        metric = metrics.get(claim["metric"], {})
        what = (
            f"{plain(metric.get('noun', claim['metric']))} ({metric.get('better', '?')} is better)"
        )
        test = claim["test"] + (f", margin {claim['margin']}" if "margin" in claim else "")
        out.append(f"| `{claim['id']}` | {a} | {b} | {what} | {test} |")
    return "\n".join(out).strip() + "\n"


def study_page(path: Path, repo: Path = REPO) -> str:
    """The page with its generated blocks rewritten."""
    study = path.stem
    makers = {"keys": keys_block, "claims": claims_block}

    def fill(m: re.Match) -> str:
        return m.group(1) + makers[m.group(2)](study, repo) + m.group(3)

    return BLOCK.sub(fill, path.read_text())


def generated(repo: Path = REPO) -> dict[Path, str]:
    """Every generated file's path and its text as the sources give it now."""
    out = {repo / "docs" / "configuration.md": configuration_md(repo)}
    for page in sorted((repo / "docs" / "experiments").glob("*.md")):
        if page.stem in STUDY_SECTIONS:
            out[page] = study_page(page, repo)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog=COMMAND, description=__doc__.splitlines()[0])
    p.add_argument(
        "--check", action="store_true", help="list stale files and exit 1; write nothing"
    )
    args = p.parse_args(argv)
    stale = []
    for path, text in generated().items():
        if not path.is_file() or path.read_text() != text:
            stale.append(path.relative_to(REPO))
            if not args.check:
                path.write_text(text)
    if args.check and stale:
        print(f"stale: {', '.join(map(str, stale))}; run `{COMMAND}`", file=sys.stderr)
        return 1
    for path in stale:
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
