"""The tables of ``README.md``, each from its JSON under ``docs/results/``."""

from __future__ import annotations

import json
from collections.abc import Callable

from tools.docs import results as docs_results
from tools.docs.pages.common import (
    _end_shares,
    attractor_chosen_runs,
    difference_cell,
    internalization_run,
    lazy_runs,
    lm_paired,
    lm_runs,
    memory_runs,
    published_runs,
    recipe_range,
    recipe_runs_label,
    run_set,
)
from tools.docs.results import load, markdown, mean_se, pct


def demo_loop_scaling() -> str:
    """The demo's two loop-scaling tables over every seed ``benchmarks/recipes.py`` ran it with: per loop count the
    lowest-highest share right of each model (``recipes.json``, the ``demo`` recipe's runs)."""
    runs = load("recipes.json")["recipes"]["demo"]["runs"]
    demo = load("demo_results.json")  # the demo's defaults, which the runs used: its steps
    steps = f"{demo['steps']} + {demo['continuation_steps']} steps"
    curves = {name: [{"accuracy": run["compared"][name]} for run in runs] for name in ("plain", "STARS")}
    header = [f"loops (trained at {runs[0]['trained_loops']})"]
    header += [f"{name}, {steps} ({recipe_runs_label(runs)})" for name in curves]
    rows = [[n] + [recipe_range(curve, n) for curve in curves.values()] for n in runs[0]["compared"]["plain"]]
    return markdown(header, rows)


def _sudoku_runs(kind: str) -> dict[int, dict]:
    """Seed -> the 6x6 run of ``kind`` (``"attractor (chosen settings)"``: the chosen setting's runs)."""
    if kind == "attractor (chosen settings)":
        folders = attractor_chosen_runs()
        kind = "attractor"
    else:
        folders = run_set("eqr_6x6_seeds")
    runs = {}
    for seed, folder in folders.items():
        path = docs_results.RESULTS / folder / kind / "eqr_sudoku.json"
        if path.exists():
            runs[seed] = json.loads(path.read_text())[kind]
    return runs


def _span(values: list[float], digits: int = 1) -> str:
    """``low-high%`` of shares (one value when they agree), trailing zeros dropped as the prose writes them."""
    cells = [f"{100 * v:.{digits}f}" for v in (min(values), max(values))]
    cells = [c.rstrip("0").rstrip(".") if "." in c else c for c in cells]
    return f"{cells[0]}%" if cells[0] == cells[1] else f"{cells[0]}-{cells[1]}%"


def _paired(a: dict[int, dict], b: dict[int, dict], depth: str) -> str:
    return difference_cell(
        [a[s]["accuracy_by_depth"][depth] - b[s]["accuracy_by_depth"][depth] for s in a if s in b], scale=100
    )


def readme_results() -> str:
    """The README's results table: a short line per headline result (:data:`README_ROWS`), every number read from
    the JSON its page's tables are generated from; the page has the command and the details."""
    return markdown(README_HEADER, [row() for row in README_ROWS])


README_HEADER = ["result", "here", "the paper", "seeds", "page"]


def _stars_at(kind: str, loops: int, relative: str = "stars_addition/results.json") -> float:
    """Exact match of the STARS addition run ``kind`` (2-digit unless ``relative`` says otherwise) at ``loops``."""
    return load(relative)["results"][kind]["accuracy"][str(loops)]


