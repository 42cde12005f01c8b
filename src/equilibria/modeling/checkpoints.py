"""Loading, saving and publishing a family's models: ``from_pretrained`` that refuses a checkpoint not matching the
config, ``save_pretrained`` that writes the ``auto_map`` for remote code, ``push_to_hub`` with the model card an
installed ``equilibria`` writes.

Hub-portable: travels as remote code beside the modeling files (it imports only safetensors and, to publish,
huggingface_hub, both dependencies of transformers; the model card writer is found through an entry point, never
imported).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable

from safetensors import SafetensorError, safe_open


class StrictLoadingMixin:
    """Mixed into a family's ``PreTrainedModel``: ``from_pretrained`` refuses checkpoints that do not match the
    config, ``save_pretrained`` writes an ``auto_map`` so the folder loads with ``trust_remote_code=True``, and the
    class attributes every family shares are set here.

    Subclasses set ``_remote_auto_map`` (Auto class name -> ``"module.Class"``)."""

    _remote_auto_map: dict[str, str] = {}
    _weight_shaping_keys: tuple[str, ...] = ()  # config keys that decide which weights exist (named when they differ)
    _head_weight_prefixes: tuple[str, ...] = ("lm_head.",)  # a head's weights, ignored when loading the base model
    base_model_prefix = "model"  # every family's heads hold the base model as `model`
    _auto_class = "AutoModel"  # a base model saves its own class in the auto_map; heads override

    @classmethod
    def from_pretrained(cls, *args, **kwargs):
        """[`PreTrainedModel.from_pretrained`], but strict for the body: a checkpoint whose body weights are missing,
        unexpected or of the wrong shape raises ``ValueError`` naming them instead of leaving randomly initialised
        weights behind a warning. ``ignore_mismatched_sizes=True`` keeps transformers' lenient behaviour for shapes.
        As in transformers, a base-model checkpoint loads into a class with a head: the head's weights (the only
        ones missing) are newly initialised, named in transformers' load report, and listed in ``missing_keys`` of
        ``output_loading_info=True``; a head checkpoint loads into the base model, its head weights ignored."""
        want_info = kwargs.pop("output_loading_info", False)
        lenient_shapes = kwargs.pop("ignore_mismatched_sizes", False)
        # load leniently, then report every problem at once in one clear error
        try:
            model, info = super().from_pretrained(
                *args, output_loading_info=True, ignore_mismatched_sizes=True, **kwargs
            )
        except SafetensorError as error:
            where = args[0] if args else kwargs.get("pretrained_model_name_or_path")
            raise ValueError(
                f"{cls.__name__}.from_pretrained: cannot read the weights {unreadable_weights(where) or where} "
                f"(truncated or not a safetensors file: {error}); save or download the checkpoint again."
            ) from None
        problems = []
        # a missing head is new, as in transformers (its load report names it); a missing body is refused
        missing = sorted(k for k in info.get("missing_keys", []) if not k.startswith(cls._head_weight_prefixes))
        unexpected = sorted(k for k in info.get("unexpected_keys", []) if not k.startswith(cls._head_weight_prefixes))
        mismatched = info.get("mismatched_keys", [])
        if missing:
            problems.append(f"missing weights (would be left randomly initialised): {missing[:12]}")
        if unexpected:
            problems.append(f"unexpected weights (not part of {cls.__name__}): {unexpected[:12]}")
        if mismatched and not lenient_shapes:
            shapes = [
                f"{key}: checkpoint {tuple(ckpt)} vs model {tuple(ours)}" for key, ckpt, ours in list(mismatched)[:12]
            ]
            problems.append(f"weights of the wrong shape: {shapes}")
        if problems:
            raise ValueError(
                f"{cls.__name__}.from_pretrained: the checkpoint does not match the config: "
                + "; ".join(problems)
                + cls._shaping_hint(model.config, missing or unexpected)
            )
        return (model, info) if want_info else model

    @classmethod
    def _shaping_hint(cls, config, names_differ) -> str:
        """Where weights are missing or unexpected, the config keys that decide which weights exist and this
        config's values of them (a checkpoint saved under other values of them cannot load into this config)."""
        if not names_differ or not cls._weight_shaping_keys:
            return ""
        values = ", ".join(f"{key}={getattr(config, key, None)!r}" for key in cls._weight_shaping_keys)
        return (
            f". This config has {values}: a checkpoint saved with another value has other weights (load it with "
            "its own config, or pass the checkpoint's value)"
        )

    def save_pretrained(self, save_directory, *args, **kwargs):
        """[`PreTrainedModel.save_pretrained`], writing the remote code and an ``auto_map`` for the family's Auto
        classes, so the folder loads with ``trust_remote_code=True`` where ``equilibria`` is not installed."""
        self.config.auto_map = dict(self._remote_auto_map)
        return super().save_pretrained(save_directory, *args, **kwargs)

    def push_to_hub(self, repo_id: str, *, commit_message: str | None = None, **kwargs):
        """[`PushToHubMixin.push_to_hub`], publishing the model card an installed ``equilibria`` writes (found
        through the ``equilibria.model_card`` entry point; the results of the folder the model was loaded from go
        along with it) instead of transformers' blank template. Without the package, transformers' behaviour."""
        writer = model_card_writer()
        if writer is None:
            return super().push_to_hub(repo_id, commit_message=commit_message, **kwargs)
        from huggingface_hub import HfApi

        api = HfApi(token=kwargs.get("token"))
        repo_id = api.create_repo(repo_id, private=kwargs.get("private"), exist_ok=True).repo_id
        with tempfile.TemporaryDirectory() as folder:
            self.save_pretrained(folder, max_shard_size=kwargs.get("max_shard_size") or "50GB")
            tags = kwargs.get("tags") or []
            tags = [tags] if isinstance(tags, str) else tags
            writer(self, folder, repo_id=repo_id, tags=list(dict.fromkeys([*(self.model_tags or []), *tags])))
            return api.upload_folder(
                repo_id=repo_id,
                folder_path=folder,
                commit_message=commit_message or "Upload model",
                commit_description=kwargs.get("commit_description"),
                revision=kwargs.get("revision"),
                create_pr=kwargs.get("create_pr", False),
            )


MODEL_CARD_ENTRY_POINT = "equilibria.model_card"


def model_card_writer() -> Callable | None:
    """The model-card writer ``write(model, folder, repo_id=..., tags=...)`` an installed package registers under the
    ``equilibria.model_card`` entry point, or ``None`` (this module imports nothing of the package itself)."""
    from importlib.metadata import entry_points

    for entry in entry_points(group=MODEL_CARD_ENTRY_POINT):
        return entry.load()
    return None


def unreadable_weights(folder) -> list[str]:
    """The ``.safetensors`` files in a local ``folder`` that do not open (truncated or garbage)."""
    if folder is None or not os.path.isdir(folder):
        return []
    broken = []
    for name in sorted(os.listdir(folder)):
        if name.endswith(".safetensors"):
            path = os.path.join(folder, name)
            try:
                with safe_open(path, framework="pt") as handle:
                    for key in handle.keys():
                        handle.get_slice(key)
            except (SafetensorError, OSError):
                broken.append(path)
    return broken


__all__ = ["MODEL_CARD_ENTRY_POINT", "StrictLoadingMixin", "model_card_writer", "unreadable_weights"]
