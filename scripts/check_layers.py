"""Print the product's import graph and exit 1 on a broken layer.

A broken layer is one of:
- a cycle between modules (a -> b -> a, however long), or between apps;
- an import that runs up the layers (LAYERS below: a pure core importing a service, a model
  importing a page ...);
- a pure core importing Django's ORM or any app's models;
- an app importing another app's forms or views.

Every import counts, the lazy ones inside functions too; only imports under `if TYPE_CHECKING:`
do not (they never run). Nothing is exempt unless it is listed in ALLOWED below, with why.
Standard library only, so CI runs it before anything is installed beyond the virtualenv:
`.venv/bin/python scripts/check_layers.py` (`--edges` lists every import edge too).
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
    "jobs.machine_catalog",
    "jobs.kube_names",
    "jobs.manifest",
    "jobs.render",
    "jobs.status",
    "models_catalog.sizing",
    "jobs.backends.local.runtimes",
    "jobs.backends.local.first_request",
    "jobs.backends.local.vllm_cpu",
    "jobs.backends.local.download_files",
    "jobs.backends.local.model_files",
    "jobs.backends.local.memory_plan",
    "models_catalog.recommended",
    "jobs.gateway.dialects",
    "jobs.gateway.infinity",
    "jobs.gateway.speech",
    "jobs.gateway.errors",
    "jobs.gateway.replica_choice",
    "jobs.gateway.split",
    "jobs.rollouts.judge",
    "jobs.usage.counters",
    "jobs.usage.histogram",
    "jobs.usage.cost",
    "jobs.backends.redaction",
    "jobs.token_refs",
    "jobs.storage_access",
    "jobs.storage_region",
    "accesspolicies.secrets",
    "jobs.benchmark.plan",
    "jobs.benchmark.stats",
    "jobs.benchmark.prompts",
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
    "management",
    "admin",
    "apps",
    "routing",
    "asgi",
    "settings",
    "cli",
    "middleware",
    "templatetags",
)
# The layers, bottom up. A module may import its own layer or any layer below, never above.
# A module is in the first layer whose prefixes it falls under, wiring (WIRING) above all, and
# "services" when none names it.
LAYERS = (
    ("pure cores", PURE_CORES),
    # The models and what they are built on (accesspolicies.scope: the scoped managers).
    (
        "models",
        ("jobs.models", "accesspolicies.models", "accesspolicies.scope", "models_catalog.models"),
    ),
    ("services", ()),
    ("wiring", ()),
)
# What the checks allow, each with why. Empty: every cycle and every upward import fails.
ALLOWED: dict[tuple[str, str], str] = {}
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


def type_checking_lines(tree: ast.AST) -> set[int]:
    """The lines under `if TYPE_CHECKING:`: imports for annotations only, never run."""
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for child in node.body:
                lines.update(range(child.lineno, (child.end_lineno or child.lineno) + 1))
    return lines


def imports_of(path: Path, module: str, root: Path) -> list[tuple[str, int]]:
    """Every module `path` imports (at the top or inside a function) with the line.

    `from a.b import c` names a.b.c when c is a module, and a.b when some name is not."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    skipped = type_checking_lines(tree)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = []
    for node in ast.walk(tree):
        if getattr(node, "lineno", 0) in skipped:
            continue
        if isinstance(node, ast.Import):
            found += [(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            modules = [
                f"{base}.{a.name}" for a in node.names if is_module(f"{base}.{a.name}", root)
            ]
            if len(modules) < len(node.names):
                found.append((base, node.lineno))
            found += [(name, node.lineno) for name in modules]
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


def layer_of(module: str) -> int:
    if is_wiring(module):
        return len(LAYERS) - 1
    for index, (_, prefixes) in enumerate(LAYERS):
        if is_under(module, prefixes):
            return index
    return [name for name, _ in LAYERS].index("services")


def strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components of more than one module (or a module importing
    itself): each is one or more cycles. Iterative, so a deep graph cannot overflow."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.get(root, ()))))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, following = work[-1]
            step = next(following, None)
            if step is not None:
                if step not in index:
                    index[step] = low[step] = counter
                    counter += 1
                    stack.append(step)
                    on_stack.add(step)
                    work.append((step, iter(sorted(graph.get(step, ())))))
                elif step in on_stack:
                    low[node] = min(low[node], index[step])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1 or node in graph.get(node, ()):
                    found.append(sorted(component))
    return found


def product_module(imported: str, modules: set[str]) -> str | None:
    """The product module an import loads: the longest name of it that is one of ours."""
    parts = imported.split(".")
    while parts:
        name = ".".join(parts)
        if name in modules:
            return name
        parts.pop()
    return None


def module_graph(root: Path) -> tuple[dict[str, set[str]], dict[tuple[str, str], str]]:
    """Every product module and the product modules it imports, with where each edge is."""
    files = {module_name(path, root): path for path in source_files(root)}
    modules = {m for m in files if app_of(m)}
    graph: dict[str, set[str]] = {m: set() for m in modules}
    where: dict[tuple[str, str], str] = {}
    for module in sorted(modules):
        path = files[module]
        for imported, line in imports_of(path, module, root):
            target = product_module(imported, modules)
            if target is None or target == module:
                continue
            graph[module].add(target)
            where.setdefault((module, target), f"{path.relative_to(root)}:{line}")
    return graph, where


def module_problems(root: Path, show_edges: bool = False) -> list[str]:
    """Cycles between modules and imports up the layers; prints the graph's figures."""
    graph, where = module_graph(root)
    problems = []
    edges = sorted((a, b) for a, targets in graph.items() for b in targets)
    upward = [(a, b) for a, b in edges if layer_of(b) > layer_of(a) and (a, b) not in ALLOWED]
    components = [
        c for c in strongly_connected(graph) if not all((a, b) in ALLOWED for a in c for b in c)
    ]
    print("Modules and their imports:")
    print(f"  modules: {len(graph)}")
    print(f"  import edges: {len(edges)}")
    print(f"  edges up the layers: {len(upward)}")
    print(f"  modules in a cycle: {sum(len(c) for c in components)} in {len(components)} cycle(s)")
    for name, _ in LAYERS:
        count = sum(1 for m in graph if LAYERS[layer_of(m)][0] == name)
        print(f"  layer {name}: {count} modules")
    if show_edges:
        for a, b in edges:
            print(f"    {a} -> {b}  ({where[(a, b)]})")
    for a, b in upward:
        problems.append(
            f"{where[(a, b)]}: {a} ({LAYERS[layer_of(a)][0]}) imports {b} "
            f"({LAYERS[layer_of(b)][0]}), a layer above it; move what both need down."
        )
    for component in components:
        inside = set(component)
        ties = [f"{where[(a, b)]} {a} -> {b}" for a in component for b in sorted(graph[a] & inside)]
        problems.append(f"a cycle between modules: {', '.join(component)}")
        problems += [f"    {tie}" for tie in ties]
    return problems


def main(root: Path = ROOT, show_edges: bool = False) -> int:
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

    problems += module_problems(root, show_edges)
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
    sys.exit(main(show_edges="--edges" in sys.argv[1:]))