def recipes_row() -> list[str]:
    """The documented training commands (``recipes.json``): each one's lowest-highest at the count its page reads, on
    the seeds it was not chosen on (outside 0-2) where it ran on them, else on seeds 0-2, and how many runs reach its
    promise."""
    entries = load("recipes.json")["recipes"]
    shown = {"readme-ouro": "Ouro", "readme-dory": "Dory", "demo": "demo's STARS", "readme-fine-tune": "fine-tune"}
    cells, seeds = [], set()
    for name, label in shown.items():
        if name not in entries:
            continue
        entry = entries[name]
        measured = [run for run in entry["runs"] if run["seed"] > 2] or entry["runs"]
        loops, target = entry["loops"], entry["target"]
        hits = "" if target is None else (
            f", {sum(run['accuracy'][str(loops)] >= target for run in measured)} of {len(measured)} >= {pct(target, 0)}")  # fmt: skip
        cells.append(f"{label} {recipe_range(measured, loops)} at {loops} loops ({recipe_runs_label(measured)}{hits})")
        seeds |= {run["seed"] for run in measured}
    return [
        "the README's training commands, as written",
        "exact match on held-out sums: " + "; ".join(cells),
        "",
        str(len(seeds)),
        "[cli](docs/cli.md#recipes)",
    ]


def stars_depth_row() -> list[str]:
    three = min(_stars_at("stars", n, "stars_addition_3digit/results.json") for n in (2, 4, 8, 16, 32))
    return [
        "STARS: accurate deeper than trained",
        f"2 digits: {_span([_stars_at('stars', n) for n in (2, 4, 8, 16)])} at 2-16 loops, "
        f"{pct(_stars_at('stars', 32))} at 32 (plain {pct(_stars_at('plain', 8))} at 8); 3 digits >= "
        f"{100 * three:.0f}% (tuned on test)",
        "not reproduced at 32 (paper: 100% at every depth)",
        "1",
        "[stars_addition](docs/benchmarks/stars_addition.md)",
    ]


def stars_presets_row() -> list[str]:
    """The two STARS recipes on 4-digit reversed addition, one cut (``stars_reference_addition``,
    ``stars_equilibria_addition4``)."""
    ref = load("stars_reference_addition/results.json")["summary"]
    ours = load("stars_equilibria_addition4/results.json")["summary"]["accuracy"]["stars"]

    def cell(row: dict) -> str:
        return pct(row["mean"], 0) + ("" if row["se"] is None else f" ± {100 * row['se']:.0f}")

    learned = max(row["mean"] for kind in ("sampling", "stars") for row in ref["accuracy"][kind].values())
    n, n_ref = ours["100"]["n"], ref["accuracy"]["plain"]["4"]["n"]
    return [
        "STARS on the paper's 4-digit task",
        f"reference: sampling, STARS <= {pct(learned)}; ours: STARS {cell(ours['32'])} / "
        f"{cell(ours['100'])} at 32 / 100 loops",
        "not reproduced at this cut (paper: 100% at every depth)",
        str(n) if n == n_ref else f"{n_ref} (reference), {n} (ours)",
        "[stars_addition](docs/benchmarks/stars_addition.md#the-reference-recipe-on-4-digit-reversed-addition)",
    ]


def stars_ablation_row() -> list[str]:
    return [
        "STARS: what carries the extrapolation",
        f"sampling alone {100 * _stars_at('sampling', 32):.0f}% at 32 loops; the penalty alone "
        f"{pct(_stars_at('jsrr', 8))} at 8 (tuned on test)",
        "suggests sampling, not the penalty; not established",
        "1 each (3+ needed)",
        "[stars_addition](docs/benchmarks/stars_addition.md)",
    ]


COST_TARGET = 1.3  # issue #42: a STARS step at most 1.3x a plain one (width 256, 2 layers, 4 loops)


def jsrr_cost_row() -> list[str]:
    cost = load("stars_cost.json")["by_loops"]
    loops = list(cost)

    def at(form: str) -> str:
        return " / ".join(f"{cost[n][form]:.2f}x" for n in loops)

    error = cost[loops[0]]["sampling_error"]["mean_relative_error"]
    cheap = [f for f in ("vjp@1 rows 1/4", "batch@1 rows 1/4") if all(cost[n][f] <= COST_TARGET for n in loops)]
    met = f"met only on 1/4 of the sequences ({100 * error:.0f}% sampling error)" if cheap else "not met"
    return [
        "STARS: the penalty's cost",
        f"vs a plain step at {' / '.join(loops)} loops: vjp@1 {at('vjp@1')}; on 1/4 of sequences "
        f"{at('vjp@1 rows 1/4')}",
        f"no paper figure; our {COST_TARGET}x target {met}",
        "1 run",
        "[stars_cost](docs/benchmarks/stars_cost.md)",
    ]


