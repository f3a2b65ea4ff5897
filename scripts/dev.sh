#!/usr/bin/env bash
# The project's two entry points. Each sets up what it needs on a fresh machine first.
#   bash scripts/dev.sh demo   write a demo training state and inspect it
#   bash scripts/dev.sh test   lint, type-check and run the whole test suite
set -euo pipefail
cd "$(dirname "$0")/.."
cmd=${1:-}
shift || true
case "$cmd" in
  demo)
    bash scripts/setup_env.sh
    exec .venv/bin/ckpt-explorer demo "$@"
    ;;
  test)
    WITH_FIXTURE_TOOLS=1 bash scripts/setup_env.sh
    echo "== ruff" && .venv/bin/ruff check . && .venv/bin/ruff format --check .
    echo "== mypy" && .venv/bin/mypy
    echo "== pytest"
    exec .venv/bin/python -m pytest -q -ra --durations=15 "$@"
    ;;
  *)
    echo "usage: bash scripts/dev.sh {demo|test} [args...]" >&2
    exit 2
    ;;
esac
