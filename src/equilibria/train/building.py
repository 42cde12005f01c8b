"""Building what ``equilibria train`` trains: the data (your ``--dataset_name`` rows or a task's generated
problems, with the tokenizer and the training-question fingerprints) and the model (a checkpoint, or a new small
one of the family), LoRA-wrapped with ``--use_peft``."""

from __future__ import annotations

from pathlib import Path

from ..families import FAMILIES
from ..tasks.registry import puzzle_cells
from .train_arguments import DTYPES, NEW_MODEL_SIZES, ModelArguments, TrainDataArguments, checkpoint_config


def build(model_args: ModelArguments, data_args: TrainDataArguments, seed: int):
    """``(model, data, collator)``: the data (:class:`~equilibria.tasks.TaskData`: your ``--dataset_name`` rows,
    or the task's generated splits with its tokenizer and training-question fingerprints) and the model: the
    checkpoint ``--model_name_or_path``, or a new one of the family with a small config sized by ``model_args``."""
    from ..families import model_task
    from ..tasks import ROWS_TASK, check_task
    from ..tasks.text_data import training_collator

    family = FAMILIES[model_args.family]
    checkpoint = model_args.model_name_or_path
    config = checkpoint_config(checkpoint) if checkpoint else None
    given = [f"--{key}" for key in NEW_MODEL_SIZES if key != "num_loops" and getattr(model_args, key) is not None]
    if config is not None and given:
        raise ValueError(f"{', '.join(given)} size a new model; {checkpoint} keeps its own: drop them")
    _overrides(model_args, family)
    if model_args.use_peft and checkpoint is None:
        raise ValueError("--use_peft adapts a trained checkpoint: give --model_name_or_path")
    what = f"--family {model_args.family}"
    if data_args.task is not None:  # the head the data is for: the task's, else a checkpoint's own
        head = family.head_for_task(check_task(data_args.task), what)
    else:
        head = family.head_of_config(config) if config is not None else family.heads[0]
    puzzle = not head.reads_text
    text = family.heads[0].reads_text and not puzzle  # --dataset_name holds text rows
    if data_args.dataset_name and data_args.task and text:
        raise ValueError("pass either --dataset_name (your rows) or --task (generated problems), not both")
    if data_args.dataset_name and text:
        head, task, data = family.heads[0], None, _dataset(model_args, data_args, family, config, seed)
    else:
        own = model_task(config) if config is not None else family.default_task
        task = check_task(data_args.task or (own if own in head.tasks else head.tasks[0]))
        head = family.head_for_task(task, what)
        data = _task_data(task, data_args, config, seed + data_args.data_seed_offset)
        if config is not None and data.tokenizer is not None:
            _check_task_tokenizer(checkpoint, data.tokenizer, task)
        if checkpoint is not None and not data_args.dataset_name:
            _without_earlier_training(checkpoint, data)
    model = _model(model_args, family, head, data, config)
    family.protocol.prepare(model)  # num_loops per call (transformers' looped LMs: looped())
    # the last stage's task: a generated task, or rows of your own (no generated task is then the model's)
    model.config.equilibria_task = task if task is not None else ROWS_TASK
    if model_args.use_peft:
        model = with_lora(model, model_args, family)
    collator = training_collator(data.tokenizer) if data.tokenizer is not None else None  # text: right padding
    return model, data, collator


def _task_data(task: str, data_args: TrainDataArguments, config, seed: int):
    """The :class:`~equilibria.tasks.TaskData` of ``task``: rows of ``--dataset_name`` (a published puzzle CSV, or
    ``inputs`` / ``labels`` rows), or generated problems at the checkpoint's size (``config``) or the flags'."""
    from ..tasks import build_task, build_task_rows, task_shape

    shape = task_shape(config, task) if config else {}
    if data_args.dataset_name:
        if data_args.split_by != "class":
            raise ValueError(
                "--split_by applies to generated puzzles; rows of --dataset_name are held out up to the task's "
                "symmetries (held-out rows in a training puzzle's class are dropped)"
            )
        data = build_task_rows(
            data_args.dataset_name,
            task,
            **data_args.split_options(),
            seed=seed,
            validation_size=data_args.validation_size,
        )
        cells = data.config_fields.get("max_seq_len")
        if config is not None and cells is not None and cells > puzzle_cells(config)[0]:
            limit, key = puzzle_cells(config)
            raise ValueError(
                f"--dataset_name {data_args.dataset_name}: its puzzles have {cells} cells, more than the checkpoint's "
                f"{key} {limit}"
            )
        return data
    test_size = 200 if data_args.test_size is None else data_args.test_size
    return build_task(
        task,
        data_args.train_size or 2000,
        test_size,
        seed=seed,
        digits=2 if data_args.digits is None else data_args.digits,
        size=shape.get("size", data_args.size),
        nodes=shape.get("nodes", data_args.nodes),
        split_by=data_args.split_by,
        options=data_args.task_options(),
        validation_size=(test_size or 200) if data_args.validation_size is None else data_args.validation_size,
    )


