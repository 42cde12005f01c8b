"""Claims about Ouro generation: the cache, padding, loop counts and early exit."""

import pytest
import torch
from conftest import PROMPT, exit_model, greedy, tiny_ouro

from equilibria import OuroCache


@pytest.mark.parametrize("num_loops", [1, 3, 7])
def test_generation_with_cache_equals_generation_without(model, num_loops):
    seq_cached, logits_cached, _ = greedy(model, PROMPT, True, num_loops=num_loops)
    seq_plain, logits_plain, _ = greedy(model, PROMPT, False, num_loops=num_loops)
    assert seq_cached.tolist() == seq_plain.tolist()
    torch.testing.assert_close(logits_cached, logits_plain, rtol=0, atol=1e-4)


def test_cache_has_one_entry_per_loop_step_and_layer(model):
    """``generate``'s own cache (one layer per decoder layer, from the config) grows a copy of its layers per further
    loop step; an ``OuroCache`` passed in also records each position's exit step."""
    _, _, out = greedy(model, PROMPT, True, num_loops=5, max_new_tokens=4)
    assert type(out.cache).__name__ == "DynamicCache"
    assert len(out.cache.layers) == 5 * model.config.num_hidden_layers
    assert out.cache.get_seq_length() == PROMPT.shape[1] + 3  # the last token is never fed back
    _, _, out = greedy(model, PROMPT, True, num_loops=5, max_new_tokens=4, cache=OuroCache())
    cache = out.cache
    assert isinstance(cache, OuroCache)
    assert len(cache.layers) == 5 * model.config.num_hidden_layers
    assert cache.get_seq_length() == PROMPT.shape[1] + 3
    assert cache.exit_steps.shape == (1, PROMPT.shape[1] + 3)
    assert (cache.exit_steps == 5).all()


def test_num_loops_changes_the_output(model):
    a, _, _ = greedy(model, PROMPT, True, num_loops=1)
    b, _, _ = greedy(model, PROMPT, True, num_loops=6)
    assert a.tolist() != b.tolist()
    with torch.no_grad():
        l2 = model(PROMPT, num_loops=2).logits
        l3 = model(PROMPT, num_loops=3).logits
        default = model(PROMPT).logits
    assert not torch.allclose(l2, l3)
    torch.testing.assert_close(default, l3)  # config.total_ut_steps == 3


def test_left_padded_batch_gives_each_row_what_it_gives_alone(model):
    rows = [[5, 9, 14, 3, 22, 7], [11, 4, 30], [8, 8, 19, 2, 6]]
    width = max(map(len, rows))
    ids = torch.tensor([[0] * (width - len(r)) + r for r in rows])
    mask = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in rows])
    seq, logits, _ = greedy(model, ids, True, attention_mask=mask, num_loops=4)
    for i, r in enumerate(rows):
        alone_seq, alone_logits, _ = greedy(model, torch.tensor([r]), True, num_loops=4)
        assert seq[i, width:].tolist() == alone_seq[0, len(r) :].tolist()
        torch.testing.assert_close(logits[i], alone_logits[0], rtol=0, atol=1e-4)


def test_continuing_a_cache_with_another_loop_count_is_an_error(model):
    cache = OuroCache()
    with torch.no_grad():
        model(PROMPT, cache=cache, use_cache=True, num_loops=3)
        with pytest.raises(ValueError, match="num_loops=3"):
            model(PROMPT[:, :1], cache=cache, use_cache=True, num_loops=4)


@pytest.mark.parametrize("bad", [0, -2, 1.5, True, "3"])
def test_invalid_num_loops_raise_value_error(model, bad):
    with pytest.raises(ValueError, match="num_loops must be an integer >= 1"):
        model(PROMPT, num_loops=bad)
    with pytest.raises(ValueError, match="num_loops must be an integer >= 1"):
        model.generate(PROMPT, num_loops=bad, max_new_tokens=2)


@pytest.mark.parametrize("bad", [0.0, -0.5, 1.5])
def test_invalid_exit_threshold_raises_value_error(model, bad):
    with pytest.raises(ValueError, match=r"exit_threshold must be None or a number in \(0, 1\]"):
        model(PROMPT, exit_threshold=bad)


# ---------------------------------------------------------------------------------------------------
# Early exit
# ---------------------------------------------------------------------------------------------------


