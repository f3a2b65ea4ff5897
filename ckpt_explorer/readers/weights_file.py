"""Open one weights file of either encoding, decided by its bytes (used for shards and parts)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..errors import CorruptCheckpointError
from ..io.location import PathLike, as_location
from ..io.torch_file import sniff_torch
from ..types import TensorRecord
from . import safetensors_file, torch_pickle


def open_file_records(
    path: PathLike, rel: str, optimizer_shard: bool = False
) -> tuple[Sequence[TensorRecord], dict[str, Any]]:
    """Records and values of one shard or part file, named as its checkpoint lists them.

    Torch optimizer shards (``{id: {state: value}}``) are listed as ``state.<id>.<name>``; a
    param-group file (a list of groups) becomes the value ``param_groups``.
    """
    path = as_location(path)
    with path.open("rb") as f:
        head = f.read(16)
    if safetensors_file.looks_like_safetensors(head):
        table, header = safetensors_file.safetensors_records(path, rel)
        if optimizer_shard or "non_tensor_keys" in header.metadata:
            return safetensors_file.decode_non_tensor_keys(path, table, header)
        return table, {}
    if sniff_torch(head) is not None:
        structure = torch_pickle.torch_structure(path)
        root = structure.root
        prefix = ""
        if isinstance(root, list):
            root = {"param_groups": root}
        elif optimizer_shard and isinstance(root, dict) and "state" not in root:
            prefix = "state."
        records, values = torch_pickle.records_and_values(path, rel, root, structure, prefix)
        return records, values
    raise CorruptCheckpointError(
        path,
        "a safetensors or torch.save file",
        f"leading bytes {head[:8]!r}",
        "The shard is corrupt or not a checkpoint file.",
    )
