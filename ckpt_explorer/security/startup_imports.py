"""Modules that importing a loader library tries to import at start-up, when they exist.

Measured, not guessed: for each library, a module of every name the import looked up and did
not find was placed in an empty folder, ``python -c "import <library>"`` was started there, and
the names whose module then ran are listed (torch 2.13, deepspeed, accelerate, transformers,
numpy as installed by scripts/setup_env.sh; transformers with ``from transformers import
AutoModel, AutoConfig, Trainer``). A Python started in a checkpoint folder puts that
folder first on ``sys.path``, so a module of one of these names there runs as soon as the
library is imported; names of installed distributions and of the standard library are judged
as shadowing by :mod:`.shadowing` already.
"""

from __future__ import annotations

STARTUP_IMPORTS: dict[str, frozenset[str]] = {
    "pickle": frozenset({"org"}),  # pickle and copy of Python 3.10-3.11: Jython's PyStringMap
    "torch": frozenset({
        "cuda", "dill", "envwrap", "monkeytype", "opt_einsum", "pydot", "pynvml",
        "torchcomms"
    }),
    "deepspeed": frozenset({
        "accelerator", "apex", "cuda", "dill", "envwrap", "habana_frameworks",
        "mlflow", "monkeytype", "oneccl_bindings_for_pytorch", "op_builder",
        "opt_einsum", "pydot", "pynvml", "tabulate", "torch_mlu", "torch_npu",
        "torch_sdaa", "torch_supa", "torch_supa_ext", "torch_xmlir", "torchcomms",
        "tutel", "xgboost"
    }),
    "accelerate": frozenset({
        "OpenSSL", "awscrt", "backports", "brotli", "brotlicffi", "cuda", "dill",
        "envwrap", "google", "monkeytype", "opt_einsum", "pydot", "pynvml",
        "torch_mlu", "torch_musa", "torch_npu", "torch_sdaa", "torch_xla",
        "torchcomms"
    }),
    "transformers": frozenset({
        "backports", "brotli", "brotlicffi", "envwrap", "h2", "mistral_common",
        "scipy", "sniffio", "socksio", "torchvision", "trio"
    }),
}  # fmt: skip
