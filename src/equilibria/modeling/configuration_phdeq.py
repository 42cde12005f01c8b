"""Configuration of the port-Hamiltonian deep equilibrium model (PH-DEQ), the subject of the computation audit.

This module travels to the Hub as remote code: it imports only ``transformers``, ``huggingface_hub`` (one of its
dependencies) and its siblings ``config_checks`` and ``solvers``, which travel with it.
"""

import math
from typing import Literal

from huggingface_hub.dataclasses import strict
from transformers import PreTrainedConfig
from transformers.utils.type_validators import interval

from .config_checks import LoopConfigMixin, check_int, raise_value_errors
from .solvers import GRADIENT_MODES, SOLVERS

INITIALIZERS = ("learned", "zero")
ANCHOR_TARGETS = ("origin", "initializer")
DYNAMICS = ("port_driven", "start_anchored")
ACTIVATIONS = ("gelu", "silu", "relu", "tanh")


def stiffness_bound(step_size: float, friction: float) -> float:
    """The largest stiffness ``k`` for which one damped symplectic-Euler step of ``q'' = -k q - friction q'`` is
    stable: the linearised step ``(q, p) -> (q + h p', p')``, ``p' = (1 - h gamma) p - h k q``, has trace
    ``2 - h gamma - h^2 k`` and determinant ``1 - h gamma``, so (Jury) its eigenvalues lie inside the unit circle
    iff ``0 < h gamma < 2`` and ``0 < h^2 k < 4 - 2 h gamma``."""
    return (4.0 - 2.0 * step_size * friction) / step_size**2


