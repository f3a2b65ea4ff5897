#!/usr/bin/env bash
# Creates or refreshes the project's virtual environment (.venv) on a CPU-only Linux machine.
#   WITH_FIXTURE_TOOLS=1  also install the real tools the tests use to write checkpoints
#                         (colossalai, deepspeed, peft, transformers 4.x in a side folder)
#   WITH_BROWSER=1        also install Debian's chromium for the browser tests (never
#                         `playwright install`; the playwright package comes with the dev extras)
# Re-running is cheap: a stamp records what was installed.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}
WITH_FIXTURE_TOOLS=${WITH_FIXTURE_TOOLS:-0}
WITH_BROWSER=${WITH_BROWSER:-0}
TORCH_VERSION=${TORCH_VERSION:-2.13.0}
PY=${PYTHON:-python3}

# Debian's chromium for the browser tests (checked on every run: it lives outside .venv)
if [ "$WITH_BROWSER" = 1 ] && [ ! -x /usr/bin/chromium ]; then
  sudo_=""; [ "$(id -u)" = 0 ] || sudo_=sudo
  $sudo_ apt-get update -qq && DEBIAN_FRONTEND=noninteractive $sudo_ apt-get install -y -qq chromium >/dev/null
fi

stamp_key=$(cat pyproject.toml scripts/setup_env.sh | sha256sum | cut -c1-16)-tools$WITH_FIXTURE_TOOLS
if [ -f "$VENV/.ckpt_explorer_stamp" ] && grep -qx "$stamp_key" "$VENV/.ckpt_explorer_stamp" \
    || { [ "$WITH_FIXTURE_TOOLS" = 0 ] && [ -f "$VENV/.ckpt_explorer_stamp" ] \
         && grep -qx "${stamp_key%0}1" "$VENV/.ckpt_explorer_stamp"; }; then
  exit 0
fi

echo "setting up $VENV (fixture tools: $WITH_FIXTURE_TOOLS) ..." >&2
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
VPY="$VENV/bin/python"
"$VPY" -m pip install -q --disable-pip-version-check uv
FIND_LINKS=$("$PY" -m pip config get global.find-links 2>/dev/null || true)
uvi() { "$VENV/bin/uv" pip install -q -p "$VPY" ${FIND_LINKS:+--find-links "$FIND_LINKS"} "$@"; }

# torch first, CPU build, then frozen so that no later step can pull a CUDA build.
# (asked of the package metadata: importing torch before numpy is installed prints a warning)
if ! "$VPY" -c "import importlib.metadata as m; m.version('torch')" 2>/dev/null; then
  if [ -n "$FIND_LINKS" ] && ls "$FIND_LINKS"/torch-"$TORCH_VERSION"+cpu-* >/dev/null 2>&1; then
    uvi "torch==${TORCH_VERSION}+cpu"
  else
    uvi --index-url https://download.pytorch.org/whl/cpu "torch==${TORCH_VERSION}" \
      || uvi "torch==${TORCH_VERSION}"
  fi
fi
PIN="$VENV/torch-pin.txt"
echo "torch==$("$VPY" -c 'import importlib.metadata as m; print(m.version("torch"))')" > "$PIN"

# (numba, for the fused diff kernel, is a core dependency where it has wheels)
# (jupyterlab: `scripts/dev.sh lab` and the JupyterLab browser test; notebook: the Notebook 7 test)
uvi -c "$PIN" -e ".[ui,dev,remote]" nbclient nbformat ipykernel "jupyterlab==4.6.6" "notebook==7.6.5"
# nbclassic, the classic Notebook's page on this jupyter_server (a page with RequireJS, as VS Code's
# notebooks have): in a side folder put on the PYTHONPATH of the classic-notebook test's server
"$VENV/bin/uv" pip install -q -p "$VPY" --no-deps --target "$VENV/side/nbclassic" "nbclassic==1.3.3"

