"""Diagnostics: the computation audit (is the loop computing, or collapsed onto its start?).

from equilibria.diagnostics import audit

report = audit(model, dataset)      # any family of equilibria; the dataset has the columns its adapter reads
print(report)                       # a table, the verdict and its reasons
report.save("audit-out")            # audit.json + audit.png
"""

from .adapters import (
    AttractorAdapter,
    EqRAdapter,
    LoopAdapter,
    LoopRun,
    OuroAdapter,
    PHDEQAdapter,
    adapter_for,
)
from .audit import VERDICTS, AuditReport, AuditThresholds, audit, linear_probe, verdict

__all__ = [
    "VERDICTS",
    "AttractorAdapter",
    "AuditReport",
    "AuditThresholds",
    "EqRAdapter",
    "LoopAdapter",
    "LoopRun",
    "OuroAdapter",
    "PHDEQAdapter",
    "adapter_for",
    "audit",
    "linear_probe",
    "verdict",
]
