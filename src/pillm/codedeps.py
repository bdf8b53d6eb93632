"""The code a ``python -m pillm`` command runs, and a fingerprint of it (stdlib only).

Snakemake does not follow imports, so a rule's code dependency is derived here instead of listed
by hand: the command's ``module:function`` comes from the CLI table (:mod:`pillm.cli`), and its
*closure* is every module of ``src/pillm`` reachable from that module, the CLI and
``__main__`` through absolute ``pillm.*`` or relative imports, function-level imports included
(a lazy import still runs), plus the package ``__init__`` files on each module's path.

The fingerprint hashes each module's AST with docstrings removed (comments never reach the AST),
so a comment or docstring edit keeps it and a real code edit changes it. :func:`stamp` turns it
into a file a rule can list as an input: the file is named by the fingerprint and written once,
so its path and mtime change exactly when the code does (see workflow/rules/common.smk).

Each file's facts (its fingerprint and import statements) depend on its bytes alone, so they are
kept on disk by a hash of those bytes (``facts_dir``): every Snakemake start plans ~45 stamps
over ~160 modules, and parsing and dumping them was about 1.3 s of each start's CPU (dry runs,
the tests' many of them). The key also hashes this module's own source and the Python version,
so a change to how facts are computed never reads old ones; an unreadable entry is recomputed.
"""

from __future__ import annotations

import ast
import hashlib
import json
import os
import sys
import tempfile
from functools import cache
from pathlib import Path

from pillm.cli import DEFINED_IN, command

PACKAGE_DIR = Path(__file__).resolve().parent
ENTRY = ("pillm.__main__", "pillm.cli")
FACTS_ENV = "PILLM_CODE_FACTS"  # the facts' folder; "0": none (every start parses every file)


def module_path(module: str, root: Path = PACKAGE_DIR) -> Path | None:
    """The file of a ``pillm.*`` module under ``root`` (the pillm package directory), or None."""
    parts = module.split(".")
    if parts[0] != "pillm":
        return None
    base = root.joinpath(*parts[1:])
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


def _packages(module: str) -> list[str]:
    """The packages a module's import runs first: pillm, pillm.lm, ... (not the module)."""
    parts = module.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


def imports(module: str, root: Path = PACKAGE_DIR) -> set[str]:
    """The ``pillm.*`` modules ``module`` imports anywhere in its body, packages included.

    ``from pillm.x import y`` counts ``pillm.x.y`` when that is a module, else ``pillm.x``.
    """
    path = module_path(module, root)
    if path is None:
        return set()
    st = path.stat()
    return set(_imports(module, root, path, st.st_mtime_ns, st.st_size))


@cache
def _imports(module: str, root: Path, path: Path, mtime_ns: int, size: int) -> frozenset[str]:
    """``imports`` walked once per version of a file: planning asks ~40 rules' closures, which
    share most modules (the walks were half of Snakemake's start-up)."""
    is_pkg = path.name == "__init__.py"
    found: set[str] = set()
    for level, base, names in _facts(path, mtime_ns, size)["imports"]:
        if level is None:  # import a, b.c
            found |= {n for n in names if n.split(".")[0] == "pillm"}
            continue
        if level:  # relative: resolve against this module's package
            pkg = module.split(".") if is_pkg else module.split(".")[:-1]
            pkg = pkg[: len(pkg) - level + 1]
            base = ".".join(pkg + ([base] if base else []))
        if base.split(".")[0] != "pillm":
            continue
        found.add(base)
        for name in names:
            if module_path(f"{base}.{name}", root) is not None:
                found.add(f"{base}.{name}")
    return frozenset(m for m in found if module_path(m, root) is not None)


def _import_statements(tree: ast.Module) -> list[tuple[int | None, str, list[str]]]:
    """Every import of the tree as (level, module, names): level None for ``import a, b``
    (names: the modules), else a ``from`` import's level, module ("" for ``from . import``)
    and imported names."""
    out: list[tuple[int | None, str, list[str]]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.append((None, "", [a.name for a in node.names]))
        elif isinstance(node, ast.ImportFrom):
            out.append((node.level, node.module or "", [a.name for a in node.names]))
    return out


def facts_dir() -> Path | None:
    """Where files' facts are kept: ``$PILLM_CODE_FACTS``, else ``$XDG_CACHE_HOME/pillm/code``
    (``~/.cache/pillm/code``, shared by clones and worktrees); None when the variable is "0"."""
    if (env := os.environ.get(FACTS_ENV)) is not None and env.strip():
        return None if env.strip() == "0" else Path(env).expanduser()
    cache_home = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache_home).expanduser() / "pillm" / "code"


@cache
def _facts_version() -> str:
    """This module's source and the Python version: how the facts are computed."""
    text = Path(__file__).read_bytes() + sys.version.encode()
    return hashlib.sha256(text).hexdigest()[:16]