def test_early_exit_reports_per_token_exit_steps():
    model = exit_model()
    with torch.no_grad():
        out = model(PROMPT, exit_threshold=0.5, use_cache=False)
        full = model(PROMPT, use_cache=False)
    steps = out.exit_steps[0]
    assert steps.min() >= 1 and steps.max() <= 6
    assert len(set(steps.tolist())) > 1, "the test model should make tokens exit at different steps"
    cdf = out.exit_probs.cumsum(-1)
    for s, t in enumerate(steps.tolist()):
        # each token exits at the first step where its cumulative exit probability reaches the threshold
        assert t == 6 or cdf[0, s, t - 1] >= 0.5
        assert t == 1 or cdf[0, s, t - 2] < 0.5
    assert (full.exit_steps == 6).all()
    torch.testing.assert_close(full.exit_probs.sum(-1), torch.ones(1, PROMPT.shape[1]))


def test_early_exit_generation_with_cache_equals_without():
    model = exit_model()
    seq_c, logits_c, out_c = greedy(model, PROMPT, True, exit_threshold=0.5, max_new_tokens=12, cache=OuroCache())
    seq_p, logits_p, _ = greedy(model, PROMPT, False, exit_threshold=0.5, max_new_tokens=12)
    assert seq_c.tolist() == seq_p.tolist()
    torch.testing.assert_close(logits_c, logits_p, rtol=0, atol=1e-4)
    steps = out_c.cache.exit_steps[0]
    assert steps.min() < 6, "some generated or prompt tokens should exit early"
    seq_d, logits_d, _ = greedy(model, PROMPT, True, exit_threshold=0.5, max_new_tokens=12)  # generate's own cache
    assert seq_d.tolist() == seq_p.tolist()
    torch.testing.assert_close(logits_d, logits_p, rtol=0, atol=1e-4)


def test_exited_tokens_are_seen_through_their_exit_step_keys_and_values():
    """Documented semantics: at loop steps after a token's exit, its cache entries repeat the ones of its exit
    step (same layer), for prompt tokens and decoded tokens alike."""
    model = exit_model()
    _, _, out = greedy(model, PROMPT, True, exit_threshold=0.5, max_new_tokens=8, cache=OuroCache())
    cache, num_layers = out.cache, model.config.num_hidden_layers
    steps = cache.exit_steps[0]
    checked = 0
    for pos, exit_step in enumerate(steps.tolist()):
        for later in range(exit_step, 6):
            for layer in range(num_layers):
                at_exit = cache.layers[(exit_step - 1) * num_layers + layer]
                after = cache.layers[later * num_layers + layer]
                torch.testing.assert_close(after.keys[0, :, pos], at_exit.keys[0, :, pos], rtol=0, atol=0)
                torch.testing.assert_close(after.values[0, :, pos], at_exit.values[0, :, pos], rtol=0, atol=0)
                checked += 1
    assert checked > 0


def test_early_exit_skips_the_remaining_steps_while_decoding():
    model = exit_model()
    calls = []
    hook = model.model.layers[0].register_forward_hook(lambda m, args, out: calls.append(out.shape[:2]))
    try:
        _, _, out = greedy(model, PROMPT, True, exit_threshold=0.5, max_new_tokens=8, cache=OuroCache())
    finally:
        hook.remove()
    steps = out.cache.exit_steps[0].tolist()
    prompt_len = PROMPT.shape[1]
    decode_calls = [c for c in calls if c[1] == 1]
    # one call of layer 0 per loop step actually run: the decoded tokens' exit steps add up to the calls
    assert len(decode_calls) == sum(steps[prompt_len:])
    assert len(decode_calls) < 6 * (len(steps) - prompt_len)


@pytest.mark.parametrize("mode", ["per_loop", "last_loop"])
def test_a_forward_whose_every_token_has_exited_skips_the_remaining_steps(mode):
    """A gate that makes every token exit after step 1: the prompt's forward runs one step, and its cache holds the
    step's keys/values for the skipped steps too; the output is the one-step run's."""
    model = exit_model()
    with torch.no_grad():
        model.model.early_exit_gate.bias.fill_(20.0)
    calls = []
    hook = model.model.layers[0].register_forward_hook(lambda m, args, out: calls.append(out.shape))
    try:
        with torch.no_grad():
            out = model(PROMPT, exit_threshold=0.5, cache=OuroCache(), use_cache=True, recurrent_kv_cache_mode=mode)
    finally:
        hook.remove()
    assert len(calls) == 1 and (out.exit_steps == 1).all()
    with torch.no_grad():
        one = model(PROMPT, num_loops=1, use_cache=True)
    torch.testing.assert_close(out.logits, one.logits, rtol=0, atol=1e-5)
    last = out.cache.layers[-1] if mode == "last_loop" else out.cache.layers[5 * model.config.num_hidden_layers + 1]
    torch.testing.assert_close(last.keys, one.cache.layers[1].keys, rtol=0, atol=0)


