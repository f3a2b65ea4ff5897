"""Every consumer the gate models: how it reaches bytes, and which part of the gate reads the
bytes as it does.

A file passes only if, for every consumer here, the part named reads it the way that consumer
would, and finds nothing that runs code. A consumer not in this table is not modelled (see
:data:`NOT_MODELLED`). ``tests/security/test_gate_consumers.py`` keeps the table and the walk together:
each module and view named exists, and every view of ``views*.py`` serves a consumer here.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Consumer:
    name: str
    reaches: str  # how it gets from a path to bytes it unpickles, imports or runs
    views: tuple[str, ...]  # "module.function" of the gate that reads the bytes that way
    modules: tuple[str, ...] = ()  # the other modules of ckpt_explorer.security it relies on


CONSUMERS: tuple[Consumer, ...] = (
    Consumer(
        "torch.load (zip)",
        "torch's own zip reader (miniz): <archive>/data.pkl through its unpickler (weights_only "
        "or not), storages by name; constants.pkl hands the file to torch.jit.load",
        ("views.judge_region", "views_zip.judge_zip"),
        ("zip_check", "zip_miniz", "weights_only", "pickle_machine"),
    ),
    Consumer(
        "torch.load (legacy)",
        "a file that is not a zip: its five pickles from byte 0 (magic number, protocol, "
        "system info, data, storage keys), followed while the values allow",
        ("views.judge_region",),
        ("pickle_machine", "weights_only"),
    ),
    Consumer(
        "torch.load (tar)",
        "torch's legacy tar format, tried first: members storages, tensors, pickle",
        ("views_archive.judge_tar",),
        ("pickle_machine",),
    ),
    Consumer(
        "pickle.load",
        "the pickle at byte 0 (a zip stops at its first byte unless a persistent_load is set)",
        ("views.judge_region",),
        ("pickle_machine", "inert"),
    ),
    Consumer(
        "torch.storage._load_from_bytes",
        "pickle.dumps of a tensor: bytes inside a pickle given to torch.load(weights_only=False)",
        ("views.nested_loads",),
        ("pickle_machine",),
    ),
    Consumer(
        "joblib.load",
        "compression detected by prefix (zlib, gzip, bz2, xz, lzma, lz4), then the pickle with "
        "each NumpyArrayWrapper's array read from the stream (object arrays are pickles)",
        ("views.judge_region", "views_compressed.judge_streams"),
        ("pickle_machine",),
    ),
    Consumer(
        "pandas.read_pickle",
        "compression inferred from the file's suffix (.gz .bz2 .xz .zip .zst .tar and the "
        "tar.* forms; a zip or tar of one member), then pickle.load",
        ("views_compressed.judge_streams", "views_zip.judge_zip", "views_archive.judge_tar"),
        ("pickle_machine",),
    ),
    Consumer(
        "numpy.load",
        ".npy (an object array's pickle when allow_pickle=True), .npz (every member that "
        "starts like an .npy), else pickle.load with allow_pickle=True",
        ("views_misc.judge_npy", "views_zip.judge_zip", "views.judge_region"),
        ("pickle_machine", "known_formats"),
    ),
    Consumer(
        "torch.distributed.checkpoint",
        ".metadata (a pickle) names the items of each .distcp data file; byte items are "
        "torch.load'ed with weights_only=False",
        ("views.judge_region",),
        ("dcp_items", "scan"),
    ),
    Consumer(
        "DeepSpeed load_checkpoint",
        "`latest` / `latest_universal` name the tag folder (os.path.join(load_dir, tag)); "
        "mp_rank_*_model_states.pt and *_optim_states.pt are torch.load'ed with "
        "weights_only=False",
        ("views.judge_region",),
        ("scan", "tree", "pointers"),
    ),
    Consumer(
        "mmengine resume",
        "`last_checkpoint` holds the path of the checkpoint to resume, torch.load'ed (its "
        "HistoryBuffer and MessageHub records inside)",
        ("views.judge_region",),
        ("pointers", "inert"),
    ),
    Consumer(
        "Trainer / accelerate load_state",
        "training_args.bin, optimizer.pt / .bin, scheduler.pt, rng_state*.pth, "
        "random_states_*.pkl: torch.load (weights_only=False for some) or pickle",
        ("views.judge_region",),
        ("scan",),
    ),
    Consumer(
        "from_pretrained",
        "config.json (keys read after JSON decoding, a config of any size), weights "
        "(safetensors, or pytorch_model.bin by torch.load); with trust_remote_code, the "
        "modules auto_map (or diffusers' model_index.json) names are imported from the folder; "
        "a sharded index names the weight files",
        ("views.judge_region", "views_misc.judge_safetensors_values"),
        ("scan", "known_formats", "remote_code", "pointers"),
    ),
    Consumer(
        "transformers pipeline",
        "config.json custom_pipelines[task].impl (module.Class, or repo--module.Class / "
        "path--module.Class) imported with trust_remote_code",
        (),
        ("remote_code", "scan"),
    ),
    Consumer(
        "SentenceTransformer",
        "modules.json types outside sentence_transformers.* imported (from the folder, another "
        "folder or Hub repo, else a dotted import); with trust_remote_code since 6.0, implicit "
        "for a local folder before",
        (),
        ("remote_code", "scan"),
    ),
    Consumer(
        "torch.package PackageImporter",
        "a zip with .data/extern_modules: its .py records are modules import_module runs; "
        "load_pickle imports the classes its pickles name",
        ("views_zip.judge_zip",),
        ("zip_miniz", "pickle_machine"),
    ),
    Consumer(
        "zipimport",
        "a zip on sys.path (a .pth path line, PYTHONPATH): its .py / .pyc members import",
        ("views_zip.judge_zip",),
    ),
    Consumer(
        "git",
        "a .git folder, the folder a .git file's gitdir: line names, or a bare repository: "
        "config keys that are commands and hooks/ run on git commands in the folder",
        (),
        ("git_dir", "pointers", "scan"),
    ),
    Consumer(
        "ColossalAI optimizer load",
        "the non_tensor_keys of a flattened optimizer safetensors are pickles, unpickled",
        ("views_misc.judge_safetensors_values",),
        ("pickle_machine",),
    ),
    Consumer(
        "site .pth",
        "a .pth in a site folder: each line that starts with `import` runs at startup "
        "(the whole file, as CPython 3.10-3.13 decode it)",
        (),
        ("site_pth", "shadowing", "scan"),
    ),
    Consumer(
        "Python's import of the working folder",
        "python started in the folder puts it first on sys.path: any module there shadows an "
        "installed one that the load or the libraries import, and any module a library's "
        "start-up tries to import (import torch tries pynvml, opt_einsum, ...)",
        (),
        ("shadowing", "startup_imports", "scan"),
    ),
    Consumer(
        "torch.export.load",
        "a .pt2 archive: its programs' pickled parts; every model folder under "
        "data/aotinductor/ goes to AOTIModelPackageLoader, which dlopens its shared library "
        "(or compiles its C++ and loads that): native code runs on a plain load (unsafe)",
        ("views_zip.judge_zip",),
        ("zip_miniz",),
    ),
    Consumer(
        "torch.jit.load",
        "TorchScript archives (constants.pkl, code/): their code runs when loaded (code)",
        ("views_zip.judge_zip",),
        ("zip_miniz",),
    ),
    Consumer(
        "chat template renderers",
        "tokenizer_config.json / chat_template.json / processor_config.json chat_template, "
        "*.jinja, GGUF tokenizer.chat_template*: Jinja rendered in a sandbox (transformers "
        "apply_chat_template, llama-cpp-python >= 0.2.72) or a plain Environment (older "
        "llama-cpp-python, CVE-2024-34359), where private names reach Python's internals",
        (),
        ("chat_templates", "scan"),
    ),
    Consumer(
        "keras.saving.load_model",
        "a .keras zip (Python's zipfile, after any prefix) or a folder holding config.json: "
        "config.json rebuilt (each module / class_name / registered_name resolved, a "
        "__lambda__ run when safe_mode=False; Keras up to 3.8 imports any module named, before "
        "3.11 calls non-modelling APIs, before 3.11.3 ignores safe_mode for .h5, before 3.13.2 "
        "loads a TFSMLayer's SavedModel), model.weights.h5 through h5py (.npz with "
        "allow_pickle=False), assets extracted; a legacy .h5: its root's model_config and "
        "training_config attributes",
        ("keras_files.keras_zip", "keras_files.hdf5_file", "keras_files.keras_json"),
        ("keras_config", "hdf5_walk", "known_formats", "judge"),
    ),
    Consumer(
        "h5py",
        "an HDF5 file (the superblock at byte 0, 512, 1024, ...): groups and datasets read; an "
        "external link opens another file, external storage and virtual datasets read other "
        "files, a filter outside HDF5's own loads a plugin library",
        ("keras_files.hdf5_file", "keras_files.beside_pickles"),
        ("hdf5_walk",),
    ),
    Consumer(
        "hydra.utils.instantiate / NeMo restore_from",
        "a YAML config (OmegaConf.load, a safe loader): every _target_ imported and called; a "
        ".nemo tar: model_config.yaml built by from_config_dict (_target_, or cls / target "
        "with params), model_weights.ckpt torch.load'ed",
        ("views_archive.judge_tar",),
        ("hydra_targets", "known_formats"),
    ),
    Consumer(
        "onnx.load / onnxruntime",
        "the ModelProto protobuf; each tensor's external data read from its location relative "
        "to the model's folder; operators of a custom domain need a library the user registers",
        ("onnx_model.parse_model",),
        ("onnx_data", "known_formats"),
    ),
    Consumer(
        "YAML loaders",
        "yaml.unsafe_load / yaml.load(Loader=yaml.Loader) (mmengine) build the Python objects "
        "tags name; yaml.full_load (Lightning hparams.yaml) resolves python/name; OmegaConf "
        "and Hydra use safe loaders (Hydra's _target_: see its row)",
        (),
        ("known_formats",),
    ),
    Consumer(
        "data readers",
        "safetensors, json, text, tokenizers (sentencepiece, tiktoken), GGUF, TensorBoard "
        "events (TFRecord), images: parsed, never executed; data only for a format parsed "
        "completely",
        (),
        ("known_formats",),
    ),
)

# functions of views*.py that are parts of the views above, not views of their own
HELPERS: dict[str, str] = {
    "views_zip.may_be_zip": "the test judge_region makes before judge_zip",
    "views_archive.is_tar": "the test judge_region makes before judge_tar",
    "views_archive.zip_in_tar": "how judge_region words a zip found inside a tar",
    "views_compressed.compression": "joblib's prefix test inside judge_streams",
    "views_compressed.pandas_compression": "pandas' suffix test inside judge_streams",
    "views_compressed.decode": "one stream decoded for judge_streams",
}

NOT_MODELLED = (
    "TensorFlow SavedModels and checkpoints, flax msgpack, HDF5 files h5py cannot walk here "
    "(their bytes are unverified, not data)",
    "loaders of other formats that a user script chooses (the gate judges files, not programs)",
)


def table_markdown() -> str:
    """The table as Markdown (for RELIABILITY.md)."""
    rows = ["| Consumer | How it reaches bytes | Modelled by |", "|---|---|---|"]
    for c in CONSUMERS:
        parts = [f"`{v}`" for v in c.views] + [f"`{m}`" for m in c.modules]
        rows.append(f"| {c.name} | {c.reaches} | {', '.join(parts)} |")
    return "\n".join(rows)


__all__ = ["CONSUMERS", "HELPERS", "NOT_MODELLED", "Consumer", "table_markdown"]
