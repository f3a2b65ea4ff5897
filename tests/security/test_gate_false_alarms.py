"""No false alarms from names: real files that once failed the gate, each written by the real
tool and loaded back by it, pass; the standard library globals they were taken for do not."""

from __future__ import annotations

import pickle
import pickletools
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from ckpt_explorer.security import judge_file
from ckpt_explorer.security.inert import inert_reason, what_it_does


def _globals(data: bytes) -> set[str]:
    out = set()
    strings: list[str] = []
    for op, arg, _pos in pickletools.genops(data):
        if op.name in ("SHORT_BINUNICODE", "BINUNICODE", "UNICODE"):
            strings.append(str(arg))
        elif op.name == "STACK_GLOBAL":
            out.add(".".join(strings[-2:]))
        elif op.name == "GLOBAL":
            out.add(str(arg).replace(" ", "."))
    return out


def test_mmengine_runner_checkpoint_is_safe(tmp_path: Path) -> None:
    """What ``Runner.save_checkpoint`` writes (mmengine 0.10): meta, state_dict, the message
    hub's state (HistoryBuffer objects) and the optimizer wrapper's state, by torch.save."""
    mmengine = pytest.importorskip("mmengine")
    from mmengine.logging import MessageHub
    from mmengine.optim import OptimWrapper
    from mmengine.utils import apply_to

    model = torch.nn.Linear(4, 2)
    optim = OptimWrapper(torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9))
    model(torch.randn(3, 4)).sum().backward()
    optim.step()
    hub = MessageHub.get_instance("gate-test")
    for i in range(4):
        hub.update_scalar("train/loss", 1.0 / (i + 1))
    hub.update_info("iter", 4, resumed=True)
    meta = {
        "epoch": 1,
        "iter": 4,
        "cfg": "model = dict(type='Linear')\n",
        "seed": 0,
        "experiment_name": "exp",
        "time": time.strftime("%Y%m%d_%H%M%S"),
        "mmengine_version": mmengine.__version__,
        "dataset_meta": {"classes": ("a", "b")},
    }
    checkpoint = {
        "meta": meta,
        "state_dict": model.state_dict(),
        "message_hub": apply_to(hub.state_dict(), lambda x: hasattr(x, "cpu"), lambda x: x.cpu()),
        "optimizer": optim.state_dict(),
        "param_schedulers": [],
    }
    path = tmp_path / "epoch_1.pth"
    torch.save(checkpoint, path)
    loaded = torch.load(path, weights_only=False)
    assert loaded["message_hub"]["log_scalars"]["train/loss"].mean() > 0
    verdict = judge_file(path)
    assert verdict.verdict == "safe", verdict.reasons


def test_mmengine_getattr_on_other_names_is_still_judged() -> None:
    """``getattr(HistoryBuffer, "name")`` is judged by the name it reaches."""
    from ckpt_explorer.security.pickle_machine import walk_pickle

    def pick(attr: str) -> bytes:
        return (
            b"\x80\x02cbuiltins\ngetattr\ncmmengine.logging.history_buffer\nHistoryBuffer\n"
            + b"X"
            + len(attr).to_bytes(4, "little")
            + attr.encode()
            + b"\x86R."
        )

    ok = walk_pickle(pick("mean"))
    assert {g.qualified for g in ok.globals} == {
        "mmengine.logging.history_buffer.HistoryBuffer",
        "mmengine.logging.history_buffer.HistoryBuffer.mean",
    }
    for attr in ("register_statistics", "__init__"):
        names = {g.qualified for g in walk_pickle(pick(attr)).globals}
        assert any(inert_reason(*n.rsplit(".", 1)) is None for n in names), attr


