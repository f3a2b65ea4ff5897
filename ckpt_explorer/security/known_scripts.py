"""Scripts a library copies beside its checkpoints, known byte for byte from its releases.

DeepSpeed copies ``deepspeed/utils/zero_to_fp32.py`` (and, from 0.19.7, ``zero_to_torch.py``)
into every ZeRO save folder with ``shutil.copyfile``. A file of that name whose SHA-256 is one
of a release's copies adds no code beyond what that DeepSpeed release published, so the gate
notes it instead of calling it ``code``; any other content under that name is code as usual.

The digests were taken from the ``deepspeed/utils/`` files of every DeepSpeed source
distribution on PyPI from 0.8.0 to 0.19.8 (value: the releases that ship those bytes).
"""

from __future__ import annotations

# file name -> {sha256 of the release's copy: the DeepSpeed releases that ship it}
DEEPSPEED_SCRIPTS: dict[str, dict[str, str]] = {
    "zero_to_fp32.py": {
        "6239382c1b3496cc72f5f0e6002be909c76f4b5b68524c0a35c2ed26b82eeb08": "0.8.0-0.8.1",
        "e865fecbce0f1ac178921fe0df80854a4372e537feddcba54b9f32080fb51b9f": "0.8.2-0.8.3",
        "7e5de1bdbae61cd0d8ad1bb9e41122f159533d080a258c129e61118b0b684fb9": "0.9.0",
        "8aba91a81457b4c25e96ad9aa0323e9c67ec2c5644541913eb8afb45712a93f9": "0.9.1",
        "c3d9f6d855fce9b344e825d0e57822d9798e94d25fe4f284a8a0d3945efa4723": "0.9.2-0.9.5",
        "061bdb6df821b30589945691c45ddf5731de7baf150f76b0555f850187e4062f": "0.10.0",
        "68f965505cd086b7582e9821f8a6bc9b5b80c43450671c1139f734d1c7678a2c": "0.10.1-0.12.6",
        "81f53f3ce7fb314d2075cae5cf3bc94742f0c994954f1437b327747cf3599a2b": "0.13.0-0.13.1",
        "47e22c3e2e9c55705ff72102ffd1146b607e80880f2011ced5bc969d11ea7b05": "0.13.2-0.15.2",
        "92dcd9cc03d6010b4d060b73c8826d71ff9e29a030154e9f192e34ad80457f3a": "0.15.3-0.15.4",
        "1da2c45d180c546ae470d13381e429f92731644816b5dc6deb3a88dd9a0aa931": "0.16.0",
        "46497565ccf2b4a8b1f6f18c8341042f3749605a94335c81f69df1bd268af64f": "0.16.1-0.17.4",
        "e8a2553b434ac043ec63b022db1e768277acf8d4e70f10a2842db6d238977135": "0.17.5-0.19.2",
        "2859057b959683c8aff715cec1691c9c46bf75b14859003202f561df2be3b1fb": "0.19.3-0.19.6",
        "54f74b8a39616e5c2a32c028a51524b1d8c481a15cd8b5961bb8125de244aed9": "0.19.7",
        "bbeb8b1fe7d79563af43902ec91f2db0be8d145466043aae200ff05168a4d6ba": "0.19.8",
    },
    "zero_to_torch.py": {
        "b1f54984e60ece6da9343a70233ef4e04653e8ce4c2739faa4363cd124a99561": "0.19.7-0.19.8",
    },
}


def released_copy(name: str, digest: str) -> str:
    """ "DeepSpeed <releases>" when ``digest`` is a release's ``name``, else ""."""
    releases = DEEPSPEED_SCRIPTS.get(name, {}).get(digest)
    return f"DeepSpeed {releases}" if releases else ""
