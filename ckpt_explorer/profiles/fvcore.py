"""detectron2's checkpointer: fvcore's ``Checkpointer`` with ``PeriodicCheckpointer``.

``Checkpointer.save(name, **extra)`` writes ``<save_dir>/<name>.pth`` holding ``model`` and the
``state_dict()`` of every checkpointable it was given (detectron2's ``DefaultTrainer`` and
``plain_train_net.py`` give ``optimizer`` and ``scheduler``), plus the extra data;
``PeriodicCheckpointer.step(iteration)`` saves ``model_<iteration:07d>.pth`` (and
``model_final.pth``) with ``iteration``: the 0-based index of the iteration just run, so the run
has taken ``iteration + 1`` optimizer steps (one per iteration). After every save the text
file ``last_checkpoint`` beside it names the file; ``resume_or_load(resume=True)`` resumes from
what it names and starts at ``iteration + 1``. No RNG state is saved (detectron2 seeds at
start). The scheduler is saved and loaded like the optimizer.
"""

from __future__ import annotations

import re

from .spec import Counter, Evidence, WriterProfile

SAVE_NAME = r"^model_(\d{7})\.pth$"
FINAL = "model_final.pth"
POINTER = "last_checkpoint"


def detect(ev: Evidence) -> list[str] | None:
    iteration = ev.value("iteration")
    if "model" not in ev.keys or isinstance(iteration, bool) or not isinstance(iteration, int):
        return None
    named = re.match(SAVE_NAME, ev.name) is not None or ev.name == FINAL
    if not (named or POINTER in ev.siblings):
        return None
    out = [f"model + iteration {iteration} (fvcore Checkpointer.save with PeriodicCheckpointer)"]
    if named:
        out.append(f"named {ev.name} (model_<iteration:07d>.pth)")
    if POINTER in ev.siblings:
        out.append(f"{POINTER} beside it")
    return out


# The declaration every writer makes: alike in shape by design, the registry reads them all.
PROFILE = WriterProfile(
    name="fvcore",
    title="detectron2/fvcore Checkpointer",
    detect=detect,
    priority=40,
    parts={
        "model": ("model",),
        "optimizer": ("optimizer",),
        "scheduler": ("scheduler",),
        "run": ("iteration",),
    },
    counters=(
        Counter(
            "iteration",
            "optimizer_steps",
            "0-based index of the last iteration run (iteration + 1 optimizer steps)",
        ),
    ),
    optimizer="saved",
    scheduler="saved",
    rng="not_saved",
    pointers=(POINTER,),
    save_name=SAVE_NAME,
    save_counter="iteration",
    notes="resume_or_load(resume=True) restores model, optimizer and scheduler from what "
    "last_checkpoint names; with no last_checkpoint it loads the weights only but still "
    "returns the file's iteration.",
)
