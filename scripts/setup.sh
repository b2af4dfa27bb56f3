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

# ensure_browser: a Chromium for the SyncLane page's browser test (Playwright drives the system's, it
# downloads none). Installed from the distribution when missing and this user may; otherwise the test says
# what is missing (a failure under CI=true, a skip elsewhere).
ensure_browser() {
    for candidate in "${SYNCLANE_CHROMIUM:-}" chromium chromium-browser google-chrome; do
        if [ -n "$candidate" ] && command -v "$candidate" >/dev/null 2>&1; then
            return 0
        fi
    done
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        echo "installing chromium (for the SyncLane page's browser test)" >&2
        DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends chromium >/dev/null \
            || (apt-get update >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends chromium >/dev/null) \
            || echo "could not install chromium; the browser test will say so" >&2
    fi
}

# Run a command and pass the signals this script receives on to it (TERM, HUP, INT), until it exits; exit
# with its status. Bash runs no trap while a foreground command runs and, killed, leaves that command
# running: `kill <this script>` would stop the script and leave the command (and all it started) alive.
# Ctrl-C in a terminal reaches both; the demo's launcher acts on the first signal and ignores the rest.
run_forwarding_signals() {
    "$@" &
    local child=$! status=0
    trap 'kill -TERM "$child" 2>/dev/null || true' TERM
    trap 'kill -HUP "$child" 2>/dev/null || true' HUP
    trap 'kill -INT "$child" 2>/dev/null || true' INT
    while true; do
        wait "$child" && status=0 || status=$?
        kill -0 "$child" 2>/dev/null || break # a trapped signal ended the wait, not the command
    done
    trap - TERM HUP INT
    return "$status"
}
