"""Claims about Ouro's KV-cache layouts (``recurrent_kv_cache_mode``): ``per_loop`` (one entry per loop step and
layer) and ``last_loop`` (one per layer, written by the last step, read by the earlier ones).

The reference for ``last_loop`` is written here independently of the package's: the model runs in ``per_loop``
with a cache that keeps every step's entries, but hands the earlier steps the *last* step's keys/values of past
tokens followed by their own. A run in ``last_loop`` must equal it whenever the input is split into the same
forwards (the "chunk schedule")."""

import inspect

import pytest
import torch
from conftest import PROMPT, exit_model, greedy, tiny_ouro
from torch._dynamo.utils import counters
from transformers import CompileConfig, DynamicCache

from equilibria import OuroCache, OuroConfig, OuroForCausalLM


class LastLoopReference(DynamicCache):
    """A ``per_loop``-indexed cache whose earlier steps attend to the last step's past keys/values."""

    def __init__(self, num_layers: int, num_loops: int):
        super().__init__()
        self.num_layers, self.num_loops = num_layers, num_loops

    def update(self, key, value, layer_idx, *args, **kwargs):
        step, layer = divmod(layer_idx, self.num_layers)
        last = (self.num_loops - 1) * self.num_layers + layer
        past = self.layers[last] if last < len(self.layers) and self.layers[last].get_seq_length() > 0 else None
        past_k, past_v = (past.keys, past.values) if past is not None else (None, None)
        out = super().update(key, value, layer_idx, *args, **kwargs)
        if step == self.num_loops - 1 or past_k is None:
            return out
        return torch.cat([past_k, key], dim=-2), torch.cat([past_v, value], dim=-2)


def run_chunks(model, ids, chunks, cache, **kwargs):
    """The logits of ``ids`` fed in forwards of the lengths in ``chunks``, continuing ``cache``."""
    logits, start = [], 0
    with torch.no_grad():
        for size in chunks:
            out = model(ids[:, start : start + size], cache=cache, use_cache=True, **kwargs)
            logits.append(out.logits)
            start += size
    return torch.cat(logits, dim=1)


IDS = torch.tensor([[5, 9, 14, 3, 22, 7, 11, 4, 30, 8, 19, 2]])


@pytest.mark.parametrize("chunks", [[12], [6, 1, 1, 1, 1, 1, 1], [5, 4, 3]])
@pytest.mark.parametrize("num_loops", [1, 4])
def test_last_loop_equals_the_reference_with_the_same_chunk_schedule(model, chunks, num_loops):
    layers = model.config.num_hidden_layers
    got = run_chunks(model, IDS, chunks, OuroCache(), num_loops=num_loops, recurrent_kv_cache_mode="last_loop")
    want = run_chunks(model, IDS, chunks, LastLoopReference(layers, num_loops), num_loops=num_loops)
    torch.testing.assert_close(got, want, rtol=0, atol=1e-5)


def test_a_prompt_in_one_forward_is_the_uncached_computation_and_decoding_is_not(model):
    with torch.no_grad():
        plain = model(IDS, use_cache=False, num_loops=4).logits
        one = model(IDS, use_cache=True, num_loops=4, recurrent_kv_cache_mode="last_loop").logits
    torch.testing.assert_close(one, plain, rtol=0, atol=1e-5)
    split = run_chunks(model, IDS, [6] + [1] * 6, OuroCache(), num_loops=4, recurrent_kv_cache_mode="last_loop")
    torch.testing.assert_close(split[:, :6], plain[:, :6], rtol=0, atol=1e-5)
    # decoded tokens' earlier steps read the last step's keys of the past: the mode is a different computation
    assert (split[:, 6:] - plain[:, 6:]).abs().max() > 1e-3


def test_generate_in_last_loop_equals_the_reference_decoding(model):
    layers = model.config.num_hidden_layers
    seq, logits, out = greedy(model, PROMPT, True, num_loops=4, recurrent_kv_cache_mode="last_loop")
    ref_seq, ref_logits, _ = greedy(model, PROMPT, True, num_loops=4, cache=LastLoopReference(layers, 4))
    assert seq.tolist() == ref_seq.tolist()
    torch.testing.assert_close(logits, ref_logits, rtol=0, atol=1e-4)
    assert type(out.cache).__name__ == "DynamicCache" and len(out.cache.layers) == layers


def test_the_cache_holds_one_entry_per_layer_num_loops_times_fewer_bytes(model):
    def cache_bytes(mode):
        _, _, out = greedy(model, PROMPT, True, num_loops=4, max_new_tokens=5, recurrent_kv_cache_mode=mode)
        return len(out.cache.layers), sum(
            t.numel() * t.element_size() for layer in out.cache.layers for t in (layer.keys, layer.values)
        )

    (per_entries, per_bytes), (last_entries, last_bytes) = cache_bytes("per_loop"), cache_bytes("last_loop")
    assert (per_entries, last_entries) == (4 * model.config.num_hidden_layers, model.config.num_hidden_layers)
    assert per_bytes == 4 * last_bytes


