"""The package's layers point one way: each module imports only its own package and lower layers.

Every ``import`` statement of every module is read (at module level and inside functions), so a cycle can not be
dodged with a function-level import either: those are allowed only for the standard library and the heavy
optional dependencies that commands load on use.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import neurondeploy

PACKAGE = Path(neurondeploy.__file__).resolve().parent

# Lowest first. A package may import its own modules and those of strictly lower layers only: packages that
# share a layer do not import each other (the planner never imports aws; serving and training are separate).
LAYERS: list[set[str]] = [
    {"", "errors", "archive"},  # the package root (version, lazy public API), errors, deterministic archives
    {"specs", "catalog", "manifest"},  # manifest: what identifies an artifact, judged by engine, compiler, serving
    {"resources"},
    {"planner", "aws"},
    {"engine", "compiler"},
    {"serving", "training"},
    {"cli"},
]
# yaml is deferred by the catalog so that `import neurondeploy.catalog` stays cheap (tests/unit/test_catalog.py).
HEAVY_OPTIONAL = {
    "torch",
    "torch_neuronx",
    "torch_xla",
    "transformers",
    "huggingface_hub",  # in the Hugging Face images: the LLM export job downloads a pinned revision with it
    "tokenizers",  # transformers' own dependencies, loaded with it by the LLM endpoint
    "boto3",
    "botocore",
    "jmespath",
    "uvicorn",
    "starlette",
    "httpx",
    "rich",
    "yaml",
}


def _layer_of(package: str) -> int:
    for index, members in enumerate(LAYERS):
        if package in members:
            return index
    raise AssertionError(f"neurondeploy.{package} is in no layer: add it to LAYERS in {__file__}")


def _package(module: str) -> str:
    parts = module.split(".")
    if parts[0] != "neurondeploy":
        return ""
    if len(parts) == 1:
        return ""
    return parts[1] if (PACKAGE / parts[1]).is_dir() or parts[1] in ("errors", "archive", "manifest") else ""


def _modules() -> list[tuple[str, Path]]:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE.parent).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found.append((".".join(parts), path))
    return found


def _imports(path: Path, module: str) -> list[tuple[str, bool, int]]:
    """(imported module, at module level, line) for every import statement; relative imports resolved."""
    tree = ast.parse(path.read_text())
    module_level = set()
    for node in tree.body:  # module level includes `if TYPE_CHECKING:` / try blocks at the top
        for inner in (
            ast.walk(node) if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) else ()
        ):
            module_level.add(id(inner))
    result = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".")[
                    : len(module.split(".")) - node.level + (1 if path.name == "__init__.py" else 0)
                ]
                names = [".".join(base + ([node.module] if node.module else []))]
            else:
                names = [node.module]
        else:
            continue
        result += [(name, id(node) in module_level, node.lineno) for name in names]
    return result


def test_every_package_is_in_a_layer():
    for module, _ in _modules():
        _layer_of(_package(module))


def test_no_layer_imports_a_higher_one_or_a_sibling():
    problems = []
    for module, path in _modules():
        own = _package(module)
        for imported, _, line in _imports(path, module):
            if not imported.startswith("neurondeploy"):
                continue
            other = _package(imported)
            if other == own:
                continue
            if _layer_of(other) >= _layer_of(own):
                problems.append(
                    f"{path.relative_to(PACKAGE.parent)}:{line}: neurondeploy.{own or '(root)'} imports "
                    f"{imported} (layer {_layer_of(other)} >= {_layer_of(own)})"
                )
    assert not problems, "\n".join(problems)


def test_function_level_imports_are_only_for_heavy_optional_dependencies():
    problems = []
    allowed = HEAVY_OPTIONAL | set(sys.stdlib_module_names)
    for module, path in _modules():
        for imported, module_level, line in _imports(path, module):
            if not module_level and imported.split(".")[0] not in allowed:
                problems.append(f"{path.relative_to(PACKAGE.parent)}:{line}: function-level import of {imported}")
    assert not problems, "\n".join(problems)


def test_the_checker_sees_what_it_must(tmp_path):
    """The reader itself: a function-level import of our own code and an upward import are both found."""
    probe = tmp_path / "probe.py"
    probe.write_text("from neurondeploy.cli.main import main\n\ndef f():\n    from neurondeploy.engine import apply\n")
    found = _imports(probe, "neurondeploy.resources.probe")
    assert ("neurondeploy.cli.main", True, 1) in found and ("neurondeploy.engine", False, 4) in found
    assert _layer_of(_package("neurondeploy.cli.main")) > _layer_of(_package("neurondeploy.resources.model"))