def test_batched_early_exit_runs_only_the_rows_still_looping():
    model = exit_model(seed=3)
    rows = [[5, 9, 14, 3, 22, 7], [11, 4, 30, 17, 2, 9], [8, 8, 19, 2, 6, 1]]
    ids = torch.tensor(rows)
    batch_sizes = []
    hook = model.model.layers[0].register_forward_hook(
        lambda m, args, out: batch_sizes.append(out.shape[0]) if out.shape[1] == 1 else None
    )
    try:
        seq, logits, out = greedy(model, ids, True, exit_threshold=0.5, max_new_tokens=8, cache=OuroCache())
    finally:
        hook.remove()
    assert min(batch_sizes) < len(rows), "some decode steps should run on a subset of the rows"
    for i, r in enumerate(rows):
        alone_seq, alone_logits, alone = greedy(
            model, torch.tensor([r]), True, exit_threshold=0.5, max_new_tokens=8, cache=OuroCache()
        )
        assert seq[i].tolist() == alone_seq[0].tolist()
        torch.testing.assert_close(logits[i], alone_logits[0], rtol=0, atol=1e-4)
        assert out.cache.exit_steps[i].tolist() == alone.cache.exit_steps[0].tolist()


def test_threshold_of_one_disables_early_exit():
    model = exit_model()
    with torch.no_grad():
        a = model(PROMPT, exit_threshold=1.0)
        b = model(PROMPT)
    assert (a.exit_steps == 6).all()
    torch.testing.assert_close(a.logits, b.logits)


def test_config_threshold_is_the_default_and_training_ignores_it():
    model = exit_model()
    model.config.early_exit_threshold = 0.5
    with torch.no_grad():
        out = model(PROMPT)
    assert out.exit_steps.min() < 6
    model.train()
    out = model(PROMPT, labels=PROMPT)
    assert (out.exit_steps == 6).all()
    out.loss.backward()


def test_single_loop_and_exit_distribution_shapes(model):
    with torch.no_grad():
        one = model(PROMPT, num_loops=1)
        four = model(PROMPT, num_loops=4)
    assert one.exit_probs.shape == (1, PROMPT.shape[1], 1) and torch.all(one.exit_probs == 1)
    assert four.exit_probs.shape == (1, PROMPT.shape[1], 4)
    torch.testing.assert_close(four.exit_probs.sum(-1), torch.ones(1, PROMPT.shape[1]))
    assert torch.all(four.loop_residual > 0)


def test_hidden_states_are_the_loop_states(model):
    with torch.no_grad():
        out = model.model(PROMPT, num_loops=3, output_hidden_states=True)
        two = model.model(PROMPT, num_loops=2, output_hidden_states=True)
    assert len(out.hidden_states) == 4
    torch.testing.assert_close(out.hidden_states[-1], out.last_hidden_state)
    torch.testing.assert_close(out.hidden_states[2], two.last_hidden_state)  # step t does not see later steps
    expected = (out.hidden_states[3] - out.hidden_states[2]).norm(dim=-1) / out.hidden_states[3].norm(dim=-1)
    torch.testing.assert_close(out.loop_residual, expected)


def test_beam_search_and_sampling_work_with_the_cache(model):
    kwargs = dict(
        max_new_tokens=6,
        num_beams=3,
        num_return_sequences=2,
        do_sample=False,
        pad_token_id=0,
        eos_token_id=None,
        num_loops=2,
    )
    cached = model.generate(PROMPT, use_cache=True, **kwargs)
    plain = model.generate(PROMPT, use_cache=False, **kwargs)
    assert cached.tolist() == plain.tolist()
    torch.manual_seed(0)
    a = model.generate(PROMPT, max_new_tokens=6, do_sample=True, top_k=5, pad_token_id=0, num_loops=2)
    torch.manual_seed(0)
    b = model.generate(PROMPT, max_new_tokens=6, do_sample=True, top_k=5, pad_token_id=0, num_loops=2, use_cache=False)
    assert a.tolist() == b.tolist()


