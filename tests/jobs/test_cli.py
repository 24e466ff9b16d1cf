"""`manage.py app|cluster|profile`: the verbs from scripts, with their exit statuses."""

import json
from io import StringIO

import pytest
import yaml
from django.core.management import call_command
from django.core.management.base import CommandError

from accesspolicies.models import Organization, Role
from jobs.models import Application, Cluster, Profile
from tests.helpers import SHORTEST, command_line, make_member


def run(*args, stdin=None):
    out, err = StringIO(), StringIO()
    call_command(*args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


@pytest.fixture
def manifest(tmp_path):
    path = tmp_path / "model.yaml"
    path.write_text(SHORTEST)
    return str(path)


def test_apply_dry_run_saves_nothing(admin, manifest):
    out, err = run("app", "apply", "-f", manifest, "--dry-run")
    assert "would be: create" in out
    assert "runtime:" in out and "scaling:" in out
    assert "warning" in err  # bge-m3's weights are PyTorch .bin (pickle) files
    assert not Application.objects.exists()


def test_apply_then_get_shows_defaults_and_round_trips(admin, manifest, tmp_path):
    out, _ = run("app", "apply", "-f", manifest)
    assert out.startswith("application/bge-embed created (revision 1)")
    got, _ = run("app", "get", "bge-embed")
    doc = yaml.safe_load(got)
    assert doc["spec"]["namespace"] == "default"
    assert doc["spec"]["source"]["model"]["resources"]["cpu"] == "1"
    assert doc["status"]["phase"] in ("Loading", "Running")
    again = tmp_path / "again.yaml"
    again.write_text(got)
    out, _ = run("app", "apply", "-f", str(again))
    assert "unchanged" in out
    as_json, _ = run("app", "get", "bge-embed", "-o", "json")
    assert json.loads(as_json)["spec"]["name"] == "bge-embed"


def test_refusals_print_every_problem_and_exit_1(admin, tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(SHORTEST.replace("bge-embed", "Bad_Name").replace("local", "nowhere"))
    err = StringIO()
    with pytest.raises(CommandError) as raised:
        call_command("app", "apply", "-f", str(bad), stdout=StringIO(), stderr=err)
    assert raised.value.returncode == 1
    lines = [line for line in err.getvalue().splitlines() if line.startswith("error:")]
    assert any("spec.name" in line for line in lines)
    assert any("spec.profileName" in line for line in lines)
    assert "2 problems" in str(raised.value)


def test_unreadable_file_is_a_clear_error(admin, tmp_path):
    with pytest.raises(CommandError, match="cannot read"):
        run("app", "apply", "-f", str(tmp_path / "missing.yaml"))


def test_list_history_rollback_delete(admin, manifest, tmp_path):
    run("app", "apply", "-f", manifest)
    bigger = tmp_path / "bigger.yaml"
    bigger.write_text(SHORTEST + "      resources:\n        memory: 6Gi\n")
    run("app", "apply", "-f", str(bigger))
    out, _ = run("app", "list")
    assert out.splitlines()[0].split()[:3] == ["NAME", "PHASE", "PROFILE"]
    assert "bge-embed" in out and ("Loading" in out or "Running" in out)
    out, _ = run("app", "history", "bge-embed")
    assert [line.split()[0] for line in out.splitlines()[1:]] == ["2", "1"]
    out, _ = run("app", "rollback", "bge-embed", "--to", "1")
    assert "revision 3" in out
    out, _ = run("app", "history", "bge-embed")
    assert "rollback to 1" in out
    with pytest.raises(CommandError, match="no revision 9"):
        run("app", "rollback", "bge-embed", "--to", "9")
    out, _ = run("app", "delete", "bge-embed")
    assert "deleted" in out
    assert not Application.objects.exists()


def test_get_unknown_application(admin):
    with pytest.raises(CommandError, match="No application named 'nope'"):
        run("app", "get", "nope")


def test_viewer_cannot_apply(viewer, admin, manifest):
    with pytest.raises(CommandError, match="viewer"):
        run("app", "apply", "-f", manifest, "--user", viewer.user.username)


def test_several_organisations_need_org(admin, outsider, manifest):
    with pytest.raises(CommandError, match="--org"):
        run("app", "list")
    out, _ = run("app", "list", "--org", "globex")
    assert out.startswith("NAME")
    with pytest.raises(CommandError, match="no such organisation"):
        run("app", "list", "--org", "nope")


def test_without_bootstrap_the_commands_say_what_to_do(db):
    with pytest.raises(CommandError, match="bootstrap"):
        run("app", "list")


def test_bootstrap_is_idempotent(db, monkeypatch):
    monkeypatch.setenv("SERVEDECK_ADMIN_PASSWORD", "a-long-test-password")
    out, _ = run("bootstrap")
    assert "Created admin admin" in out
    out, _ = run("bootstrap")
    assert "unchanged" in out
    assert Organization.objects.count() == 1
    assert Profile.objects.get().name == "local"
    from django.contrib.auth import authenticate

    assert authenticate(username="admin", password="a-long-test-password")


def test_bootstrap_generates_a_password_once(db, monkeypatch):
    monkeypatch.delenv("SERVEDECK_ADMIN_PASSWORD", raising=False)
    out, _ = run("bootstrap")
    assert "shown once" in out


def test_cluster_and_profile_commands(admin, tmp_path, settings):
    settings.SERVEDECK_KUBECONFIG_DIR = tmp_path
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text("apiVersion: v1\nkind: Config\n")
    out, _ = run(
        "cluster",
        "add",
        "prod",
        "--kubeconfig",
        str(kubeconfig),
        "--context",
        "prod",
        "--addon",
        "kserve",
        "--addon",
        "keda",
    )
    assert "cluster/prod added" in out
    cluster = Cluster.objects.get(name="prod")
    assert cluster.backend == "kubernetes" and cluster.addons == ["kserve", "keda"]
    out, _ = run("cluster", "list")
    assert "prod" in out and "kserve,keda" in out
    out, _ = run("profile", "add", "prod-inference", "--cluster", "prod", "--namespace", "models")
    assert "profile/prod-inference added" in out
    profile = Profile.objects.get(name="prod-inference")
    assert [k["name"] for k in profile.machine_catalog][:2] == ["t4", "l4"]
    out, _ = run("profile", "list")
    assert "prod-inference" in out and "models" in out


@pytest.mark.parametrize(
    "args, message",
    [
        (["cluster", "add", "local", "--local"], "exists already"),
        (["cluster", "add", "Bad_Name", "--local"], "DNS label"),
        (["profile", "add", "p", "--cluster", "nope"], "no such cluster"),
        (["profile", "add", "p", "--cluster", "local", "--hf-token", "hf_abc"], "never paste"),
        (["profile", "add", "p", "--cluster", "local", "--namespace", "Bad"], "DNS label"),
    ],
    ids=["duplicate", "bad-name", "no-cluster", "token-itself", "bad-namespace"],
)
def test_setup_commands_refuse_bad_input(admin, args, message):
    with pytest.raises(CommandError) as raised:
        run(*args)
    assert message.lower() in str(raised.value).lower()


def test_setup_commands_are_admin_only(admin, django_user_model):
    deployer = make_member(django_user_model, admin.organization, "dora", Role.DEPLOYER)
    with pytest.raises(CommandError, match="deployer"):
        run("cluster", "list", "--user", deployer.user.username)


def test_a_token_reference_may_only_name_variables_the_operator_allowed(admin):
    with pytest.raises(CommandError, match="allow-token-variable acme HF_TOKEN"):
        run("profile", "add", "p", "--cluster", "local", "--hf-token", "env/HF_TOKEN")
    call_command("organization", "allow-token-variable", "acme", "HF_TOKEN", stdout=StringIO())
    with pytest.raises(CommandError, match="allowed: HF_TOKEN"):
        run("profile", "add", "p", "--cluster", "local", "--hf-token", "env/SECRET_KEY")
    out, _ = run("profile", "add", "p", "--cluster", "local", "--hf-token", "env/HF_TOKEN")
    assert "profile/p added" in out


def test_a_viewer_may_not_dry_run_from_the_command_line(viewer, admin, manifest):
    """Bug 4: the REST API refuses a viewer's dry run (it needs the deploy role); the command
    line asks the same question and gets the same answer."""
    for verb in (["apply", "-f", manifest, "--dry-run"], ["render", "-f", manifest]):
        with pytest.raises(CommandError, match="is viewer, which may not deploy") as raised:
            run("app", *verb, "--user", viewer.user.username)
        assert raised.value.returncode == 1


def test_logs_print_a_hostile_line_escaped_as_the_client_does(admin, tmp_path, settings):
    """A model server's log holds what its callers sent: an escape sequence in it must not
    drive the terminal (retitle it, clear it); newlines and tabs stay."""
    manual = tmp_path / "manual.yaml"  # never started: no server writes to the log meanwhile
    manual.write_text(
        SHORTEST.replace("profileName: local", "profileName: local\n  syncType: Manual")
    )
    run("app", "apply", "-f", str(manual))
    log = settings.SERVEDECK_LOCAL_STATE_DIR / "acme" / "bge-embed" / "replica-0.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text("\x1b]0;owned\x07title\tkept\n\x1b[2Jcleared\n")
    out, _ = run("app", "logs", "bge-embed")
    assert out == "\\x1b]0;owned\\x07title\tkept\n\\x1b[2Jcleared\n"


def test_an_error_reads_as_the_clients_not_as_djangos(admin, tmp_path):
    """From a shell, a refusal prints `error: ...` (present.error_line), as `servedeck` does,
    not `CommandError: ...`; the exit status is the error's."""
    bad = tmp_path / "bad.yaml"
    bad.write_text(SHORTEST.replace("profileName: local", "profileName: nowhere"))
    out, err, code = command_line("app", "apply", "-f", str(bad))
    assert (out, code) == ("", 1)
    lines = err.splitlines()
    assert lines[-1] == "error: refused: 1 problem", err
    assert lines[0].startswith("error: spec.profileName: "), err
    _, err, code = command_line("app", "get", "nothing-here")
    assert code == 1 and err.startswith("error: ") and "CommandError" not in err, err
