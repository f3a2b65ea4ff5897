"""The allow-list of globals known to be inert when a pickle names, calls or builds them.

Inert means: with ``torch.load(weights_only=False)`` the global only makes data (a tensor, a
storage, a dtype, a container, a plain record whose state is set) and touches no file, process,
network or import beyond the libraries that wrote the checkpoint. Anything not listed here is
judged able to run code; :func:`what_it_does` says, in words, what the name would do.
"""

from __future__ import annotations

# pandas (to_pickle of DataFrame / Series / Index with numeric, bool, string, naive datetime,
# timedelta and categorical data; audited on pandas 2.x-3.1 sources). Each either stores the
# state it is given (``NDFrame.__setstate__`` and the block managers' ``__setstate__`` set
# attributes and rebuild blocks from arrays), or makes an object of a class the pickle names
# (``_new_Index(cls, d)`` calls ``cls.__new__(cls, **d)``; Cython's ``__pyx_unpickle_*`` check
# a layout checksum and call ``Type.__new__(cls)``, refused by Python for a ``cls`` that is not
# a subclass): that class is a global of its own, judged by this list. Dtype strings go
# through pandas' and numpy's dtype registries, which import nothing. Left out: time zones
# (``zoneinfo.ZoneInfo`` / ``DatetimeTZDtype`` of a name: reading tz files, and importing
# ``tzdata.zoneinfo.<name>`` packages), sparse, interval and period data, calendar offsets
# (not audited).
_PANDAS: dict[str, frozenset[str]] = {
    "pandas": frozenset(
        {
            "DataFrame", "Series", "Index", "RangeIndex", "MultiIndex", "DatetimeIndex",
            "TimedeltaIndex", "CategoricalIndex", "Categorical", "CategoricalDtype",
            "StringDtype", "Int8Dtype", "Int16Dtype", "Int32Dtype", "Int64Dtype", "UInt8Dtype",
            "UInt16Dtype", "UInt32Dtype", "UInt64Dtype", "Float32Dtype", "Float64Dtype",
            "BooleanDtype", "NA",
        }
    ),
    "pandas.arrays": frozenset(
        {"StringArray", "DatetimeArray", "TimedeltaArray", "IntegerArray", "FloatingArray",
         "BooleanArray"}
    ),
    "pandas.core.frame": frozenset({"DataFrame"}),
    "pandas.core.series": frozenset({"Series"}),
    "pandas.core.indexes.base": frozenset({"Index", "_new_Index"}),
    "pandas.core.indexes.range": frozenset({"RangeIndex"}),
    "pandas.core.indexes.multi": frozenset({"MultiIndex"}),
    "pandas.core.indexes.datetimes": frozenset({"DatetimeIndex", "_new_DatetimeIndex"}),
    "pandas.core.indexes.timedeltas": frozenset({"TimedeltaIndex"}),
    "pandas.core.indexes.category": frozenset({"CategoricalIndex"}),
    "pandas.core.internals.managers": frozenset({"BlockManager", "SingleBlockManager"}),
    "pandas._libs.internals": frozenset({"_unpickle_block"}),
    "pandas._libs.arrays": frozenset({"__pyx_unpickle_NDArrayBacked"}),
    "pandas._libs.missing": frozenset({"NA"}),
    "pandas._libs.tslibs.nattype": frozenset({"_nat_unpickle"}),
    "pandas._libs.tslibs.timedeltas": frozenset({"_timedelta_unpickle"}),
    # the fixed frequencies a date_range index keeps as its freq: REDUCE(Day, (n, normalize))
    "pandas._libs.tslibs.offsets": frozenset(
        {"Day", "Hour", "Minute", "Second", "Milli", "Micro", "Nano"}
    ),
    "pandas.core.arrays.string_": frozenset({"StringArray", "StringDtype"}),
    "pandas.core.arrays.datetimes": frozenset({"DatetimeArray"}),
    "pandas.core.arrays.timedeltas": frozenset({"TimedeltaArray"}),
    "pandas.core.arrays.integer": frozenset(
        {"IntegerArray", "Int8Dtype", "Int16Dtype", "Int32Dtype", "Int64Dtype", "UInt8Dtype",
         "UInt16Dtype", "UInt32Dtype", "UInt64Dtype"}
    ),
    "pandas.core.arrays.floating": frozenset({"FloatingArray", "Float32Dtype", "Float64Dtype"}),
    "pandas.core.arrays.boolean": frozenset({"BooleanArray", "BooleanDtype"}),
    "pandas.core.arrays.categorical": frozenset({"Categorical"}),
    "pandas.core.dtypes.dtypes": frozenset({"CategoricalDtype"}),
}  # fmt: skip