def vjp_estimator_row() -> list[str]:
    cost = load("stars_cost.json")["by_loops"]
    ratios = [m["cost"]["vjp@1"] / m["cost"]["jvp@1"] for m in load("jsrr_estimator.json")["maps"].values()]
    return [
        "backward (vjp) power iteration",
        f"as accurate as jvp at {min(ratios):.2f}-{max(ratios):.2f}x its cost (1 iteration); a STARS step "
        f"{cost['4']['vjp@1']:.2f}x plain, {cost['4']['jvp@1']:.2f}x with jvp",
        "ours is the default; `jvp` offered",
        "1 run",
        "[jsrr_estimator](docs/benchmarks/jsrr_estimator.md)",
    ]


def exit_gate_row() -> list[str]:
    paper = load("exit_gate.json")["losses"]["expected"]
    frozen, fixed = paper["frozen"]["0.5"], paper["fixed"]["3"]
    return [
        "Ouro's exit gate",
        f"the paper's objective: {pct(frozen['accuracy'])} at {frozen['mean_steps']:.2f} steps; 3 fixed "
        f"loops {pct(fixed['accuracy'])} (thresholds read on test)",
        "no saving at equal accuracy; the published loss's gate hurts with frozen exits",
        "1",
        "[exit_gate](docs/benchmarks/exit_gate.md)",
    ]


def ouro_decode_row() -> list[str]:
    decode = load("ouro_decode.json")
    return [
        "Ouro decoding",
        f"loop overhead {decode['loop_overhead']['ratio']:.2f}x a Llama of equal depth; early exit "
        f"{decode['early_exit']['ratio']:.2f}x the time (random weights, exit set at half the steps: a cost, no "
        f"accuracy); cache {decode['cache']['speedup']:.1f}x faster",
        "",
        "1 run",
        "[ouro_decode](docs/benchmarks/ouro_decode.md)",
    ]


def ouro_cache_modes_row() -> list[str]:
    """The ``last_loop`` cache layout against ``per_loop`` on the README's model (issue #46)."""
    (readme, *_) = load("ouro_decode.json")["cache_modes"]["models"]
    at4 = readme["loops"]["4"]
    exact, held = at4["exact_match"], at4["cache_bytes"]
    return [
        "Ouro's `last_loop` cache",
        f"{held['per_loop'] / held['last_loop']:.0f}x smaller at 4 loops; exact match {pct(exact['per_loop'])} -> "
        f"{pct(exact['last_loop'])} on the README's model, seed 0 (needs a model trained for it)",
        "no paper figure (transformers' Dory layout)",
        "1",
        "[ouro_decode](docs/benchmarks/ouro_decode.md#the-two-cache-layouts-issue-46)",
    ]


def ouro_serving_row() -> list[str]:
    """A saved Ouro on OpenVINO against the package (issue #46)."""
    r = load("ouro_serving.json")
    return [
        "a saved Ouro served by OpenVINO",
        f"{pct(r['answers_equal'])} of {r['data']['units']} answers equal to the package's ({r['precision']}), "
        f"{r['seconds']['package'] / r['seconds']['engine']:.1f}x its speed",
        "",
        "1",
        "[ouro_serving](docs/benchmarks/ouro_serving.md)",
    ]


