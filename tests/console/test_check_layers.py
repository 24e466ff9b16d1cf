"""scripts/check_layers.py on small made-up trees: it exits non-zero on a cycle between apps or
between modules (lazy imports count, imports for type checking do not), an import up the layers,
an ORM or models import in a pure core, and another app's forms; and on the product itself."""

import importlib.util
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "check_layers.py"


@pytest.fixture(scope="module")
def layers():
    spec = importlib.util.spec_from_file_location("check_layers", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def tree(root: Path, files: dict[str, str]) -> Path:
    for name in ("accesspolicies", "console", "jobs", "models_catalog"):
        (root / name).mkdir(parents=True, exist_ok=True)
        (root / name / "__init__.py").write_text("")
    for path, text in files.items():
        target = root / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
    return root


CLEAN = {
    "jobs/manifest/__init__.py": "from .rules import check\n",
    "jobs/manifest/rules.py": "import re\n",
    "jobs/models.py": "from django.db import models\nfrom accesspolicies.models import Org\n",
    "accesspolicies/models.py": "from django.db import models\n",
    "jobs/deploy.py": "from models_catalog.check import check_model\n",
    "models_catalog/check.py": "from jobs.manifest import check\n",  # a pure core: no edge
    "console/urls.py": "from jobs import views\nfrom models_catalog import views as v\n",
}


def test_a_clean_tree_passes_and_prints_the_graph(layers, tmp_path, capsys):
    assert layers.main(tree(tmp_path, CLEAN)) == 0
    out = capsys.readouterr().out
    assert "jobs -> accesspolicies, models_catalog" in out
    assert "models_catalog -> (none)" in out


def test_a_lazy_import_that_closes_a_cycle_fails(layers, tmp_path, capsys):
    lazy = "def facts(profile):\n    from jobs.models import Profile\n    return Profile\n"
    assert layers.main(tree(tmp_path, {**CLEAN, "models_catalog/service.py": lazy})) == 1
    err = capsys.readouterr().err
    assert "a cycle between apps: jobs -> models_catalog -> jobs" in err
    assert "models_catalog/service.py:2 jobs.models" in err


def test_a_pure_core_reading_models_fails(layers, tmp_path, capsys):
    orm = {**CLEAN, "jobs/manifest/rules.py": "from jobs.models import Phase\n"}
    assert layers.main(tree(tmp_path, orm)) == 1
    assert "the pure core jobs.manifest imports jobs.models" in capsys.readouterr().err
    relative = {**CLEAN, "jobs/render/__init__.py": "def f():\n    from django.db import models\n"}
    assert layers.main(tree(tmp_path / "b", relative)) == 1


def test_another_apps_forms_fail(layers, tmp_path, capsys):
    forms = {**CLEAN, "models_catalog/forms.py": "from jobs.forms import ScopedForm\n"}
    assert layers.main(tree(tmp_path, forms)) == 1
    assert "another app's forms" in capsys.readouterr().err


def test_a_cycle_between_modules_of_one_app_fails(layers, tmp_path, capsys):
    loop = {
        **CLEAN,
        "jobs/usage.py": "from jobs.charts import chart\n",
        "jobs/charts.py": "def chart():\n    from jobs import usage\n",
    }
    assert layers.main(tree(tmp_path, loop)) == 1
    err = capsys.readouterr().err
    assert "a cycle between modules: jobs.charts, jobs.usage" in err
    assert "jobs/charts.py:2 jobs.charts -> jobs.usage" in err


def test_an_import_for_type_checking_only_closes_no_cycle(layers, tmp_path, capsys):
    typed = (
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from jobs.usage import Meter\n"
    )
    loop = {**CLEAN, "jobs/usage.py": "from jobs.charts import chart\n", "jobs/charts.py": typed}
    assert layers.main(tree(tmp_path, loop)) == 0
    assert "modules in a cycle: 0 in 0 cycle(s)" in capsys.readouterr().out


def test_an_import_up_the_layers_fails(layers, tmp_path, capsys):
    upward = {**CLEAN, "jobs/manifest/rules.py": "def f():\n    from jobs import deploy\n"}
    assert layers.main(tree(tmp_path, upward)) == 1
    err = capsys.readouterr().err
    assert "jobs.manifest.rules (pure cores) imports jobs.deploy (services)" in err


def test_the_product_itself_is_clean(layers, capsys):
    assert layers.main() == 0, capsys.readouterr().err
    assert "modules in a cycle: 0 in 0 cycle(s)" in capsys.readouterr().out