def test_the_config_sets_the_default_and_a_call_overrides_it(tmp_path):
    model = tiny_ouro(total_ut_steps=4, recurrent_kv_cache_mode="last_loop")
    model.save_pretrained(tmp_path)
    loaded = OuroForCausalLM.from_pretrained(tmp_path).eval()
    assert loaded.config.recurrent_kv_cache_mode == "last_loop"
    _, _, out = greedy(loaded, PROMPT, True, max_new_tokens=3)
    assert len(out.cache.layers) == model.config.num_hidden_layers
    _, _, out = greedy(loaded, PROMPT, True, max_new_tokens=3, recurrent_kv_cache_mode="per_loop")
    assert len(out.cache.layers) == 4 * model.config.num_hidden_layers
    assert OuroConfig().recurrent_kv_cache_mode == "per_loop"  # folders saved without the key load so


def test_left_padded_rows_equal_the_rows_alone_in_last_loop(model):
    rows = [[5, 9, 14, 3, 22, 7], [11, 4, 30], [8, 8, 19, 2, 6]]
    width = max(map(len, rows))
    ids = torch.tensor([[0] * (width - len(r)) + r for r in rows])
    mask = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in rows])
    seq, logits, _ = greedy(model, ids, True, attention_mask=mask, num_loops=4, recurrent_kv_cache_mode="last_loop")
    for i, r in enumerate(rows):
        alone_seq, alone_logits, _ = greedy(
            model, torch.tensor([r]), True, num_loops=4, recurrent_kv_cache_mode="last_loop"
        )
        assert seq[i, width:].tolist() == alone_seq[0, len(r) :].tolist()
        torch.testing.assert_close(logits[i], alone_logits[0], rtol=0, atol=1e-4)


BATCH = torch.tensor([[5, 9, 14, 3, 22, 7], [11, 4, 30, 17, 2, 9], [8, 8, 19, 2, 6, 1]])


@pytest.mark.parametrize("seed, ids", [(0, PROMPT), (3, BATCH)], ids=["one row", "rows"])
def test_early_exit_composes_with_last_loop(seed, ids):
    """Tokens exit at different steps; while decoding, exited rows are dropped and, once every row has exited, the
    one entry per layer gets their frozen keys/values. The result equals the reference run with the same early
    exit."""
    model = exit_model(seed=seed)
    layers = model.config.num_hidden_layers
    seq, logits, out = greedy(
        model, ids, True, exit_threshold=0.5, max_new_tokens=8, cache=OuroCache(), recurrent_kv_cache_mode="last_loop"
    )
    ref_seq, ref_logits, _ = greedy(
        model, ids, True, exit_threshold=0.5, max_new_tokens=8, cache=LastLoopReference(layers, 6)
    )
    steps = out.cache.exit_steps[:, ids.shape[1] :]
    assert steps.min() < 6 and len(set(steps.flatten().tolist())) > 1, "rows should exit at different steps"
    assert seq.tolist() == ref_seq.tolist()
    torch.testing.assert_close(logits, ref_logits, rtol=0, atol=1e-4)


def test_a_last_loop_cache_continues_with_another_loop_count_and_refuses_another_mode(model):
    cache = OuroCache()
    run_chunks(model, IDS, [6], cache, num_loops=3, recurrent_kv_cache_mode="last_loop")
    run_chunks(model, IDS[:, 6:], [1], cache, num_loops=5, recurrent_kv_cache_mode="last_loop")
    assert cache.get_seq_length() == 7 and len(cache.layers) == model.config.num_hidden_layers
    with pytest.raises(ValueError, match="recurrent_kv_cache_mode='last_loop'; it cannot be continued"):
        run_chunks(model, IDS[:, 7:], [1], cache, num_loops=5, recurrent_kv_cache_mode="per_loop")
    plain = DynamicCache()
    run_chunks(model, IDS, [6], plain, num_loops=3)
    with pytest.raises(ValueError, match="recurrent_kv_cache_mode='last_loop' needs 2"):
        run_chunks(model, IDS[:, 6:], [1], plain, num_loops=3, recurrent_kv_cache_mode="last_loop")


@pytest.mark.parametrize("option", [dict(prompt_lookup_num_tokens=2), dict(assistant_early_exit=1)])
def test_assisted_decoding_is_refused_in_last_loop_only(model, option):
    with pytest.raises(ValueError, match="not supported with recurrent_kv_cache_mode='last_loop'"):
        greedy(model, PROMPT, True, num_loops=4, recurrent_kv_cache_mode="last_loop", **option)
    if "prompt_lookup_num_tokens" in option:  # per_loop: verified chunks give what token-by-token decoding gives
        seq, _, _ = greedy(model, PROMPT, True, num_loops=4, **option)
        assert seq.tolist() == greedy(model, PROMPT, True, num_loops=4)[0].tolist()


