"""Diagnostics: the computation audit (is the loop computing, or collapsed onto its start?).

from equilibria.diagnostics import audit

report = audit(model, dataset)      # any family of equilibria; the dataset has the columns its adapter reads
print(report)                       # a table, the verdict and its reasons
report.save("audit-out")            # audit.json + audit.png
"""

from . import adapters
from . import audit as _audit
from .adapters import *  # noqa: F403  (LoopAdapter, LoopRun, adapter_for and the families' adapters)
from .audit import *  # noqa: F403  (VERDICTS, AuditReport, AuditThresholds, audit, verdict, ...)
from .memory import saved_for_backward

__all__ = [*adapters.__all__, *_audit.__all__, "saved_for_backward"]
