"""Claims about the Attractor LM: the solve, its telemetry, generation with the cache, and the gradients."""

import logging

import pytest
import torch
from conftest import greedy, saved_bytes_of_step, tiny_attractor

from equilibria import AttractorCache, AttractorConfig, AttractorForCausalLM
from equilibria.modeling import solvers

PROMPT = torch.tensor([[5, 9, 14, 3, 22, 7]])
IDS = torch.tensor([[5, 9, 14, 3, 22, 7, 8], [11, 4, 30, 17, 2, 9, 13]])
ATTRACTOR_WEIGHT = "model.attractor.layers.1.mlp.down_proj.weight"  # a weight of T (the gate exists in one form only)


@pytest.mark.parametrize("form", ["paper", "gated"])
def test_a_freshly_built_model_converges(form):
    """At initialisation T is contractive in both forms (the paper's: small residual updates; the gated one: its
    gate), for both injections and both solvers."""
    for injection in ("add", "concat"):
        for solver in ("anderson", "picard"):
            torch.manual_seed(0)
            config = AttractorConfig(
                vocab_size=64,
                hidden_size=32,
                intermediate_size=64,
                num_backbone_layers=2,
                num_attention_heads=4,
                injection=injection,
                solver=solver,
                residual_form=form,
                num_loops=50,
                solver_tol=1e-6,
            )
            model = AttractorForCausalLM(config).eval()
            with torch.no_grad():
                out = model(IDS)
            assert out.converged.all(), (injection, solver, out.rel_residual)
            assert (out.rel_residual <= 1e-6).all() and not out.diverged.any()
            assert (out.solver_steps >= 1).all() and (out.solver_steps < 50).all()


def test_the_output_is_a_fixed_point_of_the_attractor():
    model = tiny_attractor()
    with torch.no_grad():
        out = model(IDS, output_hidden_states=True)
        f, y0 = model.model.loop_map(IDS)
        y_star = out.hidden_states[-1]
        torch.testing.assert_close(y0, out.proposal, rtol=0, atol=0)
        residual = (f(y_star) - y_star).flatten(1).norm(dim=1) / y_star.flatten(1).norm(dim=1)
    assert out.converged.all() and (out.solver_steps > 5).all()  # the attractor really iterates
    assert (residual < 1e-5).all()
    assert len(out.hidden_states) == 1 + model.config.num_backbone_layers + 1
    torch.testing.assert_close(out.hidden_states[-2], out.proposal)


def test_budget_zero_is_the_backbone_alone():
    model = tiny_attractor()
    with torch.no_grad():
        backbone = model(IDS, num_loops=0)
        solved = model(IDS)
        expected = model.lm_head(model.model.norm(backbone.proposal))
    torch.testing.assert_close(backbone.logits, expected, rtol=0, atol=0)
    assert backbone.solver_steps is None and backbone.converged is None
    assert (backbone.logits - solved.logits).abs().max() > 1.0  # the attractor changes the prediction


def test_a_small_budget_is_reported_as_not_converged():
    model = tiny_attractor(solver="picard")
    with torch.no_grad():
        out = model(IDS, num_loops=2)
    assert (out.solver_steps == 2).all()
    assert not out.converged.any() and (out.rel_residual > 1e-6).all() and not out.diverged.any()


@pytest.mark.parametrize("form", ["paper", "gated"])
def test_anderson_needs_fewer_iterations_than_picard(form):
    strength = 6.0 if form == "paper" else None  # a map Picard iteration finds slow to converge
    anderson = tiny_attractor(solver="anderson", residual_form=form, strength=strength)
    picard = tiny_attractor(solver="picard", residual_form=form, strength=strength)
    with torch.no_grad():
        a, p = anderson(IDS), picard(IDS)
    assert a.converged.all() and p.converged.all()
    assert (a.solver_steps < p.solver_steps).all()
    torch.testing.assert_close(a.logits, p.logits, rtol=0, atol=1e-4)  # the same fixed point


