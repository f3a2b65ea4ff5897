"""Integer values packed into int32 words and blocks sharing one scale, as the writers lay them out."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch


def unpack_int32(packed: torch.Tensor, bits: int, cols: int) -> torch.Tensor:
    """compressed-tensors' ``pack_to_int32`` undone along the last dimension: value ``i`` of a
    row at bit ``i * bits`` of the row's little-endian word stream, stored offset by
    ``2^(bits-1)``; returns int32 values in ``[-2^(bits-1), 2^(bits-1))``."""
    import torch

    rows = packed.shape[0]
    words = packed.contiguous().to(torch.int32)
    if bits in (4, 8):
        raw = words.view(torch.uint8).reshape(rows, -1).to(torch.int32)  # little-endian bytes
        if bits == 4:
            raw = torch.stack((raw & 0xF, raw >> 4), dim=-1).reshape(rows, -1)
    else:
        shifts = torch.arange(32, dtype=torch.int64)
        bitstream = ((words.to(torch.int64) & 0xFFFFFFFF)[..., None] >> shifts) & 1
        bitstream = bitstream.reshape(rows, -1)[:, : cols * bits].reshape(rows, cols, bits)
        raw = (bitstream << torch.arange(bits, dtype=torch.int64)).sum(-1).to(torch.int32)
    return raw[:, :cols] - (1 << (bits - 1))


def expand_blocks(scale: torch.Tensor, rows: int, cols: int, bh: int, bw: int) -> torch.Tensor:
    """A per-block scale ``[ceil(rows/bh), ceil(cols/bw)]`` repeated over its elements."""
    return scale.repeat_interleave(bh, 0)[:rows].repeat_interleave(bw, 1)[:, :cols]
