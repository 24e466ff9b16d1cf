"""Settings come from the environment; a bad value stops start-up naming the variable."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def start(env: dict, *args: str) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "REDIS_URL"}}
    return subprocess.run(
        [sys.executable, "manage.py", *(args or ("check",))],
        cwd=ROOT,
        env={**clean, **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize(
    "env, named",
    [
        ({"DEBUG": "maybe"}, "DEBUG"),
        ({"DATABASE_URL": "mysql://db/servedeck"}, "DATABASE_URL"),
        ({"REDIS_URL": "http://cache:6379"}, "REDIS_URL"),
        ({"SECRET_KEY": "short"}, "SECRET_KEY"),
        ({"SECURE_HSTS_SECONDS": "a year"}, "SECURE_HSTS_SECONDS"),
        ({"SERVEDECK_VM_CALLER_NAMESPACES": "servedeck,Not_A_Namespace"}, "SERVEDECK_VM_CALLER"),
        ({"SERVEDECK_VM_CALLER_NAMESPACES": "servedeck,*"}, "SERVEDECK_VM_CALLER_NAMESPACES"),
        ({"SERVEDECK_LIVE_SOCKETS_PER_USER": "many"}, "SERVEDECK_LIVE_SOCKETS_PER_USER"),
        ({"SERVEDECK_LIVE_SOCKETS_PER_USER": "0"}, "SERVEDECK_LIVE_SOCKETS_PER_USER"),
    ],
    ids=lambda v: next(iter(v)) if isinstance(v, dict) else v,
)
def test_a_bad_value_stops_start_up_naming_the_variable(env, named, tmp_path):
    result = start({**env, "SERVEDECK_VAR_DIR": str(tmp_path)})
    assert result.returncode != 0
    assert named in result.stderr.splitlines()[-1]


def test_production_settings_pass_check_deploy(tmp_path):
    result = start(
        {
            "SECRET_KEY": "x" * 20 + "production-secret-key-that-is-long-enough-1234",
            "HTTPS": "true",
            "ALLOWED_HOSTS": "servedeck.example.com",
            "DEBUG": "false",
            "SERVEDECK_VAR_DIR": str(tmp_path),
        },
        "check",
        "--deploy",
        "--fail-level",
        "WARNING",
    )
    assert result.returncode == 0, result.stderr


def test_without_secret_key_one_is_generated_once_and_kept_private(tmp_path):
    env = {"SERVEDECK_VAR_DIR": str(tmp_path), "SECRET_KEY": ""}
    assert start(env).returncode == 0
    key = (tmp_path / "secret-key").read_text()
    assert len(key) >= 50
    assert (tmp_path / "secret-key").stat().st_mode & 0o077 == 0
    assert start(env).returncode == 0
    assert (tmp_path / "secret-key").read_text() == key


def test_defaults_are_sqlite_and_in_memory_channels(settings):
    if os.environ.get("DATABASE_URL") or os.environ.get("REDIS_URL"):
        pytest.skip("this run points DATABASE_URL/REDIS_URL at services on purpose")
    assert settings.DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3"
    assert settings.CHANNEL_LAYERS["default"]["BACKEND"] == "channels.layers.InMemoryChannelLayer"
    assert settings.DEBUG is False


def test_healthz_answers_without_login_or_a_known_host(client):
    response = client.get("/healthz", HTTP_HOST="10.1.2.3:8000")
    assert response.status_code == 200 and response.content == b"ok"


def test_files_under_var_are_private_from_the_start(tmp_path):
    """Started by a user whose umask lets everyone read (022), the console still creates its
    folder, database, secret key and local state for its own user only."""
    var = tmp_path / "var"
    env = {"SERVEDECK_VAR_DIR": str(var), "SECRET_KEY": ""}
    clean = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "REDIS_URL"}}
    result = subprocess.run(
        [sys.executable, "manage.py", "migrate", "--noinput", "-v", "0"],
        cwd=ROOT,
        env={**clean, **env},
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=lambda: os.umask(0o022),
    )
    assert result.returncode == 0, result.stderr
    made = [var, var / "secret-key", var / "servedeck.sqlite3"]
    modes = {path.name: oct(path.stat().st_mode & 0o777) for path in made}
    assert modes == {"var": "0o700", "secret-key": "0o600", "servedeck.sqlite3": "0o600"}


def test_a_var_folder_left_open_by_an_earlier_version_is_closed(tmp_path):
    var = tmp_path / "var"
    var.mkdir()
    var.chmod(0o755)
    assert start({"SERVEDECK_VAR_DIR": str(var), "SECRET_KEY": ""}).returncode == 0
    assert var.stat().st_mode & 0o777 == 0o700


def test_a_live_pages_redis_reads_outlast_its_blocking_receive(tmp_path):
    """A socket's receive blocks in Redis for brpop_timeout; a read timeout no longer than that
    cut idle pages off on a busy console (1011). Nothing connects here: the pool is only made."""
    probe = (
        "from channels.layers import get_channel_layer; layer = get_channel_layer(); "
        "kwargs = layer.create_pool(0).connection_kwargs; "
        "print(kwargs['socket_timeout'], layer.brpop_timeout)"
    )
    env = {"SERVEDECK_VAR_DIR": str(tmp_path), "REDIS_URL": "redis://127.0.0.1:1/0"}
    result = start(env, "shell", "-c", probe)
    assert result.returncode == 0, result.stderr
    read_timeout, blocking = map(float, result.stdout.splitlines()[-1].split())
    assert read_timeout >= blocking + 10
