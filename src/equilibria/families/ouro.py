"""The Ouro looped LM's record (Zhu et al., 2025) and its small configs."""

from __future__ import annotations

from transformers import PreTrainedTokenizerBase

from ..loops import OuroLoop
from ..modeling import OuroConfig, OuroForCausalLM, OuroModel
from ..tasks.recipes import VALIDATED, looped_lm_recipe
from .card_text import LM_USAGE, FamilyText
from .record import Family, Head
from .vocabulary import small_lm_fields


def small_ouro_config(
    tokenizer: PreTrainedTokenizerBase | int,
    hidden_size: int = 128,
    num_hidden_layers: int = 2,
    num_attention_heads: int = 4,
    total_ut_steps: int = 4,
) -> OuroConfig:
    """A small Ouro config for a character-level task: vocabulary and special tokens from ``tokenizer`` (or just a
    vocabulary size), SwiGLU width ``2 * hidden_size``, positions up to 64 with a tokenizer (512 without)."""
    return _ouro_config(small_lm_fields(tokenizer), hidden_size, num_hidden_layers, num_attention_heads, total_ut_steps)


def _ouro_config(fields: dict, hidden_size: int, num_layers: int, num_attention_heads: int, num_loops: int):
    return OuroConfig(
        **{"max_position_embeddings": 64, **fields},
        hidden_size=hidden_size,
        intermediate_size=2 * hidden_size,
        num_hidden_layers=num_layers,
        num_attention_heads=num_attention_heads,
        total_ut_steps=num_loops,
    )


OURO_BIBTEX = """@misc{zhu2025ouro,
  title = {Scaling Latent Reasoning via Looped Language Models},
  author = {Zhu, Rui-Jie and Wang, Zixuan and Hua, Kai and Zhang, Tianyu and Li, Ziniu and Que, Haoran and Wei, Boyi
    and Wen, Zixin and Yin, Fan and Xing, He and Li, Lu and Shi, Jiajun and Ma, Kaijing and Li, Shanda and Kergan,
    Taylor and Smith, Andrew and Qu, Xingwei and Hui, Mude and Wu, Bohong and Min, Qiyang and Huang, Hongzhi and Zhou,
    Xun and Ye, Wei and Liu, Jiaheng and Yang, Jian and Shi, Yunfeng and Lin, Chenghua and Zhao, Enduo and Cai, Tianle
    and Zhang, Ge and Huang, Wenhao and Bengio, Yoshua and Eshraghian, Jason},
  year = {2025},
  eprint = {2510.25741},
  archivePrefix = {arXiv}
}

@misc{yang2026stars,
  title = {Stabilizing Recurrent Dynamics for Test-Time Scalable Latent Reasoning in Looped Language Models},
  author = {Yang, Xiao-Wen and Han, Zi-Yu and Zhang, Xi-Hua and Wei, Wen-Da and Shao, Jie-Jing and Guo, Lan-Zhe
    and Li, Yu-Feng},
  year = {2026},
  eprint = {2605.26733},
  archivePrefix = {arXiv}
}"""


OURO_TEXT = FamilyText(
    name="Ouro looped language model",
    paper="Zhu et al., 2025, *Scaling Latent Reasoning via Looped Language Models* (Ouro); STARS fine-tuning "
    "(random loop counts + a Jacobian spectral-radius penalty) from Yang et al., 2026, *Stabilizing Recurrent "
    "Dynamics for Test-Time Scalable Latent Reasoning in Looped Language Models*",
    tags=("looped-lm", "recurrent-depth"),
    usage={"causal_lm": LM_USAGE},
    citation=OURO_BIBTEX,
)

OURO = Family(
    loop_meaning="recurrence steps of the shared decoder stack",
    protocol=OuroLoop(),
    base_class=OuroModel,
    heads=(Head(OuroForCausalLM, kind="causal_lm", tasks=("addition",)),),
    make_config=_ouro_config,
    capabilities=frozenset({"sampled_loops", "stars_penalty", "per_loop_readout", "vllm", "early_exit"}),
    card=OURO_TEXT,
    # the last step's loss: what a fixed loop count reads. 6000 steps, the whole cosine schedule, validated every 250
    # and the best kept: a seed that learns late still gets a decayed learning rate after it has learned
    recipes=(
        looped_lm_recipe(
            "addition",
            "a 0.33M-parameter Ouro (width 128, 2 layers) at 4 loops on 8000 generated "
            "2-digit sums, the last step's loss",
            exit_loss="final",
            max_steps=6000,
            **VALIDATED,
        ),
    ),  # fmt: skip
)