# mmengine (0.10) checkpoints from Runner.save_checkpoint: the message hub's HistoryBuffer.
# ``HistoryBuffer.__setstate__`` registers its four statistics methods and merges the pickled
# ``statistics_methods`` (objects the pickle made, each judged) into the class's table, then
# updates ``__dict__``; nothing is called. Protocol 2 pickles those methods as
# ``getattr(HistoryBuffer, "mean")``, judged here by the dotted name it reaches.
_MMENGINE: dict[str, frozenset[str]] = {
    "mmengine.logging.history_buffer": frozenset(
        {
            "HistoryBuffer",
            "HistoryBuffer.min",
            "HistoryBuffer.max",
            "HistoryBuffer.mean",
            "HistoryBuffer.current",
        }
    ),
}

# module -> names that are inert in it (exact names, never prefixes; a dotted name only for a
# method a protocol-2 pickle reaches with getattr on an allow-listed class)
_INERT: dict[str, frozenset[str]] = {
    "torch._utils": frozenset(
        {
            "_rebuild_tensor",
            "_rebuild_tensor_v2",
            "_rebuild_tensor_v3",
            "_rebuild_parameter",
            "_rebuild_parameter_with_state",
            "_rebuild_qtensor",
            "_rebuild_sparse_tensor",
            "_rebuild_meta_tensor_no_storage",
            "_rebuild_nested_tensor",
            "_rebuild_wrapper_subclass",
            "_rebuild_device_tensor_from_numpy",
            "_rebuild_device_tensor_from_cpu_tensor",
        }
    ),
    "torch._tensor": frozenset({"_rebuild_from_type_v2", "_rebuild_from_type"}),
    "torch.serialization": frozenset({"_get_layout"}),
    "torch.nn.parameter": frozenset({"Parameter"}),
    "torch.storage": frozenset({"UntypedStorage", "TypedStorage", "_LegacyStorage"}),
    "torch.torch_version": frozenset({"TorchVersion"}),
    "collections": frozenset({"OrderedDict", "Counter", "defaultdict", "deque"}),
    "builtins": frozenset(
        {
            "set",
            "frozenset",
            "dict",
            "list",
            "tuple",
            "bytes",
            "bytearray",
            "str",
            "int",
            "float",
            "bool",
            "complex",
            "slice",
            "range",
            "object",
        }
    ),
    "copyreg": frozenset({"_reconstructor", "__newobj__", "__newobj_ex__"}),
    "_codecs": frozenset({"encode"}),
    "codecs": frozenset({"encode"}),
    "numpy": frozenset({"ndarray", "dtype"}),
    "numpy.core.multiarray": frozenset({"_reconstruct", "scalar"}),
    "numpy._core.multiarray": frozenset({"_reconstruct", "scalar"}),
    # kept for pickles of numpy < 1.0: ``ndarray.__new__(subtype, shape, dtype)``, what
    # multiarray._reconstruct does (numpy/core/_internal.py, numpy 1.x and 2.x)
    "numpy.core._internal": frozenset({"_reconstruct"}),
    # numpy's pickle of a non-contiguous or subclass array buffer: ``frombuffer(buf, dtype)
    # .reshape(shape, order=order)`` of bytes in the pickle
    "numpy._core.numeric": frozenset({"_frombuffer"}),
    "numpy.core.numeric": frozenset({"_frombuffer"}),
    "numpy.random._pickle": frozenset(
        {"__randomstate_ctor", "__bit_generator_ctor", "__generator_ctor"}
    ),
    "numpy.random._mt19937": frozenset({"MT19937"}),
    "numpy.random.mtrand": frozenset({"RandomState"}),
    "datetime": frozenset({"datetime", "date", "time", "timedelta", "timezone"}),
    "argparse": frozenset({"Namespace"}),
    # making a path object touches no file (its methods would need a global of their own)
    "pathlib": frozenset({"Path", "PosixPath", "WindowsPath", "PurePosixPath", "PureWindowsPath"}),
    # Records that real training tools write (plain classes, enums and dataclasses: making
    # one sets attributes and runs nothing of the file's choosing).
    "torch.distributed.checkpoint.metadata": frozenset(
        {
            "Metadata",
            "TensorStorageMetadata",
            "BytesStorageMetadata",
            "ChunkStorageMetadata",
            "TensorProperties",
            "MetadataIndex",
            "StorageMeta",
            "_MEM_FORMAT_ENCODING",
        }
    ),
    "torch.distributed.checkpoint.filesystem": frozenset({"_StorageInfo"}),
    # DCP's planner records, which megatron-core dist_checkpointing and NeMo keep in
    # .metadata (planner_data): dataclasses (frozen ones define __setattr__ only to refuse
    # assignment; BUILD fills __dict__ directly) and enums; no __reduce__ / __setstate__ /
    # __new__ of their own beyond Enum's value lookup (torch 2.4-2.13)
    "torch.distributed.checkpoint.planner": frozenset(
        {
            "WriteItemType",
            "LoadItemType",
            "BytesIOWriteData",
            "TensorWriteData",
            "WriteItem",
            "ReadItem",
            "SavePlan",
            "LoadPlan",
        }
    ),
    # TorchScript archives' pickles (ScriptModule.save): identity functions on lists and ids
    "torch.jit._pickle": frozenset(
        {
            "build_intlist",
            "build_tensorlist",
            "build_doublelist",
            "build_boollist",
            "build_tensor_from_id",
            "restore_type_tag",
        }
    ),
    # joblib's array placeholder: plain pickle.load only sets its attributes; joblib.load
    # reads the array bytes that follow it (views.py walks them as joblib does)
    "joblib.numpy_pickle": frozenset({"NumpyArrayWrapper"}),
    "deepspeed.runtime.zero.config": frozenset({"ZeroStageEnum"}),
    "deepspeed.runtime.fp16.loss_scaler": frozenset({"LossScaler", "DynamicLossScaler"}),
    "deepspeed.utils.tensor_fragment": frozenset({"fragment_address"}),
    # HF Trainer's training_args.bin (a dataclass with enums; accelerate's state records)
    "transformers.training_args": frozenset(
        {"TrainingArguments", "OptimizerNames", "ParallelMode"}
    ),
    "transformers.training_args_seq2seq": frozenset({"Seq2SeqTrainingArguments"}),
    # allow-list entries: alike in shape with the other modules' entries (a table)
    "transformers.trainer_utils": frozenset(
        {
            "HubStrategy",
            "IntervalStrategy",
            "SaveStrategy",
            "SchedulerType",
            "FSDPOption",
            "EvaluationStrategy",
        }
    ),
    "transformers.trainer_pt_utils": frozenset({"AcceleratorConfig"}),
    "transformers.debug_utils": frozenset({"DebugOption"}),
    "accelerate.state": frozenset({"PartialState"}),
    "accelerate.utils.dataclasses": frozenset({"DistributedType", "DeepSpeedPlugin"}),
    # Trainer's args with a DeepSpeed config: plain classes (no __new__, __setstate__,
    # __reduce__, __setattr__ or __getattr__ of their own; __init__ is not run on unpickling)
    "transformers.integrations.deepspeed": frozenset(
        {"HfTrainerDeepSpeedConfig", "HfDeepSpeedConfig"}
    ),
    # TRL's trainer configs: dataclass subclasses of TrainingArguments (trl 1.16: no
    # __new__, __reduce__, __setstate__, __setattr__ or __getattr__ in their MRO)
    "trl.trainer.sft_config": frozenset({"SFTConfig"}),
    "trl.trainer.dpo_config": frozenset({"DPOConfig"}),
    "trl.trainer.grpo_config": frozenset({"GRPOConfig"}),
    "trl.trainer.kto_config": frozenset({"KTOConfig"}),
    "trl.trainer.reward_config": frozenset({"RewardConfig"}),
    "trl.trainer.rloo_config": frozenset({"RLOOConfig"}),
    # OmegaConf configs (Hydra; Lightning's save_hyperparameters(cfg), NeMo): no __new__ or
    # __reduce__; their __setstate__ (omegaconf.base.Node, basecontainer.BaseContainer, 2.x)
    # only reads the pickled metadata's type annotations and updates __dict__; the Metadata
    # records are dataclasses. Their __getattr__/__setattr__ are not used by unpickling.
    "omegaconf.dictconfig": frozenset({"DictConfig"}),
    "omegaconf.listconfig": frozenset({"ListConfig"}),
    "omegaconf.base": frozenset({"Metadata", "ContainerMetadata"}),
    "omegaconf.nodes": frozenset(
        {"AnyNode", "StringNode", "IntegerNode", "FloatNode", "BooleanNode", "BytesNode"}
    ),
    **_PANDAS,
    **_MMENGINE,
    # type annotations a config's metadata names (referenced, never called by the pickle)
    "typing": frozenset({"Any", "Dict", "List", "Tuple", "Optional", "Union"}),
}

