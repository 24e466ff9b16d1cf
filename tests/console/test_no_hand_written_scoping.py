"""Pages, the REST API and the command line reach objects through the one access decision
(`Model.objects.for_member` / `get_for_member`): none of them filters by organisation by hand
(CONVENTIONS.md 3). Creating an object for the organisation is not filtering and is allowed."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SURFACES = [
    *ROOT.glob("*/views.py"),
    *ROOT.glob("*/views/*.py"),
    *ROOT.glob("*/api*.py"),
    *ROOT.glob("*/management/commands/*.py"),
]
# Operator commands act on an organisation as the host's operator, not as one of its members.
# api_auth.py finds the member a token acts as: that is who asks, before any object is asked.
NOT_MEMBERS = {"organization.py", "bootstrap.py", "api_auth.py"}
READS = {"filter", "exclude", "get"}


def hand_written_scoping(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        if node.func.attr not in READS:
            continue
        names = {k.arg for k in node.keywords if k.arg}
        if names & {"organization", "organization_id", "organization__slug"}:
            found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    return found


def test_no_surface_filters_by_organisation_by_hand():
    assert SURFACES, "the surfaces moved: point SURFACES at them"
    found = []
    for path in SURFACES:
        if path.name in NOT_MEMBERS or ".venv" in path.parts:
            continue
        found += hand_written_scoping(path)
    assert not found, (
        f"organisation filters written by hand at {found}: use Model.objects.for_member(membership)"
        " or get_for_member(membership, name, action) instead"
    )