if [ "$WITH_FIXTURE_TOOLS" = 1 ]; then
  # colossalai pins torch<=2.5.1 and transformers==4.51.3: never let the resolver see its requirements.
  BUILD_EXT=0 uvi --no-deps "colossalai==0.5.0" galore_torch
  # a safetensors file from a writer other than the safetensors library (data files only)
  uvi --no-deps "silero-vad==6.2.3"
  # the gate's real writers: mmengine checkpoints (its Runner needs cv2: only the checkpoint
  # module and what it imports), GGUF files (gguf-py), sentencepiece tokenizer models,
  # TensorBoard event files (tensorboardX)
  uvi --no-deps "mmengine==0.10.7" "gguf==0.19.0"
  uvi -c "$PIN" "addict>=2.4" "yapf>=0.40" "termcolor>=2" "sentencepiece==0.2.3" pillow pyyaml \
      "tensorboardX>=2.6"
  uvi -c "$PIN" "peft==0.13.2" einops contexttimer "bitsandbytes==0.50.2" "deepspeed==0.19.8" \
      rich click psutil packaging tqdm pydantic "lightning==2.5.6" "omegaconf==2.3.0" \
      "diffusers==0.42.1" "joblib==1.6.0" "megatron-core==0.16.1" "schedulefree==1.4.1"
  # detectron2's checkpointer (fvcore) and LitGPT (its own requirements would replace
  # huggingface_hub and lightning: it runs on what is installed, so --no-deps)
  uvi -c "$PIN" "fvcore==0.1.5.post20221221" "iopath==0.1.10" "yacs==0.1.8" "tabulate==0.10.0" \
      "portalocker==4.4.2" "jsonargparse==4.41.0" "docstring-parser==0.18.0"
  uvi --no-deps "litgpt==0.5.13"
  # cmake builds llama.cpp's llama-quantize for the K-quant fixtures (a system cmake is used first)
  command -v cmake >/dev/null || uvi "cmake==3.31.6"
  # quantized-export fixtures and oracles: compressed-tensors' compressors (bitsandbytes above)
  uvi -c "$PIN" "compressed-tensors==0.20.1" "loguru==0.7.3"
  # mmengine's Runner (writer-profile fixtures) imports cv2 and matplotlib
  uvi -c "$PIN" "opencv-python-headless==4.10.0.84" "matplotlib==3.9.2"
  # (diffusers' models import peft>=0.17 when peft is found: its maker hides peft)
  # transformers 4.x (HF .bin shards, ColossalAI HybridParallelPlugin) lives in a side folder,
  # put on PYTHONPATH only by the fixture scripts that need it.
  "$VENV/bin/uv" pip install -q -p "$VPY" --no-deps --target "$VENV/side/transformers4" \
      "transformers==4.51.3" "huggingface_hub==0.36.2" "tokenizers>=0.21,<0.22"
  # timm needs torchvision, whose only PyPI build is for CUDA: both in a side folder, put on
  # sys.path by realworld_timm_maker.py only
  "$VENV/bin/uv" pip install -q -p "$VPY" --no-deps --target "$VENV/side/timm" \
      "timm==1.0.31" "torchvision==0.28.0"
  # torchtune 0.6.1 (its recipes write the torchtune fixtures) and what it imports, in a side
  # folder put on sys.path by realworld_tune_maker.py only; torchao 0.11 (0.12+ moved nf4tensor).
  "$VENV/bin/uv" pip install -q -p "$VPY" --no-deps --target "$VENV/side/torchtune" \
      "torchtune==0.6.1" "torchao==0.11.0" "torchdata==0.11.0" "datasets==5.2.0" \
      "pyarrow==26.0.1" "dill==0.4.1" "multiprocess==0.70.19" "xxhash==4.1.0" \
      "sentencepiece==0.2.3" "tiktoken==0.14.0" "blobfile==3.3.0" "lxml==6.1.3" \
      "pycryptodomex==3.24.2" "kagglehub==1.0.3"
  # GPTQ / AWQ fixtures and oracles, written on CPU by GPTQModel and AutoAWQ, in a side folder put
  # on sys.path by gptq_maker.py only: peft imports awq whenever it is importable, and AutoAWQ
  # breaks that import under transformers 4 (GPTQModel asks for a newer torch than the pin but
  # runs on it, hence --no-deps and its runtime needs listed)
  "$VENV/bin/uv" pip install -q -p "$VPY" --no-deps --target "$VENV/side/gptq" \
      "gptqmodel==7.7.0" "autoawq==0.2.9" "datasets==5.2.0" "pyarrow==26.0.1" "dill==0.4.1" \
      "multiprocess==0.70.19" "xxhash==4.1.0" "pypcre==0.6.4" "logbar==0.4.15" \
      "device-smi==0.5.7" "tokenicer==0.0.14" "defuser==0.0.28" "threadpoolctl==3.8.0"
  # llm-compressor (mse-observer exports) in a side folder put on sys.path by
  # llmcompressor_maker.py only: it pins transformers<=5.17 and compressed-tensors 0.19.0 but
  # runs on the main environment's, hence --no-deps and its runtime needs listed
  "$VENV/bin/uv" pip install -q -p "$VPY" --no-deps --target "$VENV/side/llmcompressor" \
      "llmcompressor==0.14.0.1" "datasets==5.2.0" "pyarrow==26.0.1" "dill==0.4.1" \
      "multiprocess==0.70.19" "xxhash==4.1.0"
  # sentence-transformers (the gate's modules.json consumer) in a side folder put on the
  # PYTHONPATH of one test's children only: transformers probes for scikit-learn
  "$VENV/bin/uv" pip install -q -p "$VPY" --no-deps --target "$VENV/side/sbert" \
      "sentence-transformers==6.2.0" "scipy==1.16.3" "scikit-learn==1.7.2" "threadpoolctl==3.6.0"
  # h5py in the main environment: the gate's HDF5 walk runs it in an isolated child (without
  # it, HDF5 files are unverified). Keras 3 (current, and 3.8 whose loader imports any module a
  # config names), hydra-core and onnx: the gate's consumers, in side folders put on the
  # PYTHONPATH of the oracle's children only (omegaconf and antlr4 come from the main
  # environment)
  uvi -c "$PIN" "h5py==3.16.0"
  "$VENV/bin/uv" pip install -q -p "$VPY" --no-deps --target "$VENV/side/keras" \
      "keras==3.15.1" "namex==0.1.0" "optree==0.20.0" "ml-dtypes==0.6.0" "h5py==3.16.0" \
      "absl-py==2.5.1"
  "$VENV/bin/uv" pip install -q -p "$VPY" --no-deps --target "$VENV/side/keras38" "keras==3.8.0"
  "$VENV/bin/uv" pip install -q -p "$VPY" --no-deps --target "$VENV/side/hydra" "hydra-core==1.3.2"
  "$VENV/bin/uv" pip install -q -p "$VPY" --no-deps --target "$VENV/side/onnx" \
      "onnx==1.20.1" "ml-dtypes==0.6.0"
fi
echo "$stamp_key" > "$VENV/.ckpt_explorer_stamp"