def vllm_serving_row() -> list[str]:
    """The README's Ouro served by vLLM through the package's plugin (issue #73)."""
    r = load("vllm_serving.json")
    held, speed, gate = r["held_out"], r["speed"]["by_concurrency"], r["exit_gate"]["speed"]
    first, last = list(speed)[0], list(speed)[-1]
    versus = lambda c: f"{speed[c]['ratios']['ouro_over_llama']['median']:.2f}x"  # noqa: E731
    return [
        "a saved Ouro served by vLLM (the package's plugin)",
        f"{pct(held['equal_to_package']['rows'])} of {r['data']['units']} answers equal to the package's (f32); "
        f"tokens/s {versus(first)} / {versus(last)} a Llama of equal depth's at {first} / {last} requests; exit gate "
        f"{gate[first]['loop_steps_per_forward']:.1f} / {gate[last]['loop_steps_per_forward']:.1f} of {r['loops']} "
        "loop steps per forward (untrained gate)",
        "",
        "1 run",
        "[ouro_serving](docs/benchmarks/ouro_serving.md#vllm-issue-73)",
    ]


def rl_loops_row() -> list[str]:
    """GRPO, RLTT and sampled loops on an Ouro that half-solves addition, against SFT continued for the same compute
    (issues #64, #74): accuracy at 4 loops and the paired tests' verdicts against the controls."""
    summary = load("rl/summary.json")
    at4 = {arm: cells["4"]["mean"] for arm, cells in summary["arms"].items()}
    tests = summary["paired_tests"]["tests"]
    seeds = len(summary["seeds"]["grpo"])
    rltt = summary["minus_grpo"]["rltt"]["4"]
    rltt = "reproduced" if rltt.get("holm") and rltt["mean"] > 0 else "not reproduced"

    def against(arm: str) -> str:  # better / worse than the time- and token-matched controls, in seeds
        cells = [tests[f"{arm} vs {control}"] for control in ("sft_wall", "sft_tokens")]
        return " / ".join(f"+{t['better']} -{t['worse']}" for t in cells)

    return [
        f"RL on a looped LM (Ouro, addition, from {pct(summary['base']['4'])} at 4 loops)",
        f"at 4 loops: GRPO {pct(at4['grpo'])}, RLTT {pct(at4['rltt'])}, loops sampled 2-8 "
        f"{pct(at4['grpo_sampled'])}; the base's SFT continued for GRPO's time / tokens {pct(at4['sft_wall'])} / "
        f"{pct(at4['sft_tokens'])}",
        f"of {seeds} seeds, those where RL is significantly above (+) or below (-) continued SFT (time / tokens; "
        f"McNemar, Holm): GRPO {against('grpo')}, RLTT {against('rltt')}; RLTT above GRPO {rltt}",
        str(seeds),
        "[rl_loops](docs/benchmarks/rl_loops.md)",
    ]


def attractor_memory_row() -> list[str]:
    memory = memory_runs()
    flat = [r["saved_ratio"] for k, r in memory.items() if "/unrolled@" not in k]
    unrolled = [r["saved_ratio"] for k, r in memory.items() if k.endswith("/unrolled@32")]
    budgets = sorted({int(k.split("@")[1]) for k in memory})
    same = "equal" if max(abs(r - 1) for r in flat) < 0.005 else f"within {max(abs(r - 1) for r in flat):.0%}"
    return [
        "Attractor LM: constant training memory",
        f"saved activations {same} at budgets {', '.join(map(str, budgets))}; unrolled {min(unrolled):.1f}-"
        f"{max(unrolled):.1f}x more at {budgets[-1]} than at {budgets[0]}",
        "reproduced",
        "1 run (bytes are exact)",
        "[attractor_memory](docs/benchmarks/attractor_memory.md)",
    ]


def _published_internalization() -> tuple[str, str]:
    """The published code's four choices on addition, for the README row: its T=0 / solved clause and its seeds
    (both empty until run)."""
    runs = published_runs("addition", "all")
    if not runs:
        return "", ""
    ends = [_end_shares(run) for run in runs.values()]
    shares = f"{_span([e[0] for e in ends], 0)} / {_span([e[2] for e in ends], 0)}"
    return f"; published code {shares}", f" (published code: {len(runs)})"


