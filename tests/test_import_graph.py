"""The import graph over src/ringfence (an ast walk, every import at any depth, TYPE_CHECKING included).

- Nothing outside ``ringfence.lab``, ``ringfence.cli`` and ``ringfence.demo`` imports the lab: the
  lab is one executor among equals, reached through ``ringfence.targets`` like any other.
- No module imports another package's private module or name (``ringfence.secure._verify_lab``,
  ``ringfence.secure.layers._state``): a private part is private to its own package.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterator
from pathlib import Path

import ringfence

SRC = Path(ringfence.__file__).resolve().parent
LAB_USERS = ("ringfence.lab", "ringfence.cli", "ringfence.demo")
#: what a control may never import: the packages that act on a cluster
ACTORS = ("ringfence.enforce", "ringfence.secure", "ringfence.targets", "ringfence.lab", "ringfence.rollout",
          "ringfence.drill")


def _module_name(path: Path) -> str:
    rel = path.relative_to(SRC.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _package(module: str, path: Path) -> str:
    return module if path.name == "__init__.py" else module.rpartition(".")[0]


def _imports(path: Path, module: str) -> Iterator[tuple[int, str]]:
    """Every (line, imported dotted name) in ``path``; ``from a import b`` yields ``a.b``.

    ``importlib.import_module("ringfence.x")`` with a literal name counts too: an import written as a
    string is still an import.
    """
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    package = _package(module, path)
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute | ast.Name)
            and (node.func.attr if isinstance(node.func, ast.Attribute) else node.func.id) == "import_module"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            yield node.lineno, node.args[0].value
        elif isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            for alias in node.names:
                yield node.lineno, f"{base}.{alias.name}"


def _modules() -> Iterator[tuple[Path, str]]:
    for path in sorted(SRC.rglob("*.py")):
        yield path, _module_name(path)


def _within(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def _private_owner(imported: str) -> str | None:
    """The package a private part of ``imported`` belongs to (None if nothing in it is private)."""
    parts = imported.split(".")
    for i, part in enumerate(parts):
        if part.startswith("_") and not part.startswith("__"):
            return ".".join(parts[:i])
    return None


def test_the_module_walk_sees_the_whole_package() -> None:
    names = {m for _, m in _modules()}
    assert {"ringfence.cli", "ringfence.targets.interface", "ringfence.lab.lab"} <= names
    # the walk itself must catch a lab import where one is written (the lab imports itself)
    lab = SRC / "lab" / "lab.py"
    assert any(_within(n, "ringfence.lab") for _, n in _imports(lab, "ringfence.lab.lab"))


def test_only_the_lab_the_cli_and_the_demo_import_the_lab() -> None:
    offenders = [
        f"{path.relative_to(SRC.parent)}:{line} imports {name}"
        for path, module in _modules()
        if not any(_within(module, user) for user in LAB_USERS)
        for line, name in _imports(path, module)
        if _within(name, "ringfence.lab")
    ]
    assert offenders == []


def test_no_module_imports_another_packages_private_parts() -> None:
    offenders = []
    for path, module in _modules():
        package = _package(module, path)
        for line, name in _imports(path, module):
            if not _within(name, "ringfence"):
                continue
            owner = _private_owner(name)
            if owner is not None and not _within(package, owner):
                offenders.append(f"{path.relative_to(SRC.parent)}:{line} imports {name}")
    assert offenders == []


def test_private_owner_rules() -> None:
    assert _private_owner("ringfence.secure._verify_lab") == "ringfence.secure"
    assert _private_owner("ringfence.secure.layers._state.StateStore") == "ringfence.secure.layers"
    assert _private_owner("ringfence.secure.verify.verify_lab") is None
    assert _private_owner("ringfence.__version__") is None


def _offenders(package: str, allowed: Callable[[str], bool]) -> list[str]:
    """Every import of a ringfence module from within ``package`` that ``allowed`` refuses."""
    return [
        f"{path.relative_to(SRC.parent)}:{line} imports {name}"
        for path, module in _modules()
        if _within(module, package)
        for line, name in _imports(path, module)
        if _within(name, "ringfence") and not allowed(name)
    ]


def test_the_controls_never_import_what_acts_on_a_cluster() -> None:
    assert _offenders("ringfence.controls", lambda n: not any(_within(n, a) for a in ACTORS)) == []


def test_the_policy_imports_only_itself_and_the_base_modules() -> None:
    base = ("ringfence.policy", "ringfence.errors", "ringfence.bounded", "ringfence.atomic", "ringfence.__version__")
    assert _offenders("ringfence.policy", lambda n: any(_within(n, b) for b in base)) == []
