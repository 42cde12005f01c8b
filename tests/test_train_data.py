"""Fine-tuning a checkpoint on your own data: `equilibria train --model_name_or_path ... --dataset_name ...`, the
row formats (prompt/completion, messages, text, packing), the data files it reads and the one-line errors."""

import json
import string

import pytest
import torch
from conftest import OURO_REFERENCE, addition_rows, tiny_trained_ouro, write_jsonl
from datasets import Dataset
from huggingface_hub import ModelCard
from safetensors.torch import load_file

from equilibria.cli import main
from equilibria.tasks import addition_tokenizer, char_tokenizer
from equilibria.tasks.text_data import (
    DEFAULT_CHAT_TEMPLATE,
    RowEncoder,
    build_text_data,
    encode_prompt_completion,
    encode_rows,
    load_rows,
)

PRINTABLE = char_tokenizer(string.printable)
CONVERSATION = [
    {"role": "system", "content": "be brief"},
    {"role": "user", "content": "1+1?"},
    {"role": "assistant", "content": "2"},
    {"role": "user", "content": "2+2?"},
    {"role": "assistant", "content": "4"},
]
COMMON = ["--report_to", "none", "--save_strategy", "no", "--use_cpu", "--disable_tqdm", "true"]


def labelled(tokenizer, row: dict) -> str:
    """The text of the tokens the loss is on."""
    return "".join(tokenizer.convert_ids_to_tokens([t for t in row["labels"] if t != -100]))


def test_prompt_completion_rows_train_on_the_completion_and_its_end():
    row = RowEncoder(addition_tokenizer(), "prompt_completion", "x")({"prompt": "12+34=", "completion": "46"}, 0)
    assert addition_tokenizer().decode(row["input_ids"]) == "12+34=46</s>"
    assert labelled(addition_tokenizer(), row) == "46</s>"


def test_messages_train_on_the_assistant_turns_only_with_chatml_when_the_tokenizer_has_no_template():
    tokenizer = char_tokenizer(string.printable)
    assert tokenizer.chat_template is None
    row = RowEncoder(tokenizer, "messages", "x")({"messages": CONVERSATION}, 0)
    assert tokenizer.chat_template == DEFAULT_CHAT_TEMPLATE  # set, so it is saved with the model
    assert tokenizer.decode(row["input_ids"]).startswith("<|im_start|>system\nbe brief<|im_end|>\n")
    assert labelled(tokenizer, row) == "2<|im_end|>\n4<|im_end|>\n</s>"


def test_messages_use_the_tokenizers_own_chat_template():
    tokenizer = char_tokenizer(string.printable)
    tokenizer.chat_template = (
        "{% for m in messages %}{{ m['role'][0] + ': ' + m['content'] + '\\n' }}{% endfor %}"
        "{% if add_generation_prompt %}{{ 'a: ' }}{% endif %}"
    )
    row = RowEncoder(tokenizer, "messages", "x")({"messages": CONVERSATION}, 0)
    assert tokenizer.decode(row["input_ids"]) == "s: be brief\nu: 1+1?\na: 2\nu: 2+2?\na: 4\n</s>"
    assert labelled(tokenizer, row) == "2\n4\n</s>"


def test_text_rows_train_on_every_token_and_packing_keeps_every_token():
    rows = Dataset.from_list([{"body": "hello world"}, {"body": "abc"}, {"body": "xy"}])
    unpacked = encode_rows(rows, RowEncoder(PRINTABLE, "text", "x", "body", max_length=8))
    assert [len(ids) for ids in unpacked["input_ids"]] == [8, 4, 3]  # cut to max_length
    assert unpacked["labels"] == unpacked["input_ids"]
    packed = encode_rows(rows, RowEncoder(PRINTABLE, "text", "x", "body", max_length=8, packing=True))
    assert [len(ids) for ids in packed["input_ids"]] == [8, 8, 3]  # 12 + 4 + 3 tokens, nothing cut
    assert PRINTABLE.decode(sum(packed["input_ids"], [])) == "hello world</s>abc</s>xy</s>"


