"""``ckpt-explorer repair``: rebuild the one small file a damaged folder lost, exactly as its
writer writes it, from the shards' own headers and pickles; never touch a shard.

Repairs: a lost HF or ColossalAI model index, a lost ColossalAI optimizer index (from its
shards and ``pytorch_optim_group.bin``), DeepSpeed's ``latest`` (from the one tag present).
Anything whose answer is not unique is refused with the reason.

Example:
    >>> plan = plan_repair("run/optimizer")       # doctest: +SKIP
    >>> print(plan.describe()); run_repair(plan)  # doctest: +SKIP
"""

from __future__ import annotations

from .plan import RepairPlan
from .run import RepairResult, plan_repair, run_repair

__all__ = ["RepairPlan", "RepairResult", "plan_repair", "run_repair"]
