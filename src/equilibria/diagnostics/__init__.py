"""Diagnostics: the computation audit (is the loop computing, or collapsed onto its start?).

from equilibria.diagnostics import audit

report = audit(model, dataset)      # any family of equilibria; the dataset has the columns its adapter reads
print(report)                       # a table, the verdict and its reasons
report.save("audit-out")            # audit.json + audit.png

By concern: ``audit.py`` runs the audit (the evidence, batch by batch), ``adapters.py`` reads each family's loop,
``statistics.py`` (paired changes, the sign test, the chance baseline, the summaries), ``probes.py`` (T2's linear
probe), ``verdict_rules.py`` (the verdict and its thresholds), ``report.py`` (the report, its table and plot);
``memory.py`` measures what a training step saves for its backward; ``trajectory.py`` follows the loop step by
step (the state's norm, the relative step, the spectral radius: ``equilibria diagnose``).
"""

from . import adapters
from .adapters import *  # noqa: F403  (LoopAdapter, LoopRun, adapter_for and the families' adapters)
from .audit import audit
from .memory import saved_for_backward
from .probes import linear_probe
from .report import AuditReport
from .statistics import chance_baseline, paired_change
from .trajectory import LoopTrajectory, loop_trajectory
from .verdict_rules import VERDICTS, AuditThresholds, verdict

__all__ = [
    *adapters.__all__,
    "VERDICTS",
    "AuditReport",
    "AuditThresholds",
    "LoopTrajectory",
    "audit",
    "chance_baseline",
    "linear_probe",
    "loop_trajectory",
    "paired_change",
    "verdict",
    "saved_for_backward",
]
