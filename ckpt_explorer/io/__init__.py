"""Byte-level access: the byte store and Location, headers, pickle structure, mapped tensors,
safe paths."""
