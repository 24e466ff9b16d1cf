# Sourced by the run and test scripts: a virtualenv in .venv with requirements.txt installed.
# Reinstalls only when requirements.txt (or the client package's own requirements) changes.
set -euo pipefail
PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  echo "Creating the virtualenv in .venv ..."
  "$PYTHON" -m venv .venv
fi
stamp=.venv/.requirements.sha256
want=$(cat requirements.txt requirements/no-deps.txt client/pyproject.toml | sha256sum | cut -d' ' -f1)
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  echo "Installing requirements.txt into .venv ..."
  .venv/bin/python -m pip install --quiet --disable-pip-version-check --upgrade pip
  .venv/bin/python -m pip install --quiet --disable-pip-version-check -r requirements.txt
  # botocore's python-dateutil cap against kubernetes' (requirements/no-deps.txt says why).
  .venv/bin/python -m pip install --quiet --disable-pip-version-check --no-deps \
    -r requirements/no-deps.txt
  echo "$want" > "$stamp"
fi
