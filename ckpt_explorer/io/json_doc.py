"""A JSON file parsed once per process while it is unchanged (same path, mtime and size).

A 90,000-tensor index is 6.5 MB of JSON: the security gate parses it (is it JSON?), then the
sharded reader (its weight_map). Both read it here; the parsed document is shared, so
callers must not modify it.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

from .location import PathLike, as_location


def json_document(path: PathLike) -> Any:
    """``json.loads`` of the file's UTF-8 text (do not modify the result); a remote file is
    parsed each time it is asked for.

    Raises:
        OSError: unreadable; ValueError (UnicodeDecodeError, JSONDecodeError) or
        RecursionError: not JSON.
    """
    where = as_location(path)
    local = where.local_path()
    if local is None:
        return json.loads(where.read_bytes().decode("utf-8"))
    st = local.stat()
    return _parsed(str(local), st.st_mtime_ns, st.st_size)


@functools.lru_cache(maxsize=16)
def _parsed(name: str, mtime_ns: int, size: int) -> Any:
    return json.loads(Path(name).read_bytes().decode("utf-8"))
