"""Which runtimes read a quantized export, from their documentation (not run here).

Each note is ``{"runtime", "reads", "note", "source"}``; ``source`` always says that the note
comes from the runtime's documentation and was not verified on this machine.
"""

from __future__ import annotations

from collections.abc import Set
from typing import Any

SOURCE = "documentation; unverified here"


def _note(runtime: str, reads: bool | None, note: str) -> dict[str, Any]:
    return {"runtime": runtime, "reads": reads, "note": note, "source": SOURCE}


def runtime_notes(q: dict[str, Any], kinds: Set[str]) -> list[dict[str, Any]]:
    """The notes for an export of ``quant_method`` whose weights are of these ``kinds``."""
    # one list of notes per scheme: alike in shape by design (each is what one runtime's
    # documentation says), not logic to share
    method = q.get("quant_method")
    if method == "compressed-tensors":
        return [
            _note(
                "vLLM",
                True,
                "compressed-tensors W4A16/W8A16 (int weights, group or channel), W8A8 int8 and "
                f"FP8 (tensor, channel, 128x128 block) schemes; here: {', '.join(sorted(kinds))}; "
                "kernels need an NVIDIA GPU (FP8 W8A8 Ada/Hopper or later, weight-only Marlin "
                "on Ampere)",
            ),
            _note("transformers", True, "with the compressed-tensors package (decompresses)"),
        ]
    if method == "fp8":
        return [
            _note("vLLM", True, "fp8 with weight_block_size (DeepSeek-V3 layout)"),
            _note("SGLang", True, "fp8 block-scaled checkpoints (DeepSeek-V3 layout)"),
            _note(
                "transformers",
                True,
                "FineGrainedFP8Config: runs on a GPU; dequantize=True gives bf16 on CPU",
            ),
        ]
    if method == "bitsandbytes":
        four = q.get("load_in_4bit") or q.get("_load_in_4bit")
        return [
            _note(
                "transformers",
                True,
                "with bitsandbytes; loading needed CUDA before bitsandbytes 0.45's CPU/XPU "
                "backends",
            ),
            _note(
                "vLLM",
                bool(four),
                "pre-quantized bitsandbytes 4-bit checkpoints"
                if four
                else "bitsandbytes 8-bit (LLM.int8) checkpoints are not listed as supported",
            ),
        ]
    if method == "gptq":
        bits = q.get("bits", "?")
        return [
            _note(
                "vLLM",
                True,
                f"GPTQ {bits}-bit; its Marlin kernels take 4/8-bit only "
                "(other widths fall back to the plain GPTQ kernel); NVIDIA GPU",
            ),
            _note("transformers", True, "with GPTQModel (CPU through its torch kernel)"),
        ]
    if method == "awq":
        return [
            _note("vLLM", True, "AWQ GEMM checkpoints (awq / awq_marlin kernels); NVIDIA GPU"),
            _note("transformers", True, "with AutoAWQ or GPTQModel"),
        ]
    return []
