# Sourced by the Python suites' run.sh: `pinned_venv DIR MODULE REQUIREMENT...` makes the virtual
# environment DIR with the pinned REQUIREMENTs unless it can already import MODULE.
pinned_venv() {
  local venv=$1 module=$2
  shift 2
  if ! "$venv/bin/python" -c "import $module" 2>/dev/null; then
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check "$@"
  fi
}
