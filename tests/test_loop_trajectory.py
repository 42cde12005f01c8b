"""The STARS paper's norm diagnosis as a tool: ``OuroConfig(norm_placement=...)`` computes the layout it names, and
the loop-trajectory diagnostic (``loop_trajectory``, ``equilibria diagnose``) measures what it reports."""

import json
import math

import pytest
import torch
from conftest import char_tokenizer, tiny_ouro, tiny_ouro_config
from datasets import Dataset
from torch import nn

from equilibria import EqRConfig, EqRForPuzzleSolving, OuroForCausalLM, PHDEQConfig, PHDEQForSequenceClassification
from equilibria.cli import main
from equilibria.diagnostics import LoopAdapter, loop_trajectory
from equilibria.modeling.loop_map import LoopMap
from equilibria.tasks.reachability import reachability_input_size

PLACEMENTS = ("sandwich", "pre", "post")


class _Twice(nn.Module):  # a stand-in attention: (2h + 1, no weights)
    def forward(self, hidden_states, **kwargs):
        return 2 * hidden_states + 1, None


class _Square(nn.Module):  # a stand-in MLP
    def forward(self, hidden_states):
        return 0.5 * hidden_states**2


@pytest.mark.parametrize("placement", PLACEMENTS)
def test_each_norm_placement_computes_the_layer_it_names(placement):
    model = tiny_ouro(norm_placement=placement)
    layer = model.model.layers[0]
    with torch.no_grad():  # norms with weights of their own, so that each one is visible
        for i, module in enumerate(m for m in layer.modules() if type(m).__name__ == "RMSNorm"):
            module.weight.fill_(1.0 + 0.25 * (i + 1))
    layer.self_attn, layer.mlp = _Twice(), _Square()
    h = torch.randn(2, 5, 32)
    n = {name: getattr(layer, name, None) for name in layer.NORMS["sandwich"]}
    attn, mlp = (lambda x: 2 * x + 1), (lambda x: 0.5 * x**2)
    if placement == "sandwich":
        mid = h + n["input_layernorm_2"](attn(n["input_layernorm"](h)))
        expected = mid + n["post_attention_layernorm_2"](mlp(n["post_attention_layernorm"](mid)))
    elif placement == "pre":
        mid = h + attn(n["input_layernorm"](h))
        expected = mid + mlp(n["post_attention_layernorm"](mid))
    else:
        mid = n["input_layernorm_2"](h + attn(h))
        expected = n["post_attention_layernorm_2"](mid + mlp(mid))
    torch.testing.assert_close(layer(h), expected, rtol=1e-6, atol=1e-6)
    present = {name for name, m in n.items() if type(m).__name__ == "RMSNorm"}
    assert present == {name for name in layer.NORMS[placement] if name}


