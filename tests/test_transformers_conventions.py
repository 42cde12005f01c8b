"""The transformers conventions both causal-LM families keep (the ones transformers' own common tests check and
that ``../shared/peer-tests`` cannot, because they compare cache sizes with ``num_hidden_layers``): attention
weights, assisted and prompt-lookup decoding, loading a base-model checkpoint into the head class, the
tensor-parallel plan, and training in which every trainable parameter gets a gradient."""

import logging
import re

import pytest
import torch
from conftest import tiny_attractor, tiny_ouro
from torch import nn

from equilibria import OuroForCausalLM

PROMPT = torch.tensor([[5, 9, 14, 3, 22, 7, 5, 9]])
FAMILIES = {"ouro": tiny_ouro, "attractor": tiny_attractor}


def expected_attention_count(model, num_loops: int) -> int:
    config = model.config
    if isinstance(model, OuroForCausalLM):
        return num_loops * config.num_hidden_layers
    return config.num_backbone_layers + (config.num_attractor_layers if num_loops > 0 else 0)


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("num_loops", [0, 1, 3])
def test_forward_returns_one_attention_map_per_layer_application(family, num_loops):
    if family == "ouro" and num_loops == 0:
        pytest.skip("Ouro runs at least one loop step")
    model = FAMILIES[family]()
    out = model(PROMPT, num_loops=num_loops, output_attentions=True)
    heads, length = model.config.num_attention_heads, PROMPT.shape[1]
    assert len(out.attentions) == expected_attention_count(model, num_loops)
    for weights in out.attentions:
        assert weights.shape == (1, heads, length, length)
        torch.testing.assert_close(weights.sum(-1), torch.ones(1, heads, length))  # rows are distributions
        assert torch.all(weights.triu(1) == 0)  # causal
    assert model(PROMPT, num_loops=num_loops).attentions is None


@pytest.mark.parametrize("family", FAMILIES)
def test_config_output_attentions_and_the_argument_agree(family):
    model = FAMILIES[family]()
    model.config.output_attentions = True
    from_config = model(PROMPT).attentions
    model.config.output_attentions = False
    from_argument = model(PROMPT, output_attentions=True).attentions
    assert len(from_config) == len(from_argument) > 0
    for a, b in zip(from_config, from_argument):
        torch.testing.assert_close(a, b)


@pytest.mark.parametrize("family", FAMILIES)
def test_attention_weights_reach_generate_per_step(family):
    model = FAMILIES[family]()
    out = model.generate(
        PROMPT, max_new_tokens=3, do_sample=False, return_dict_in_generate=True, output_attentions=True
    )
    num_loops = model.config.total_ut_steps if family == "ouro" else model.config.num_loops
    assert len(out.attentions) == 3
    for step, weights in enumerate(out.attentions):
        assert len(weights) == expected_attention_count(model, num_loops)
        query_len = PROMPT.shape[1] if step == 0 else 1
        assert weights[0].shape[-2:] == (query_len, PROMPT.shape[1] + step)


def test_the_attention_weights_of_the_ouro_loop_are_per_loop_step():
    """Step 1's weights differ from step 0's (the state changed), and the one-loop forward's weights are step 0's."""
    model = tiny_ouro()
    deep = model(PROMPT, num_loops=3, output_attentions=True).attentions
    one = model(PROMPT, num_loops=1, output_attentions=True).attentions
    layers = model.config.num_hidden_layers
    for layer in range(layers):
        torch.testing.assert_close(deep[layer], one[layer])
    assert not torch.allclose(deep[layers], deep[0])


@pytest.mark.parametrize("family", FAMILIES)
def test_other_attention_kernels_warn_and_return_no_weights(family, caplog):
    model = FAMILIES[family]()
    model.set_attn_implementation("sdpa")
    out = model(PROMPT, output_attentions=True)
    assert out.attentions is None
    assert "needs the eager attention" in caplog.text


def greedy(model, **kwargs):
    return model.generate(PROMPT, max_new_tokens=8, do_sample=False, pad_token_id=0, eos_token_id=None, **kwargs)


@pytest.mark.parametrize("family", FAMILIES)
def test_assisted_decoding_equals_greedy_search(family):
    model = FAMILIES[family]()
    assistant = FAMILIES[family](seed=1)  # a different model: some of its drafts are rejected
    reference = greedy(model)
    assisted = greedy(model, assistant_model=assistant)
    assert assisted.tolist() == reference.tolist()
    self_assisted = greedy(model, assistant_model=FAMILIES[family]())  # every draft accepted
    assert self_assisted.tolist() == reference.tolist()


