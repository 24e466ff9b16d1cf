"""The docs say what the code reads: every environment variable the settings read is named in
docs/configuration.md, every manifest field of the code's own schema in docs/manifest.md, and
every relative link of README.md and docs/ leads to a file."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from jobs.manifest.json_schema import manifest_json_schema

ROOT = Path(__file__).resolve().parents[2]
SETTINGS = ROOT / "console" / "settings.py"
DOCS = ROOT / "docs"
CONFIGURATION = DOCS / "configuration.md"
MANIFEST = DOCS / "manifest.md"
# Where the model's fields live: docs/manifest.md writes them from here down.
FIELD_ROOTS = ("spec.source.model.", "spec.")


# --- environment variables ------------------------------------------------------------------


def _is_environ(node: ast.AST) -> bool:
    """`os.environ` or a bare `environ`."""
    if isinstance(node, ast.Attribute):
        return node.attr == "environ" and isinstance(node.value, ast.Name)
    return isinstance(node, ast.Name) and node.id == "environ"


def _environ_key(node: ast.AST) -> ast.AST | None:
    """The key expression of a direct read of the environment: os.environ.get(KEY, ...),
    os.getenv(KEY, ...), os.environ[KEY]; None for anything else."""
    if isinstance(node, ast.Subscript) and _is_environ(node.value):
        return node.slice
    if isinstance(node, ast.Call) and node.args:
        func = node.func
        if isinstance(func, ast.Attribute) and func.attr == "get" and _is_environ(func.value):
            return node.args[0]
        if isinstance(func, ast.Attribute) and func.attr == "getenv":
            return node.args[0]
        if isinstance(func, ast.Name) and func.id == "getenv":
            return node.args[0]
    return None


def _called_name(node: ast.AST) -> str | None:
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.args:
        return node.func.id
    return None


def _string_constants(tree: ast.Module) -> dict[str, str]:
    """Module-level NAME = "text" assignments (a variable's name kept in a constant)."""
    found = {}
    for node in tree.body:
        if (
            isinstance(node, ast.Assign)
            and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str)
        ):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    found[target.id] = node.value.value
    return found


def _readers(tree: ast.Module) -> set[str]:
    """The module's functions that read the environment variable named by their first
    parameter, directly or through another such function (env_str, env_list, ...)."""
    functions = {
        node.name: node
        for node in tree.body
        if isinstance(node, ast.FunctionDef) and node.args.args
    }
    readers: set[str] = set()
    changed = True
    while changed:
        changed = False
        for name, function in functions.items():
            if name in readers:
                continue
            first = function.args.args[0].arg
            for node in ast.walk(function):
                key = _environ_key(node)
                if key is None and _called_name(node) in readers:
                    key = node.args[0]
                if isinstance(key, ast.Name) and key.id == first:
                    readers.add(name)
                    changed = True
                    break
    return readers


def _variables_read(tree: ast.Module, readers: set[str]) -> set[str]:
    """The variables a module reads by a name written in it: a literal, or a module constant."""
    constants = _string_constants(tree)
    names = set()
    for node in ast.walk(tree):
        key = _environ_key(node)
        if key is None and _called_name(node) in readers:
            key = node.args[0]
        if isinstance(key, ast.Constant) and isinstance(key.value, str):
            names.add(key.value)
        elif isinstance(key, ast.Name) and key.id in constants:
            names.add(constants[key.id])
    return names


def settings_variables() -> set[str]:
    """Every environment variable console/settings.py reads, itself or through the helper
    modules of this project it imports its readers from (console/env.py)."""
    tree = ast.parse(SETTINGS.read_text())
    found: set[str] = set()
    readers: set[str] = set()
    for node in tree.body:
        if not isinstance(node, ast.ImportFrom) or not node.module:
            continue
        helper = ROOT / (node.module.replace(".", "/") + ".py")
        if not helper.is_file():
            continue  # a library's module (Django's, dj_database_url): not ours to document
        helper_tree = ast.parse(helper.read_text())
        helper_readers = _readers(helper_tree)
        found |= _variables_read(helper_tree, helper_readers)
        readers |= {alias.asname or alias.name for alias in node.names} & helper_readers
    return found | _variables_read(tree, readers)


def test_every_variable_the_settings_read_is_in_the_configuration_page():
    variables = settings_variables()
    # Both ways of naming a variable are found: a literal in settings.py, and a constant of
    # the helper module (configured_engine_flags reads FLAGS_SETTING).
    assert {"DATABASE_URL", "SERVEDECK_VAR_DIR", "SERVEDECK_EXTRA_ENGINE_FLAGS"} <= variables
    assert len(variables) > 30, sorted(variables)
    page = CONFIGURATION.read_text()
    missing = sorted(name for name in variables if f"`{name}`" not in page)
    assert not missing, f"docs/configuration.md does not name {', '.join(missing)}"


# --- manifest fields ------------------------------------------------------------------------


def field_paths(schema: dict, prefix: str = "") -> list[str]:
    """The dotted path of every leaf field of the JSON Schema (spec.scaling.minReplicas, ...)."""
    properties = schema.get("properties")
    if not properties:
        return [prefix]
    paths = []
    for name, child in properties.items():
        paths += field_paths(child, f"{prefix}.{name}" if prefix else name)
    return paths


def spellings(path: str) -> list[str]:
    """How docs/manifest.md may write a field: its full path, or its path below the section
    it is listed in (spec.source.model, spec)."""
    return [path] + [path[len(root) :] for root in FIELD_ROOTS if path.startswith(root)]


def test_every_manifest_field_is_in_the_manifest_page():
    paths = field_paths(manifest_json_schema())
    assert "spec.source.model.scaling.minReplicas" in paths
    assert len(paths) > 30, paths
    page = MANIFEST.read_text()
    missing = [p for p in paths if not any(f"`{s}`" in page for s in spellings(p))]
    assert not missing, f"docs/manifest.md does not name {', '.join(missing)}"


# --- links ----------------------------------------------------------------------------------

LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)


def relative_links(page: Path) -> list[str]:
    text = FENCE.sub("", page.read_text())
    targets = [m.group(1) for m in LINK.finditer(text)]
    return [t for t in targets if not re.match(r"[a-z][a-z0-9+.-]*:|#", t)]


def test_every_relative_link_of_the_docs_leads_to_a_file():
    pages = [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]
    checked = 0
    broken = []
    for page in pages:
        for target in relative_links(page):
            path = (page.parent / target.split("#", 1)[0]).resolve()
            checked += 1
            if not path.exists():
                broken.append(f"{page.relative_to(ROOT)}: {target}")
    assert checked > 20, checked
    assert not broken, broken