def test_tied_model_saves_and_loads(tmp_path):
    from equilibria import OuroForCausalLM

    model = tiny_ouro(tie_word_embeddings=True)
    model.save_pretrained(tmp_path)
    loaded = OuroForCausalLM.from_pretrained(tmp_path, attn_implementation="eager").eval()
    assert loaded.lm_head.weight.data_ptr() == loaded.model.embed_tokens.weight.data_ptr()
    with torch.no_grad():
        torch.testing.assert_close(loaded(PROMPT).logits, model(PROMPT).logits, rtol=0, atol=0)


def test_a_cache_passed_in_training_mode_is_used_not_dropped(model):
    model.train()
    cache = OuroCache()
    out = model(PROMPT, cache=cache, num_loops=2)
    assert out.cache is cache and cache.get_seq_length() == PROMPT.shape[1]


def test_loop_map_is_one_loop_step(model):
    with torch.no_grad():
        out = model.model(PROMPT, num_loops=3, output_hidden_states=True)
        f = model.model.loop_map(PROMPT)
        for t in range(3):
            torch.testing.assert_close(f(out.hidden_states[t]), out.hidden_states[t + 1], rtol=1e-5, atol=1e-5)


IDS = torch.tensor([[5, 9, 14, 3, 22, 7, 8, 10], [11, 4, 30, 17, 2, 9, 13, 6]])
LABELS = torch.tensor([[-100, -100, 14, 3, 22, 7, 8, 10], [-100, 4, 30, 17, -100, 9, 13, 6]])


def _step_logits_and_exit(model, ids):
    out = model.model(ids, output_hidden_states=True)
    return [model.lm_head(h) for h in out.hidden_states[1:]], out.exit_probs


def test_the_published_loss_is_the_cross_entropy_of_the_expected_logits():
    model = tiny_ouro(exit_loss="expected_logits")
    out = model(IDS, labels=LABELS)
    steps, probs = _step_logits_and_exit(model, IDS)
    expected = sum(probs[..., t, None] * logits for t, logits in enumerate(steps))
    torch.testing.assert_close(out.logits, expected)
    reference = torch.nn.functional.cross_entropy(expected[:, :-1].flatten(0, 1), LABELS[:, 1:].flatten())
    torch.testing.assert_close(out.loss, reference)
    torch.testing.assert_close(model(IDS, use_weighted_exit=True).logits, expected)  # the same readout without labels


def test_the_papers_loss_is_the_expected_cross_entropy_minus_the_entropy_bonus():
    model = tiny_ouro(exit_loss="expected", exit_entropy_weight=0.3)
    out = model(IDS, labels=LABELS)
    steps, probs = _step_logits_and_exit(model, IDS)
    targets, valid = LABELS[:, 1:], LABELS[:, 1:] != -100
    ce = torch.stack(
        [
            torch.nn.functional.cross_entropy(s[:, :-1].transpose(1, 2), targets.clamp_min(0), reduction="none")
            for s in steps
        ],
        dim=-1,
    )
    p = probs[:, :-1]
    per_token = (p * ce).sum(-1) + 0.3 * (p * p.log()).sum(-1)
    torch.testing.assert_close(out.loss, per_token[valid].mean())
    # with gradient accumulation the Trainer passes the number of labelled tokens of the whole batch
    halved = model(IDS, labels=LABELS, num_items_in_batch=2 * int(valid.sum())).loss
    torch.testing.assert_close(halved, out.loss / 2)


def test_the_final_loss_reads_the_last_step_only():
    model = tiny_ouro(exit_loss="final")
    out = model(IDS, labels=LABELS)
    last = _step_logits_and_exit(model, IDS)[0][-1]
    torch.testing.assert_close(out.logits, last)
    torch.testing.assert_close(
        out.loss, torch.nn.functional.cross_entropy(last[:, :-1].flatten(0, 1), LABELS[:, 1:].flatten())
    )