@pytest.mark.parametrize("form", ["paper", "gated"])
def test_a_diverging_solve_is_flagged_warned_and_not_returned_as_garbage(caplog, form):
    model = tiny_attractor(residual_form=form)
    with torch.no_grad():
        if form == "gated":
            model.model.attractor.gate[3] = float("inf")
        else:
            model.model.attractor.layers[-1].mlp.down_proj.weight[3] = float("inf")
        backbone = model(IDS, num_loops=0).logits
    logging.Logger.warning_once.cache_clear()  # transformers' once-per-message cache
    with caplog.at_level(logging.WARNING, logger=solvers.__name__), torch.no_grad():
        out = model(IDS)
    assert solvers.DIVERGED in caplog.messages
    assert out.diverged.all() and not out.converged.any()
    assert torch.isfinite(out.logits).all()
    torch.testing.assert_close(out.logits, backbone)  # the lowest-residual iterate: the proposal


@pytest.mark.parametrize(
    "overrides", [dict(), dict(injection="concat"), dict(solver="picard"), dict(num_backbone_layers=0)]
)
def test_generation_with_cache_equals_generation_without(overrides):
    model = tiny_attractor(**overrides)
    seq_plain, logits_plain, _ = greedy(model, PROMPT, False)
    for cache in (None, AttractorCache()):  # generate's own cache, and one that records the solver's telemetry
        seq_cached, logits_cached, out = greedy(model, PROMPT, True, cache=cache)
        assert seq_cached.tolist() == seq_plain.tolist()
        torch.testing.assert_close(logits_cached, logits_plain, rtol=0, atol=1e-4)
    assert out.cache.converged.all() and (out.cache.solver_steps > 2).all()


def test_the_cache_keeps_past_positions_converged_states():
    model = tiny_attractor()
    _, _, out = greedy(model, PROMPT, True, max_new_tokens=4, cache=AttractorCache())
    cache = out.cache
    assert isinstance(cache, AttractorCache)
    assert len(cache.layers) == model.config.num_hidden_layers == 3
    length = PROMPT.shape[1] + 3  # the last token is never fed back
    assert [cache.get_seq_length(i) for i in range(3)] == [length] * 3
    assert cache.solver_steps.shape == (1, length) and cache.converged.shape == (1, length)
    # the attractor layers' cached keys are those of the solved states: recompute them without a cache
    with torch.no_grad():
        hidden = model(out.sequences[:, :length], use_cache=False, output_hidden_states=True).hidden_states
        captured = {}
        layer = model.model.attractor.layers[0]
        hook = layer.self_attn.k_proj.register_forward_hook(lambda m, i, o: captured.setdefault("k", o))
        f, _ = model.model.loop_map(out.sequences[:, :length])
        f(hidden[-1])
        hook.remove()
    cached_keys = cache.layers[1].keys  # (batch, kv_heads, seq, head_dim), after RoPE
    assert cached_keys.shape[-2] == length
    # compare by value: rotate the fresh keys by RoPE at their positions, as the attention does before caching
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

    fresh = captured["k"].view(1, length, -1, model.config.head_dim).transpose(1, 2)
    cos, sin = model.model.rotary_emb(hidden[-1], torch.arange(length)[None])
    fresh, _ = apply_rotary_pos_emb(fresh, fresh, cos, sin)
    torch.testing.assert_close(cached_keys, fresh, rtol=1e-4, atol=1e-4)


def test_left_padded_batch_gives_each_row_what_it_gives_alone():
    model = tiny_attractor()
    rows = [[5, 9, 14, 3, 22, 7], [11, 4, 30], [8, 8, 19, 2, 6]]
    width = max(map(len, rows))
    ids = torch.tensor([[0] * (width - len(r)) + r for r in rows])
    mask = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in rows])
    batch, _, _ = greedy(model, ids, True, max_new_tokens=6, attention_mask=mask)
    for i, row in enumerate(rows):
        alone, _, _ = greedy(model, torch.tensor([row]), True, max_new_tokens=6)
        assert batch[i, width:].tolist() == alone[0, len(row) :].tolist()


def test_beam_search_and_sampling_work_with_the_cache():
    model = tiny_attractor()
    kwargs = dict(max_new_tokens=6, pad_token_id=0, eos_token_id=None)
    beams_cached = model.generate(PROMPT, num_beams=3, use_cache=True, **kwargs)
    beams_plain = model.generate(PROMPT, num_beams=3, use_cache=False, **kwargs)
    assert beams_cached.tolist() == beams_plain.tolist()
    torch.manual_seed(3)
    sampled_cached = model.generate(PROMPT, do_sample=True, top_k=5, use_cache=True, **kwargs)
    torch.manual_seed(3)
    sampled_plain = model.generate(PROMPT, do_sample=True, top_k=5, use_cache=False, **kwargs)
    assert sampled_cached.tolist() == sampled_plain.tolist()


