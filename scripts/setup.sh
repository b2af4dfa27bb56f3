# Shared set-up for scripts/test and scripts/demo (sourced, not run).
#
# ensure_venv EXTRAS: a .venv in the checkout with the package installed
# editable with those extras, pinned by constraints.txt. Re-running is cheap:
# nothing is installed when pyproject.toml and constraints.txt are unchanged.

PYTHON=${PYTHON:-python3.11}
command -v "$PYTHON" >/dev/null 2>&1 || PYTHON=python3

ensure_venv() {
    local extras=$1
    local stamp=".venv/.installed-$extras"
    local want
    want=$(cat pyproject.toml constraints.txt | sha256sum | cut -c1-16)
    if [ ! -x .venv/bin/python ]; then
        echo "creating .venv with $($PYTHON --version)" >&2
        "$PYTHON" -m venv .venv
    fi
    if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
        echo "installing airflow-provider-synclane[$extras] into .venv" >&2
        .venv/bin/python -m pip install --quiet --disable-pip-version-check "uv>=0.5"
        .venv/bin/uv pip install --quiet --python .venv/bin/python -c constraints.txt -e ".[$extras]"
        echo "$want" > "$stamp"
    fi
}