@pytest.mark.parametrize("family", FAMILIES)
def test_prompt_lookup_decoding_equals_greedy_search(family):
    model = FAMILIES[family]()
    assert greedy(model, prompt_lookup_num_tokens=2).tolist() == greedy(model).tolist()


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("tied", [False, True])
def test_a_base_model_checkpoint_loads_into_the_head_class_with_the_head_reported(family, tied, tmp_path, caplog):
    """transformers reports weights missing from a checkpoint in a load report, logged as a warning by
    ``transformers.modeling_utils`` (the ``transformers`` logger does not propagate to the root logger, where caplog
    listens, unless CI is set: hence the monkeypatch). An untied head is reported missing (newly initialised); a
    tied head is the embeddings, so nothing is missing and nothing is reported."""
    model = FAMILIES[family](tie_word_embeddings=tied)
    model.model.save_pretrained(tmp_path)
    library = logging.getLogger("transformers")
    with pytest.MonkeyPatch.context() as patch, caplog.at_level(logging.WARNING, logger="transformers.modeling_utils"):
        patch.setattr(library, "propagate", True)
        loaded, info = type(model).from_pretrained(tmp_path, output_loading_info=True)
    # pytest 9 also attaches caplog's handler to non-propagating loggers: one record may arrive twice
    records = {id(r): r for r in caplog.records if r.name == "transformers.modeling_utils"}.values()
    reports = [r.getMessage() for r in records if r.levelno == logging.WARNING and "LOAD REPORT" in r.getMessage()]
    if tied:
        assert info["missing_keys"] == set() and reports == []
        assert loaded.lm_head.weight is loaded.model.embed_tokens.weight
    else:
        assert info["missing_keys"] == {"lm_head.weight"}
        assert len(reports) == 1 and f"{type(model).__name__} LOAD REPORT" in reports[0]
        assert re.search(r"lm_head\.weight\s*\|\s*MISSING", reports[0]), reports[0]
        assert not re.search(r"model\.\S+\s*\|\s*MISSING", reports[0])  # the body is all there
    assert info["unexpected_keys"] == set() and info["mismatched_keys"] == set()
    for name, weight in model.model.state_dict().items():
        torch.testing.assert_close(loaded.model.state_dict()[name], weight)
    plain = type(model).from_pretrained(tmp_path)  # without output_loading_info: loads too
    assert isinstance(plain, type(model))


@pytest.mark.parametrize("family", FAMILIES)
def test_a_checkpoint_missing_body_weights_is_still_refused(family, tmp_path):
    from safetensors.torch import load_file, save_file

    model = FAMILIES[family]()
    model.save_pretrained(tmp_path)
    weights = load_file(tmp_path / "model.safetensors")
    dropped = next(k for k in weights if "layers.0" in k)
    del weights[dropped]
    save_file(weights, tmp_path / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(ValueError, match="missing weights"):
        type(model).from_pretrained(tmp_path)


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("tied", [True, False])
def test_the_tensor_parallel_plan_shards_a_tied_head_with_its_embeddings(family, tied):
    """The head is column-parallel with its output gathered, the embeddings vocabulary-parallel: both shard the
    vocabulary (dim 0 of the (vocab, hidden) weight), so a tied weight is sharded one way for both; every linear
    layer of the loop's stack is sharded Megatron-style (q, k, v, gate, up column-wise; o, down row-wise)."""
    from transformers.distributed.tensor_parallel import ALL_PARALLEL_STYLES, ColwiseParallel, EmbeddingParallel

    model = FAMILIES[family](tie_word_embeddings=tied)
    plan = model.tp_plan
    assert plan.get("lm_head") == "colwise_gather_output" and plan.get("model.embed_tokens") == "embedding_rowwise"
    head, embeddings = ALL_PARALLEL_STYLES[plan["lm_head"]], ALL_PARALLEL_STYLES[plan["model.embed_tokens"]]
    assert isinstance(head, ColwiseParallel) and isinstance(embeddings, EmbeddingParallel)
    assert embeddings.shard_dim == 0  # the vocabulary; colwise shards a Linear weight's dim 0 (its outputs)
    assert model.lm_head.weight.shape == model.model.embed_tokens.weight.shape
    assert (model.lm_head.weight is model.model.embed_tokens.weight) == tied
    styles = {"q_proj": "colwise", "k_proj": "colwise", "v_proj": "colwise", "o_proj": "rowwise"}
    styles.update(gate_proj="colwise", up_proj="colwise", down_proj="rowwise")
    stack = [
        (name, module)
        for name, module in model.named_modules()
        if isinstance(module, nn.Linear) and (".layers." in name or ".backbone." in name)
    ]
    assert len(stack) == 7 * (
        model.config.num_hidden_layers
        if family == "ouro"
        else model.config.num_backbone_layers + model.config.num_attractor_layers
    )
    for name, _ in stack:
        matched = [style for pattern, style in plan.items() if _matches(name, pattern)]
        assert matched == [styles[name.rsplit(".", 1)[-1]]], (name, matched)


def _matches(name: str, pattern: str) -> bool:
    parts, keys = name.split("."), pattern.split(".")
    return len(parts) == len(keys) and all(k == "*" or k == p for p, k in zip(parts, keys))


@pytest.mark.parametrize("family", FAMILIES)
def test_training_gives_every_trainable_parameter_a_gradient(family):
    """So plain DDP without find_unused_parameters and gradient checkpointing work."""
    model = FAMILIES[family]().train()
    model.activation_checkpointing_enable()
    loss = model(PROMPT, labels=PROMPT).loss
    loss.backward()
    without = [n for n, p in model.named_parameters() if p.requires_grad and p.grad is None]
    assert without == []


@pytest.mark.parametrize("exit_loss, trainable", [("expected_logits", True), ("expected", True), ("final", False)])
def test_the_ouro_exit_gate_is_trainable_exactly_when_a_loss_reaches_it(tmp_path, exit_loss, trainable):
    model = tiny_ouro(exit_loss=exit_loss).train()
    gate = model.model.early_exit_gate
    assert all(p.requires_grad == trainable for p in gate.parameters())
    model(PROMPT, labels=PROMPT).loss.backward()
    assert (gate.weight.grad is not None and float(gate.weight.grad.norm()) > 0) == trainable
    with torch.no_grad():
        gate.bias.fill_(-1.25)
    model.save_pretrained(tmp_path)
    assert OuroForCausalLM.from_pretrained(tmp_path).model.early_exit_gate.bias.item() == -1.25


class _Logits(nn.Module):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_ids):
        return self.model(input_ids=input_ids, use_cache=False).logits


