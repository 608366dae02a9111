"""The package's layers point one way: each module imports only its own package and lower layers.

Every ``import`` statement of every module is read (at module level and inside functions), so a cycle can not be
dodged with a function-level import either: those are allowed only for the standard library and the heavy
optional dependencies that commands load on use.
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

import pytest

import neurondeploy

PACKAGE = Path(neurondeploy.__file__).resolve().parent

# Lowest first. A package may import its own modules and those of strictly lower layers only: packages that
# share a layer do not import each other (the planner never imports aws; serving and training are separate).
LAYERS: list[set[str]] = [
    {"", "errors", "archive"},  # the package root (version, lazy public API), errors, deterministic archives
    {"user_files"},  # the one guarded reader of the files users hand neurondeploy
    {"catalog"},  # facts as data: the specs check against them (which container kinds exist, what each takes)
    {"specs", "manifest"},  # manifest: what identifies an artifact, judged by engine, compiler, serving
    {"resources"},
    {"planner", "aws"},
    {"engine", "compiler"},
    {"replay"},  # what AWS would run, run here: the local endpoint (serving) and local training run on it
    {"serving", "training"},
    {"ops"},  # every workflow a user starts, as a library call: apply, train, compile_remote, logs
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
    "pyarrow",  # neurondeploy data writes the tokenized dataset with it (the data extra)
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
    return (
        parts[1] if (PACKAGE / parts[1]).is_dir() or parts[1] in ("errors", "archive", "manifest", "user_files") else ""
    )


def _modules() -> list[tuple[str, Path]]:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if not (path.parent / "__init__.py").is_file():
            continue  # not a module: package data another process runs (training/reference, the reference script)
        rel = path.relative_to(PACKAGE.parent).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found.append((".".join(parts), path))
    return found


# Source a module writes for another process to run, where the whole package is installed (a container's
# entry point, as console_scripts names cli.main): allowed by name, each with why. Any other generated import of
# our code is checked like an import statement.
GENERATED_ENTRY_POINTS = {
    # code/inference.py of the DLC model bundle: the PyTorch inference toolkit imports it in the container
    ("neurondeploy.engine.model_bundle", "neurondeploy.serving.sagemaker_handler"),
}
GENERATED_IMPORT = re.compile(
    r"^\s*(?:from\s+(neurondeploy[\w.]*)\s+import|import\s+(neurondeploy[\w.]*))", re.MULTILINE
)
IMPORTLIB_CALLS = {"import_module", "__import__"}


def _dynamic_target(call: ast.Call) -> str | None:
    """The module an ``importlib.import_module(...)`` / ``__import__(...)`` call names: a literal, or the literal
    start of an f-string (``f"neurondeploy.cli.{name}"`` is somewhere in ``neurondeploy.cli``)."""
    name = call.func.attr if isinstance(call.func, ast.Attribute) else getattr(call.func, "id", None)
    if name not in IMPORTLIB_CALLS or not call.args:
        return None
    first = call.args[0]
    if isinstance(first, ast.Constant) and isinstance(first.value, str):
        return first.value
    if isinstance(first, ast.JoinedStr) and first.values and isinstance(first.values[0], ast.Constant):
        return str(first.values[0].value).rstrip(".")
    return None


def _imports(path: Path, module: str) -> list[tuple[str, bool, int, str]]:
    """(imported module, at module level, line, how) for every import of a neurondeploy module or any module:
    ``statement`` (``import x``, ``from x import y``: each imported name, since ``from neurondeploy import cli``
    imports the cli package), ``importlib`` (a call naming it) and ``generated`` (source in a string that imports
    it); relative imports resolved."""
    tree = ast.parse(path.read_text())
    module_level = set()
    for node in tree.body:  # module level includes `if TYPE_CHECKING:` / try blocks at the top
        for inner in (
            ast.walk(node) if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) else ()
        ):
            module_level.add(id(inner))
    result = []
    for node in ast.walk(tree):
        how = "statement"
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".")[
                    : len(module.split(".")) - node.level + (1 if path.name == "__init__.py" else 0)
                ]
                base_name = ".".join(base + ([node.module] if node.module else []))
            else:
                base_name = node.module
            names = [base_name if alias.name == "*" else f"{base_name}.{alias.name}" for alias in node.names]
        elif isinstance(node, ast.Call) and (target := _dynamic_target(node)):
            names, how = [target], "importlib"
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and "neurondeploy" in node.value:
            names = [a or b for a, b in GENERATED_IMPORT.findall(node.value)]
            names = [n for n in names if (module, n) not in GENERATED_ENTRY_POINTS]
            how = "generated"
        else:
            continue
        result += [(name, id(node) in module_level, getattr(node, "lineno", 0), how) for name in names]
    return result


def _layer_problems(module: str, path: Path) -> list[str]:
    own = _package(module)
    problems = []
    for imported, _, line, how in _imports(path, module):
        if not imported.startswith("neurondeploy"):
            continue
        other = _package(imported)
        if other != own and _layer_of(other) >= _layer_of(own):
            problems.append(
                f"{path.name}:{line}: neurondeploy.{own or '(root)'} imports {imported} ({how}; "
                f"layer {_layer_of(other)} >= {_layer_of(own)})"
            )
    return problems


def test_every_package_is_in_a_layer():
    for module, _ in _modules():
        _layer_of(_package(module))


def test_no_layer_imports_a_higher_one_or_a_sibling():
    problems = [problem for module, path in _modules() for problem in _layer_problems(module, path)]
    assert not problems, "\n".join(problems)


def test_function_level_imports_are_only_for_heavy_optional_dependencies():
    problems = []
    allowed = HEAVY_OPTIONAL | set(sys.stdlib_module_names)
    for module, path in _modules():
        for imported, module_level, line, how in _imports(path, module):
            # importlib calls are how cli loads a command's module on use; the layer test checks where they point
            if how == "statement" and not module_level and imported.split(".")[0] not in allowed:
                problems.append(f"{path.relative_to(PACKAGE.parent)}:{line}: function-level import of {imported}")
    assert not problems, "\n".join(problems)


def test_the_checker_sees_what_it_must(tmp_path):
    """The reader itself: a function-level import of our own code and an upward import are both found."""
    probe = tmp_path / "probe.py"
    probe.write_text("from neurondeploy.cli.main import main\n\ndef f():\n    from neurondeploy.engine import apply\n")
    found = _imports(probe, "neurondeploy.resources.probe")
    assert ("neurondeploy.cli.main.main", True, 1, "statement") in found
    assert ("neurondeploy.engine.apply", False, 4, "statement") in found
    assert _layer_of(_package("neurondeploy.cli.main")) > _layer_of(_package("neurondeploy.resources.model"))


HIDDEN_UPWARD_IMPORTS = {
    "a name imported from the package root": "from neurondeploy import cli, engine\n",
    "a relative import of the root": "from .. import cli\n",
    "importlib with a literal": "import importlib\n\ndef f():\n    importlib.import_module('neurondeploy.cli.main')\n",
    "importlib with an f-string": "import importlib\n\ndef f(n):\n    importlib.import_module(f'neurondeploy.serving.{n}')\n",
    "__import__": "def f():\n    __import__('neurondeploy.engine.apply')\n",
    "generated source": 'HANDLER = "from neurondeploy.serving.sagemaker_handler import model_fn\\n"\n',
    "generated source, import form": 'SCRIPT = """\nimport sys\nimport neurondeploy.cli.main\n"""\n',
}


@pytest.mark.parametrize("hole", sorted(HIDDEN_UPWARD_IMPORTS), ids=sorted(HIDDEN_UPWARD_IMPORTS))
def test_each_way_of_importing_upward_is_caught_in_a_fixture_tree(tmp_path, hole):
    """A resources/ module (layer 2) that reaches cli, engine or serving in any of these ways is reported."""
    probe = tmp_path / "neurondeploy" / "resources" / "probe.py"
    probe.parent.mkdir(parents=True)
    probe.write_text(HIDDEN_UPWARD_IMPORTS[hole])
    problems = _layer_problems("neurondeploy.resources.probe", probe)
    assert problems and all("neurondeploy.resources imports" in problem for problem in problems), problems


def test_the_declared_entry_point_is_seen_and_let_through_by_name_only(monkeypatch):
    path = PACKAGE / "engine" / "model_bundle.py"
    assert _layer_problems("neurondeploy.engine.model_bundle", path) == []
    monkeypatch.setattr(sys.modules[__name__], "GENERATED_ENTRY_POINTS", set())
    (problem,) = _layer_problems("neurondeploy.engine.model_bundle", path)
    assert "imports neurondeploy.serving.sagemaker_handler (generated" in problem
