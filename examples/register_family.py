"""A looped architecture of your own, served by the package after one call: ``register_family``.

The architecture here is a Llama decoder layer looped ``num_loops`` times between the embeddings and the final norm
(transformers' own Llama pieces). Its record names its classes, its heads and its loop protocol; the protocol says
how the package drives the loop (the defaults: ``num_loops`` in ``forward`` and the base model's ``loop_map``) and
how the head reads a state (``decode``) and runs a fixed number of steps (``states``). Registered, the model loads
with ``AutoModelForCausalLM``, trains with ``StarsTrainer`` at a loop count drawn per step (the record's protocol
gives it that capability; STARS' Jacobian penalty, which its forward does not compute, stays off), is scored at
several loop counts and audited, and gets a model card.

    python examples/register_family.py --output_dir out/looped_llama
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
from torch import nn
from transformers import GenerationMixin, LlamaConfig, PreTrainedModel
from transformers.modeling_outputs import BaseModelOutput, CausalLMOutput
from transformers.models.llama.modeling_llama import LlamaDecoderLayer, LlamaRMSNorm, LlamaRotaryEmbedding

from equilibria.families import Family, Head, register_family
from equilibria.loops import LoopProtocol, LoopStates, base_model_of, head_model
from equilibria.modeling.loop_map import LoopMap


class LoopedLlamaConfig(LlamaConfig):
    model_type = "looped_llama"

    def __init__(self, num_loops: int = 4, **kwargs):
        self.num_loops = num_loops
        super().__init__(**kwargs)


class LoopedLlamaModel(PreTrainedModel):
    config_class, base_model_prefix = LoopedLlamaConfig, "model"

    def __init__(self, config):
        super().__init__(config)
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layer, self.rotary = LlamaDecoderLayer(config, 0), LlamaRotaryEmbedding(config)
        self.norm = LlamaRMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.post_init()

    def loop_map(self, input_ids, attention_mask=None) -> LoopMap:
        """One loop step as a function of the state, and the embeddings it starts from (causal attention)."""
        start = self.embed_tokens(input_ids)
        positions = torch.arange(input_ids.shape[1], device=input_ids.device)[None]
        rotary = self.rotary(start, positions)
        mask = torch.full((input_ids.shape[1],) * 2, float("-inf"), device=start.device).triu(1)[None, None]
        if attention_mask is not None:
            mask = mask + (1.0 - attention_mask[:, None, None, :].to(start.dtype)) * torch.finfo(start.dtype).min
        return LoopMap(lambda h: self.layer(h, attention_mask=mask, position_embeddings=rotary), start)

    def forward(self, input_ids, attention_mask=None, num_loops: int | None = None, **kwargs):
        step, state = self.loop_map(input_ids, attention_mask)
        for _ in range(self.config.num_loops if num_loops is None else num_loops):
            state = step(state)
        return BaseModelOutput(last_hidden_state=self.norm(state))


class LoopedLlamaForCausalLM(PreTrainedModel, GenerationMixin):
    config_class, base_model_prefix = LoopedLlamaConfig, "model"

    def __init__(self, config):
        super().__init__(config)
        self.model = LoopedLlamaModel(config)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self.post_init()

    def forward(self, input_ids, attention_mask=None, labels=None, num_loops: int | None = None, **kwargs):
        logits = self.lm_head(self.model(input_ids, attention_mask, num_loops).last_hidden_state)
        loss = None if labels is None else self.loss_function(logits, labels, self.config.vocab_size, **kwargs)
        return CausalLMOutput(loss=loss, logits=logits)


class LoopedLlamaLoop(LoopProtocol):
    """The protocol: the count and the loop map are the defaults; a state is read by the final norm and the head."""

    model_types = ("looped_llama",)

    def decode(self, model, batch, state):
        return head_model(model).lm_head(base_model_of(model).norm(state))

    def states(self, model, batch, num_loops):
        loop = self.loop_map(model, batch)
        trajectory = [loop(loop.start)]
        for _ in range(1, num_loops):
            trajectory.append(loop(trajectory[-1]))
        return LoopStates(trajectory[0], trajectory[max(num_loops - 2, 0)], trajectory[-1])


def small_config(fields: dict, hidden_size: int, num_layers: int, num_attention_heads: int, num_loops: int):
    """The record's small-config factory (a task's vocabulary and special tokens, then the sizes)."""
    return LoopedLlamaConfig(
        num_loops=num_loops, hidden_size=hidden_size, intermediate_size=2 * hidden_size, num_hidden_layers=1,
        num_attention_heads=num_attention_heads, num_key_value_heads=num_attention_heads, use_cache=False,
        **{"max_position_embeddings": 64, **fields},
    )  # fmt: skip


FAMILY = register_family(
    Family(
        loop_meaning="passes of the looped Llama layer",
        protocol=LoopedLlamaLoop(),
        base_class=LoopedLlamaModel,
        heads=(Head(LoopedLlamaForCausalLM, kind="causal_lm", tasks=("addition",)),),
        make_config=small_config,
    )
)


def main(argv: list[str] | None = None) -> dict:
    """Train a small looped Llama on 2-digit addition, save and reload it, score it at 1-8 loops on the 200
    held-out problems and audit its loop on them; returns (and writes to ``results.json`` in the output folder) the
    scores and the verdict."""
    from transformers import AutoModelForCausalLM

    from equilibria.diagnostics import audit
    from equilibria.hub_cards import build_model_card
    from equilibria.scaling import loop_scaling
    from equilibria.tasks import build_task, tokenizer_fields
    from equilibria.tasks.addition import tokenize_for_training
    from equilibria.tasks.text_data import training_collator
    from equilibria.trainers import StarsTrainer, StarsTrainingArguments

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output_dir", required=True)
    parser.add_argument("--max_steps", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    torch.manual_seed(args.seed)
    task = build_task("addition", 4000, 200, args.seed)  # 2-digit sums; the 200 test problems are held out
    model = LoopedLlamaForCausalLM(small_config(tokenizer_fields(task.tokenizer), 64, 1, 4, 4))
    train = StarsTrainingArguments(args.output_dir, max_steps=args.max_steps, per_device_train_batch_size=64,
                                   learning_rate=3e-3, min_loops=2, max_loops=6, jsrr_weight=0.0, report_to=[],
                                   save_strategy="no", seed=args.seed, use_cpu=True, logging_steps=10)  # fmt: skip
    trainer = StarsTrainer(model=model, args=train, train_dataset=task.train,
                           data_collator=training_collator(task.tokenizer))  # fmt: skip
    trainer.train()
    drawn = [round(h["num_loops"], 2) for h in trainer.state.log_history if "num_loops" in h]  # mean per 10 steps
    model.save_pretrained(args.output_dir)
    task.tokenizer.save_pretrained(args.output_dir)
    model = AutoModelForCausalLM.from_pretrained(args.output_dir).eval()
    scores = loop_scaling(model, task.test, [1, 2, 4, 8], model_path=args.output_dir)
    report = audit(model, tokenize_for_training(task.test, task.tokenizer), progress=False)
    print(f"exact match by loops (200 held-out problems): {scores}\naudit: {report.verdict}")
    card = build_model_card(model, loop_scaling=scores, audit=report, task_name="2-digit addition")
    card.save(Path(args.output_dir, "README.md"))  # the model card its record gives it
    result = {"seed": args.seed, "max_steps": args.max_steps, "mean_loops_logged": drawn, "accuracy": scores,
              "verdict": report.verdict}  # fmt: skip
    Path(args.output_dir, "results.json").write_text(json.dumps(result, indent=1))
    return result


if __name__ == "__main__":
    main()