def _dataset(model_args: ModelArguments, data_args: TrainDataArguments, family, config, seed: int):
    """The :class:`~equilibria.tasks.TaskData` of ``--dataset_name``, tokenised with the checkpoint's tokenizer
    (or ``--tokenizer_name_or_path``); a new model's config fields are the tokenizer's and ``--max_length``."""
    from ..tasks import tokenizer_fields
    from ..tasks.row_files import parse_columns
    from ..tasks.text_data import build_text_data

    tokenizer = _text_tokenizer(model_args.tokenizer_name_or_path or model_args.model_name_or_path)
    positions = config.max_position_embeddings if config is not None else None
    max_length = data_args.max_length or min(1024, positions or 1024)
    if positions is not None and max_length > positions:
        import warnings

        warnings.warn(
            f"--max_length {max_length} is more than the {positions} positions the model was configured for "
            "(max_position_embeddings): rotary positions continue past them, but it was not trained there",
            stacklevel=2,
        )
    data = build_text_data(
        data_args.dataset_name,
        tokenizer,
        max_length,
        **data_args.split_options(),
        text_field=data_args.dataset_text_field,
        packing=data_args.packing,
        metric=data_args.eval_metric,
        seed=seed + data_args.data_seed_offset,
        columns=parse_columns(data_args.dataset_columns),
        validation_size=data_args.validation_size,
    )
    data.config_fields = {**tokenizer_fields(tokenizer), "max_position_embeddings": max_length}
    return data


def _without_earlier_training(checkpoint: str, data) -> None:
    """Fine-tuning a checkpoint on freshly generated problems of the task it was trained on: drop from the test split
    every question of the checkpoint's own training (its ``training_data.json``), and keep those questions in the
    new training record, so that no evaluation of the result (here or by ``equilibria eval``) repeats them."""
    from ..tasks import fingerprints, load_training_record

    record = load_training_record(checkpoint) if Path(checkpoint).is_dir() else None
    if not record or record.get("task") != data.name or not record.get("fingerprints"):
        return
    earlier = set(record["fingerprints"])
    keep = [i for i, key in enumerate(fingerprints(data.name, data.test)) if key not in earlier]
    dropped = len(data.test) - len(keep)
    data.train_fingerprints = sorted(set(data.train_fingerprints) | earlier)
    if dropped:
        data.test = data.test.select(keep)
        data.record["dropped_as_trained"] = {"dropped": dropped, "drawn": dropped + len(keep)}
        note = f"{dropped} test problems dropped: {checkpoint} was trained on them"
        data.test_description = f"{data.test_description}; {note}" if data.test_description else note


def _check_task_tokenizer(checkpoint: str, task_tokenizer, task: str) -> None:
    """A checkpoint trained further on a generated text task must read it with the task's own tokenizer."""
    from transformers import AutoTokenizer

    try:
        vocab = AutoTokenizer.from_pretrained(checkpoint).get_vocab()
    except (OSError, ValueError, TypeError):
        vocab = None
    if vocab != task_tokenizer.get_vocab():
        raise ValueError(
            f"{checkpoint} does not read {task} problems with the task's tokenizer (it was not trained on them by "
            "equilibria): fine-tune it on your data with --dataset_name"
        )


def _text_tokenizer(name: str | None):
    """The tokenizer at ``name``, with a padding token (its end-of-sequence token when it has none)."""
    from ..tasks.tokenization import load_tokenizer

    if name is None:
        raise ValueError(
            "--dataset_name needs a tokenizer: give --model_name_or_path (a checkpoint with one) or "
            "--tokenizer_name_or_path"
        )
    tokenizer = load_tokenizer(name, "--dataset_name", hint="; pass --tokenizer_name_or_path")
    if tokenizer.eos_token_id is None:
        raise ValueError(f"the tokenizer of {name} has no end-of-sequence token, which ends every training row")
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


LORA_SAVES = ("merged", "adapter")


