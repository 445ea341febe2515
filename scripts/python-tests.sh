#!/usr/bin/env bash
# The Python client's tests (clients/python) against real burnrate servers they start.
# Installs the package (not editable) into .venv at the repo root, so the installed
# package is what is tested. Works from `npm test` and on a fresh clone (after npm install).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

python="${PYTHON:-python3}"
venv="$root/.venv"

if ! "$venv/bin/python" -c 'import sys; sys.exit(sys.version_info < (3, 9))' >/dev/null 2>&1; then
  rm -rf "$venv"
  "$python" -m venv "$venv"
fi

# setuptools builds in clients/python/build; a stale copy there could ship deleted modules.
rm -rf clients/python/build
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check --upgrade ./clients/python

exec "$venv/bin/python" -m unittest discover -s clients/python/tests -t clients/python -v