@cache
def _facts(path: Path, mtime_ns: int, size: int) -> dict:
    """{"fingerprint": sha256 of the AST without docstrings, "imports": ``_import_statements``}
    of one version of a file: read from ``facts_dir`` by the hash of its bytes, else computed
    from its parse and written there (once, atomically; a folder that cannot be written is left
    alone)."""
    data = path.read_bytes()
    folder = facts_dir()
    entry = None
    if folder is not None:
        key = hashlib.sha256(_facts_version().encode() + b"\0" + data).hexdigest()
        entry = folder / key[:2] / f"{key[2:]}.json"
        try:
            facts = json.loads(entry.read_text())
            if set(facts) == {"fingerprint", "imports"}:
                return facts
        except (OSError, ValueError):
            pass
    tree = ast.parse(data.decode(), filename=str(path))
    facts = {
        "fingerprint": hashlib.sha256(canonical(tree, docstrings=False).encode()).hexdigest(),
        "imports": _import_statements(tree),
    }
    if entry is not None:
        try:
            entry.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=entry.parent, suffix=".tmp")
            with os.fdopen(fd, "w") as f:
                json.dump(facts, f)
            os.replace(tmp, entry)
        except OSError:
            pass
    return facts


def closure(name: str, root: Path = PACKAGE_DIR) -> list[Path]:
    """Files of every module command ``name`` may run, sorted: its target, the CLI, the module
    of its command row, and what they import, transitively, with each one's parent packages."""
    todo = [command(name).module, DEFINED_IN[name], *ENTRY]
    seen: set[str] = set()
    while todo:
        mod = todo.pop()
        if mod in seen or module_path(mod, root) is None:
            continue
        seen.add(mod)
        todo += [*_packages(mod), *imports(mod, root)]
    return sorted(p for m in seen if (p := module_path(m, root)) is not None)


_DOCSTRING_HOLDERS = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)


def _body(node: ast.AST) -> list:
    """The body of a module, class or function without its docstring (a ``pass`` when nothing
    else is left); any other node's ``body`` as it is. Comments are not in the AST."""
    body = node.body  # type: ignore[attr-defined]
    if (
        isinstance(node, _DOCSTRING_HOLDERS)
        and body
        and isinstance(body[0], ast.Expr)
        and isinstance(body[0].value, ast.Constant)
        and isinstance(body[0].value.value, str)
    ):
        return body[1:] or [ast.Pass()]
    return body


def file_fingerprint(path: Path) -> str:
    """sha256 of the file's AST without docstrings (no line numbers: moves don't count)."""
    st = path.stat()
    return _file_fingerprint(path, st.st_mtime_ns, st.st_size)


def canonical(node: object, docstrings: bool = True) -> str:
    """The AST as text, the same under every Python 3.11+: ``ast.dump`` is not (3.12 adds
    ``type_params=[]`` to every def), so a field left empty or None is not written. Without
    ``docstrings`` each module, class and function is written without its docstring (the tree
    itself is left as it is: the parse is shared with ``imports``)."""
    if isinstance(node, ast.AST):
        fields = []
        for name in node._fields:
            value = _body(node) if name == "body" and not docstrings else getattr(node, name, None)
            if value is not None and value != []:
                fields.append(f"{name}={canonical(value, docstrings)}")
        return f"{type(node).__name__}({', '.join(fields)})"
    if isinstance(node, list):
        return f"[{', '.join(canonical(v, docstrings) for v in node)}]"
    return repr(node)


def _file_fingerprint(path: Path, mtime_ns: int, size: int) -> str:
    return _facts(path, mtime_ns, size)["fingerprint"]  # one parse gives imports and this


def fingerprint(name: str, root: Path = PACKAGE_DIR) -> str:
    """One sha256 over command ``name``'s closure: each file's path and AST fingerprint."""
    h = hashlib.sha256()
    for path in closure(name, root):
        h.update(f"{path.relative_to(root).as_posix()} {file_fingerprint(path)}\n".encode())
    return h.hexdigest()


def stamp(name: str, directory: str | Path, root: Path = PACKAGE_DIR) -> str:
    """Path of ``<directory>/<name>/<fingerprint[:16]>.sha``, written only if absent.

    A rule lists this path as its code input: an edit that changes the code changes the path
    (a new, newer file), a comment or docstring edit yields the existing file untouched, and
    reverting an edit returns to the old file with its old mtime.
    """
    digest = fingerprint(name, root)
    path = Path(directory) / name / f"{digest[:16]}.sha"
    if not path.exists():
        files = "".join(f"{p.relative_to(root).as_posix()}\n" for p in closure(name, root))
        _create_once(path, f"{digest}\n{files}")
    return str(path)


def config_stamp(name: str, params: str, directory: str | Path) -> str:
    """Path of ``<directory>/<name>/<sha256(params)[:16]>.json`` holding ``params`` (the config
    a command reads, as JSON), written only if absent: a rule lists it as an input where its
    command gets that config inside a params function of ``input`` or ``output``, which
    Snakemake's params trigger does not compare, so that a config edit still reruns its jobs
    (a new path) and reverting it returns to the old file with its old mtime."""
    path = Path(directory) / name / f"{hashlib.sha256(params.encode()).hexdigest()[:16]}.json"
    if not path.exists():
        _create_once(path, params + "\n")
    return str(path)


def _create_once(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` unless it exists: created, never replaced, so a stamp another
    planner just wrote keeps its mtime."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
    with os.fdopen(fd, "w") as f:
        f.write(text)
    try:
        os.link(tmp, path)
    except FileExistsError:
        pass
    finally:
        os.unlink(tmp)
