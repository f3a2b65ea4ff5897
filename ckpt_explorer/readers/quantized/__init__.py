"""Quantized safetensors exports read by their own rules: one module per scheme.

:mod:`.folder` recognises an HF folder whose ``config.json`` names a ``quantization_config``
and lists each quantized weight once; :mod:`.compressed` (compressed-tensors),
:mod:`.fp8_block` (DeepSeek-V3 FP8 with block scales) and :mod:`.bnb` (bitsandbytes 4- and
8-bit) each claim their parts and dequantize them as their library does; :mod:`.parts` and
:mod:`.unpack` are what they share; :mod:`.checks` compares the config with the files and
:mod:`.runtimes` says which runtimes read the scheme (from their documentation).
"""
