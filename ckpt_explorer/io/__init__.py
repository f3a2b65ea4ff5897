"""Byte-level access: headers, pickle structure, mmapped tensors, safe paths."""