# Words for what a name would do, by module or builtin (first match on the dotted path).
_DOES: tuple[tuple[frozenset[str], str], ...] = (
    (frozenset({"os", "posix", "nt", "subprocess", "pty", "commands", "popen2"}),
     "runs a shell command or starts a process"),
    (frozenset({"builtins.eval", "builtins.exec", "builtins.compile", "code", "codeop",
                "runpy", "timeit", "pdb", "bdb", "cProfile", "profile", "trace"}),
     "runs Python code chosen by the file"),
    (frozenset({"marshal", "types", "pickle", "_pickle", "dill", "cloudpickle", "joblib",
                "shelve", "copyreg._extension_registry"}),
     "builds code objects or unpickles more data, running whatever it holds"),
    (frozenset({"builtins.__import__", "importlib", "imp", "pkgutil", "zipimport",
                "pydoc", "torch.hub", "torch.utils.cpp_extension", "ctypes", "cffi"}),
     "imports or compiles modules, or loads native code"),
    (frozenset({"builtins.open", "io", "_io", "pathlib", "shutil", "tempfile", "glob",
                "fileinput", "zipfile", "tarfile", "logging.config", "logging"}),
     "opens, writes or deletes files"),
    (frozenset({"socket", "ssl", "http", "urllib", "urllib3", "requests", "ftplib",
                "smtplib", "webbrowser", "xmlrpc", "asyncio", "huggingface_hub"}),
     "opens network connections"),
    (frozenset({"multiprocessing", "threading", "_thread", "concurrent", "signal",
                "torch.utils.collect_env"}),
     "starts threads or processes"),
    (frozenset({"builtins.getattr", "builtins.setattr", "builtins.delattr",
                "builtins.globals", "builtins.locals", "builtins.vars", "operator",
                "functools", "inspect", "sys", "gc", "builtins.type", "builtins.super"}),
     "reaches arbitrary attributes or objects of the running process"),
)  # fmt: skip


