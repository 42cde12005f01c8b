"""A loop count per request in vLLM: ``SamplingParams(extra_args={"num_loops": k})`` (the OpenAI API's
``extra_body={"vllm_xargs": {"num_loops": k}}``).

vLLM's model ``forward`` sees a flat batch of tokens, not its requests or their sampling parameters. Its logits
processors do: before each forward the engine tells them which request sits in which row of the batch
(``update_state``, with each new request's ``SamplingParams``), and the forward's attention metadata gives the tokens
of each row (``query_start_loc``). :class:`LoopCounts` is such a processor that changes no logits: it keeps each row's
count where the model (:class:`~equilibria.serving.vllm_ouro.OuroForCausalLM`, in the same worker process) reads it,
and its ``validate_params`` refuses a bad count when the request arrives (HTTP 400 on the server). This is the
interface of vLLM's V1 model runner, the one vLLM runs on a CPU; its V2 runner (the default on GPUs) calls a
processor only after the forward, so there a request with ``num_loops`` is refused in one line
(:class:`LoopCountsRefusedV2`).
"""

from __future__ import annotations

import torch
from vllm import SamplingParams
from vllm.forward_context import get_forward_context
from vllm.v1.sample.logits_processor import BatchUpdate, LogitsProcessor, MoveDirectionality
from vllm.v1.worker.gpu.sample.logits_processor import LogitsProcessor as LogitsProcessorV2

KEY = "num_loops"
#: what the served model allows, recorded where vLLM builds its config (the process that admits requests):
#: ``max`` (the most loops a request may ask for), and why requests may not ask at all (``refused``, or None)
SERVED: dict = {"max": None, "refused": None}
#: the batch row -> loop count of the requests that asked for one (the worker's; written before each forward)
ROWS: dict[int, int] = {}


def requested_loops(params: SamplingParams) -> int | None:
    """The count a request asks for (``extra_args["num_loops"]``), or None."""
    return (params.extra_args or {}).get(KEY)


def check_request(params: SamplingParams) -> None:
    """Raise ``ValueError`` (vLLM answers HTTP 400) unless the request's ``num_loops`` is absent, or an integer from 1
    to the server's most."""
    value = requested_loops(params)
    if value is None:
        return
    if SERVED["refused"]:
        raise ValueError(f"extra_args num_loops: {SERVED['refused']}")
    most = SERVED["max"]
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= most:
        raise ValueError(
            f"extra_args num_loops must be an integer from 1 to {most} (this server's max_num_loops; start it with "
            f'hf_overrides {{"max_num_loops": N}} for more), got {value!r}'
        )


class LoopCounts(LogitsProcessor):
    """Keeps each batch row's requested loop count in :data:`ROWS` (a V1 logits processor that changes no logits)."""

    def __init__(self, vllm_config, device: torch.device, is_pin_memory: bool) -> None:
        ROWS.clear()

    @classmethod
    def validate_params(cls, sampling_params: SamplingParams) -> None:
        check_request(sampling_params)

    def is_argmax_invariant(self) -> bool:
        return True

    def apply(self, logits: torch.Tensor) -> torch.Tensor:
        return logits

    def update_state(self, batch_update: BatchUpdate | None) -> None:
        """Follow the batch's rows, in the order vLLM documents: removed, added, moved."""
        if batch_update is None:
            return
        for row in batch_update.removed:
            ROWS.pop(row, None)
        for row, params, _, _ in batch_update.added:
            count = requested_loops(params)
            if count is None:
                ROWS.pop(row, None)
            else:
                ROWS[row] = count
        for a, b, direction in batch_update.moved:
            moved_a, moved_b = ROWS.pop(a, None), ROWS.pop(b, None)
            if moved_a is not None:
                ROWS[b] = moved_a
            if moved_b is not None and direction == MoveDirectionality.SWAP:
                ROWS[a] = moved_b


class LoopCountsRefusedV2(LogitsProcessorV2):
    """Under vLLM's V2 model runner: refuses a request's ``num_loops`` in one line (changes no logits)."""

    @classmethod
    def validate_params(cls, sampling_params: SamplingParams) -> None:
        if requested_loops(sampling_params) is not None:
            raise ValueError(
                "extra_args num_loops needs vLLM's V1 model runner (start vLLM with VLLM_USE_V2_MODEL_RUNNER=0): the "
                "V2 runner, vLLM's default on GPUs, tells logits processors a request's row only after the forward"
            )

    def add_request(self, req_idx: int, sampling_params: SamplingParams) -> bool:
        return False

    def apply(self, logits: torch.Tensor, ctx) -> torch.Tensor:
        return logits


def token_counts(layer_name: str, num_tokens: int, default: int) -> torch.Tensor | None:
    """Each token's loop count in this forward (``(num_tokens,)``), from :data:`ROWS` and the rows' token ranges in
    the attention metadata of ``layer_name``; None when no request in the batch asked for a count (or in vLLM's
    profiling runs, which have no metadata)."""
    if not ROWS:
        return None
    metadata = get_forward_context().attn_metadata
    metadata = metadata.get(layer_name) if isinstance(metadata, dict) else None
    if metadata is None:
        return None
    lengths = metadata.query_start_loc.diff().cpu()
    counts = torch.tensor([ROWS.get(row, default) for row in range(lengths.shape[0])])
    per_token = torch.repeat_interleave(counts, lengths)
    if per_token.shape[0] != num_tokens:  # never in vLLM's layout; refuse to guess
        raise RuntimeError(f"{num_tokens} tokens in the forward, {per_token.shape[0]} in its requests' ranges")
    return per_token
