"""The integrity area: files, indexes and shards, from the files before the checkpoint is opened
and from the opened view's parts after."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..area import ERR, INFO, WARN, Area, Step, declare
from ..findings import Finding

if TYPE_CHECKING:
    from ...io.location import Location
    from ...view import CheckpointView
    from ..run import Run


def _integrity(run: Run) -> list[Finding]:
    from ..integrity import check_path

    if run.given is not None and not run.root.is_dir():
        return []  # an open view of a file: its integrity is its reader's
    return check_path(run.root)


def _integrity_of_view(run: Run) -> list[Finding]:
    view = run.opened
    return _integrity_of_parts(view, {view.path}) + _unrecognised_children(view)


def _integrity_of_parts(view: CheckpointView, seen: set[Location]) -> list[Finding]:
    from ..integrity import check_path

    out: list[Finding] = []
    for name, part in view.parts.items():
        if part.path in seen:
            continue
        seen.add(part.path)
        if part.path.is_dir() or part.path.name.endswith(".json"):
            out += check_path(part.path, label=f"{name}/")
        out += _integrity_of_parts(part, seen)
    return out


def _unrecognised_children(view: CheckpointView) -> list[Finding]:
    """Children of a training-state folder that look like checkpoint files but are broken
    (the bundle reader leaves out what it cannot read, e.g. a truncated optimizer file)."""
    if not view.traits.part_files or not view.path.is_dir():
        return []
    from ...api import detect_format
    from ...errors import CkptExplorerError, FormatDetectionError, TruncatedFileError
    from ...readers.bundle import IGNORED

    taken = {p.path.resolve() for p in view.parts.values()}
    out = []
    for child in sorted(view.path.iterdir()):
        if child.name.startswith(".") or child.name in IGNORED or child.resolve() in taken:
            continue
        try:
            detect_format(child)
        except FormatDetectionError:
            continue  # not a checkpoint file at all (README, tokenizer, scripts)
        except TruncatedFileError as e:
            out.append(
                Finding(
                    "integrity.truncated",
                    "error",
                    f"{child.name} is truncated: expected {e.expected}, found {e.found}",
                    "Copy the file again from its source; the training state is incomplete.",
                    file=child.name,
                )
            )
        except CkptExplorerError as e:
            out.append(
                Finding(
                    "integrity.unreadable_part",
                    "error",
                    f"{child.name} beside the training state cannot be read: {e.found}",
                    e.hint or "Copy it again or re-save; the training state is incomplete.",
                    file=child.name,
                )
            )
    return out


# registered by its line in catalogue.AREAS; the declare(...) lines are catalogue entries, alike
# in shape by design
AREA = Area(
    name="integrity",
    rules=(
        declare("integrity.missing_file", ERR, "a file the index or the format names is not there"),
        declare("integrity.missing_tensor", ERR, "a tensor the index names is not in its shard"),
        declare(
            "integrity.unindexed_tensor", WARN, "a shard holds a tensor the index does not name"
        ),
        declare(
            "integrity.wrong_shard", ERR, "the index names a shard that does not hold the tensor"
        ),
        declare("integrity.orphan_shard", WARN, "a shard no index entry names"),
        declare("integrity.duplicate_entry", WARN, "the index lists a tensor twice"),
        declare(
            "integrity.duplicate_tensor", (WARN, INFO), "two shards hold a tensor of the same name"
        ),
        declare(
            "integrity.shadowing_file",
            WARN,
            "a file beside the index that a loader reads instead of it",
        ),
        declare("integrity.bad_index", ERR, "the index is not valid JSON or lacks its weight map"),
        declare(
            "integrity.total_size", (ERR, WARN), "total_size matches the tensors in no known unit"
        ),
        declare(
            "integrity.total_size_convention", INFO, "total_size counts MiB or bytes, and which"
        ),
        declare(
            "integrity.tmp_index_files",
            WARN,
            "tmp_index_files/ left by an interrupted sharded save",
        ),
        declare(
            "integrity.interrupted_save", ERR, "a save that was cut off: temporary files, no index"
        ),
        declare("integrity.truncated", ERR, "a file shorter than its header or index says"),
        declare("integrity.unreadable_file", ERR, "a file of the checkpoint cannot be read"),
        declare(
            "integrity.unreadable_part",
            ERR,
            "a checkpoint file beside a training state cannot be read",
        ),
        declare("integrity.unsafe_name", ERR, "a name in an index that would leave the folder"),
        declare(
            "integrity.unopenable", ERR, "the checkpoint cannot be opened (after an error found)"
        ),
    ),
    steps=(
        Step("integrity", _integrity, before_view=True),
        Step("integrity", _integrity_of_view),
    ),
)