@pytest.mark.slow
def test_the_attractor_exports_with_torch_export_and_matches_eager():
    """Under tracing the solver runs its whole budget without data-dependent branches (samples that stopped keep
    their iterate), so the exported program gives eager's numbers, although eager stopped early."""
    model = tiny_attractor(num_loops=9, solver_tol=1e-3)
    ids = torch.tensor([[5, 9, 14, 3, 22, 7], [11, 4, 30, 17, 2, 9]])
    eager = model(ids, use_cache=False)
    assert bool(eager.converged.all()) and int(eager.solver_steps.max()) < 9
    program = torch.export.export(_Logits(model), (ids,))
    torch.testing.assert_close(program.module()(ids), eager.logits, rtol=0, atol=1e-5)


def _puzzle_and_classifier_calls():
    from conftest import tiny_eqr, tiny_phdeq

    yield "eqr", tiny_eqr(), (torch.randint(0, 5, (2, 16)),)
    yield "phdeq", tiny_phdeq(), (torch.randn(2, 6),)


@pytest.mark.parametrize("misspelt", [{"num_loop": 8}, {"exit_treshold": 0.5}, {"output_attention": True}])
def test_a_misspelt_keyword_is_a_type_error_naming_it(misspelt):
    calls = [(name, make(), (PROMPT,)) for name, make in FAMILIES.items()] + list(_puzzle_and_classifier_calls())
    (keyword,) = misspelt
    for _name, model, args in calls:
        with pytest.raises(TypeError, match=f"unexpected keyword argument.*'{keyword}'.*num_loops"):
            model(*args, **misspelt)


@pytest.mark.parametrize("family", FAMILIES)
def test_the_keywords_are_checked_once_per_call(family, monkeypatch):
    """A head passes what it does not take to its base model, whose forward checks it: one check per call."""
    import sys

    from equilibria.modeling import looped_lm

    seen = []
    check = looped_lm.check_keywords
    for module in [m for name, m in sys.modules.items() if name.startswith("equilibria.modeling")]:
        if getattr(module, "check_keywords", None) is check:  # wherever it was imported into
            monkeypatch.setattr(
                module, "check_keywords", lambda model, kwargs: (seen.append(model), check(model, kwargs))
            )
    FAMILIES[family]()(PROMPT, labels=PROMPT, num_items_in_batch=PROMPT.numel())
    assert len(seen) == 1


@pytest.mark.parametrize("family", FAMILIES)
def test_the_keywords_transformers_passes_through_still_work(family):
    model = FAMILIES[family]()
    out = model(PROMPT, labels=PROMPT, num_items_in_batch=PROMPT.numel(), return_dict=True, output_hidden_states=True)
    assert out.loss is not None and out.hidden_states is not None
    assert isinstance(model(PROMPT, return_dict=False), tuple)


@pytest.mark.parametrize("family", ["ouro", "attractor_lm"])
def test_a_language_model_runs_past_its_configured_length_with_one_warning(family, caplog):
    """Rotary positions have no table that ends (rope scaling exists to go past ``max_position_embeddings``), so
    a looped LM refuses no position, as Llama does not: it warns once and generates, scaled or not."""
    from transformers.utils.logging import warning_once

    build = tiny_ouro if family == "ouro" else tiny_attractor
    for rope in (None, {"rope_type": "linear", "factor": 2.0, "rope_theta": 10000.0}):
        model = build(**({"rope_parameters": rope} if rope else {})).eval()
        limit = model.config.max_position_embeddings
        ids = torch.randint(3, 40, (1, limit - 4))
        warning_once.cache_clear()
        with caplog.at_level(logging.WARNING):
            out = model.generate(ids, max_new_tokens=12, do_sample=False)
            model(torch.randint(3, 40, (1, limit + 8)))
        assert out.shape == (1, limit + 8)
        past = [r for r in caplog.records if f"positions past the {limit}" in r.getMessage()]
        assert len(past) == 1, [r.getMessage() for r in caplog.records]
        caplog.clear()