def internalization_row() -> list[str]:
    def last(name: str) -> dict:
        return internalization_run(name)["rows"][-1]["accuracy"]

    paper = last("addition-paper-one-step")
    sudoku = [last(f"sudoku-{f}-one-step") for f in ("paper", "gated")]
    published, seeds = _published_internalization()
    return [
        "equilibrium internalization",
        f"T=0 / solved: addition {pct(paper['0'])} / {pct(paper['30'])} (paper's map); Sudoku "
        f"{_span([s[t] for s in sudoku for t in ('0', '1')], 0)} / {_span([s['30'] for s in sudoku], 0)}" + published,
        "not reproduced at this scale",
        "1" + seeds,
        "[attractor_internalization](docs/benchmarks/attractor_internalization.md)",
    ]


def attractor_lm_row() -> list[str]:
    lm = lm_runs()

    def vs(kind: str) -> str:
        return difference_cell(lm_paired(lm, kind), digits=2)

    def mean_of(kind: str, key: str) -> float:
        return mean_se([r[key] for r in lm[kind].values()])[0]

    fewer = [
        1 - mean_of(k, "train_flops") / mean_of("looped", "train_flops") for k in ("attractor-paper", "attractor-gated")
    ]
    return [
        "Attractor LM vs transformer and looped model",
        f"perplexity vs transformer: gated {vs('attractor-gated')}, paper's {vs('attractor-paper')}; "
        f"{100 * min(fewer):.0f}-{100 * max(fewer):.0f}% fewer FLOPs than looped",
        "FLOPs and memory reproduced; lower perplexity not (nor contradicted)",
        str(len(lm["llama"])),
        "[attractor_lm](docs/benchmarks/attractor_lm.md)",
    ]


def attractor_puzzles_row() -> list[str]:
    chosen, eqr, tied = (_sudoku_runs(k) for k in ("attractor (chosen settings)", "eqr", "weight_tied"))
    at64 = lambda runs: _span([r["accuracy_by_depth"]["64"] for r in runs.values()])  # noqa: E731
    return [
        "Attractor vs EqR on 6x6 Sudoku",
        f"at 64 iterations: Attractor {at64(chosen)}, EqR {at64(eqr)} ({_paired(chosen, eqr, '64')}), weight-tied "
        f"{at64(tied)} ({_paired(chosen, tied, '64')})",
        "not separated (only the Attractor's settings searched); the paper's gap not seen at this scale",
        str(len(chosen)),
        "[attractor_puzzles](docs/benchmarks/attractor_puzzles.md)",
    ]


def eqr_depth_breadth_row() -> list[str]:
    eqr = _sudoku_runs("eqr")
    depth16 = [r["accuracy_by_depth"]["16"] for r in eqr.values()]
    gains = {s: r["grid"]["16x16"]["halt"] - r["grid"]["16x1"]["halt"] for s, r in eqr.items()}
    top = max(gains, key=gains.get)
    others = [
        abs(r["grid"][f"{d}x{b}"][rule] - r["grid"][f"{d}x1"][rule])
        for s, r in eqr.items()
        if s != top
        for d in (16, 32, 64)
        for b in (4, 16)
        for rule in ("residual", "vote", "halt")
    ]
    return [
        "EqR depth x breadth on 6x6 Sudoku",
        f"{_span(depth16)} at depth 16; 16 restarts: +{100 * gains[top]:.0f} points in one seed (rule read on test), "
        f"<= {100 * max(others):.0f} in the others",
        f"depth gain reproduced, breadth gain in 1 of {len(eqr)} seeds; not separated from weight-tied",
        str(len(eqr)),
        "[eqr_sudoku](docs/benchmarks/eqr_sudoku.md), [eqr_ablations](docs/benchmarks/eqr_ablations.md)",
    ]


