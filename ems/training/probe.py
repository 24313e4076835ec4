"""Learning curves: the retrieval probe (ems.training.retrieval_probe: Tatoeba and FLORES-200 devtest P@1 of the
model's languages) at the start of a run, every probe_every steps (0: never) and at its end.

In: the engine and rank 0's ems.training.retrieval_probe.RetrievalProbe; out: records with probe_<task> (the
average) and probe_languages in metrics.jsonl, TensorBoard scalars probe/<task>/{average,<lang>}.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ems.training.metrics import MetricsLog

if TYPE_CHECKING:
    from deepspeed import DeepSpeedEngine

    from ems.training.retrieval_probe import RetrievalProbe


@dataclass
class Probe:
    """The probe every `every` steps (not at an invocation's last step: its end probes), at the
    start and the end of a run: rank 0 scores the model, the other ranks wait."""

    retrieval: RetrievalProbe | None  # rank 0's, when every > 0
    every: int
    engine: DeepSpeedEngine
    rank: int
    metrics_log: MetricsLog

    def should_run(self, step: int, last: int) -> bool:
        return bool(self.every) and step % self.every == 0 and step != last

    def run(self, step: int) -> dict | None:
        """The probe's scores of the model at `step`, logged (rank 0; None elsewhere and when off)."""
        import torch.distributed as dist

        if not self.every:
            return None
        record = None
        if self.rank == 0:
            scores = self.retrieval.run(self.engine.module.encoder)
            record = {
                "step": step,
                **{f"probe_{task}": result["average"] for task, result in scores.items()},
                "probe_languages": {task: result["languages"] for task, result in scores.items()},
            }
            scalars = {f"probe/{task}/average": result["average"] for task, result in scores.items()}
            scalars.update(
                {
                    f"probe/{task}/{lang}": p
                    for task, result in scores.items()
                    for lang, p in result["languages"].items()
                }
            )
            self.metrics_log.write(record, scalars)
        dist.barrier()
        return record