def _torch_names() -> frozenset[str]:
    """dtypes, layouts, memory formats, qschemes and storage classes named in ``torch`` (a
    static copy while exact for the installed torch, see :mod:`.weights_only`)."""
    from .weights_only import tables

    return tables().torch_names


def _return_types() -> frozenset[str]:
    from .weights_only import tables

    return tables().return_types


def inert_reason(module: str, name: str) -> str | None:
    """Why ``module.name`` is inert, or None when it is not known to be."""
    from .pickle_machine import is_module_path

    if not is_module_path(module):
        return "not an importable module name: the load fails there"
    if name in _INERT.get(module, ()):
        return "allow-listed"
    if module == "torch" and name in _torch_names():
        return "a torch dtype, layout, storage class or size"
    if module == "torch.cuda" and name.endswith("Storage") and name in _torch_names():
        return "a legacy CUDA storage class"
    if module == "torch.return_types" and name in _return_types():
        return "a torch.return_types structseq (a named tuple of tensors)"
    if module == "__torch__" or module.startswith("__torch__."):
        return (
            "a TorchScript class, which torch.jit.load builds from the archive's code/ (such an "
            "archive is unverified as a whole) and no Python import finds"
        )
    if module == "torch.storage" and name == "_load_from_bytes":
        return "torch.load of bytes in the pickle, which are judged as a file of their own"
    if module == "numpy.dtypes" and name.endswith("DType") and name != "ObjectDType":
        return "a numpy dtype class"
    return None


def what_it_does(module: str, name: str) -> str:
    """In words, what ``torch.load(weights_only=False)`` would do with this global."""
    if module == "copyreg" and name.startswith("_extension_registry"):
        return "calls whatever object the process registered under that extension code"
    mod = module.split(".")
    attrs = name.split(".")
    # the module by its full path and the packages it is in ("os.path" is in "os"; a module
    # "mmengine.logging" is not the standard library's "logging")
    prefixes = {".".join(mod[:i]) for i in range(1, len(mod) + 1)}
    prefixes |= {".".join([*mod, *attrs[:i]]) for i in range(1, len(attrs) + 1)}
    # a dotted name reaches every object along its path: "builtins" "print.__self__.exec",
    # "torch" "os.system" (a module imported by the module is one of its attributes)
    prefixes |= {f"builtins.{p}" for p in attrs} | {
        ".".join(attrs[:i]) for i in range(1, len(attrs) + 1)
    }
    parts = [*mod, *attrs]
    for names, words in _DOES:
        if prefixes & names:
            return words
    if any(p.startswith("__") and p.endswith("__") for p in parts[1:]) or "." in name:
        return "walks attributes to reach an object of the running process, then uses it"
    return f"imports {module} and calls {name}, code that is not known to be inert"