def test_a_static_cache_is_refused_in_last_loop_with_a_clear_error(model):
    with pytest.raises(ValueError, match="recurrent_kv_cache_mode='last_loop' reads the cache's plain dynamic layers"):
        greedy(
            model, PROMPT, True, max_new_tokens=2, cache_implementation="static", recurrent_kv_cache_mode="last_loop"
        )


@pytest.mark.parametrize("bad", ["last", "per-loop", None, 3])
def test_an_unknown_mode_is_a_clear_error(model, bad):
    if bad is not None:
        with pytest.raises(ValueError, match=r"recurrent_kv_cache_mode must be one of \('per_loop', 'last_loop'\)"):
            model(PROMPT, recurrent_kv_cache_mode=bad)
    with pytest.raises(ValueError, match="recurrent_kv_cache_mode"):
        OuroConfig(recurrent_kv_cache_mode=bad if bad is not None else "first_loop")


# ---------------------------------------------------------------------------------------------------
# Static cache and torch.compile
# ---------------------------------------------------------------------------------------------------


def test_a_static_cache_grows_an_entry_per_loop_step_and_equals_the_dynamic_cache(model):
    seq, logits, out = greedy(model, PROMPT, True, num_loops=3, cache_implementation="static")
    want_seq, want_logits, _ = greedy(model, PROMPT, True, num_loops=3)
    assert type(out.cache).__name__ == "StaticCache" and len(out.cache.layers) == 3 * model.config.num_hidden_layers
    assert seq.tolist() == want_seq.tolist()
    torch.testing.assert_close(logits, want_logits, rtol=0, atol=1e-4)
    model = exit_model(seed=3)  # early exit with row dropping writes into the static buffers as well
    seq, logits, _ = greedy(model, BATCH, True, exit_threshold=0.5, max_new_tokens=8, cache_implementation="static")
    want_seq, want_logits, _ = greedy(model, BATCH, True, exit_threshold=0.5, max_new_tokens=8)
    assert seq.tolist() == want_seq.tolist()
    torch.testing.assert_close(logits, want_logits, rtol=0, atol=1e-4)


def compiled(fullgraph=True):
    """A compile config that compiles on the CPU too, with dynamo alone (``backend="eager"``: it checks that the
    step traces into one graph without paying for code generation)."""
    config = CompileConfig(fullgraph=fullgraph, backend="eager", mode=None)
    config._compile_all_devices = True
    return config


@pytest.mark.slow
def test_a_compiled_decoding_step_traces_whole_and_compiles_once_per_loop_count(model):
    assert type(model)._can_compile_fullgraph
    torch._dynamo.reset()
    counters["stats"].clear()
    for num_loops in (3, 3, 5):
        seq, logits, _ = greedy(
            model, PROMPT, True, num_loops=num_loops, cache_implementation="static", compile_config=compiled()
        )
        want_seq, want_logits, _ = greedy(model, PROMPT, True, num_loops=num_loops)
        assert seq.tolist() == want_seq.tolist()
        torch.testing.assert_close(logits, want_logits, rtol=0, atol=1e-4)
    assert counters["stats"]["unique_graphs"] == 2  # one per loop count, none per token


@pytest.mark.slow
def test_the_compute_saving_early_exit_refuses_a_whole_graph_compile_and_the_reference_readout_compiles():
    model = exit_model(seed=3)
    torch._dynamo.reset()
    with pytest.raises(Exception, match="compute-saving early exit .* cannot run in a compiled forward"):
        greedy(model, BATCH, True, exit_threshold=0.5, cache_implementation="static", compile_config=compiled())
    options = dict(exit_threshold=0.5, exit_readout="reference", max_new_tokens=6)
    seq, logits, _ = greedy(model, BATCH, True, cache_implementation="static", compile_config=compiled(), **options)
    want_seq, want_logits, _ = greedy(model, BATCH, True, **options)
    assert seq.tolist() == want_seq.tolist()
    torch.testing.assert_close(logits, want_logits, rtol=0, atol=1e-4)


def test_the_cache_can_be_passed_under_its_old_name_which_the_forward_names_for_exporters(model):
    assert "past_key_values" in inspect.signature(type(model).forward).parameters  # exporters check the names
    plain, old = OuroCache(), OuroCache()
    with torch.no_grad():
        a = model(IDS[:, :6], cache=plain, use_cache=True).logits
        b = model(IDS[:, :6], past_key_values=old, use_cache=True).logits
        torch.testing.assert_close(a, b, rtol=0, atol=0)
        assert old.get_seq_length() == 6  # the cache given was the one filled
        with pytest.raises(ValueError, match="Pass the cache once"):
            model(IDS[:, 6:7], cache=plain, past_key_values=old)