@pytest.mark.parametrize("suffix", [".jsonl", ".json", ".csv", ".parquet", "folder"])
def test_every_data_file_kind_reads_the_same_rows(tmp_path, suffix):
    rows = Dataset.from_list([{"prompt": f"{i}+1=", "completion": str(i + 1)} for i in range(5)])
    path = tmp_path / f"data{suffix}"
    {
        ".jsonl": lambda: rows.to_json(path),
        ".json": lambda: path.write_text(json.dumps(rows.to_list())),
        ".csv": lambda: rows.to_csv(path, index=False),
        ".parquet": lambda: rows.to_parquet(path),
        "folder": lambda: rows.save_to_disk(path),
    }[suffix]()
    loaded = load_rows(str(path))["train"]
    assert [str(r["prompt"]) + str(r["completion"]) for r in loaded] == [f"{i}+1={i + 1}" for i in range(5)]


@pytest.mark.parametrize(
    "rows, message",
    [
        ([{"prompt": "1+1=", "answer": "2"}], "has a `prompt` column but no `completion` column"),
        ([{"question": "1+1="}], "rows need `prompt` and `completion`, or `messages`, or a text column `text`"),
        ([{"prompt": "1+1=", "completion": "2"}, {"prompt": "", "completion": "3"}], "line 2: `prompt` is missing"),
        ([{"prompt": "1+1=", "completion": "2"}, {"prompt": "2+x=", "completion": "3"}], "line 2: `prompt` contains"),
        ([{"prompt": "1+1=", "completion": 2}], "line 1: `completion` must be a string, got int"),
        ([{"messages": [{"role": "user", "content": "1+1="}]}], "line 1: `messages` has no assistant turn"),
        ([{"messages": [{"role": "bot", "content": "2"}]}], "line 1: `messages` turn 1 must have a `role`"),
    ],
)
def test_bad_rows_are_one_line_errors_naming_file_row_and_column(tmp_path, rows, message):
    path = write_jsonl(tmp_path / "mine.jsonl", rows)
    with pytest.raises(ValueError, match="mine.jsonl") as err:
        build_text_data(path, addition_tokenizer(), 32, test_size=0)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_a_bad_row_is_named_by_its_line_in_the_file_not_its_place_after_the_shuffle(tmp_path):
    """The training rows are shuffled before they are encoded; the error still names the file's line (JSON Lines:
    its line; CSV: its line, the header being line 1), and the characters it lists are that row's."""
    rows = [{"prompt": f"{i % 97}+{i // 97}=", "completion": str(i % 97 + i // 97)} for i in range(300)]
    rows[49]["prompt"] = "ab+cd="  # line 50 of the JSON Lines file
    path = write_jsonl(tmp_path / "mine.jsonl", rows)
    with pytest.raises(ValueError, match=r"mine.jsonl, line 50: `prompt` contains \['a', 'b', 'c', 'd'\],") as err:
        build_text_data(path, addition_tokenizer(), 32)
    assert "\n" not in str(err.value)
    Dataset.from_list(rows).to_csv(tmp_path / "mine.csv", index=False)
    with pytest.raises(ValueError, match=r"mine.csv, line 51: `prompt` contains \['a', 'b', 'c', 'd'\],"):
        build_text_data(str(tmp_path / "mine.csv"), addition_tokenizer(), 32)


def test_a_long_list_of_unknown_characters_says_it_is_cut():
    text = "".join(chr(c) for c in range(ord("a"), ord("a") + 20))
    with pytest.raises(ValueError) as err:
        encode_prompt_completion(addition_tokenizer(), text + "=", "1")
    shown = str(err.value)
    assert "'a', 'b'" in shown and "'l', ...] (20 in all)" in shown and "'m'" not in shown


@pytest.mark.parametrize(
    "name, text, message",
    [
        ("empty.jsonl", "", "empty.jsonl: the file holds no rows"),
        ("blank.jsonl", "\n\n", "blank.jsonl: the file holds no rows"),
        ("broken.jsonl", '{"text": "1+1=2"}\n{"text": 1+1}\n', "broken.jsonl, line 2: not valid JSON"),
        ("list.jsonl", '{"text": "1"}\n["1"]\n', "list.jsonl, line 2: a row must be a JSON object"),
        ("mixed.jsonl", '{"text": "1"}\n\n{"text": 2}\n', "mixed.jsonl, line 3: `text` is int, but str in the rows"),
        ("wide.csv", "prompt,completion\n1+1=,2\n2+2=,4,9\n", "wide.csv, line 3: 3 values for the 2 columns"),
        ("short.csv", "prompt,completion\n1+1=\n", "short.csv, line 2: no value for the column(s) ['completion']"),
        ("empty.csv", "", "empty.csv: the file holds no rows"),
        ("array.json", '[{"text": "1"}, 3]', "array.json, row 2: a row must be a JSON object"),
        ("latin1.jsonl", b'{"text": "caf\xe9"}\n', "latin1.jsonl: not UTF-8 text (byte 13"),
    ],
)
def test_an_unreadable_file_is_a_one_line_error_naming_the_line(tmp_path, name, text, message):
    (tmp_path / name).write_bytes(text if isinstance(text, bytes) else text.encode())
    with pytest.raises(ValueError) as err:
        load_rows(str(tmp_path / name))
    assert message in str(err.value) and "\n" not in str(err.value), str(err.value)


def test_json_files_read_as_their_writers_meant(tmp_path):
    """JSON Lines whose strings hold U+2028 or a form feed (json.dumps(ensure_ascii=False) leaves them raw), a .json
    of columns, a .json holding JSON Lines, and a CSV value spanning two lines (the next row's line is right)."""
    texts = ["a\u2028b", "c\x0cd"]
    (tmp_path / "raw.jsonl").write_text("".join(json.dumps({"text": t}, ensure_ascii=False) + "\n" for t in texts))
    assert load_rows(str(tmp_path / "raw.jsonl"))["train"]["text"] == texts
    (tmp_path / "columns.json").write_text(json.dumps({"prompt": ["1+1=", "2+2="], "completion": ["2", "4"]}))
    assert load_rows(str(tmp_path / "columns.json"))["train"]["completion"] == ["2", "4"]
    (tmp_path / "lines.json").write_text('{"text": "1"}\n{"text": "2"}\n')
    assert load_rows(str(tmp_path / "lines.json"))["train"]["text"] == ["1", "2"]
    (tmp_path / "multi.csv").write_text('prompt,completion\n"1+\n1=",2\n2+\u00e9=,4\n')
    with pytest.raises(ValueError, match="multi.csv, line 4: `prompt` contains"):
        build_text_data(str(tmp_path / "multi.csv"), PRINTABLE, 32, test_size=0)


def test_a_file_too_small_to_hold_rows_out_says_how_to_go_on(tmp_path):
    path = write_jsonl(tmp_path / "few.jsonl", [{"prompt": f"{i}+1=", "completion": str(i + 1)} for i in range(6)])
    with pytest.raises(ValueError, match="has 6 rows, too few to hold some out .* or --test_size 0"):
        build_text_data(path, addition_tokenizer(), 32)
    assert len(build_text_data(path, addition_tokenizer(), 32, test_size=0).train) == 6


def test_bad_sources_are_one_line_errors(tmp_path):
    for name, message in [
        (str(tmp_path / "missing.jsonl"), "no such file"),
        (str(tmp_path), "must be written by Dataset.save_to_disk"),
    ]:
        with pytest.raises(ValueError, match=message):
            load_rows(name)
    (tmp_path / "rows.txt").write_text("hi\n")
    with pytest.raises(ValueError, match=r"a data file must be one of \['.csv', '.json'"):
        load_rows(str(tmp_path / "rows.txt"))
    path = write_jsonl(tmp_path / "pc.jsonl", [{"prompt": "1+1=", "completion": "2"}] * 3)
    with pytest.raises(ValueError, match="--test_size 3 holds out every one of the 3 training rows"):
        build_text_data(path, addition_tokenizer(), 32, test_size=3)
    with pytest.raises(ValueError, match="--dataset_train_split 'dev' is not in"):
        build_text_data(path, addition_tokenizer(), 32, train_split="dev")
    text = write_jsonl(tmp_path / "t.jsonl", [{"text": "1+1=2"}] * 3)
    with pytest.raises(ValueError, match=r"--eval_metric must be one of .* \(exact_match: prompt/completion rows\)"):
        build_text_data(text, addition_tokenizer(), 32, test_size=1, metric="exact_match")


def test_held_out_rows_never_ask_what_a_training_row_asks(tmp_path):
    rows = [{"prompt": f"{i % 20}+1=", "completion": str(i % 20 + 1)} for i in range(30)]  # 10 asked twice
    data = build_text_data(write_jsonl(tmp_path / "rep.jsonl", rows), addition_tokenizer(), 32, test_size=10)
    trained = {addition_tokenizer().decode(ids).split("=")[0] for ids in data.train["input_ids"]}
    assert len(data.train) == 20 and data.metric == "token_accuracy"
    assert 0 < len(data.test) < 10 and "none asking what a training row asks" in data.test_description
    tested = {addition_tokenizer().decode(ids).split("=")[0] for ids in data.test["input_ids"]}
    assert not trained & tested


SUMS = [{"prompt": f"{a}+{b}=", "completion": str(a + b)} for a in range(15) for b in range(10)]  # 150 rows
CHATS = [{"messages": [{"role": "user", "content": r["prompt"]}, {"role": "assistant", "content": r["completion"]}]}
         for r in SUMS]  # fmt: skip


@pytest.mark.parametrize(
    "good, bad, message",
    [
        (SUMS, lambda row: {**row, "completion": "x" + row["completion"]}, "`completion` contains ['x']"),
        (SUMS, lambda row: {**row, "completion": int(row["completion"])}, "`completion` must be a string, got int"),
        (CHATS, lambda row: {"messages": row["messages"][:1]}, "`messages` has no assistant turn"),
    ],
)
def test_a_file_of_bad_rows_names_its_first_line_and_how_many_are_bad(base, tmp_path, capsys, good, bad, message):
    """The training rows are shuffled before they are encoded: the error names the file's first bad line (not
    whichever bad row came first after the shuffle) and says how many are bad."""

    def refused(rows) -> str:
        path = write_jsonl(tmp_path / "bad.jsonl", rows)
        argv = ["train", "--model_name_or_path", str(base), "--dataset_name", path, "--output_dir", str(tmp_path)]
        assert main([*argv, "--max_steps", "1", *COMMON]) == 2
        err = capsys.readouterr().err.strip()
        assert "Traceback" not in err
        return err.splitlines()[-1]

    err = refused([bad(row) for row in good])
    assert f"bad.jsonl, line 1: {message}" in err, err
    assert "(150 of its 150 rows are bad; this is the first, then lines 2, 3, 4, 5, 6, ...)" in err
    if good is CHATS:
        return  # the base's addition tokenizer cannot render a conversation (good or bad) in ChatML
    few = [bad(row) if i in (40, 100) else row for i, row in enumerate(good)]  # two bad rows
    err = refused(few)
    if isinstance(few[40].get("completion"), int):  # a column of strings with an int: refused as the file is read
        assert "bad.jsonl, line 41: `completion` is int, but str in the rows before" in err, err
    else:
        assert f"bad.jsonl, line 41: {message}" in err, err
        assert "(2 of its 150 rows are bad; this is the first, then line 101)" in err


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    """A tiny Ouro trained 2 steps on generated addition by `equilibria train`."""
    return tiny_trained_ouro(tmp_path_factory.mktemp("base") / "ouro")


def test_fine_tuning_a_checkpoint_on_your_rows_from_the_cli(base, tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    data = write_jsonl(tmp_path / "sums.jsonl", addition_rows())
    out = tmp_path / "tuned"
    argv = ["train", "--model_name_or_path", str(base), "--dataset_name", data, "--output_dir", str(out)]
    argv += ["--test_size", "8", "--max_steps", "3", "--learning_rate", "1e-2", "--eval_loops", "1,2", *COMMON]
    assert main(argv) == 0
    before, after = load_file(base / "model.safetensors"), load_file(out / "model.safetensors")
    assert before.keys() == after.keys() and any(not torch.equal(before[k], after[k]) for k in before)
    model, tokenizer = AutoModelForCausalLM.from_pretrained(out), AutoTokenizer.from_pretrained(out)
    assert model.config.hidden_size == 16 and len(tokenizer) == model.config.vocab_size
    scaling = json.loads((out / "loop_scaling.json").read_text())
    assert scaling["data"]["metric"] == "token_accuracy" and scaling["data"]["units"] == 8
    assert scaling["data"]["name"] == "8 held-out rows of sums.jsonl" and set(scaling["accuracy"]) == {"1", "2"}
    card = ModelCard.load(out / "README.md")
    assert (
        "Next-token accuracy (teacher forcing, on the tokens the loss is on) on 8 held-out rows of sums.jsonl"
        in card.text
    )
    assert "Stage 2 of 2" in card.text and "32 prompt/completion rows of sums.jsonl" in card.text  # 5 validate
    assert [r.metric_type for r in card.data.eval_results] == ["accuracy", "accuracy"]


def test_a_published_ouro_checkpoint_fine_tunes_with_a_tokenizer_given(tmp_path, capsys):
    data = write_jsonl(tmp_path / "chat.jsonl", [{"messages": CONVERSATION}] * 6)
    argv = ["train", "--model_name_or_path", str(OURO_REFERENCE), "--dataset_name", data, "--test_size", "2"]
    argv += ["--output_dir", str(tmp_path / "out"), "--max_steps", "1", "--eval_loops", "1,3", *COMMON]
    assert main(argv) == 2  # the published folder has no tokenizer
    assert "has no tokenizer to read --dataset_name with" in capsys.readouterr().err
    tokenizer = char_tokenizer(string.digits + string.ascii_letters + " \n<|>_+?")  # 73 ids of the checkpoint's 97
    tokenizer.save_pretrained(tmp_path / "tok")
    assert main([*argv, "--tokenizer_name_or_path", str(tmp_path / "tok")]) == 0
    saved = json.loads((tmp_path / "out" / "config.json").read_text())
    assert (saved["model_type"], saved["total_ut_steps"], saved["hidden_size"]) == ("ouro", 3, 64)
    assert (
        json.loads((tmp_path / "out" / "tokenizer_config.json").read_text()).get("chat_template")
        or (tmp_path / "out" / "chat_template.jinja").is_file()
    )


def test_a_puzzle_checkpoint_continues_on_its_own_task_at_its_own_size(tmp_path):
    from equilibria.train import train_and_evaluate

    first = [
        "--family",
        "phdeq",
        "--task",
        "reachability",
        "--nodes",
        "6",
        "--hidden_size",
        "8",
        "--logging_steps",
        "1",
    ]
    trainer, _ = train_and_evaluate(
        [*first, "--output_dir", str(tmp_path / "a"), "--max_steps", "1", "--train_size", "16", *COMMON]
    )
    logged = next(h for h in trainer.state.log_history if "loss" in h)
    assert logged["grad_norm/dynamics"] > 0 and logged["grad_norm/direct_path"] > 0  # the family's callback
    again = ["train", "--model_name_or_path", str(tmp_path / "a"), "--output_dir", str(tmp_path / "b")]
    assert main([*again, "--max_steps", "1", "--train_size", "16", "--test_size", "4", *COMMON]) == 0
    config = json.loads((tmp_path / "b" / "config.json").read_text())
    assert (config["model_type"], config["equilibria_task"], config["input_size"]) == ("phdeq", "reachability", 54)


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--hidden_size", "32"], "--hidden_size size a new model; "),
        (["--family", "eqr"], "--family eqr, but "),
        (["--num_loops", "2"], "does not read addition problems with the task's tokenizer"),
        (["--dataset_name", "x.jsonl", "--exit_loss", "everything"], "--exit_loss must be one of"),
    ],
)
def test_checkpoint_errors_are_one_line(base, tmp_path, capsys, extra, message):
    PRINTABLE.save_pretrained(tmp_path / "tok")
    argv = ["train", "--model_name_or_path", str(OURO_REFERENCE), "--output_dir", str(tmp_path / "o"), *extra]
    assert main([*argv, "--tokenizer_name_or_path", str(tmp_path / "tok")]) == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if "error:" in line]
    assert len(errors) == 1 and message in errors[0], errors


def test_dataset_name_rows_must_fit_the_family(tmp_path, capsys):
    text = write_jsonl(tmp_path / "x.jsonl", [{"prompt": "1+1=", "completion": "2"}] * 8)
    argv = ["train", "--family", "eqr", "--dataset_name", text, "--output_dir", str(tmp_path / "out")]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert (
        "sudoku rows need `inputs` and `labels` columns or a Sudoku-Extreme CSV (source,question,answer,rating)" in err
    )
    assert main(["train", "--dataset_name", "x.jsonl", "--task", "addition", "--output_dir", str(tmp_path)]) == 2
    assert "pass either --dataset_name (your rows) or --task" in capsys.readouterr().err


@pytest.fixture(scope="module")
def sums(tmp_path_factory):
    return write_jsonl(tmp_path_factory.mktemp("data") / "sums.jsonl", addition_rows())


def lora_run(base, data, out, *extra):
    argv = ["train", "--model_name_or_path", str(base), "--dataset_name", data, "--output_dir", str(out)]
    argv += ["--use_peft", "--lora_r", "4", "--test_size", "4", "--max_steps", "2", "--learning_rate", "5e-2"]
    return main([*argv, "--eval_loops", "2", *extra, *COMMON])


def test_lora_merged_changes_only_the_adapted_projections_and_loads_as_a_checkpoint(base, sums, tmp_path):
    from transformers import AutoModelForCausalLM

    assert lora_run(base, sums, tmp_path / "merged") == 0
    out = tmp_path / "merged"
    assert not (out / "adapter_config.json").exists() and not (out / "adapter_model.safetensors").exists()
    before, after = load_file(base / "model.safetensors"), load_file(out / "model.safetensors")
    assert before.keys() == after.keys()
    changed = {k for k in before if not torch.equal(before[k], after[k])}
    assert changed and all(k.rsplit(".", 2)[-2] in {"q_proj", "k_proj", "v_proj", "o_proj"} for k in changed), changed
    assert type(AutoModelForCausalLM.from_pretrained(out)).__name__ == "OuroForCausalLM"
    card = ModelCard.load(out / "README.md")
    assert "LoRA r=4, alpha=32, dropout 0.05 on k_proj, o_proj, q_proj, v_proj, merged into the saved weights" in (
        card.text
    )
    assert card.data.library_name == "transformers"


def test_lora_adapter_alone_loads_onto_its_base(base, sums, tmp_path):
    from transformers import AutoModelForCausalLM

    from equilibria.loading import load_saved_model

    assert lora_run(base, sums, tmp_path / "adapter", "--lora_save", "adapter", "--lora_target_modules", "q_proj") == 0
    out = tmp_path / "adapter"
    assert (out / "adapter_model.safetensors").is_file() and not (out / "model.safetensors").exists()
    ids = torch.tensor([[4, 5, 6, 7]])
    plain = AutoModelForCausalLM.from_pretrained(base).eval()
    for loaded in (AutoModelForCausalLM.from_pretrained(out).eval(), load_saved_model(str(out))):
        assert not torch.allclose(loaded(ids).logits, plain(ids).logits)  # the adapter is applied
    card = ModelCard.load(out / "README.md")
    assert "**A LoRA adapter, not a checkpoint.**" in card.text and "on q_proj) for the base model" in card.text
    assert card.data.library_name == "peft"


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--lora_target_modules", "qkv"], "--lora_target_modules ['qkv'] are not linear layers of this model"),
        (["--lora_save", "both"], "--lora_save must be one of ('merged', 'adapter')"),
    ],
)
def test_lora_errors_are_one_line(base, sums, tmp_path, capsys, extra, message):
    assert lora_run(base, sums, tmp_path / "o", *extra) == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if "error:" in line]
    assert len(errors) == 1 and message in errors[0], errors


