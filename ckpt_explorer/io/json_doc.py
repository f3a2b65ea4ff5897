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


def json_document(path: Path) -> Any:
    """``json.loads`` of the file's UTF-8 text (do not modify the result).

    Raises:
        OSError: unreadable; ValueError (UnicodeDecodeError, JSONDecodeError) or
        RecursionError: not JSON.
    """
    st = path.stat()
    return _parsed(str(path), st.st_mtime_ns, st.st_size)


@functools.lru_cache(maxsize=16)
def _parsed(name: str, mtime_ns: int, size: int) -> Any:
    return json.loads(Path(name).read_bytes().decode("utf-8"))