def _halting_chosen(folder: str, seeds: tuple[int, ...]) -> dict[int, dict]:
    """Per seed run, ``<folder>/seed<k>/eqr_halting.json``'s chosen settings and their test comparison."""
    paths = {s: docs_results.RESULTS / folder / f"seed{s}" / "eqr_halting.json" for s in seeds}
    return {s: json.loads(path.read_text())["chosen"] for s, path in paths.items() if path.exists()}


def _halting_cells(halting: dict[int, dict]) -> tuple[str, str]:
    """The README row's saving and its seeds, with how many of them kept the fixed depth's accuracy."""
    ratios = [h[split]["nfe_ratio"] for h in halting.values() for split in ("easy", "all")]
    equal = {split: sum(h[split]["equal_accuracy_on_test"] for h in halting.values()) for split in ("easy", "all")}
    return (
        f"{min(ratios):.1f}-{max(ratios):.1f}x fewer evaluations than the cheapest fixed depth of equal accuracy",
        f"{len(halting)} (equal accuracy: all puzzles {equal['all']}, easy {equal['easy']})",
    )


def eqr_halting_row() -> list[str]:
    here, seeds = _halting_cells(_halting_chosen("eqr_halting_6x6", (1, 2)))
    return [
        "EqR halting",
        here,
        "the >= 3x target not met; the paper's 11.34x is a different comparison",
        seeds,
        "[eqr_halting](docs/benchmarks/eqr_halting.md)",
    ]


def eqr_halting_published_row() -> list[str]:
    """The halting saving on models trained with the published recipe (cut to the CPU), for the seeds run."""
    halting = _halting_chosen("eqr_halting_published_6x6", (0, 1, 2))
    here, seeds = _halting_cells(halting) if halting else ("not run yet", "0")
    if len(halting) < 3:
        seeds += f" (run: {', '.join(map(str, halting)) or 'none'} of 0, 1, 2)"
    return [
        "EqR halting, the published recipe",
        here,
        "the paper's 11.34x is not computed by the published code (it runs every segment)",
        seeds,
        "[eqr_halting](docs/benchmarks/eqr_halting.md#with-the-published-recipe-issue-45)",
    ]


def eqr_maze_row() -> list[str]:
    maze = {
        k: [load(f"{folder}/{k}/eqr_sudoku.json") for folder in run_set("eqr_maze9").values()]
        for k in ("eqr", "weight_tied", "untied")
    }
    best = lambda k: _span([max(run[k]["accuracy_by_depth"].values()) for run in maze[k]])  # noqa: E731
    d32 = [
        a["eqr"]["accuracy_by_depth"]["32"] - b["weight_tied"]["accuracy_by_depth"]["32"]
        for a, b in zip(maze["eqr"], maze["weight_tied"])
    ]
    return [
        "EqR on 9x9 mazes (held out by class)",
        f"best depth: EqR {best('eqr')}, weight-tied {best('weight_tied')}; untied baseline (8x the "
        f"parameters) {_span([run['untied']['accuracy_by_depth']['8'] for run in maze['untied']])}",
        f"not reproduced at this scale; not separated from weight-tied ({difference_cell(d32, scale=100)} at 32)",
        str(len(run_set("eqr_maze9"))),
        "[eqr_ablations](docs/benchmarks/eqr_ablations.md)",
    ]


def lazy_identity_audit_row() -> list[str]:
    paths = sorted((docs_results.RESULTS / "audit_reachability").glob("*-seed*/audit.json"))
    audits = [json.loads(p.read_text()) for p in paths]
    seeds = {p.parent.name.rsplit("-seed", 1)[1] for p in paths}
    return [
        "the lazy-identity study's audit",
        f"iterations blind to difficulty: yes (r within ±{max(abs(a['iterations']['pearson']) for a in audits):.2f}); "
        f"`h* = z0`, solves at the cap: no (<= {max(a['iterations']['cap_share'] for a in audits):.0%})",
        "partly reproduced at small scale",
        f"{len(seeds)} ({len(audits)} runs)",
        "[audit_reachability](docs/benchmarks/audit_reachability.md)",
    ]