@raise_value_errors
@strict
class PHDEQConfig(LoopConfigMixin, PreTrainedConfig):
    r"""Configuration for [`PHDEQModel`] and [`PHDEQForSequenceClassification`].

    The model embeds its input (one feature vector, or a masked sequence of them, mean-pooled) into a context
    ``c``, starts from ``z_0 = (q_0, p_0)`` given by a feed-forward initialiser ``c -> z_0`` and solves for the
    equilibrium of damped, anchored port-Hamiltonian dynamics in phase space,

        H(q, p; c) = |p|^2 / 2 + anchor * |q - q_a|^2 / 2 + sum_i a_i log cosh(w_i . q + u_i . c + b_i),
        dq/dt = p,    dp/dt = -dH/dq - friction * p + B c,

    discretised by one symplectic-Euler step of size ``step_size`` (``p`` first, then ``q`` with the new ``p``).
    The map ``f(z) = z_{k+1}`` has its fixed points exactly at the equilibria (``p* = 0``, ``dH/dq(q*) = B c``);
    the anchor keeps ``H`` strongly convex in ``q`` at initialisation, so the equilibrium is unique there. The
    anchor's centre ``q_a`` is the origin (``anchor_target="origin"``) or the ``q`` half of the initialiser's
    output (``"initializer"``, the lazy-identity study's design: the state is pulled toward the initialiser's
    proposal, which stays fixed while solving, also when the solver starts elsewhere). A decoder reads the solved
    state ``h* = z*`` and, with ``direct_path``, the context ``c`` as well.

    ``dynamics="start_anchored"`` is our reading of the lazy-identity study's updates, under which the solver's
    start ``s = (q_s, p_s)`` (``z_0``, ``z_0`` plus the start noise, or ``initial_state``) is itself an equilibrium
    when the learned force vanishes: no port drive (the context enters through ``z_0`` and the potential ``V``), and
    the anchor and the friction act on the whole phase state, centred at ``s``:

        p' = p - step_size * (dV/dq(q) + anchor * (q - q_s) + friction * (p - p_s)),    q' = q + step_size * (p' - p_s).

    Its equilibria have ``p* = p_s`` and ``anchor * (q* - q_s) = -dV/dq(q*)``, so ``|z* - s| <= |dV/dq| / anchor``
    and ``f(s) = s`` exactly when ``V`` is flat; the step linearises as the port-driven one does (the same
    stability bound). ``anchor_target`` must stay ``"origin"`` with it (the centre is the start).

    Args:
        input_size (`int`): Features per input vector (e.g. 304 for the graph-reachability encoding, 384 for
            MiniLM sentence embeddings).
        hidden_size (`int`): Size of ``q`` and of ``p`` (the state has ``2 * hidden_size`` entries) and of ``c``.
        intermediate_size (`int`): Hidden width of the context encoder, the initialiser and the decoder, and the
            number of terms in the potential.
        num_labels (`int`): Classes of the classification head (from [`PreTrainedConfig`]).
        step_size (`float`): ``h`` in ``(0, 2)``, the symplectic-Euler step.
        friction (`float`): ``gamma`` >= 0, the friction on ``p`` (``h * gamma < 2`` keeps the step stable). Configs
            saved with the old key ``damping`` load with a deprecation warning.
        anchor (`float`): ``kappa`` >= 0, the stiffness of the quadratic well that anchors ``q`` (0 removes it: the
            anchor-removal ablation). The anchor alone must keep the step stable: ``step_size^2 * anchor <
            4 - 2 * step_size * friction`` (configurations past that bound are refused).
        anchor_target (`str`): The anchor's centre: ``"origin"`` or ``"initializer"`` (the initialiser's ``q``).
        dynamics (`str`): ``"port_driven"`` (the default: the port drive ``B c``, anchor and friction centred as
            above) or ``"start_anchored"`` (the lazy-identity study's reading, above).
        start_noise (`float`): >= 0; in training mode the solver starts from ``z_0 + noise`` with Gaussian noise of
            expected norm ``start_noise * |z_0|`` per example (the anchor's centre stays noiseless); 0 turns it
            off. Nothing is added with a zero start or at evaluation.
        initializer (`str`): ``"learned"`` (the feed-forward initialiser ``c -> z_0``) or ``"zero"`` (``z_0 = 0``).
        initializer_loss_weight (`float`): Weight (>= 0) of the amortisation loss ``mean((z_0 - sg(z*))^2)`` that
            trains the learned initialiser to predict the equilibrium.
        stop_initializer_gradient (`bool`): Detach ``z_0`` (the start and the anchor's centre) from the task
            loss; the initialiser then learns from the amortisation loss alone, or, with
            ``initializer_loss_weight=0``, not at all (isolated from every gradient, as in the lazy-identity study).
        direct_path (`bool`): Whether the decoder also sees the context ``c`` (a path around the solver).
        solver (`str`): ``"anderson"`` or ``"picard"``.
        anderson_memory (`int`): Anderson's history size ``m`` (>= 1).
        num_loops (`int`): The solver's default iteration budget (>= 0; 0 decodes ``z_0``).
        solver_tol (`float`): Relative-residual tolerance ``||f(z) - z|| / ||f(z)||`` (> 0).
        gradient_mode (`str`): ``"implicit"`` (implicit-function-theorem gradient, constant memory),
            ``"one_step"`` (the gradient of ``f`` at the detached equilibrium) or ``"unrolled"`` (backpropagate
            through ``num_loops`` plain steps from ``z_0``).
        hidden_act (`str`): Activation of the feed-forward parts (``"gelu"``, ``"silu"``, ``"relu"``, ``"tanh"``).
        potential_scale_init (`float`): Initial ``a_i`` (small enough that the anchor dominates: a unique
            equilibrium at initialisation).
    """

    model_type = "phdeq"
    _auto_class = "AutoConfig"
    keys_to_ignore_at_inference = [
        "start_state",
        "solved_state",
        "context",
        "solver_steps",
        "abs_residual",
        "rel_residual",
        "converged",
        "diverged",
        "initializer_loss",
    ]

    input_size: int = interval(min=1)(default=64)
    hidden_size: int = interval(min=1)(default=64)
    intermediate_size: int = interval(min=1)(default=128)
    step_size: float | int = interval(min=0.0, max=2.0, exclude_min=True, exclude_max=True)(default=0.5)
    friction: float | int = interval(min=0.0, max=math.inf, exclude_max=True)(default=1.0)
    anchor: float | int = interval(min=0.0, max=math.inf, exclude_max=True)(default=1.0)
    anchor_target: Literal[ANCHOR_TARGETS] = "origin"
    dynamics: Literal[DYNAMICS] = "port_driven"
    start_noise: float | int = interval(min=0.0, max=math.inf, exclude_max=True)(default=0.0)
    initializer: Literal[INITIALIZERS] = "learned"
    initializer_loss_weight: float | int = interval(min=0.0, max=math.inf, exclude_max=True)(default=1.0)
    stop_initializer_gradient: bool = False
    direct_path: bool = True
    solver: Literal[SOLVERS] = "anderson"
    anderson_memory: int = interval(min=1)(default=5)
    num_loops: int = interval(min=0)(default=300)
    solver_tol: float | int = interval(min=0.0, max=math.inf, exclude_min=True, exclude_max=True)(default=1e-4)
    gradient_mode: Literal[GRADIENT_MODES] = "implicit"
    hidden_act: Literal[ACTIVATIONS] = "gelu"
    potential_scale_init: float | int = interval(min=0.0, max=math.inf, exclude_max=True)(default=0.1)
    tie_word_embeddings: bool = False

    _renamed_keys = {"damping": "friction"}

    def __post_init__(self, **kwargs):
        super().__post_init__(**kwargs)
        if self.problem_type is None:  # the head's loss (self.loss_function): cross-entropy over num_labels classes
            self.problem_type = "single_label_classification"

    def validate_architecture(self) -> None:
        """The dynamics give a stable step and a zero initialiser is not trained (a ``@strict`` hook, see
        [`LoopConfigMixin`]; each key's own range and choices are checked by its field)."""
        super().validate_architecture()
        name = type(self).__name__
        check_int(self, 1, "num_labels")
        if self.problem_type != "single_label_classification":
            raise ValueError(
                f"{name}: problem_type must be 'single_label_classification' (one class per example), got "
                f"{self.problem_type!r}."
            )
        if self.friction * self.step_size >= 2.0:
            raise ValueError(
                f"{name}: friction * step_size must be < 2 for a stable step, got {self.friction} * {self.step_size}."
            )
        bound = stiffness_bound(float(self.step_size), float(self.friction))
        if self.anchor >= bound:
            raise ValueError(
                f"{name}: the linearised step is unstable: step_size^2 * anchor must be < 4 - 2 * step_size * "
                f"friction, i.e. anchor < {bound:.4g} for step_size={self.step_size} and friction={self.friction}, "
                f"got anchor={self.anchor}."
            )
        if self.dynamics == "start_anchored" and self.anchor_target != "origin":
            raise ValueError(
                f"{name}: dynamics='start_anchored' centres the anchor at the solver's start; anchor_target must be "
                f"'origin' (unused), got {self.anchor_target!r}."
            )
        if self.initializer == "zero" and self.initializer_loss_weight > 0:
            raise ValueError(
                f"{name}: initializer_loss_weight must be 0 with initializer='zero' (nothing to train), got "
                f"{self.initializer_loss_weight}."
            )


__all__ = ["PHDEQConfig"]