def test_lora_needs_a_checkpoint(tmp_path, capsys):
    assert main(["train", "--use_peft", "--output_dir", str(tmp_path), *COMMON]) == 2
    assert "--use_peft adapts a trained checkpoint: give --model_name_or_path" in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.two_process("cli_lora_ddp")
def test_lora_fine_tuning_with_stars_behind_torchrun_keeps_replicas_identical(two_process_run):
    r0, r1, folder = two_process_run
    assert r0["world"] == r1["world"] == 2
    saved = load_file(folder / "model" / "model.safetensors")
    start = load_file(folder / "base" / "model.safetensors")
    assert any(not torch.equal(saved[k], start[k]) for k in saved)  # it trained
    for name, value in saved.items():
        assert torch.equal(r0["params"][name], value) and torch.equal(r1["params"][name], value), name
    assert (folder / "model" / "README.md").exists() and (folder / "model" / "loop_scaling.json").exists()


def test_dtype_names_go_to_from_pretrained_and_others_are_refused(tmp_path, capsys):
    import torch

    from equilibria.train import build, parse_train_args

    sizes = ["--family", "eqr", "--hidden_size", "32", "--num_attention_heads", "2", "--size", "4"]
    small = ["--output_dir", str(tmp_path / "out"), "--train_size", "4", "--test_size", "2"]
    build(*parse_train_args([*sizes, *small])[:2], seed=0)[0].save_pretrained(tmp_path / "base")
    argv = ["--model_name_or_path", str(tmp_path / "base"), *small]
    model_args, data_args, _ = parse_train_args([*argv, "--dtype", "bfloat16"])
    assert {p.dtype for p in build(model_args, data_args, seed=0)[0].parameters()} == {torch.bfloat16}
    with pytest.raises(SystemExit):
        parse_train_args([*argv, "--dtype", "bf16"])
    assert "invalid choice: 'bf16'" in capsys.readouterr().err
    config = tmp_path / "run.yaml"
    config.write_text("\n".join(f"{k.strip('-')}: {v}" for k, v in zip(argv[::2], argv[1::2])) + "\ndtype: bf16\n")
    model_args, data_args, _ = parse_train_args([str(config)])  # a file's value is not checked by argparse
    with pytest.raises(ValueError, match=r"--dtype must be one of \('float32', 'bfloat16', 'float16', 'auto'\)"):
        build(model_args, data_args, seed=0)


def test_a_yaml_number_is_read_as_the_flag_would_read_it(tmp_path):
    """YAML 1.1 reads ``1e-4`` (no dot) as a string; the file's values go through the flags' own types."""
    from equilibria.train import parse_train_args

    config = tmp_path / "run.yaml"
    config.write_text(f"family: eqr\noutput_dir: {tmp_path}\nlearning_rate: 1e-4\nmax_steps: '3'\n")
    _, _, args = parse_train_args([str(config)])
    assert (args.learning_rate, args.max_steps) == (1e-4, 3)
