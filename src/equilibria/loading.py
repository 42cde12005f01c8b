"""Loading a saved model of any family with its task head, the way ``equilibria eval`` / ``audit`` / ``generate`` /
``card`` do: the head's Auto class comes from the family's record (:mod:`equilibria.families`)."""

from __future__ import annotations

from pathlib import Path

import transformers
from transformers import AutoConfig

from .families import family_record


def load_saved_model(path: str, trust_remote_code: bool = False):
    """A saved model of any family with its task head (the head's Auto class from the family's record), in eval
    mode; a folder holding a LoRA adapter loads its base model with the adapter applied (transformers' peft
    integration). Its family's loop protocol prepares it for ``num_loops`` per call (a looped LM that transformers ships gets
    :func:`~equilibria.looped`). ``ValueError`` when ``path``
    is no saved model of a family."""
    if not Path(path).is_dir():
        raise ValueError(f"{path} is not a folder written by save_pretrained")
    config_of = path
    if not (Path(path) / "config.json").is_file():
        if not (Path(path) / "adapter_config.json").is_file():
            raise ValueError(
                f"{path} is not a folder written by save_pretrained: it has no config.json (nor a LoRA adapter)"
            )
        from peft import PeftConfig  # a LoRA adapter: its base model's config

        config_of = PeftConfig.from_pretrained(path).base_model_name_or_path
    config = AutoConfig.from_pretrained(config_of, trust_remote_code=trust_remote_code)
    try:
        auto = getattr(transformers, family_record(config).head_of_config(config).auto_class)
    except ValueError as err:
        raise ValueError(f"{path}: {err}") from None
    model = auto.from_pretrained(path, trust_remote_code=trust_remote_code).eval()
    return family_record(config).protocol.prepare(model)


__all__ = ["load_saved_model"]