def test_pandas_to_pickle_outputs_are_safe(tmp_path: Path) -> None:
    pd = pytest.importorskip("pandas")
    frames = {
        "frame": pd.DataFrame(
            {
                "a": [1, 2, 3],
                "f": [0.5, 1.5, 2.5],
                "s": ["x", "y", "z"],
                "b": [True, False, True],
                "t": pd.to_datetime(["2024-01-01", "2024-01-02", "2024-01-03"]),
                "d": pd.to_timedelta([1, 2, 3], unit="s"),
                "c": pd.Categorical(["u", "v", "u"]),
                "n": pd.array([1, None, 3], dtype="Int64"),
            }
        ),
        "series": pd.Series([1.0, 2.0], index=pd.Index(["p", "q"], name="k"), name="v"),
        "multi": pd.DataFrame({"v": [1, 2]}, index=pd.MultiIndex.from_arrays([[1, 2], ["a", "b"]])),
        "index": pd.Index([1, 2, 3]),
        "daily": pd.Series([1.0, 2.0, 3.0], index=pd.date_range("2024-01-01", periods=3)),
        "hourly": pd.DataFrame(
            {"v": [1, 2]}, index=pd.date_range("2024-01-01", periods=2, freq="h")
        ),
    }
    for name, obj in frames.items():
        for suffix in (".pkl", ".pkl.gz", ".pkl.xz"):
            path = tmp_path / f"{name}{suffix}"
            pd.to_pickle(obj, path)
            back = pd.read_pickle(path)
            assert back.equals(obj)
            verdict = judge_file(path)
            assert verdict.verdict == "safe", (path.name, verdict.reasons)


def test_old_numpy_reconstruct_name_is_inert(tmp_path: Path) -> None:
    """numpy < 1.0 pickled arrays with ``numpy.core._internal._reconstruct``; numpy keeps it
    as ``ndarray.__new__(subtype, shape, dtype)``, what ``multiarray._reconstruct`` does."""
    arr = np.array([1, "x", None], dtype=object)
    data = pickle.dumps(arr, protocol=2)
    assert b"numpy._core.multiarray" in data or b"numpy.core.multiarray" in data
    old = data.replace(
        b"numpy._core.multiarray\n_reconstruct", b"numpy.core._internal\n_reconstruct"
    )
    old = old.replace(b"numpy.core.multiarray\n_reconstruct", b"numpy.core._internal\n_reconstruct")
    assert b"numpy.core._internal\n_reconstruct" in old
    path = tmp_path / "old_objects.pkl"
    path.write_bytes(old)
    code = "import pickle,sys; a=pickle.load(open(sys.argv[1],'rb')); assert a[1]=='x'"
    done = subprocess.run(
        [sys.executable, "-W", "ignore", "-c", code, str(path)], capture_output=True, timeout=60
    )
    assert done.returncode == 0, done.stderr  # the real loader reads it back
    assert judge_file(path).verdict == "safe"


@pytest.mark.parametrize(
    ("module", "name"),
    [("logging", "FileHandler"), ("logging.config", "fileConfig"), ("logging", "basicConfig")],
)
def test_stdlib_logging_stays_flagged(tmp_path: Path, module: str, name: str) -> None:
    assert inert_reason(module, name) is None
    assert "files" in what_it_does(module, name)
    path = tmp_path / "log.pkl"
    path.write_bytes(
        b"\x80\x02c" + f"{module}\n{name}\n".encode() + b"X\x05\x00\x00\x00a.logq\x00\x85R."
    )
    verdict = judge_file(path)
    assert verdict.verdict == "unsafe"
    assert "opens, writes or deletes files" in " ".join(verdict.reasons)


def test_modules_named_like_stdlib_ones_are_judged_by_their_full_path() -> None:
    assert "files" not in what_it_does("mmengine.logging.history_buffer", "HistoryBuffer")
    assert "files" not in what_it_does("mylib.io.records", "Record")
    assert "shell" in what_it_does("os.path", "join")  # a module inside os is os
    assert "shell" in what_it_does("torch", "os.system")  # an attribute path reaches os
    assert "Python code" in what_it_does("builtins", "print.__self__.exec")