def with_lora(model, model_args: ModelArguments, family):
    """``model`` wrapped by peft with LoRA on ``--lora_target_modules`` (default: the family's ``lora_targets``);
    only the LoRA weights train."""
    from peft import LoraConfig, TaskType, get_peft_model

    if model_args.lora_save not in LORA_SAVES:
        raise ValueError(f"--lora_save must be one of {LORA_SAVES}, got {model_args.lora_save!r}")
    targets = list(model_args.lora_target_modules or family.lora_targets)
    linear = {name.rsplit(".", 1)[-1] for name, module in model.named_modules() if type(module).__name__ == "Linear"}
    missing = sorted(set(targets) - linear)
    if missing:
        raise ValueError(
            f"--lora_target_modules {missing} are not linear layers of this model; it has {sorted(linear)}"
        )
    lm = family.head_of_model(model).reads_text
    lora = LoraConfig(
        r=model_args.lora_r,
        lora_alpha=model_args.lora_alpha,
        lora_dropout=model_args.lora_dropout,
        target_modules=targets,
        task_type=TaskType.CAUSAL_LM if lm else None,
    )
    return get_peft_model(model, lora)


def save_lora(model, folder: Path, how: str):
    """Save a LoRA-trained ``model`` (a peft model) into ``folder`` as ``how`` says (:data:`LORA_SAVES`) and return
    the model to evaluate: the merged plain model, or the peft model whose adapter ``folder`` now holds."""
    if how == "adapter":
        model.save_pretrained(folder)
        return model
    merged = model.merge_and_unload()
    for name in ("adapter_config.json", "adapter_model.safetensors", "adapter_model.bin"):
        (folder / name).unlink(missing_ok=True)  # what the Trainer saved: a folder with both loads the adapter
    merged.save_pretrained(folder)
    return merged


def _overrides(model_args: ModelArguments, family) -> dict:
    """The config values ``--exit_loss`` sets (checked before any data is built; ``--num_loops``'s need the config)."""
    from ..modeling.configuration_ouro import EXIT_LOSSES

    overrides = {}  # --num_loops: set by the family's protocol once the config is known (_model)
    if model_args.exit_loss is not None:
        family.require("early_exit", "--exit_loss")
        if model_args.exit_loss not in EXIT_LOSSES:
            raise ValueError(f"--exit_loss must be one of {EXIT_LOSSES}, got {model_args.exit_loss!r}")
        overrides["exit_loss"] = model_args.exit_loss
    return overrides


def _preset_config(model_args: ModelArguments, family, data):
    """A new model's config from the preset ``--config_preset`` of the family's config class, the task's fields
    and the sizes given as flags overriding it."""
    from_preset = getattr(family.config_class, "from_preset", None)
    if from_preset is None:
        raise ValueError(f"--config_preset: the {family.model_type} family has no architecture presets")
    given = {key: getattr(model_args, key) for key in NEW_MODEL_SIZES if getattr(model_args, key) is not None}
    given.pop("num_loops", None)  # set with the other overrides, under the family's key
    return from_preset(model_args.config_preset, **dict(data.config_fields), **given)


def _model(model_args: ModelArguments, family, head, data, config):
    """The checkpoint (``config`` is its config) loaded into ``head``'s class, or a new model of ``family``;
    ``--num_loops`` and ``--exit_loss`` set in either config."""

    overrides = _overrides(model_args, family)
    if config is None and model_args.config_preset is not None:
        config = _preset_config(model_args, family, data)
    elif config is None:
        sizes = [
            NEW_MODEL_SIZES[key] if getattr(model_args, key) is None else getattr(model_args, key)
            for key in NEW_MODEL_SIZES
        ]
        config = family.make_config(dict(data.config_fields), *sizes)
    elif model_args.config_preset is not None:
        raise ValueError("--config_preset builds a new model; a checkpoint (--model_name_or_path) keeps its own config")
    vocab = len(data.tokenizer) if data.tokenizer is not None else None
    if vocab is not None and vocab > config.vocab_size:
        raise ValueError(
            f"the tokenizer has {vocab} tokens but the model's vocab_size is {config.vocab_size}: give the tokenizer "
            "the checkpoint was trained with"
        )
    if model_args.num_loops is not None:  # the config values of the count (HRM-text: its cache slots too)
        overrides.update(family.protocol.loop_config(config, model_args.num_loops))
    for key, value in overrides.items():
        setattr(config, key, value)
    config.validate_architecture()
    if model_args.model_name_or_path is None:
        return head.model_class(config)
    if model_args.dtype not in DTYPES:  # a config file's value is not checked against the flag's choices
        raise ValueError(f"--dtype must be one of {DTYPES}, got {model_args.dtype!r}")
    return head.model_class.from_pretrained(model_args.model_name_or_path, config=config, dtype=model_args.dtype)
