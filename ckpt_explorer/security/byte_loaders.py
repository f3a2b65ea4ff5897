"""Globals that load or unpickle bytes or a file, and allow-listed functions that call an argument.

How the table was derived: tests/security/test_gate_byte_loaders.py parses (``ast``) every module of the
installed torch, numpy, pandas and joblib and finds the module-level functions that pass one of
their parameters (or a value made from one) to ``pickle.load``/``loads``/``Unpickler`` (or a
subclass of it), ``torch.load``, ``numpy.load``, ``marshal.loads`` or, transitively, to a
function found so; it then imports those packages and names every attribute that *is* such a
function (``torch.load`` is ``torch.serialization.load``). Every name it finds is either here or
not allow-listed (:func:`.inert.inert_reason` is None, so naming it is judged on its own). The
standard library's and dill's / cloudpickle's loaders are added by reading their sources.

What :mod:`.pickle_machine` does with a reference to any of these, wherever it appears (called by
``REDUCE``/``INST``/``OBJ``/``NEWOBJ``/``NEWOBJ_EX``, called by an allow-listed function that
calls its argument, passed, stored, kept): a call on bytes the walk knows has those bytes judged
as a file of their own (:func:`.views.nested_loads`); anything else makes the file unverified.
"""

from __future__ import annotations

from typing import Any

# qualified name -> which argument holds the serialized bytes (None: a file or a path, or a
# stream the walk cannot see, which is never in the pickle)
BYTE_LOADERS: dict[str, int | None] = {
    # torch (torch/storage.py, serialization.py, hub.py, export/, _export/serde, distributed)
    "torch.storage._load_from_bytes": 0,  # torch.load(io.BytesIO(b), weights_only=False)
    "torch.load": None,
    "torch.serialization.load": None,
    "torch.serialization._load": None,
    "torch.serialization._legacy_load": None,
    "torch.hub.load_state_dict_from_url": None,
    "torch.hub._legacy_zip_load": None,
    "torch.export.load": None,
    "torch.export.pt2_archive._package.load_pt2": None,
    "torch.export.pt2_archive._package._load_state_dict": None,
    "torch.export.pt2_archive._package._load_constants": None,
    "torch.export.pt2_archive._package._load_exported_programs": None,
    "torch._export.serde.serialize.deserialize_torch_artifact": 0,
    "torch._inductor.package.package.load_package": None,
    "torch.distributed._serialization._streaming_load": None,
    "torch.distributed.checkpoint.format_utils.torch_save_to_dcp": None,
    "torch.distributed.optim.zero_redundancy_optimizer._broadcast_object": None,
    "torch.utils.data.datapipes.utils.decoder.basichandlers": 1,
    "torch._dynamo.package.load_guards_state": 0,
    # numpy (lib/_npyio_impl.py, lib/_format_impl.py)
    "numpy.load": None,
    "numpy.lib._npyio_impl.load": None,
    "numpy.lib.format.read_array": None,
    "numpy.lib._format_impl.read_array": None,
    # pandas (io/pickle.py, compat/pickle_compat.py)
    "pandas.read_pickle": None,
    "pandas.io.pickle.read_pickle": None,
    "pandas.compat.pickle_compat.loads": 0,
    "pandas.compat.pickle_compat.Unpickler": None,
    # joblib (numpy_pickle.py, numpy_pickle_compat.py)
    "joblib.load": None,
    "joblib.numpy_pickle.load": None,
    "joblib.numpy_pickle._unpickle": None,
    "joblib.numpy_pickle.load_temporary_memmap": None,
    "joblib.numpy_pickle.NumpyUnpickler": None,
    "joblib.numpy_pickle_compat.load_compatibility": None,
    # the standard library, dill, cloudpickle
    "pickle.loads": 0,
    "pickle._loads": 0,
    "_pickle.loads": 0,
    "pickle.load": None,
    "pickle._load": None,
    "_pickle.load": None,
    "pickle.Unpickler": None,
    "pickle._Unpickler": None,
    "_pickle.Unpickler": None,
    "marshal.loads": None,  # code objects, not a pickle: never judged as one
    "marshal.load": None,
    "dill.loads": 0,
    "dill.load": None,
    "dill._dill.loads": 0,
    "dill._dill.load": None,
    "cloudpickle.loads": 0,
    "cloudpickle.load": None,
    "shelve.open": None,
}

# Allow-listed functions that call an argument: qualified name -> (which argument is called,
# what it is called with: ("tuple", i) the tuple argument i, ("one", i) argument i alone,
# ("none",) nothing). From their sources (torch/_tensor.py, numpy/random/_pickle.py). The
# other allow-listed functions that take a class or callable only make an instance of it or
# keep it, never call a function with arguments of the pickle's choosing:
# copyreg._reconstructor(cls, base, state) calls base.__new__ / base.__init__ (a function has
# no such constructor: the load fails), copyreg.__newobj__/__newobj_ex__ call cls.__new__,
# numpy's multiarray._reconstruct and torch._utils._rebuild_wrapper_subclass make an instance
# of their class argument, _rebuild_parameter(_with_state) keeps backward_hooks,
# collections.defaultdict keeps its factory, torch.jit._pickle.restore_type_tag returns its
# argument. A byte loader passed to any of them stays unverified (it is not called on bytes).
CALLS_ARGUMENT: dict[str, tuple[tuple[int, tuple[Any, ...]], ...]] = {
    # ret = func(*args), then ret.as_subclass(type) and its state set
    "torch._tensor._rebuild_from_type_v2": ((0, ("tuple", 2)),),
    "torch._tensor._rebuild_from_type": ((0, ("tuple", 2)),),
    # a class given as the bit generator's name is called with no arguments
    "numpy.random._pickle.__bit_generator_ctor": ((0, ("none",)),),
    # bit_generator_ctor(bit_generator_name), whose default calls a class given as the name
    "numpy.random._pickle.__generator_ctor": ((1, ("one", 0)), (0, ("none",))),
    "numpy.random._pickle.__randomstate_ctor": ((1, ("one", 0)), (0, ("none",))),
}


def called_arguments(
    qualified: str, args: tuple[Any, ...]
) -> list[tuple[Any, tuple[Any, ...] | None]]:
    """(callee, its arguments or None when the walk cannot know them) for each argument that
    ``qualified`` calls when it is called with ``args``."""
    out: list[tuple[Any, tuple[Any, ...] | None]] = []
    for index, how in CALLS_ARGUMENT.get(qualified, ()):
        if index >= len(args):
            continue
        callee = args[index]
        call_args: tuple[Any, ...] | None = None
        if how[0] == "none":
            call_args = ()
        elif how[0] == "one" and how[1] < len(args):
            call_args = (args[how[1]],)
        elif how[0] == "tuple" and how[1] < len(args):
            inner = args[how[1]]
            call_args = getattr(inner, "items", None)
            if not isinstance(call_args, tuple):
                call_args = None
        out.append((callee, call_args))
    return out


__all__ = ["BYTE_LOADERS", "CALLS_ARGUMENT", "called_arguments"]
