"""Print the app-to-app import graph and the pure cores' imports; exit 1 on a broken layer.

A broken layer is one of:
- a cycle between apps (jobs -> models_catalog -> jobs, however long);
- a pure core importing Django's ORM or any app's models;
- an app importing another app's forms or views.

Every import counts, the lazy ones inside functions too. Standard library only, so CI runs it
before anything is installed beyond the virtualenv: `.venv/bin/python scripts/check_layers.py`.
"""

from __future__ import annotations

import ast
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
APPS = ("accesspolicies", "console", "jobs", "models_catalog")
SKIPPED = {"tests", ".venv", "var", "migrations", "node_modules", "__pycache__", "bench", "scripts"}

# The pure cores: modules (a package stands for every module under it) that hold decisions on
# plain values and import no Django model. Keep this the one list.
PURE_CORES = (
    "jobs.catalog",
    "jobs.kube_names",
    "jobs.manifest",
    "jobs.render",
    "jobs.status",
    "jobs.phases",
    "models_catalog.sizing",
    "jobs.backends.local.runtimes",
    "jobs.backends.local.download_files",
    "jobs.backends.local.model_files",
    "models_catalog.recommended",
    "jobs.gateway.dialects",
    "jobs.gateway.infinity",
    "jobs.gateway.speech",
)
# The wiring: modules that compose every app into the product's surfaces (REST API, URLs,
# pages, the command line). They may import any app; the apps' own layers may not loop.
WIRING = (
    "api",
    "api_usage",
    "api_auth",
    "api_errors",
    "urls",
    "console_urls",
    "views",
    "gateway_views",
    "management",
    "admin",
    "apps",
    "routing",
    "asgi",
    "settings",
    "cli",
)
ORM = ("django.db", "django.contrib.auth.models", "django.contrib.contenttypes.models")
# Plain enums with labels (TextChoices): under django.db, but no ORM.
NOT_ORM = ("django.db.models.enums",)
# What another app may not import from an app: its pages' wiring.
PRIVATE = ("forms", "views")


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def source_files(root: Path) -> list[Path]:
    files = []
    for path in sorted(root.rglob("*.py")):
        relative = path.relative_to(root).parts
        if any(part in SKIPPED for part in relative[:-1]):
            continue
        files.append(path)
    return files


def imports_of(path: Path, module: str, root: Path) -> list[tuple[str, int]]:
    """Every module `path` imports (at the top or inside a function) with the line."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            found.append((base, node.lineno))
            # `from jobs import models` imports the module jobs.models
            found += [
                (f"{base}.{alias.name}", node.lineno)
                for alias in node.names
                if is_module(f"{base}.{alias.name}", root)
            ]
    return found


def is_module(module: str, root: Path) -> bool:
    path = root.joinpath(*module.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def app_of(module: str) -> str | None:
    top = module.split(".")[0]
    return top if top in APPS else None


def is_under(module: str, prefixes) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def is_wiring(module: str) -> bool:
    return any(part in WIRING for part in module.split(".")[1:])


def is_models(module: str) -> bool:
    """An app's models module (or package)."""
    parts = module.split(".")
    return app_of(module) is not None and "models" in parts[1:]


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Each elementary cycle once, found by a depth-first walk from each app in order."""
    found, seen = [], set()

    def walk(start: str, node: str, path: list[str]) -> None:
        for following in sorted(graph.get(node, ())):
            if following == start:
                key = frozenset(path)
                if key not in seen:
                    seen.add(key)
                    found.append([*path, start])
            elif following not in path and following > start:
                walk(start, following, [*path, following])

    for app in sorted(graph):
        walk(app, app, [app])
    return found


def main(root: Path = ROOT) -> int:
    graph: dict[str, set[str]] = defaultdict(set)
    edges: dict[tuple[str, str], list[str]] = defaultdict(list)
    core_imports: dict[str, set[str]] = defaultdict(set)
    problems = []
    for path in source_files(root):
        module = module_name(path, root)
        here = app_of(module)
        where = path.relative_to(root)
        for imported, line in imports_of(path, module, root):
            there = app_of(imported)
            if here and there and here != there:
                # a pure core is a library any app may use; wiring composes apps
                if not is_under(imported, PURE_CORES) and not is_wiring(module):
                    graph[here].add(there)
                    edges[(here, there)].append(f"{where}:{line} {imported}")
                if imported.split(".")[1:2] and imported.split(".")[1] in PRIVATE:
                    problems.append(
                        f"{where}:{line}: {here} imports {imported}, another app's "
                        f"{imported.split('.')[1]}; move what both need into a module of {there} "
                        "that is not its pages' wiring."
                    )
            if is_under(module, PURE_CORES):
                core = next(p for p in PURE_CORES if is_under(module, [p]))
                if not is_under(imported, [core]) and (there or imported.startswith("django")):
                    core_imports[core].add(imported)
                orm = is_under(imported, ORM) and not is_under(imported, NOT_ORM)
                if orm or is_models(imported):
                    problems.append(
                        f"{where}:{line}: the pure core {core} imports {imported}; pass plain "
                        "values in from the caller instead of reading models."
                    )

    print("App-to-app imports:")
    for app in APPS:
        targets = sorted(graph.get(app, ()))
        print(f"  {app} -> {', '.join(targets) if targets else '(none)'}")
    print("Pure cores' imports of Django and the apps (outside the core itself):")
    for core in PURE_CORES:
        names = sorted(core_imports.get(core, ()))
        print(f"  {core}: {', '.join(names) if names else '(none)'}")

    for cycle in cycles(graph):
        problems.append("a cycle between apps: " + " -> ".join(cycle))
        for here, there in zip(cycle, cycle[1:], strict=False):
            for edge in edges[(here, there)][:5]:
                problems.append(f"    {here} -> {there}: {edge}")
    if problems:
        print(f"\n{len(problems)} layer problem(s):", file=sys.stderr)
        for problem in problems:
            print(f"  {problem}", file=sys.stderr)
        return 1
    print("\nLayers are clean.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