@pytest.mark.parametrize("placement", PLACEMENTS)
def test_forward_reads_out_the_loop_maps_states(placement):
    """Each step's ``hidden_states`` is the readout of the state the loop map carries, which is normalised (by the
    final norm for sandwich, by the layer's last norm for post) except under pre-norm."""
    model = tiny_ouro(norm_placement=placement)
    ids = torch.randint(3, 20, (2, 6))
    out = model.model(ids, num_loops=4, output_hidden_states=True)
    loop = model.model.loop_map(ids)
    z, carried = loop.start, []
    for t in range(1, 5):
        z = loop(z)
        carried.append(z)
        torch.testing.assert_close(out.hidden_states[t], model.model.readout(z), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(out.last_hidden_state, model.model.readout(carried[-1]), rtol=1e-5, atol=1e-5)
    rms = carried[-1].pow(2).mean(-1).sqrt()
    assert torch.allclose(rms, torch.ones_like(rms), atol=1e-3) == (placement != "pre")


@pytest.mark.parametrize("placement", ("pre", "post"))
def test_other_placements_cache_save_and_refuse_mismatched_weights(placement, tmp_path):
    model = tiny_ouro(norm_placement=placement)
    ids = torch.randint(3, 20, (2, 5))
    cached = model.generate(ids, max_new_tokens=6, do_sample=False, num_loops=3)
    uncached = model.generate(ids, max_new_tokens=6, do_sample=False, num_loops=3, use_cache=False)
    assert torch.equal(cached, uncached)
    model.save_pretrained(tmp_path)
    loaded = OuroForCausalLM.from_pretrained(tmp_path, attn_implementation="eager").eval()
    assert loaded.config.norm_placement == placement
    torch.testing.assert_close(loaded(ids).logits, model(ids).logits, rtol=0, atol=0)
    with pytest.raises(ValueError, match="norm_placement='sandwich'.*another value"):
        OuroForCausalLM.from_pretrained(tmp_path, norm_placement="sandwich")


def test_norm_placement_is_checked():
    with pytest.raises(ValueError, match="norm_placement"):
        tiny_ouro_config(norm_placement="middle")


class _LinearModel(nn.Module):
    def __init__(self, matrix):
        super().__init__()
        self.matrix = matrix
        self.config = type("Config", (), {"model_type": "linear"})()


class _LinearAdapter(LoopAdapter):
    """z_{t+1} = A z_t from the rows' ``x``: every quantity of the trajectory is known in closed form."""

    def loop(self, batch):
        matrix = self.model.matrix
        return LoopMap(lambda z: z @ matrix.T, batch["x"].double()), None


def test_loop_trajectory_measures_a_known_linear_loop():
    matrix = torch.diag(torch.tensor([0.8, -0.5, 0.25], dtype=torch.float64))
    x = torch.tensor([[1.0, 2.0, -1.0], [0.5, -1.0, 3.0], [2.0, 0.0, 1.0]], dtype=torch.float64)
    rows = Dataset.from_dict({"x": x.tolist()})
    model = _LinearModel(matrix)
    trajectory = loop_trajectory(
        model, rows, loops=[1, 4, 8], batch_size=2, power_iters=200, adapter=_LinearAdapter(model)
    )
    assert trajectory.steps == list(range(1, 9)) and trajectory.units == 3
    states = [x]
    for _ in range(8):
        states.append(states[-1] @ matrix.T)
    for t in range(1, 9):
        assert trajectory.state_norm[t - 1] == pytest.approx(states[t].norm(dim=1).mean().item(), rel=1e-9)
        step = ((states[t] - states[t - 1]).norm(dim=1) / states[t - 1].norm(dim=1)).mean().item()
        assert trajectory.relative_step[t - 1] == pytest.approx(step, rel=1e-9)
    assert trajectory.start_norm == pytest.approx(x.norm(dim=1).mean().item())
    for t in (1, 4, 8):
        assert trajectory.spectral_radius[t] == pytest.approx(0.8, abs=1e-6)
    assert "loop trajectory of linear on 3 units" in str(trajectory)


def test_loop_trajectory_reports_divergence_and_checks_its_arguments():
    model = _LinearModel(torch.eye(2, dtype=torch.float64) * 1e200)
    rows = Dataset.from_dict({"x": [[1.0, 1.0]]})
    trajectory = loop_trajectory(model, rows, loops=[1, 8], adapter=_LinearAdapter(model))
    assert trajectory.diverged_at == 2 and trajectory.steps == [1]
    assert "diverged: the state is not finite from loop step 2" in str(trajectory)
    with pytest.raises(ValueError, match="loops must be loop counts"):
        loop_trajectory(model, rows, loops=[0, 2], adapter=_LinearAdapter(model))
    with pytest.raises(ValueError, match="power_iters must be"):
        loop_trajectory(model, rows, loops=[2], power_iters=0, adapter=_LinearAdapter(model))


def test_trajectory_tells_the_placements_apart_at_initialisation():
    """What the diagnosis reads, on random weights: the post-norm state keeps the RMSNorm's scale exactly (it stalls
    in norm), the pre-norm residual stream grows with the loop."""
    rows = Dataset.from_dict({"input_ids": [[3, 4, 5, 6, 7]] * 4, "labels": [[3, 4, 5, 6, 7]] * 4})
    norms = {}
    for placement in ("pre", "post"):
        trajectory = loop_trajectory(tiny_ouro(norm_placement=placement), rows, loops=[1, 16], power_iters=5)
        norms[placement] = trajectory.state_norm
    assert norms["post"] == pytest.approx([math.sqrt(32)] * 16, rel=1e-4)
    assert norms["pre"][-1] > 1.1 * norms["pre"][0]


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    root = tmp_path_factory.mktemp("diagnose")
    torch.manual_seed(0)
    config = PHDEQConfig(input_size=reachability_input_size(6), hidden_size=8, intermediate_size=16, num_labels=2)
    PHDEQForSequenceClassification(config).save_pretrained(root / "phdeq")
    eqr = EqRConfig(max_seq_len=16, hidden_size=32, intermediate_size=64, num_attention_heads=2, num_loops=4)
    EqRForPuzzleSolving(eqr).save_pretrained(root / "eqr")
    tiny_ouro(norm_placement="pre").save_pretrained(root / "ouro")
    char_tokenizer().save_pretrained(root / "ouro")
    return root


def test_diagnose_runs_on_every_family_from_its_folder(saved, tmp_path, capsys, monkeypatch):
    from matplotlib.figure import Figure

    legends, save = [], Figure.savefig

    def recording(fig, *args, **kwargs):  # the plot's legends: the start's norm, what a radius above 1 means
        legends.append([t.get_text() for ax in fig.axes if ax.get_legend() for t in ax.get_legend().get_texts()])
        return save(fig, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", recording)
    for family, extra in (("ouro", ["--digits", "1"]), ("eqr", ["--task", "sudoku"]), ("phdeq", [])):
        out = tmp_path / family
        argv = ["diagnose", str(saved / family), "--loops", "1,2,4", "--num-examples", "4", "--power-iters", "3"]
        assert main([*argv, *extra, "--output-dir", str(out)]) == 0
        assert f"loop trajectory of {family} on 4 units" in capsys.readouterr().out
        result = json.loads((out / "trajectory.json").read_text())
        assert result["steps"] == [1, 2, 3, 4] and set(result["spectral_radius"]) == {"1", "2", "4"}
        assert result["data"]["units"] == 4 and result["model"]["weights"]
        assert (out / "trajectory.png").stat().st_size > 5000
    assert json.loads((tmp_path / "ouro" / "trajectory.json").read_text())["model"]["norm_placement"] == "pre"
    start = json.loads((tmp_path / "ouro" / "trajectory.json").read_text())["start_norm"]
    assert legends[0] == [
        f"|z_0| = {start:.3g} (start)",
        "1: above, a small change of the state\ngrows over a step; below, it shrinks",
    ]
    assert main(["diagnose", str(saved / "phdeq"), "--loops", "0,2"]) == 2
    assert "--loops must be comma-separated integers >= 1" in capsys.readouterr().err
