"""The equilibria command on tiny saved models: eval (loop scaling), generate, audit, card."""

import json

import pytest
import torch
from huggingface_hub import ModelCard

from equilibria import EqRConfig, EqRForPuzzleSolving, PHDEQConfig, PHDEQForSequenceClassification
from equilibria.cli import main
from equilibria.tasks import reachability_input_size


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    from conftest import char_tokenizer, tiny_ouro

    root = tmp_path_factory.mktemp("models")
    torch.manual_seed(0)
    config = PHDEQConfig(input_size=reachability_input_size(6), hidden_size=8, intermediate_size=16, num_labels=2)
    PHDEQForSequenceClassification(config).save_pretrained(root / "phdeq")
    eqr = EqRConfig(max_seq_len=16, hidden_size=32, intermediate_size=64, num_attention_heads=2, num_loops=4)
    EqRForPuzzleSolving(eqr).save_pretrained(root / "eqr")
    tiny_ouro().save_pretrained(root / "ouro")
    char_tokenizer().save_pretrained(root / "ouro")
    return root


def test_eval_prints_the_loop_scaling_table_and_writes_json_and_plot(saved, tmp_path, capsys):
    assert (
        main(["eval", str(saved / "phdeq"), "--loops", "0,5,50", "--num-examples", "30", "--output-dir", str(tmp_path)])
        == 0
    )
    out = capsys.readouterr().out
    assert "num_loops | accuracy" in out and "       50 |" in out
    result = json.loads((tmp_path / "loop_scaling.json").read_text())
    assert set(result) == {"0", "5", "50"} and all(0 <= v <= 1 for v in result.values())
    assert (tmp_path / "loop_scaling.png").stat().st_size > 5000
    assert main(["eval", str(saved / "eqr"), "--loops", "1,4", "--num-examples", "6"]) == 0
    assert main(["eval", str(saved / "ouro"), "--loops", "1,2", "--num-examples", "4", "--digits", "1"]) == 0
    assert "loop scaling of" in capsys.readouterr().out


def test_generate_streams_and_honours_num_loops(saved, capsys):
    assert (
        main(["generate", str(saved / "ouro"), "--prompt", "12+3=", "--num-loops", "2", "--max-new-tokens", "4"]) == 0
    )
    plain = capsys.readouterr().out.strip()
    assert plain.startswith("12+3=")
    assert (
        main(
            [
                "generate",
                str(saved / "ouro"),
                "--prompt",
                "12+3=",
                "--num-loops",
                "2",
                "--max-new-tokens",
                "4",
                "--stream",
            ]
        )
        == 0
    )
    assert capsys.readouterr().out.strip() == plain  # the streamed text is the same greedy text


def test_card_collects_the_folders_results(saved, capsys):
    folder = saved / "phdeq"
    assert main(["eval", str(folder), "--loops", "0,10", "--num-examples", "20", "--output-dir", str(folder)]) == 0
    assert main(["audit", str(folder), "--num-examples", "20", "--output-dir", str(folder)]) == 0
    assert main(["card", str(folder), "--repo-id", "someone/phdeq", "--dataset", "someone/reach"]) == 0
    assert "with loop scaling, audit" in capsys.readouterr().out
    card = ModelCard.load(folder / "README.md")
    assert [r.metric_config for r in card.data.eval_results] == ["num_loops=0", "num_loops=10"]
    assert "## Computation audit" in card.text and "![loop scaling](loop_scaling.png)" in card.text


@pytest.mark.parametrize(
    "argv, message",
    [
        (["generate", "{phdeq}", "--prompt", "x"], "generate needs a language model"),
        (["eval", "{phdeq}", "--loops", "1,a"], "--loops must be comma-separated integers"),
        (["eval", "{phdeq}", "--task", "sudoku"], "--task sudoku does not fit a phdeq model"),
        (["card", "{missing}"], "is not a folder written by save_pretrained"),
    ],
)
def test_errors_are_one_line(saved, capsys, argv, message):
    argv = [a.format(phdeq=saved / "phdeq", missing=saved / "missing") for a in argv]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert message in err.strip().splitlines()[-1]  # one line (progress bars of weight loading may come before)