def test_exit_at_step_reads_out_one_step_in_forward_and_generate():
    model = tiny_ouro()
    steps, _ = _step_logits_and_exit(model, IDS)
    for step in range(3):
        torch.testing.assert_close(model(IDS, exit_at_step=step).logits, steps[step])
        # step k's state depends on steps <= k only (causal in depth too): reading it equals running k + 1 loops
        torch.testing.assert_close(steps[step], model(IDS, num_loops=step + 1).logits)
    generated = model.generate(IDS[:1], max_new_tokens=4, do_sample=False, exit_at_step=1, pad_token_id=0)
    shallow = model.generate(IDS[:1], max_new_tokens=4, do_sample=False, num_loops=2, pad_token_id=0)
    assert generated.tolist() == shallow.tolist()
    with pytest.raises(ValueError, match=r"exit_at_step must be in \[0, 2\]"):
        model(IDS, exit_at_step=3)
    with pytest.raises(ValueError, match="choose the readout without labels"):
        model(IDS, labels=LABELS, exit_at_step=1)


def test_training_with_the_published_loss_moves_the_exit_gate():
    model = tiny_ouro().train()
    before = model.model.early_exit_gate.weight.detach().clone()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    for _ in range(3):
        model(IDS, labels=LABELS).loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    assert not torch.allclose(model.model.early_exit_gate.weight, before)


def _gated(bias: float, weight_std: float = 0.2):
    model = tiny_ouro(total_ut_steps=4)
    with torch.no_grad():
        model.model.early_exit_gate.weight.normal_(0, weight_std, generator=torch.Generator().manual_seed(3))
        model.model.early_exit_gate.bias.fill_(bias)
    return model


def test_the_reference_readout_reads_each_token_at_its_exit_step_of_the_full_computation():
    model = _gated(-0.5)
    out = model(IDS, exit_threshold=0.6, exit_readout="reference")
    full = model.model(IDS, output_hidden_states=True)  # every step, no exit
    step = (full.exit_probs.cumsum(-1) >= 0.6).float().argmax(-1)  # the published rule: first step reaching it
    expected = torch.stack(full.hidden_states[1:], 2)[torch.arange(2)[:, None], torch.arange(IDS.shape[1]), step]
    torch.testing.assert_close(out.logits, model.lm_head(expected))
    assert torch.equal(out.exit_steps, step + 1) and len(set(step.flatten().tolist())) > 1
    frozen = model(IDS, exit_threshold=0.6)  # the compute-saving exit: later tokens see frozen keys/values
    assert not torch.allclose(frozen.logits, out.logits)


def test_both_readouts_agree_when_every_token_exits_at_the_same_step():
    model = _gated(6.0, weight_std=0.0)  # lambda ~ 1: everyone exits after the first step
    frozen, reference = model(IDS, exit_threshold=0.9), model(IDS, exit_threshold=0.9, exit_readout="reference")
    assert (frozen.exit_steps == 1).all() and (reference.exit_steps == 1).all()
    torch.testing.assert_close(frozen.logits, reference.logits)


def test_reference_readout_generation_with_the_cache_equals_without():
    model = _gated(-0.5)
    kwargs = dict(max_new_tokens=6, exit_threshold=0.6, exit_readout="reference", do_sample=False, pad_token_id=0)
    assert model.generate(IDS[:1], **kwargs).tolist() == model.generate(IDS[:1], use_cache=False, **kwargs).tolist()
    with pytest.raises(ValueError, match="exit_readout must be one of"):
        model(IDS, exit_threshold=0.6, exit_readout="published")


def test_generating_far_beyond_the_configured_loops_warns_once_naming_both_counts():
    import warnings

    from conftest import tiny_native

    from equilibria import looped

    for model, key in ((tiny_ouro(), "total_ut_steps"), (looped(tiny_native("dory")), "n_recurrent_loops")):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            model.generate(PROMPT, num_loops=12, max_new_tokens=1)  # 4x the config's 3: within reach, no warning
            model.generate(PROMPT, num_loops=30, max_new_tokens=1)
            model.generate(PROMPT, num_loops=40, max_new_tokens=1)  # once per model
        far = [str(w.message) for w in caught if "far beyond" in str(w.message) or "runs 10x" in str(w.message)]
        assert far == [f"generate(num_loops=30) runs 10x the 3 loops of this model's config ({key}, the count it was "
                       "saved with): a looped model trained at a few loops is rarely right that far beyond them; "
                       "measure it (equilibria eval FOLDER --loops ...) before trusting the answers."], far  # fmt: skip