def test_num_loops_and_solver_tol_reach_forward_from_generate():
    model = tiny_attractor(solver="picard")
    _, _, few = greedy(model, PROMPT, True, max_new_tokens=3, num_loops=2, cache=AttractorCache())
    assert (few.cache.solver_steps == 2).all() and not few.cache.converged.any()
    _, _, loose = greedy(model, PROMPT, True, max_new_tokens=3, solver_tol=1e-2, cache=AttractorCache())
    _, _, tight = greedy(model, PROMPT, True, max_new_tokens=3, cache=AttractorCache())
    assert (loose.cache.solver_steps < tight.cache.solver_steps).all()
    backbone, _, _ = greedy(model, PROMPT, True, num_loops=0)
    backbone_plain, _, _ = greedy(model, PROMPT, False, num_loops=0)
    assert backbone.tolist() == backbone_plain.tolist()


def test_continuing_a_cache_across_budget_zero_is_an_error():
    model = tiny_attractor()
    with torch.no_grad():
        cache = model(PROMPT, num_loops=0, use_cache=True).cache
        with pytest.raises(ValueError, match="num_loops=0"):
            model(torch.tensor([[4]]), cache=cache, num_loops=5)
        cache = model(PROMPT, use_cache=True).cache
        with pytest.raises(ValueError, match="num_loops=0"):
            model(torch.tensor([[4]]), cache=cache, num_loops=0)


@pytest.mark.parametrize("bad", [-1, 1.5, "3", True])
def test_invalid_budgets_raise_value_error(bad):
    model = tiny_attractor()
    with pytest.raises(ValueError, match="num_loops must be an integer >= 0"):
        model(PROMPT, num_loops=bad)
    with pytest.raises(ValueError, match="num_loops"):
        model.generate(PROMPT, max_new_tokens=2, num_loops=bad, pad_token_id=0)


@pytest.mark.parametrize("bad", [0, -1e-3, float("nan"), float("inf")])
def test_invalid_tolerances_raise_value_error(bad):
    with pytest.raises(ValueError, match="solver_tol must be a finite number > 0"):
        tiny_attractor()(PROMPT, solver_tol=bad)


def test_static_cache_is_refused_with_a_clear_error():
    model = tiny_attractor()
    with pytest.raises(ValueError, match="needs a DynamicCache.*StaticCache.*cache_implementation"):
        model.generate(PROMPT, max_new_tokens=2, cache_implementation="static", pad_token_id=0)


# ---- gradients -----------------------------------------------------------------------------------------


