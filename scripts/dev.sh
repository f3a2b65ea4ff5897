#!/usr/bin/env bash
# The project's entry points. Each sets up what it needs on a fresh machine first.
#   bash scripts/dev.sh demo   write a demo training state and open the dashboard on it
#   bash scripts/dev.sh lab    open the walkthrough notebooks in JupyterLab (127.0.0.1)
#   bash scripts/dev.sh test   lint, type-check and run the whole test suite
set -euo pipefail
cd "$(dirname "$0")/.."
cmd=${1:-}
shift || true
case "$cmd" in
  demo)
    # generate the demo training state, then open the dashboard on it (127.0.0.1)
    bash scripts/setup_env.sh
    out=${CKPT_EXPLORER_DEMO:-ckpt-explorer-demo}
    .venv/bin/python -c "import sys; from ckpt_explorer.demo import make_demo; make_demo(sys.argv[1])" "$out"
    echo "demo training state in $out/ (resumed_from, after_resume); Ctrl+C stops the dashboard"
    exec .venv/bin/ckpt-explorer serve "$out/resumed_from" "$out/after_resume" --root "$out" "$@"
    ;;
  lab)
    # JupyterLab on notebooks/ with the environment's own kernel ("Python 3"); the dashboard
    # inlines its scripts and stylesheets, so it draws offline
    bash scripts/setup_env.sh
    if [ ! -x .venv/bin/jupyter-lab ]; then
      echo "jupyterlab is missing from .venv: .venv/bin/uv pip install -p .venv/bin/python" \
        "-c .venv/torch-pin.txt 'jupyterlab==4.6.6'" >&2
      exit 1
    fi
    exec .venv/bin/jupyter-lab --ServerApp.ip=127.0.0.1 --ServerApp.root_dir=notebooks "$@"
    ;;
  test)
    WITH_FIXTURE_TOOLS=1 WITH_BROWSER=1 bash scripts/setup_env.sh
    # one command per line: `set -e` does not stop on a failure inside an `a && b` chain
    echo "== ruff"
    .venv/bin/ruff check .
    .venv/bin/ruff format --check .
    echo "== mypy"
    .venv/bin/mypy
    # llama.cpp's llama-quantize (K-quant fixtures), built once from the sdist and cached like a
    # fixture: a cold build takes 10-20 min on 2 cores, longer than a maker may run inside a test
    echo "== fixture tools"
    .venv/bin/python tests/fixture_makers/kquant_maker.py --build
    echo "== pytest"
    exec .venv/bin/python -m pytest -q -ra --durations=15 "$@"
    ;;
  *)
    echo "usage: bash scripts/dev.sh {demo|lab|test} [args...]" >&2
    exit 2
    ;;
esac