def lazy_identity_regime_row() -> list[str]:
    """The study's regime (``bench_lazy_identity.py``, the start-anchored PH-DEQ) on reachability."""
    runs = lazy_runs("reachability")
    lazy = runs["lazy"] + runs["lazy_noisy"]
    caps = [r["tolerances"]["rows"][-1]["at_cap"] for rs in runs.values() for r in rs]
    disp = [r["disp_rel"] for r in runs["lazy"]]
    return [
        "the lazy-identity study's regime",
        f"T1 {min(r['t1'] for r in lazy):+.1f} to {max(r['t1'] for r in lazy):+.1f} points; `h*` {min(disp):.2f}-"
        f"{max(disp):.2f} from `z0`, not 1e-7; at the cap 0 at 1e-4, {100 * min(caps):.0f}-{pct(max(caps), 0)} "
        "at 1e-8",
        "partly: T1 ~ 0, noisy start kept, as in the study; `h* = z0` and the cap share not",
        str(len(runs["lazy"])),
        "[lazy_identity](docs/benchmarks/lazy_identity.md)",
    ]


def audit_control_row() -> list[str]:
    """The trained Ouro that computes (``build_audit_control.py``): it fails at one loop and solves at four, and
    ``equilibria audit`` says so."""
    control = load("audit_control.json")
    accuracy, audit = control["loop_scaling"]["accuracy"], control["audit"]
    return [
        "the audit's positive control",
        f"trained Ouro: {pct(accuracy['1'], 0)} at 1 loop, {pct(accuracy['4'], 0)} at 4 on addition; audit: "
        f"{audit['verdict']} (T1 {audit['substitution']['change_points']:+.0f}, probe "
        f"{audit['probe']['change_points']:+.0f} points)",
        "",
        "1",
        "[audit](docs/audit.md)",
    ]


def anderson_row() -> list[str]:
    solved = load("solvers.json")
    ours = {name: solved["results"][f"{name} | equilibria anderson (m=5)"] for name in solved["best_torchdeq"]}
    extra = [b["iterations"] - ours[name]["iterations"] for name, b in solved["best_torchdeq"].items()]
    times = [abs(b["seconds"] / ours[name]["seconds"] - 1) for name, b in solved["best_torchdeq"].items()]
    return [
        "our Anderson vs torchdeq's",
        f"torchdeq at its best ridge: {min(extra) if min(extra) == max(extra) else f'{min(extra)}-{max(extra)}'} "
        f"iteration{'s' if max(extra) != 1 else ''} more on each map, its time within {max(times):.1%} of ours",
        "",
        "1 run",
        "[solvers](docs/benchmarks/solvers.md)",
    ]


README_ROWS: tuple[Callable[[], list[str]], ...] = (  # the README's results table, a row each, in its order
    recipes_row,
    stars_depth_row,
    stars_ablation_row,
    stars_presets_row,
    jsrr_cost_row,
    vjp_estimator_row,
    exit_gate_row,
    ouro_decode_row,
    ouro_cache_modes_row,
    ouro_serving_row,
    vllm_serving_row,
    rl_loops_row,
    attractor_memory_row,
    internalization_row,
    attractor_lm_row,
    attractor_puzzles_row,
    eqr_depth_breadth_row,
    eqr_halting_row,
    eqr_halting_published_row,
    eqr_maze_row,
    lazy_identity_audit_row,
    lazy_identity_regime_row,
    audit_control_row,
    anderson_row,
)


#: this page's tables, by the name its marks give
TABLES: dict[str, Callable[[], str]] = {
    "demo-loop-scaling": demo_loop_scaling,
    "readme-results": readme_results,
}