def _grads(model, mode, num_loops=None, solver_tol=None):
    model.zero_grad()
    model.train()
    out = model(IDS, labels=IDS, gradient_mode=mode, num_loops=num_loops, solver_tol=solver_tol)
    out.loss.backward()
    model.eval()
    return out, {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def test_one_step_gradient_is_the_gradient_of_one_step_at_the_detached_fixed_point():
    model = tiny_attractor(seed=2, strength=3.0)
    _, got = _grads(model, "one_step")
    with torch.no_grad():
        y_star = model(IDS, output_hidden_states=True).hidden_states[-1]
    model.zero_grad()
    f, _ = model.model.loop_map(IDS)
    logits = model.lm_head(model.model.norm(f(y_star)))
    model.loss_function(logits=logits, labels=IDS, vocab_size=model.config.vocab_size).backward()
    for name, param in model.named_parameters():
        torch.testing.assert_close(got[name], param.grad, rtol=1e-4, atol=1e-6, msg=name)
    assert got[ATTRACTOR_WEIGHT].abs().sum() > 0 and got["model.backbone.0.mlp.up_proj.weight"].abs().sum() > 0


@pytest.mark.parametrize("form", ["paper", "gated"])  # this tiny DEQ control does not converge by plain iteration
def test_implicit_gradient_matches_backprop_through_the_converged_unrolled_solve(form):
    model = tiny_attractor(
        seed=2, strength=3.0 if form == "gated" else 2.0, solver="picard", solver_tol=1e-7, residual_form=form
    )
    out, implicit = _grads(model, "implicit", num_loops=200)
    assert out.converged.all()
    _, unrolled = _grads(model, "unrolled", num_loops=60)
    _, one_step = _grads(model, "one_step", num_loops=200)
    flat = {k: torch.cat([g[k].flatten() for k in sorted(implicit)]) for k, g in (("i", implicit), ("u", unrolled))}
    flat["o"] = torch.cat([one_step[k].flatten() for k in sorted(implicit)])
    rel = (flat["i"] - flat["u"]).norm() / flat["u"].norm()
    assert rel < 1e-5, rel
    cosine_one_step = torch.nn.functional.cosine_similarity(flat["o"], flat["u"], dim=0)
    assert cosine_one_step < 0.999  # the one-step gradient is an approximation; the implicit one is exact


def _saved_bytes(model, mode, num_loops):
    return saved_bytes_of_step(model, IDS, IDS, mode, num_loops)


@pytest.mark.parametrize("form", ["paper", "gated", "deq"])
def test_training_memory_does_not_grow_with_the_budget_except_when_unrolled(form):
    model = tiny_attractor(solver="picard", residual_form=form)
    for mode in ("one_step", "implicit"):
        assert _saved_bytes(model, mode, 32) == _saved_bytes(model, mode, 2), mode
    unrolled = [_saved_bytes(model, "unrolled", budget) for budget in (2, 8, 32)]
    assert unrolled[0] < unrolled[1] < unrolled[2] and unrolled[2] > 6 * unrolled[0]


def test_jacobian_penalty_is_a_hutchinson_estimate_of_the_frobenius_norm():
    model = tiny_attractor(seed=1, strength=3.0)
    ids = IDS[:1, :3]
    torch.manual_seed(0)
    model.train()
    out = model(ids, jacobian_samples=300)
    model.eval()
    f, _ = model.model.loop_map(ids)
    with torch.no_grad():
        y_star = model(ids, output_hidden_states=True).hidden_states[-1]
    jac = torch.autograd.functional.jacobian(f, y_star).reshape(y_star.numel(), y_star.numel())
    exact = jac.pow(2).sum() / y_star.numel()
    assert out.jacobian_penalty.requires_grad
    torch.testing.assert_close(out.jacobian_penalty.detach(), exact, rtol=0.15, atol=0)
    out.jacobian_penalty.backward()
    assert model.model.attractor.layers[-1].mlp.down_proj.weight.grad.abs().sum() > 0


def test_correction_loss_reads_intermediate_iterates():
    model = tiny_attractor(solver="picard")
    model.train()
    out = model(IDS, labels=IDS, correction_states=3, num_loops=12)
    assert out.correction_loss is not None and out.correction_loss.requires_grad
    # early iterates are further from the fixed point than the final state: their loss differs
    assert not torch.isclose(out.correction_loss, out.loss)
    out.correction_loss.backward()
    assert model.model.attractor.layers[-1].mlp.down_proj.weight.grad.abs().sum() > 0
    model.eval()


def test_gradient_checkpointing_gives_the_same_gradients():
    a, b = tiny_attractor(seed=1, strength=3.0), tiny_attractor(seed=1, strength=3.0)
    b.activation_checkpointing_enable()
    for mode in ("one_step", "implicit"):
        _, ga = _grads(a, mode)
        _, gb = _grads(b, mode)
        for name in ga:
            torch.testing.assert_close(ga[name], gb[name], rtol=1e-4, atol=1e-6, msg=(mode, name))


def test_correction_iterates_are_spread_over_the_solve_in_constant_memory():
    from equilibria.modeling.regularization import IterateSampler

    sampler = IterateSampler(3)
    for i in range(100):
        sampler.offer(torch.tensor([float(i)]))
        assert len(sampler.kept) <= 6
    picked = [int(t.item()) for t in sampler.select(100)]
    assert len(picked) == 3 and picked == sorted(picked) and picked[-1] >= 64 and picked[0] >= 16
    short = IterateSampler(3)
    for i in range(2):
        short.offer(torch.tensor([float(i)]))
    assert [int(t.item()) for t in short.select(2)] == [0, 1]
