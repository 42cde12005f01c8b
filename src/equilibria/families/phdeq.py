"""The port-Hamiltonian deep equilibrium model's record: a classifier."""

from __future__ import annotations

from ..loops import PHDEQLoop
from ..modeling import PHDEQConfig, PHDEQForSequenceClassification, PHDEQModel
from ..tasks.recipes import scratch_recipe
from .card_text import FamilyText
from .record import Family, Head


def _phdeq_config(fields: dict, hidden_size: int, num_layers: int, num_attention_heads: int, num_loops: int):
    return PHDEQConfig(**fields, hidden_size=hidden_size, intermediate_size=2 * hidden_size, num_loops=num_loops)


PHDEQ_BIBTEX = """@misc{lazyidentity2026,
  title = {The Equilibrium Is the Initialization: Lazy Identity Collapse in Physics-Structured Deep Equilibrium
    Reasoning},
  year = {2026},
  eprint = {2607.11116},
  archivePrefix = {arXiv},
  note = {authors as listed on arXiv:2607.11116}
}"""


PHDEQ_TEXT = FamilyText(
    name="Port-Hamiltonian deep equilibrium model",
    paper="a DEQ over phase space with damped, anchored symplectic-Euler dynamics and a learned initialiser, "
    "the model studied in *The Equilibrium Is the Initialization: Lazy Identity Collapse in Physics-Structured "
    "Deep Equilibrium Reasoning* (2026)",
    tags=("deep-equilibrium",),
    usage={"classifier": ("out = model(inputs, num_loops=300)  # logits, solved_state, solver_steps, converged, ...",)},
    citation=PHDEQ_BIBTEX,
)

PHDEQ = Family(
    loop_meaning="the fixed-point solver's iteration cap (Anderson or Picard: config.solver)",
    protocol=PHDEQLoop(),
    base_class=PHDEQModel,
    heads=(Head(PHDEQForSequenceClassification, kind="classifier", tasks=("reachability", "entailment")),),
    make_config=_phdeq_config,
    lora_targets=("potential_q", "potential_c", "port"),  # no attention: the dynamics' maps,
    card=PHDEQ_TEXT,
    recipes=(
        scratch_recipe("reachability", "a small PH-DEQ on generated reachability graphs", max_steps=1500),
        scratch_recipe("entailment", "a small PH-DEQ on generated entailment problems", max_steps=1500),
    ),
)
