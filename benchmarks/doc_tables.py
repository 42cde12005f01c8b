"""The table builders of the docs: one function per marked table (``<!-- table: NAME -->``), rendering it from its
JSON under ``docs/results/``; :data:`TABLES` maps each name to its builder. The engine that finds the marks,
renders them, and checks and rewrites the marked numbers of prose is ``tools/docs/engine.py``.

    python benchmarks/doc_tables.py           # rewrite the marked tables and numbers of README.md and docs/**/*.md
    python benchmarks/doc_tables.py --check   # exit 1, naming the tables and the numbers that differ from their JSON
"""

from __future__ import annotations

import json
import re
import statistics
import sys
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the repository: the docs tool (tools/docs)
from tools.docs import engine  # noqa: E402
from tools.docs.engine import (  # noqa: E402,F401  (the names the builders use; the tests read some through here)
    MARKED,
    NUMBER,
    ROOT,
    NumberError,
    load,
    markdown,
    mean_se,
    number,
    numbers,
    page_name,
    pages,
    pct,
    small,
)

# ---- the demo --------------------------------------------------------------------------------------------------


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


def demo_output() -> str:
    """The middle of ``./run demo``'s output, the loop-scaling table and the audit of both loops, as the demo
    prints them (``equilibria.demo``), from what it recorded in ``demo_results.json``."""
    data = load("demo_results.json")
    curves = {f"plain, {data['steps']} + {data['continuation_steps']} steps": data["accuracy_by_loops"]}
    curves["STARS"] = data["stars_accuracy_by_loops"]
    loops = list(data["accuracy_by_loops"])
    n = int(data["evaluation_data"].split()[0])
    lines = [
        f"[5/7] exact match on the {n} held-out problems at loops [{', '.join(loops)}] (trained at {data['trained_loops']})"
    ]
    lines.append("  loops | " + " | ".join(f"{name:>24}" for name in curves))
    lines += [f"  {k:>5} | " + " | ".join(f"{curve[k]:>24.1%}" for curve in curves.values()) for k in loops]
    lines.append(
        "[6/7] the computation audit of both loops on the held-out problems (start: the state after the first loop "
        "step; solved: after the last; do the extra steps compute?)"
    )
    for name, audit in data["audit"].items():
        lines.append(
            f"  {name}: {audit['verdict'].upper()}, resting on: accuracy {100 * audit['accuracy']:.1f}% per sequence "
            f"against {100 * audit['majority_class']:.1f}% for the most common answer ({audit['margin_se']:+.1f} SE)"
        )
        lines += ["    - " + reason for reason in audit["reasons"][:2]]
    return "```\n" + "\n".join(lines) + "\n```"


# ---- Ouro and STARS --------------------------------------------------------------------------------------------


def ouro_decode() -> str:
    data = load("ouro_decode.json")
    a, over, early, cache = data["args"], data["loop_overhead"], data["early_exit"], data["cache"]
    layers, loops = int(a["layers"]), int(a["loops"])
    rows = [
        [
            "loop overhead",
            f"Ouro {layers} layers x {loops} loops vs Llama {layers * loops} layers, width {a['width']}, "
            f"{a['new_tokens']} new tokens",
            "{:.3f} [{:.3f}, {:.3f}]".format(over["ratio"], *over["ratio_range"]),
            "<= 1.10",
        ],
        [
            "early exit",
            f"{early['loops']} loops, threshold {early['threshold']:.3f} (mean exit {early['mean_exit_steps']:.2f} "
            "steps), vs no early exit",
            "{:.3f} [{:.3f}, {:.3f}]".format(early["ratio"], *early["ratio_range"]),
            "<= 0.60",
        ],
        [
            "KV cache",
            f"{cache['new_tokens']} new tokens, width {a['cache_width']}, cache vs none",
            "{:.2f}x faster [{:.2f}, {:.2f}]".format(cache["speedup"], *cache["speedup_range"]),
            "> 1",
        ],
    ]
    return markdown(["measure", "setting", "ratio [min, max]", "target"], rows)


def ouro_cache_modes() -> str:
    """The cache layouts on saved models (``bench_ouro_decode.py --sections cache_modes``)."""
    section = load("ouro_decode.json").get("cache_modes")
    if not section:
        return "(not run yet: `python benchmarks/bench_ouro_decode.py --sections cache_modes --models FOLDERS`)"
    rows = []
    for model in section["models"]:
        for loops, r in model["loops"].items():
            held, exact = r["cache_bytes"], r["exact_match"]
            rows.append(
                [
                    f"`{Path(model['model']).name}` ({model['data']['units']} held-out rows)",
                    loops,
                    f"{pct(exact['per_loop'])} / {pct(exact['last_loop'])}",
                    f"{100 * r['difference']:+.1f} ± {100 * r['difference_se']:.1f} pts",
                    pct(r["same_answers"]),
                    f"{held['per_loop'] / 1024:.0f} / {held['last_loop'] / 1024:.0f} KiB ({held['per_loop'] / held['last_loop']:.1f}x)",
                    "{:.3f} [{:.3f}, {:.3f}]".format(r["time_ratio"], *r["time_ratio_range"]),
                ]
            )
    header = [
        "model (data)",
        "loops",
        "exact match per_loop / last_loop",
        "last - per (± SE, paired)",
        "same answers",
        "cache after decoding a batch",
        "time last / per [min, max]",
    ]
    return markdown(header, rows)


def ouro_exit_at_one() -> str:
    """Every token exiting after step 1 against a one-loop run (``--sections exit_at_one``)."""
    section = load("ouro_decode.json").get("exit_at_one")
    if not section:
        return "(not run yet: `python benchmarks/bench_ouro_decode.py --sections exit_at_one`)"
    names = {
        "exit_per_loop": "compute-saving exit, `per_loop` cache",
        "exit_last_loop": "compute-saving exit, `last_loop` cache",
        "exit_static": "compute-saving exit, static cache (`per_loop`)",
        "full": f"no exit: all {section['loops']} steps",
    }
    rows = [
        [names[name], "{:.3f} [{:.3f}, {:.3f}]".format(ratio, *section["ratio_range"][name])]
        for name, ratio in section["ratio_to_one_loop"].items()
    ]
    return markdown(["run (every token exits after step 1)", "time / a one-loop run [min, max]"], rows)


def ouro_exit_rows() -> str:
    """Dropping exited rows against running every row (``--sections exit_rows``), one row per batch size."""
    section = load("ouro_decode.json").get("exit_rows")
    if not section or "batches" not in section:
        return "(not run yet: `python benchmarks/bench_ouro_decode.py --sections exit_rows`)"
    rows = [
        [
            f"{batch} rows, {r['loops']} loops, threshold {r['threshold']} (mean exit {r['mean_exit_steps']:.2f} steps)",
            "{:.3f} [{:.3f}, {:.3f}]".format(r["ratio"], *r["ratio_range"]),
            "yes" if r["same_tokens"] else "**no**",
        ]
        for batch, r in section["batches"].items()
    ]
    return markdown(["batch", "time dropping / running every row [min, max]", "same tokens"], rows)


def ouro_compile() -> str:
    """The compiled decoding step against eager decoding (``bench_ouro_decode.py --sections compile``)."""
    r = load("ouro_decode.json").get("compile")
    if not r:
        return "(not run yet: `python benchmarks/bench_ouro_decode.py --sections compile`)"
    names = {"eager_dynamic": "eager, dynamic cache (the default)", "eager_static": "eager, static cache"}
    rows = [
        [
            f"compiled ({r['backend']}, whole graph, static cache) vs {names[name]}",
            "{:.3f} [{:.3f}, {:.3f}]".format(ratio, *r["ratio_range"][name]),
        ]
        for name, ratio in r["ratio"].items()
    ]
    sweep = ", ".join(f"{graphs} after {loops}" for loops, graphs in r["graphs_after_loops"].items())
    rows.append(
        [
            "first call (compiles)",
            f"{r['first_call_s']:.1f} s; same tokens as eager: {'yes' if r['same_tokens'] else '**no**'}",
        ]
    )
    rows.append(["graphs compiled over a loop sweep (each loop count run twice)", sweep])
    return markdown(["measure", "time ratio [min, max] or value"], rows)


def ouro_real_scale() -> str:
    """An Ouro-1.4B-shaped model with random weights on the CPU (``--sections real_scale``)."""
    r = load("ouro_decode.json").get("real_scale")
    if not r:
        return "(not run yet: `python benchmarks/bench_ouro_decode.py --sections real_scale`)"
    gib = 1024**3
    rows = [
        [
            dtype,
            mode,
            f"{run['tokens_per_s']:.2f}",
            f"{run['weight_bytes'] / gib:.2f} GiB",
            f"{run['cache_bytes'] / 1024**2:.1f} MiB",
            f"{run['peak_rss_bytes'] / gib:.2f} GiB",
        ]
        for (dtype, mode), run in ((key.split("/"), run) for key, run in r["runs"].items())
    ]
    table = markdown(
        [
            "dtype",
            "cache",
            "tokens / s",
            "weights",
            "cache after 32 + " + str(r["new_tokens"]) + " tokens",
            "peak memory of the process",
        ],
        rows,
    )
    drift = [
        [loops, f"{d['max_abs_over_std']:.3f}", f"{d['mean_abs_over_std']:.4f}", pct(d["top1_agreement"])]
        for loops, d in r["drift"].items()
    ]
    header = ["loops", "bf16 - fp32 logits, max / std", "mean / std", "same top token (32 positions)"]
    return table + "\n\n" + markdown(header, drift)


def ouro_serving() -> str:
    """A saved Ouro on an existing engine against the package (``bench_ouro_serving.py``), one row per precision."""
    runs = sorted(engine.RESULTS.glob("ouro_serving*.json"))
    if not runs:
        return "(not run yet: `python benchmarks/bench_ouro_serving.py --model out --engine-python ENV/bin/python`)"
    rows = []
    for path in runs:
        r = json.loads(path.read_text())
        v = r["versions"]
        used = re.sub(r"<Type: '(.*)'>", r"\1", v.get("inference_precision", "-"))  # OpenVINO's element type
        serving = f"{r['engine']} {v.get('openvino', '')} (optimum-intel {v.get('optimum-intel', '-')}, transformers {v['transformers']})"
        rows.append(
            [
                serving,
                f"{r['precision']} ({used})",
                f"{r['data']['units']} held-out problems, {r['loops']} loops",
                f"{pct(r['answers_equal'])} ({'all' if r['tokens_equal'] else 'not all'})",
                f"{pct(r['exact_match']['package'])} / {pct(r['exact_match']['engine'])}",
                f"{r['seconds']['package'] / r['seconds']['engine']:.2f}x",
            ]
        )
    header = [
        "engine",
        "precision asked (used)",
        "data",
        "answers equal to the package's",
        "exact match package / engine",
        "engine speed (package time / engine time)",
    ]
    return markdown(header, rows)


STARS_KINDS = {
    "plain": "plain, trained at {train_loops}",
    "sampling": "loop sampling only",
    "jsrr": "JSRR only, at {train_loops}",
    "stars": "STARS",
}


def stars_accuracy(relative: str) -> str:
    data = load(relative)
    results, args = data["results"], data["args"]
    loops = list(next(iter(results.values()))["accuracy"])
    rows = [
        [label.format(**args)] + [pct(results[kind]["accuracy"][n]) for n in loops]
        for kind, label in STARS_KINDS.items()
        if kind in results
    ]
    return markdown(["loops at test time", *loops], rows)


def stars_dynamics() -> str:
    results = load("stars_addition/results.json")["results"]
    rows = []
    for kind, label in STARS_KINDS.items():
        radius, step = results[kind]["dynamics"]["spectral_radius"], results[kind]["dynamics"]["relative_step"]
        label = label.split(",")[0].replace("loop sampling", "sampling")
        rows.append(
            [
                label,
                " / ".join(f"{radius[t]:.2f}" for t in ("4", "16", "64")),
                " / ".join(small(step[t - 1]) for t in (4, 16, 63)),
            ]
        )
    return markdown(["kind", "radius at t = 4 / 16 / 64", "relative step at t = 4 / 16 / 63"], rows)


def stars_preset_runs(folder: str) -> str:
    """The summary of one preset's runs of ``bench_stars_addition.py`` (``docs/results/<folder>/results.json``): per
    kind the mean exact match over seeds with its standard error, then the seed-paired differences."""
    summary = load(f"{folder}/results.json")["summary"]

    def cell(row: dict) -> str:
        return pct(row["mean"]) + ("" if row["se"] is None else f" ± {100 * row['se']:.1f}")

    loops = list(next(iter(summary["accuracy"].values())))
    rows = []
    for part in ("accuracy", "differences"):
        for kind, by_loops in summary.get(part, {}).items():
            seeds = next(iter(by_loops.values()))["n"]
            rows.append([f"{kind} ({seeds} seed{'s' if seeds > 1 else ''})", *(cell(by_loops[n]) for n in loops)])
    return markdown(["loops at test time", *loops], rows)


def stars_norm_placement() -> str:
    """The norm diagnosis (``stars_norm_placement/results.json``): per placement and training kind the state's norm
    and the relative step at loop steps 4, 16 and 100, the spectral radius at 64 and exact match at 4, 16 and 100
    loops."""
    data = load("stars_norm_placement/results.json")

    def cells(values: dict, keys: tuple, fmt) -> str:
        return " / ".join("diverged" if values[k] is None else fmt(values[k]) for k in keys)

    rows = [
        [
            f"`{placement}`, {kind}",
            cells(r["state_norm"], ("4", "16", "100"), lambda v: f"{v:.3g}"),
            cells(r["relative_step"], ("4", "16", "100"), small),
            "-" if r["spectral_radius"]["64"] is None else f"{r['spectral_radius']['64']:.2f}",
            " / ".join(pct(r["accuracy"][n]) for n in ("4", "16", "100")),
        ]
        for placement, by_kind in data["placements"].items()
        for kind, r in by_kind.items()
    ]
    header = ["placement, training", "state norm at t = 4 / 16 / 100", "relative step at t = 4 / 16 / 100"]
    return markdown([*header, "radius at t = 64", "exact match at 4 / 16 / 100 loops"], rows)


def stars_cost() -> str:
    by_loops = load("stars_cost.json")["by_loops"]
    columns = ["vjp@1", "vjp@2", "vjp@4", "jvp@1", "jvp@2", "jvp@4"]
    rows = [
        [loops, f"{row['plain_seconds']:.2f} s", *(f"{row[c]:.2f}x" for c in columns)]
        for loops, row in by_loops.items()
    ]
    return markdown(["loops", "plain step", "vjp, 1 iteration", "2", "4", "jvp, 1 iteration", "2", "4"], rows)


def jsrr_estimator() -> str:
    rows = []
    for name, data in load("jsrr_estimator.json")["maps"].items():
        rho = data["exact_radius"]
        label = f"{'at ' if name == 'initialisation' else ''}{name} (rho {min(rho):.2f}-{max(rho):.2f})"
        for estimator, shown in (("vjp", "vjp"), ("jvp", "jvp (paper)")):
            iters = [1, 2, 4, 8]
            errors = [f"{data['errors'][f'{estimator}@{k}']['mean_rel_error']:+.2f}" for k in iters]
            cost = " / ".join(f"{data['cost'][f'{estimator}@{k}']:.1f}" for k in iters)
            rows.append([label if estimator == "vjp" else "", shown, *errors, cost])
    return markdown(["map", "estimator", "1 iteration", "2", "4", "8", "cost at 1 / 2 / 4 / 8"], rows)


def jsrr_spread() -> str:
    """The spread the mean error hides: the mean absolute relative error, and the share of estimates above rho."""
    rows = []
    for name, data in load("jsrr_estimator.json")["maps"].items():
        for estimator in ("vjp", "jvp"):
            errors = [data["errors"][f"{estimator}@{k}"] for k in (1, 2, 4, 8)]
            rows.append(
                [name if estimator == "vjp" else "", estimator]
                + [" / ".join(f"{e['mean_abs_rel_error']:.2f}" for e in errors)]
                + [" / ".join(pct(e["overestimates"], 0) for e in errors)]
            )
    header = ["map", "estimator", "mean absolute error at 1 / 2 / 4 / 8", "estimates above rho at 1 / 2 / 4 / 8"]
    return markdown(header, rows)


EXIT_LOSSES = {
    "expected_logits": "`expected_logits` (published, default)",
    "expected": "`expected` (paper, entropy 0.05)",
    "final": "`final` (gate untrained)",
}


def exit_gate() -> str:
    losses = load("exit_gate.json")["losses"]

    def points(runs: dict, keys: tuple[str, ...]) -> str:
        return " / ".join(f"{pct(runs[k]['accuracy'])} @ {runs[k]['mean_steps']:.2f}" for k in keys)

    rows = []
    for loss, label in EXIT_LOSSES.items():
        runs = losses[loss]
        fixed = " / ".join(f"{100 * runs['fixed'][k]['accuracy']:.1f}" for k in ("1", "2", "3", "4")) + "%"
        rows.append(
            [
                label,
                fixed,
                points(runs["frozen"], ("0.5", "0.9", "0.95")),
                points(runs["reference"], ("0.3", "0.5", "0.9")),
            ]
        )
    header = [
        "exit_loss",
        "fixed 1 / 2 / 3 / 4 loops",
        "frozen exit, threshold 0.5 / 0.9 / 0.95",
        "reference readout, 0.3 / 0.5 / 0.9",
    ]
    return markdown(header, rows)


# ---- EqR -------------------------------------------------------------------------------------------------------


def depth_table(
    runs: dict[str, dict], title: str = "exact solve (mean final residual)", suffix: str = "", training: bool = True
) -> str:
    """Exact solve by depth (with the mean final residual) of every kind, a row each (``suffix`` after the kind's
    name), with the training steps and seconds unless ``training`` is off."""
    depths = sorted({int(d) for r in runs.values() for d in r["accuracy_by_depth"]})
    header = [title, *(f"depth {d}" for d in depths)] + (["training"] if training else [])
    lines = ["| " + " | ".join(header) + " |", "| --- " * len(header) + "|"]
    for kind, r in runs.items():
        acc, res = r["accuracy_by_depth"], r["residual_by_depth"]
        cells = [f"{100 * acc[str(d)]:.1f}% ({res[str(d)]:.2g})" if str(d) in acc else "" for d in depths]
        if training:
            steps = f"{r['train_steps']} steps, " if "train_steps" in r else ""
            cells.append(f"{steps}{r['train_seconds']:.0f} s")
        lines.append(f"| {kind}{suffix} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def selection_table(runs: dict[str, dict]) -> str:
    """Among 16 restarts at the deepest depth: exact solve by each selection rule, for the kinds whose restarts
    differ (empty when none do), and the correlation of the log residual with being right."""
    picked = {k: r["selection"] for k, r in runs.items() if r.get("selection")}
    if not picked:
        return ""
    lines = [
        "| selection rule | lowest residual | vote | halting head | r(log residual, right) |",
        "| --- | --- | --- | --- | --- |",
    ]
    for kind, s in picked.items():
        cells = [f"{100 * s[rule]:.1f}%" if rule in s else "" for rule in ("residual", "vote", "halt")]
        lines.append(f"| {kind} | " + " | ".join(cells) + f" | {s['residual_correctness_r']:+.2f} |")
    return "\n".join(lines)


def eqr_depths(relative: str, **options) -> str:
    return depth_table(load(relative)["kinds"], **options)


def difference_cell(values: list[float], scale: float = 1.0, digits: int = 1) -> str:
    """``+mean ± SE`` of paired differences (times ``scale``); no ``±`` for one value, empty for none."""
    if not values:
        return ""
    mean, se = mean_se(values)
    spread = f" ± {scale * se:.{digits}f}" if len(values) > 1 else ""  # one seed: no standard error
    return f"{scale * mean:+.{digits}f}{spread}"


def seeds_label(n: int) -> str:
    return f"{n} seed{'s' if n != 1 else ''}"


EQR_SEED_RUNS = {  # seed -> the folder of its per-kind runs (seed 0: the 6x6 ablation, run at ab566ad)
    0: "eqr_ablation_6x6",
    1: "eqr_6x6_seeds/seed1",
    2: "eqr_6x6_seeds/seed2",
}


MAZE9_RUNS = {seed: f"eqr_maze9/seed{seed}" for seed in (0, 1, 2)}  # 9x9 mazes held out by class, 2000 steps

PUZZLE_SIZE_RUNS = {  # the 6x6 runs at two model sizes, seed 0 each (docs/benchmarks/attractor_puzzles.md)
    "width 64, seed 0": "attractor_puzzles_width64",
    "width 128, seed 0": "eqr_ablation_6x6",
}

PUZZLE_SIZE_SPLIT2_RUNS = {  # the Attractor with the search's chosen split (2 + 2 layers, equal parameters, budget 16)
    "width 64, seed 0": "attractor_puzzles_width64_chosen",
    "width 128, seed 0": "attractor_puzzles_select/split2-budget16",
}

PUZZLE_SIZE_4LAYER_RUNS = {  # EqR and weight-tied with the same shape: 4 layers, narrower MLP, equal parameters
    "width 64, seed 0": "attractor_puzzles_width64_4layer",
}


def run_label(key: int | str) -> str:
    return f"seed {key}" if isinstance(key, int) else key


def eqr_seeds(
    kinds: tuple[str, ...] = ("weight_tied", "eqr"),
    pairs: tuple[tuple[str, str], ...] = (("eqr", "weight_tied"),),
    depths: tuple[int, ...] = (4, 8, 16, 32, 64),
    folders: dict[int | str, str] = EQR_SEED_RUNS,
    kind_folders: dict[str, dict[int | str, str]] | None = None,
) -> str:
    """Exact solve per seed and kind on the runs in ``folders`` (seed, or a row label such as ``"width 64, seed
    0"``, -> folder of per-kind runs; default the 6x6 Sudoku runs; a run not made yet says so), then for each pair ``(a, b)``
    and depth the mean over the seeds that have both kinds of the per-seed difference ``a - b``, with its standard
    error (the spread of the per-seed differences, n - 1 degrees of freedom). A depth a kind was not evaluated at is
    blank. ``kind_folders`` gives a row kind such as ``"attractor (chosen settings)"`` its own folders (seed ->
    folder); its results are read under the kind's first word."""
    runs: dict[int, dict] = {}
    for seed in folders:
        runs[seed] = {}
        for k in kinds:
            folder = (kind_folders or {}).get(k, folders).get(seed)  # None: this kind has no run for this row
            path = engine.RESULTS / str(folder) / k.split()[0] / "eqr_sudoku.json"
            if folder is not None and path.is_file():
                runs[seed][k] = json.loads(path.read_text())[k.split()[0]]["accuracy_by_depth"]
    rows = []
    for kind in kinds:
        for seed, by_kind in runs.items():
            if kind not in by_kind:
                rows.append([f"{kind}, {run_label(seed)}", "not run yet", *[""] * (len(depths) - 1)])
                continue
            rows.append(
                [
                    f"{kind}, {run_label(seed)}",
                    *(pct(by_kind[kind][str(d)]) if str(d) in by_kind[kind] else "" for d in depths),
                ]
            )
    for a, b in pairs:
        paired = [r for r in runs.values() if a in r and b in r]
        cells = []
        for d in depths:
            values = [r[a][str(d)] - r[b][str(d)] for r in paired if str(d) in r[a] and str(d) in r[b]]
            cells.append(difference_cell(values, scale=100))
        rows.append([f"{a} - {b} (mean ± SE over {seeds_label(len(paired))})", *cells])
    return markdown(["exact solve, one trajectory", *(f"depth {d}" for d in depths)], rows)


def eqr_breadth(seeds: tuple[int, ...] = (0, 1, 2)) -> str:
    """EqR's depth x breadth grid per seed (6x6): exact solve with the answer picked by the lowest residual / vote
    / halting head, and the correlation of a restart's log residual with its being right."""
    rows = []
    for seed in seeds:
        if not (engine.RESULTS / EQR_SEED_RUNS[seed] / "eqr" / "eqr_sudoku.json").exists():
            continue  # not run yet (the seeds table says so)
        run = load(f"{EQR_SEED_RUNS[seed]}/eqr/eqr_sudoku.json")["eqr"]
        breadths = sorted({int(key.split("x")[1]) for key in run["grid"]})  # the same options for every seed
        for depth in sorted({int(key.split("x")[0]) for key in run["grid"]}):
            cells = []
            for b in breadths:
                point = run["grid"][f"{depth}x{b}"]
                cells.append(" / ".join(f"{100 * point[rule]:.1f}" for rule in ("residual", "vote", "halt")))
            r = run["residual_correctness_r"].get(str(depth))
            rows.append([f"seed {seed}, depth {depth}", *cells, "" if r is None else f"{r:+.2f}"])
    header = ["EqR (exact solve %: residual / vote / halting head)", *(f"breadth {b}" for b in breadths)]
    return markdown([*header, "r(log residual, right)"], rows)


def eqr_selection(relative: str) -> str:
    return selection_table(load(relative)["kinds"])


def eqr_halting(folder: str, seeds: tuple[int, ...]) -> str:
    """Per seed and split: the fixed depth and threshold chosen on the validation half (the cheapest of equal
    accuracy, ``benchmarks/comparisons.py``) and how they compare on the test half."""
    rows = []
    for seed in seeds:
        if not (engine.RESULTS / folder / f"seed{seed}" / "eqr_halting.json").exists():
            rows.append([f"seed {seed}", "not run yet", *[""] * 6])
            continue
        data = load(f"{folder}/seed{seed}/eqr_halting.json")
        for split in ("easy", "all"):
            row = data["chosen"][split]
            depth = row["test_depth"]
            cells = [f"seed {seed}, {split} ({row['validation_puzzles']} / {row['test_puzzles']})"]
            cells += [str(row["reference_depth"]), f"{pct(depth['accuracy'])} / {depth['mean_nfe']:.0f}"]
            if row["threshold"] is None:
                rows.append(cells + ["none of equal accuracy", "", "", "", ""])
                continue
            halt = row["test_halting"]
            cells += [f"{row['threshold']:g}", f"{pct(halt['accuracy'])} / {halt['mean_nfe']:.1f}"]
            cells += [
                f"{row['nfe_ratio']:.2f}x",
                f"{100 * row['accuracy_difference']:+.1f} ± {100 * row['difference_se']:.1f}",
            ]
            cells.append("yes" if row["equal_accuracy_on_test"] else "**no**")
            rows.append(cells)
    header = [
        "seed, split (validation / test puzzles)",
        "fixed depth (chosen)",
        "test: exact / NFE",
        "threshold (chosen)",
        "test: exact / mean NFE",
        "fewer evaluations",
        "difference (pts, paired SE)",
        "equal accuracy on test",
    ]
    return markdown(header, rows)


# ---- the audit -------------------------------------------------------------------------------------------------

AUDIT_ROWS = {  # the order of the table, and the summary file each model's runs are in
    "studied": "audit_studied.json",
    "no_anchor": "audit_no_anchor.json",
    "noisy_start": "audit_studied.json",
    "amortised": "audit_controls.json",
    "control": "audit_controls.json",
    "mlp": "audit_controls.json",
}


def per_seed(runs: list[dict], key: str, form: str | Callable) -> str:
    """The seeds' values of ``key``, formatted, joined by `` / ``; one value when they agree."""
    cells = [form(run[key]) if callable(form) else format(run[key], form) for run in runs]
    return cells[0] if len(set(cells)) == 1 else " / ".join(cells)


def two_digits(value: float) -> str:
    """Two significant digits, keeping a trailing zero (``1.0``, ``0.023``, ``12``)."""
    return format(value, "#.2g").rstrip(".")


def iterations(value: float) -> str:
    return f"{value:.0f}" if value >= 20 else f"{value:.1f}"


def audit_cells(runs: list[dict]) -> list[str]:
    """One model's seeds (``runs``, sorted by seed) as the audit table's cells after seed, model and accuracy:
    displacement, T1, zeroing, probes, r, iterations, share at the cap, verdict."""
    rel = sorted({two_digits(r["disp_rel"]) for r in runs}, key=float)
    displacement = (
        per_seed(runs, "disp_median", two_digits) + f" ({rel[0] if len(rel) == 1 else rel[0] + '-' + rel[-1]})"
    )
    probes = ", ".join(f"{100 * r['probe_h']:.1f}/{100 * r['probe_z0']:.1f}" for r in runs)
    verdicts = [r["verdict"] for r in runs]
    verdict = f"{verdicts[0]} (all {len(runs)})" if len(set(verdicts)) == 1 else " / ".join(verdicts)
    verdict = verdict.replace("(all 3)", "(all three)")
    cap = per_seed(runs, "cap", lambda share: f"{100 * share:.2g}")
    return [displacement, per_seed(runs, "t1", "+.1f"), per_seed(runs, "zero", "+.1f"), probes] + [
        per_seed(runs, "pearson", lambda r: "n/a" if r is None else f"{r:+.3f}"),
        per_seed(runs, "steps", iterations),
        cap + "%",
        verdict,
    ]


AUDIT_HEADER = ["seed", "model", "acc %", "median `||h*-z0||` (rel.)", "T1 pts", "zeroing pts", "probe h* / z0 %"]
AUDIT_HEADER += ["r (Pearson)", "iterations", "at cap", "verdict"]


def audit_reachability(folder: str = "audit_reachability") -> str:
    """A row per model, each cell its three seeds (one value when they agree): the audit's numbers and verdict."""
    rows = []
    for model, summary in AUDIT_ROWS.items():
        runs = sorted((r for r in load(f"{folder}/{summary}")["runs"] if r["model"] == model), key=lambda r: r["seed"])
        seeds = " / ".join(str(r["seed"]) for r in runs)
        accuracy = " / ".join(f"{100 * r['accuracy']:.1f}" for r in runs)
        if "verdict" not in runs[0]:  # the MLP baseline: accuracy only
            rows.append([seeds, model, accuracy] + [""] * 8)
            continue
        rows.append([seeds, model, accuracy] + audit_cells(runs))
    return markdown(AUDIT_HEADER, rows)


def lazy_runs(task: str) -> dict[str, list[dict]]:
    """The lazy-identity regime's run records of ``task``, by model (the benchmark's order), each sorted by seed."""
    by_model: dict[str, list[dict]] = {}
    for path in sorted((engine.RESULTS / "lazy_identity" / task).glob("*-seed*/run.json")):
        run = json.loads(path.read_text())
        by_model.setdefault(run["model"], []).append(run)
    order = ["lazy", "lazy_no_anchor", "lazy_noisy", "lazy_no_direct", "lazy_control"]
    return {m: sorted(by_model[m], key=lambda r: r["seed"]) for m in sorted(by_model, key=order.index)}


def lazy_identity_audit(task: str) -> str:
    """The audit table of the lazy-identity regime's runs on ``task``, with the tightest tolerance 99% reach."""
    rows = []
    for model, runs in lazy_runs(task).items():
        seeds = " / ".join(str(r["seed"]) for r in runs)
        accuracy = " / ".join(f"{100 * r['accuracy']:.1f}" for r in runs)
        tight = per_seed(runs, "tolerances", lambda t: "none" if t["tightest_99"] is None else f"{t['tightest_99']:g}")
        rows.append([seeds, model, accuracy] + audit_cells(runs)[:-1] + [tight, audit_cells(runs)[-1]])
    header = AUDIT_HEADER[:-1] + ["at cap: tol 1e-4", "tightest tol 99% reach", "verdict"]
    header.remove("at cap")
    return markdown(header, rows)


def lazy_identity_ablations(task: str) -> str:
    """Per model: the noisy starts (where the solve ends, the accuracy there), how strongly the decoder reads h*,
    the learned potential's scale, the anchor removed at test time, and the gradient reaching the dynamics."""
    rows = []
    for model, runs in lazy_runs(task).items():
        noisy = [r["noisy_starts"] for r in runs if r.get("noisy_starts")]
        ends = ", ".join(f"{n['to_noisy_start']:.2g} / {n['to_z0']:.2g}" for n in noisy) or "n/a (zero start)"
        change = " / ".join(f"{100 * (n['accuracy_noisy'] - n['accuracy_clean']):+.1f}" for n in noisy) or "n/a"
        reads = per_seed(
            runs, "decoder", lambda d: f"{d['state_over_context']:.2f}" if "state_over_context" in d else "no context"
        )
        removed = [r["anchor_removed"] for r in runs if "anchor_removed" in r]
        anchor = " / ".join(f"{a['steps']:.0f} it, {100 * a['cap']:.0f}%, {100 * a['accuracy']:.1f}%" for a in removed)
        grads = []
        for r in runs:
            g = r["gradients"]
            key = "direct_path" if "direct_path" in g else None
            grads.append(
                f"{g['dynamics']['first'] / g[key]['first']:.2g} -> {g['dynamics']['last'] / g[key]['last']:.2g}"
                if key
                else f"{g['dynamics']['first']:.2g} -> {g['dynamics']['last']:.2g} (abs.)"
            )
        rows.append(
            [model, ends, change, reads, per_seed(runs, "potential_scale", ".3g"), anchor or "n/a", ", ".join(grads)]
        )
    header = ["model", "noisy start: end to s / to z0 (per noise norm)", "acc. change from noisy starts (pts)"]
    header += ["decoder reads h* / context (RMS weight)", "potential scale (mean abs; init 0.01)"]
    header += [
        "anchor set to 0 at test: iterations, at cap, acc.",
        "gradient dynamics / direct path, first -> last tenth",
    ]
    return markdown(header, rows)


def lazy_identity_holm() -> str:
    """Every lazy-identity run's T1 and today's `studied` runs' on the same task, with Holm's correction over all of
    them per task."""
    from equilibria.diagnostics.statistics import two_sided_p

    rows = []
    for task in ("reachability", "entailment"):
        path = engine.RESULTS / "lazy_identity" / task / "summary.json"
        if not path.exists():
            continue
        for row in json.loads(path.read_text())["holm"]["runs"]:
            p = two_sided_p(row["t1_z"])
            rows.append(
                [
                    task,
                    row["run"],
                    f"{row['t1_z']:+.2f}",
                    f"{p:.2g}",
                    "yes" if row["t1_significant"] else "no",
                    row["verdict"],
                ]
            )
    header = ["task", "run", "T1 z", "p (two-sided)", "significant after Holm (0.05, per task)", "verdict"]
    return markdown(header, rows)


def audit_holm(folder: str = "audit_reachability", alpha: float = 0.05) -> str:
    """Every audited run's T1 (its z and two-sided p) and whether T1 is still significant after Holm's correction
    over all the runs of the benchmark, beside the verdict the run got."""
    from equilibria.diagnostics import AuditReport, verdict
    from equilibria.diagnostics.statistics import holm, two_sided_p
    from equilibria.diagnostics.verdict_rules import SCHEMA

    runs = sorted((engine.RESULTS / folder).glob("*-seed*/audit.json"))
    reports = [(path.parent.name, AuditReport.from_json(path)) for path in runs]
    p_values = [two_sided_p(r.substitution["z"]) for _, r in reports]
    survives = holm(p_values, alpha)
    rows = [
        [name, f"{r.verdict} (schema {r.schema})", verdict(r)[0]]
        + [f"{r.substitution['change_points']:+.1f}", f"{r.substitution['z']:+.2f}", f"{p:.2g}"]
        + ["yes" if kept else "no"]
        for (name, r), p, kept in zip(reports, p_values, survives)
    ]
    header = ["run", "verdict (recorded)", f"verdict by today's rules (schema {SCHEMA}, from the recorded numbers)"]
    header += ["T1 pts", "T1 z", "p (two-sided)", f"T1 significant after Holm ({alpha:g})"]
    return markdown(header, rows)


# ---- solvers and releases --------------------------------------------------------------------------------------


def solvers() -> str:
    data = load("solvers.json")
    results, dim = data["results"], data["args"]["dim"]

    def cell(run: dict, lam: bool = False) -> str:
        seconds = f"{run['seconds']:.3f}" if run["map"].startswith("tanh") else f"{run['seconds']:.2f}"
        extra = " (`{}`)".format(re.search(r"lam=([\d.e-]+)", run["solver"]).group(1)) if lam else ""
        return f"{run['iterations']} it, {seconds} s{extra}"

    rows = []
    for name, best in data["best_torchdeq"].items():
        label = (
            f"tanh(Wz + x), dim {dim}, {name.split(', ')[1].replace('=', ' = ')}"
            if name.startswith("tanh")
            else ("Attractor LM map (width 256, 64 tokens, layers x10)")
        )
        runs = [
            results[f"{name} | {s}"]
            for s in ("equilibria anderson (m=5)", "equilibria picard", "torchdeq anderson (m=5, lam=0.0001)")
        ]
        rows.append([label, *(cell(r) for r in runs), cell(best, lam=True)])
    header = [
        "map",
        "equilibria Anderson",
        "equilibria Picard",
        "torchdeq Anderson, default `lam=1e-4`",
        "torchdeq Anderson, best `lam`",
    ]
    return markdown(header, rows)


def forward_paths() -> str:
    """A row per forward path: the package's functions it runs and their files, release 0.2's code and now."""
    before, now = load("forward_paths_0.2.json")["paths"], load("forward_paths.json")["paths"]
    rows = []
    for name, got in now.items():
        old = before.get(name)
        then = f"{old['functions']} in {old['files']}" if old else "-"
        files = ", ".join(f"`{file}`" for file in got["file_names"])
        rows.append([f"`{name}`", then, f"{got['functions']} in {got['files']}", files])
    return markdown(["forward", "0.2: functions in files", "now: functions in files", "files now"], rows)


def compat_matrix() -> str:
    """A row per release, a column per family, each cell *folder as remote code / package* (transformers' looped
    LMs: *the saved folder / package*; ``absent`` on a release without the model)."""
    payload = load("compat_matrix.json")
    families = list(payload["families"])  # the folders checked, in the order they were run

    def cell(verdict: dict) -> str:
        if verdict["status"] == "absent":
            return "absent"
        return f"{verdict['status']} / {'ok' if verdict['package'] == 'ok' else 'error'}"

    rows = [[release, *(cell(row[f]) for f in families)] for release, row in payload["releases"].items()]
    return markdown(["transformers", *families], rows)


# ---- the command line -----------------------------------------------------------------------------------------


def cli_commands() -> str:
    """The subcommands of ``equilibria`` with their one-line help, read from the parser itself (what ``equilibria
    --help`` prints)."""
    import argparse

    from equilibria.cli import build_parser

    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    rows = [[f"`equilibria {choice.dest}`", " ".join(choice.help.split())] for choice in sub._choices_actions]
    return markdown(["command", "what it does (`equilibria COMMAND --help` for its options)"], rows)


def stars_presets() -> str:
    """Every option of each STARS preset, read from ``equilibria.trainers.stars_presets`` (the code is the source)."""
    from equilibria.trainers.stars_presets import DEFAULTS, PRESETS, STARS_OPTIONS

    names = list(PRESETS)
    training = list(dict.fromkeys(k for name in names for k in PRESETS[name]["training"]))

    def cell(value) -> str:
        if value is None:
            return "-"
        return f"{value:.4g}" if isinstance(value, float) else str(value).replace("{", "").replace("}", "")

    rows = [[f"`{k}`", cell(DEFAULTS[k]), *(cell(PRESETS[n]["stars"][k]) for n in names)] for k in STARS_OPTIONS]
    rows += [[f"`{k}`", "(Trainer's)", *(cell(PRESETS[n]["training"].get(k)) for n in names)] for k in training]
    return markdown(["option", "no preset", *(f"`{n}`" for n in names)], rows)


# ---- puzzle classes ---------------------------------------------------------------------------------------------


def generator_cell(row: dict) -> str:
    """The class count of a generator row, saying what kind of number it is."""
    seen = f"{row['seen']} seen in {row['draws']} draws, {row['once']} once"
    if row["kind"] == "saturated":
        return f"{row['classes']} (saturated: {seen})"
    if row["kind"] == "lower bound":
        return f"more than {row['seen']} (a lower bound: {seen})"
    return f"about {row['classes']:,} (Chao1 estimate: {seen}, {row['twice']} twice)"


def puzzle_generators() -> str:
    rows = [[g["name"], generator_cell(g)] for g in load("puzzle_census.json")["generators"]]
    return markdown(["generator", "classes up to symmetry"], rows)


def puzzle_splits() -> str:
    rows = []
    for split in load("puzzle_census.json")["splits"]:
        for run in split["runs"]:
            held = "held out" if run["held_out"] else "**memorisation check**"
            rows.append(
                [
                    split["name"],
                    str(run["seed"]),
                    f"{run['train_rows']} / {run['train_classes']}",
                    f"{run['test_rows']} / {run['test_classes']}",
                    str(run["test_rows_in_training_classes"]),
                    held,
                ]
            )
    header = ["split", "seed", "training puzzles / classes", "test puzzles / classes", "test in a training class", ""]
    return markdown(header, rows)


INTERNALIZATION_RUNS = (  # folders under attractor_internalization/: <task>-<form>-<gradient>
    "addition-paper-one-step",
    "addition-gated-one-step",
    "addition-deq-one-step",
    "addition-paper-implicit",
    "sudoku-paper-one-step",
    "sudoku-gated-one-step",
    "sudoku-deq-one-step",
)


def internalization_run(name: str) -> dict | None:
    """The internalization run ``name`` (a folder of :data:`INTERNALIZATION_RUNS`); ``None`` until it is made."""
    path = engine.RESULTS / "attractor_internalization" / name / "internalization.json"
    return json.loads(path.read_text()) if path.exists() else None


def internalization_cells(run: dict) -> list[str]:
    """One run's cells: iterations at the first and last evaluation (and their minimum), the held-out accuracy at
    T=0, T=1 and T* at the end, the gap T* - T=0, and the run's length (and its GPU, where it ran on one)."""
    first, last = run["rows"][0], run["rows"][-1]
    steps = [r["iterations"] for r in run["rows"]]
    at = [last["accuracy"].get(t) for t in ("0", "1", run["args"]["budget"])]  # T=0 (none for deq), T=1, T*
    where = "" if run.get("device", "cpu") == "cpu" else f" on an {run['device'].removeprefix('NVIDIA ')}"
    return [
        f"{first['iterations']:.1f} → {last['iterations']:.1f} (min {min(steps):.1f})",
        " / ".join("n/a" if a is None else pct(a) for a in at),
        "n/a" if at[0] is None else f"{100 * (at[2] - at[0]):+.1f}",
        f"{run['args']['steps']} steps, {run['train_seconds'] / 60:.0f} min{where}",
    ]


INTERNALIZATION_HEADER = ["iterations: start → end", "T=0 / T=1 / T* at the end", "T* − T=0", "run"]


def attractor_internalization() -> str:
    """A row per run (one not made yet says so), with :func:`internalization_cells`."""
    rows = []
    for name in INTERNALIZATION_RUNS:
        task, form, gradient = name.split("-", 2)
        label = [task, f"`{form}`", gradient.replace("-", "_")]
        run = internalization_run(name)
        rows.append([*label, "not run yet", "", "", ""] if run is None else [*label, *internalization_cells(run)])
    return markdown(["task", "map", "gradient", *INTERNALIZATION_HEADER], rows)


PUBLISHED_CHOICES = ("gates", "neumann", "batch_stop", "optimizer")  # bench_attractor_internalization's order


def _published_label(run: dict) -> str:
    """The choices as the tables name them ("all four", "`gates` alone", "`gates` + `optimizer`"), with the learning
    rate where ``--lr`` set it."""
    choices = run["published"]["choices"]
    label = "all four" if len(choices) == len(PUBLISHED_CHOICES) else " + ".join(f"`{c}`" for c in choices)
    label += " alone" if len(choices) == 1 else ""
    lr = run["published"]["training"].get("learning_rate")
    return label + (f" at lr {lr:g}" if run["args"].get("lr_given") == "True" and lr is not None else "")


def _published_files(task: str | None = None) -> list[Path]:
    pattern = f"published-*-{task}-seed*" if task else "published-*"
    return sorted((engine.RESULTS / "attractor_internalization").glob(f"{pattern}/internalization.json"))


def attractor_published() -> str:
    """A row per ``published-<choices>-<task>-seed<k>`` run: the paper's map with the published code's choices."""
    rows = []
    runs = [json.loads(path.read_text()) for path in _published_files()]
    for run in sorted(runs, key=lambda run: run["args"]["task"]):  # stable: by choices and seed within a task
        own = [r.get("iterations_per_sample", r["iterations"]) for r in run["rows"]]
        least = min(range(1, len(own)), key=own.__getitem__)
        trace = f"{own[0]:.1f} → {own[1]:.1f} (step {run['rows'][1]['step']}) → least {own[least]:.1f} (step "
        trace += f"{run['rows'][least]['step']}) → {own[-1]:.1f}"
        rows.append(
            [run["args"]["task"], _published_label(run), run["args"]["seed"], *internalization_cells(run), trace]
        )
    header = ["task", "the published code's choices", "seed", *INTERNALIZATION_HEADER]
    return markdown(header + ["the rows' own iterations: start → first evaluation → least after it → end"], rows)


def published_runs(task: str, choice: str) -> dict[int, dict]:
    """The runs of ``task`` with exactly the published choices ``choice`` (``all``, one choice, or several joined
    by ``+``) at the published learning rate, by seed."""
    wanted = set(PUBLISHED_CHOICES) if choice == "all" else set(choice.split("+"))
    runs = {}
    for path in _published_files(task):
        run = json.loads(path.read_text())
        if set(run["published"]["choices"]) == wanted and run["args"].get("lr_given", "False") == "False":
            runs[int(run["args"]["seed"])] = run
    return runs


def _end_shares(run: dict) -> tuple[float, float, float]:
    """T=0, T=1 and T* accuracy at the end of a run."""
    last = run["rows"][-1]["accuracy"]
    return last["0"], last["1"], last[run["args"]["budget"]]


def paper_baseline(task: str, device: str) -> dict | None:
    """The paper's map with the paper's choices on ``task`` (seed 0) trained on ``device`` (``cpu`` or a GPU's
    name), so that a published choice is compared with a run on the same kind of machine."""
    for path in sorted(
        (engine.RESULTS / "attractor_internalization").glob(f"{task}-paper-one-step*/internalization.json")
    ):
        run = json.loads(path.read_text())
        if run.get("device", "cpu") == device:
            return run
    return None


def _beyond_binomial(a: float, b: float, n: int) -> str:
    """``"SE: yes"`` where two shares of ``n`` rows each differ by more than two binomial standard errors of the
    difference (the two runs taken as independent samples), else ``"SE: no"``."""
    se = ((a * (1 - a) + b * (1 - b)) / n) ** 0.5
    return f"{100 * se:.1f}: " + ("yes" if abs(a - b) > 2 * se else "no")


def attractor_published_singles(task: str = "addition") -> str:
    """Each published choice alone (seed 0) against the paper's map with the paper's choices (seed 0, the same data):
    the end's T=0 and T*, and the change in T=0 (the internalization measure) against two standard errors: the
    binomial one of the held-out rows alone (the two runs taken as independent samples), and one that also counts
    the spread between seeds, ``sqrt(2)`` times the standard deviation of T=0 over the seeds of all four choices
    together; and the change in T* with its binomial standard error. The paper's run is the one trained on the same
    kind of machine as the single choices."""
    singles = published_runs(task, "gates").get(0)
    base = None if singles is None else paper_baseline(task, singles.get("device", "cpu"))
    if base is None:
        return "not run yet"
    b0, _, b_star = _end_shares(base)
    n = int(base["args"]["test_size"])
    combined = [_end_shares(run)[0] for run in published_runs(task, "all").values()]
    spread = statistics.stdev(combined) * 2**0.5 if len(combined) > 1 else None
    rows = [["none (the paper's)", pct(b0), pct(b_star), "", "", "", ""]]
    for choice in (*PUBLISHED_CHOICES, "gates+batch_stop+optimizer", "all"):
        run = published_runs(task, choice).get(0)
        label = "all four" if choice == "all" else " + ".join(f"`{c}`" for c in choice.split("+"))
        label += " alone" if choice in PUBLISHED_CHOICES else ""
        if run is None and "+" in choice:  # an optional combination: a row only where it was run
            continue
        if run is None:
            rows.append([label, "not run yet", "", "", "", "", ""])
            continue
        t0, _, t_star = _end_shares(run)
        change = t0 - b0
        seeds = "n/a" if spread is None else f"{100 * spread:.1f}: " + ("yes" if abs(change) > 2 * spread else "no")
        moved = _beyond_binomial(t0, b0, n)
        solved = f"{100 * (t_star - b_star):+.1f} ({_beyond_binomial(t_star, b_star, n)})"
        rows.append([label, pct(t0), pct(t_star), f"{100 * change:+.1f}", moved, seeds, solved])
    header = ["published choices (seed 0)", "T=0 at the end", "T* at the end", "T=0 change vs the paper's (pts)"]
    header += ["binomial SE: beyond 2 SE?", "SE with the seeds' spread: beyond 2 SE?", "T* change (pts; binomial SE)"]
    return markdown(header, rows)


FORMS = ("paper", "gated", "deq")  # the columns of the Attractor page's comparison, one per ``residual_form``
FORM_LINKS = {
    "internalization": "[internalization](benchmarks/attractor_internalization.md)",
    "memory": "[memory](benchmarks/attractor_memory.md)",
    "lm": "[LM](benchmarks/attractor_lm.md)",
}


def _form_iterations(name: str) -> str:
    """The internalization run's iterations to tolerance: start -> least -> end."""
    run = internalization_run(name)
    if run is None:
        return "not run yet"
    steps = [r["iterations"] for r in run["rows"]]
    return f"{steps[0]:.1f} -> {min(steps):.1f} -> {steps[-1]:.1f}"


def _form_exact(name: str) -> str:
    """The internalization run's held-out exact match at the end, at T=0 / T=1 / T* (``-`` where it has none)."""
    run = internalization_run(name)
    if run is None:
        return "not run yet"
    last = run["rows"][-1]["accuracy"]
    cells = [last.get(t) for t in ("0", "1", run["args"]["budget"])]
    return " / ".join("-" if a is None else f"{100 * a:.1f}%" for a in cells)


def _form_saved(memory: dict, form: str) -> str:
    """The map's one-step saved-for-backward MiB, one number when every budget agrees."""
    bytes_ = {memory[k]["saved_bytes"] for k in memory if k.startswith(f"{form}/one_step@")}
    return f"{bytes_.pop() / 2**20:.1f} MiB" if len(bytes_) == 1 else "differs by budget"


def _form_perplexity(lm: dict[str, dict[int, dict]], kind: str) -> str:
    """The kind's mean validation perplexity, and its paired difference from the transformer's."""
    if not lm[kind]:
        return "not run yet"
    mean = mean_se([r["val_perplexity"] for r in lm[kind].values()])[0]
    return f"{mean:.2f} ({difference_cell(lm_paired(lm, kind), digits=2)})"


def attractor_forms() -> str:
    """The Attractor page's comparison of its maps, from the internalization, memory and language-model runs: a row
    per measure, a column per ``residual_form``."""
    memory, lm = memory_runs(), lm_runs()
    first = internalization_run("addition-paper-one-step")
    steps = first["args"]["steps"] if first else "?"
    llama = list(lm["llama"].values())
    params = f"{llama[0]['parameters'] / 1e6:.1f}M" if llama else "?"
    tol = llama[0]["args"]["tol"] if llama else "?"
    lm_steps = {
        kind: lm_iterations(lm[kind].values()).replace("→", "->") or "not run yet"
        for kind in ("attractor-paper", "attractor-gated")
    }
    rows = [
        [f"addition, {steps} steps: iterations to tolerance (start -> least -> end)"]
        + [_form_iterations(f"addition-{f}-one-step") for f in FORMS]
        + [FORM_LINKS["internalization"]],
        ["addition: held-out exact at T=0 / T=1 / T*"]
        + [_form_exact(f"addition-{f}-one-step") for f in FORMS]
        + [FORM_LINKS["internalization"]],
        [
            "training memory saved for backward, one-step, any budget",
            _form_saved(memory, "paper"),
            _form_saved(memory, "gated"),
            "",
            FORM_LINKS["memory"],
        ],
        [
            f"language model ({params} parameters, {len(llama)} seeds): validation perplexity, mean (minus the "
            "transformer's)",
            _form_perplexity(lm, "attractor-paper"),
            _form_perplexity(lm, "attractor-gated"),
            "",
            FORM_LINKS["lm"],
        ],
        [
            f"language model: iterations to {float(tol):.0e} in training (start -> least -> end)".replace("e-0", "e-"),
            lm_steps["attractor-paper"],
            lm_steps["attractor-gated"],
            "",
            FORM_LINKS["lm"],
        ],
    ]
    return markdown(["on", '`"paper"`', '`"gated"`', '`"deq"`', "page"], rows)


ATTRACTOR_SETTINGS = {  # folder under attractor_puzzles_select/ -> the setting (6x6, width 128, paper map, seed 0)
    "split1-budget16": "1 + 1 layers (MLP 512), budget 16",
    "split2-budget16": "2 + 2 layers (MLP 171), budget 16",
    "split1-budget30": "1 + 1 layers (MLP 512), budget 30",
    "split2-budget30": "2 + 2 layers (MLP 171), budget 30",
}


def attractor_settings() -> dict[str, dict]:
    """The Attractor runs of the settings search that have been made: folder -> its ``attractor`` entry."""
    found = {}
    for name in ATTRACTOR_SETTINGS:
        path = engine.RESULTS / "attractor_puzzles_select" / name / "attractor" / "eqr_sudoku.json"
        if path.exists():
            found[name] = json.loads(path.read_text())["attractor"]
    return found


def chosen_attractor_setting() -> str | None:
    """The setting with the most validation puzzles solved at depth 64 (ties: the smaller training budget, then the
    first listed), once every setting has been run; the test split plays no part."""
    runs = attractor_settings()
    if len(runs) < len(ATTRACTOR_SETTINGS):
        return None
    return max(runs, key=lambda name: runs[name]["validation_accuracy_by_depth"]["64"])


def attractor_chosen_runs() -> dict[int, str]:
    """Seed -> folder of the chosen setting's runs (seed 0: its run in the search); empty until it is chosen."""
    chosen = chosen_attractor_setting()
    if chosen is None:
        return {}
    return {
        0: f"attractor_puzzles_select/{chosen}",
        1: "attractor_puzzles_chosen/seed1",
        2: "attractor_puzzles_chosen/seed2",
    }


def attractor_puzzles_select() -> str:
    """A row per setting of the search: parameters, the solver's converged share and iterations at the end of
    training, exact solve on the validation split (which chooses) and on the test split (which does not)."""
    runs, chosen = attractor_settings(), chosen_attractor_setting()
    rows = []
    for name, label in ATTRACTOR_SETTINGS.items():
        if name not in runs:
            rows.append([label, "not run yet", *[""] * 3])
            continue
        run, last = runs[name], runs[name]["log"][-1]
        valid, test = run["validation_accuracy_by_depth"], run["accuracy_by_depth"]
        rows.append(
            [
                f"**{label}** (chosen)" if name == chosen else label,
                f"{run['parameters']:,}",
                f"{pct(last['converged_rate'])}, {last['solver_steps']:.1f}",
                " / ".join(pct(valid[d]) for d in ("16", "32", "64")),
                pct(test["64"]),
            ]
        )
    header = [
        "setting",
        "parameters",
        "end of training: converged, iterations",
        "validation: depth 16 / 32 / 64",
        "test: depth 64 (not used to choose)",
    ]
    return markdown(header, rows)


def memory_runs() -> dict[str, dict]:
    """The memory benchmark's runs, ``"<form>/<mode>@<budget>"`` -> its measurement; empty until it is run."""
    path = engine.RESULTS / "attractor_memory" / "memory.json"
    return json.loads(path.read_text())["runs"] if path.exists() else {}


def attractor_memory() -> str:
    """A row per map and gradient mode: saved-for-backward and peak-increase MiB at each budget, and the ratios of
    the largest budget to the smallest."""
    runs = memory_runs()
    if not runs:
        return markdown(["map", "gradient", "saved / peak (MiB) at each budget"], [["not run yet", "", ""]])
    budgets = sorted({int(key.split("@")[1]) for key in runs})  # keys: "<form>/<mode>@<budget>"
    rows = []
    for form, mode in dict.fromkeys(tuple(key.split("@")[0].split("/")) for key in runs):
        cells = [runs[f"{form}/{mode}@{b}"] for b in budgets]
        last = cells[-1]
        rows.append(
            [
                f"`{form}`",
                mode,
                *(f"{c['saved_bytes'] / 2**20:.1f} / {c['peak_increase_bytes'] / 2**20:.1f}" for c in cells),
                f"{last['saved_ratio']:.2f}, {last['peak_ratio']:.2f}",
            ]
        )
    ratio = f"ratio {budgets[-1]} / {budgets[0]} (saved, peak)"
    return markdown(["map", "gradient", *(f"budget {b}: saved / peak MiB" for b in budgets), ratio], rows)


def attractor_smoke() -> str:
    """A row per smoke-scale case: its data (held out or not) and the exact-solve share at each loop count."""
    path = engine.RESULTS / "attractor_smoke.json"
    if not path.exists():
        return markdown(["case", "data", "exact solve at each loop count"], [["not run yet", "", ""]])
    run = load("attractor_smoke.json")
    rows = []
    for name, case in run["cases"].items():
        held = "held out by class" if case["data"]["held_out"] else "NOT held out"
        scores = ", ".join(f"{n}: {pct(a)}" for n, a in case["accuracy"].items())
        rows.append([name, f"{case['data']['units']} test puzzles, {held}", scores])
    return markdown(["case", "data", f"exact solve at each loop count ({run['args']['steps']} steps)"], rows)


LM_KINDS = {
    "llama": "`LlamaForCausalLM`",
    "attractor-paper": "Attractor, paper's map",
    "attractor-gated": "Attractor, gated map",
    "looped": "looped, unrolled (Parcae-style)",
}


def lm_runs() -> dict[str, dict[int, dict]]:
    """Kind of :data:`LM_KINDS` -> seed -> its language-model run (``attractor_lm/<kind>/seed<N>.json``), by seed."""
    return {
        kind: {
            int(p.stem[4:]): json.loads(p.read_text())
            for p in sorted((engine.RESULTS / "attractor_lm" / kind).glob("seed*.json"))
        }
        for kind in LM_KINDS
    }


def lm_paired(lm: dict[str, dict[int, dict]], kind: str, other: str = "llama") -> list[float]:
    """``kind``'s validation perplexity minus ``other``'s, per seed that both have (of :func:`lm_runs`)."""
    return [r["val_perplexity"] - lm[other][s]["val_perplexity"] for s, r in lm[kind].items() if s in lm[other]]


def attractor_lm() -> str:
    """A row per model kind: validation perplexity per seed and its mean, the paired difference from the
    transformer (mean ± SE over the seeds both have), and each run's mean cost."""
    runs = lm_runs()
    rows = []
    for kind, label in LM_KINDS.items():
        by_seed = runs[kind]
        if not by_seed:
            rows.append([label, "not run yet", "", "", "", "", "", ""])
            continue
        ppl = [r["val_perplexity"] for r in by_seed.values()]
        paired = lm_paired(runs, kind)
        diff = (
            "" if kind == "llama" or not paired else f"{difference_cell(paired, digits=2)} ({seeds_label(len(paired))})"
        )
        cost = {
            k: mean_se([r[k] for r in by_seed.values()])[0] for k in ("train_flops", "train_seconds", "saved_bytes")
        }
        rows.append(
            [
                label,
                f"{next(iter(by_seed.values()))['parameters']:,}",
                " / ".join(f"{v:.2f}" for v in ppl) + f" (mean {mean_se(ppl)[0]:.2f})",
                diff,
                lm_iterations(by_seed.values()),
                f"{cost['train_flops'] / 1e12:.1f}",
                f"{cost['train_seconds'] / 60:.1f}",
                f"{cost['saved_bytes'] / 2**20:.1f}",
            ]
        )
    header = ["model", "parameters", "validation perplexity per seed", "minus the transformer's"]
    return markdown([*header, ITERATIONS, "training TFLOPs", "minutes", "saved for backward (MiB)"], rows)


ITERATIONS = "solver iterations in training: first → least → last"


def lm_iterations(runs) -> str:
    """The solver's mean iterations per logged step, averaged over seeds: first, least and last (empty without a solver)."""
    curves = [r["solver_steps"] for r in runs if r.get("solver_steps")]
    if not curves:
        return ""
    mean = [sum(c[i] for c in curves) / len(curves) for i in range(min(map(len, curves)))]
    return f"{mean[0]:.1f} → {min(mean):.1f} → {mean[-1]:.1f}"


# ---- the README's results table --------------------------------------------------------------------------------


def _sudoku_runs(kind: str) -> dict[int, dict]:
    """Seed -> the 6x6 run of ``kind`` (``"attractor (chosen settings)"``: the chosen setting's runs)."""
    if kind == "attractor (chosen settings)":
        folders = attractor_chosen_runs()
        kind = "attractor"
    else:
        folders = EQR_SEED_RUNS
    runs = {}
    for seed, folder in folders.items():
        path = engine.RESULTS / folder / kind / "eqr_sudoku.json"
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


def recipe_range(runs: list[dict], loops: int | str) -> str:
    """``95.5-99.0%`` (``98.0%`` when every run agrees): the lowest and highest share right at ``loops`` over
    ``runs``."""
    values = [run["accuracy"][str(loops)] for run in runs]
    low, high = pct(min(values)), pct(max(values))
    return low if low == high else f"{low[:-1]}-{high}"


def recipe_runs_label(runs: list[dict]) -> str:
    """``seeds 0-2 x 1, 2 threads``: which runs a range covers."""
    seeds = sorted({run["seed"] for run in runs})
    threads = sorted({run["threads"] for run in runs})
    span = f"{seeds[0]}-{seeds[-1]}" if seeds == list(range(seeds[0], seeds[-1] + 1)) and len(seeds) > 2 else (
        ", ".join(map(str, seeds)))  # fmt: skip
    return f"seed{'s' if len(seeds) > 1 else ''} {span}, {' and '.join(map(str, threads))} thread{'s' if threads != [1] else ''}"


def recipes() -> str:
    """Every documented training command (``benchmarks/recipes.py``): what it gives at its trained loop count over
    every seed and thread count run, the wall time, and what the page's earlier command gave."""
    rows = []
    for name, entry in load("recipes.json")["recipes"].items():
        runs, loops = entry["runs"], entry["loops"]
        before = entry.get("before", {}).get("runs") or []
        walls = [run["wall_s"] for run in runs]
        rows.append([
            f"`{name}` ({entry['page'] if entry.get('shown', True) else 'no page: the recipe alone'})",
            f"`{entry['command']}`",
            entry["what"],
            f"{recipe_range(runs, loops)} ({recipe_runs_label(runs)})",
            "" if entry["target"] is None else f">= {pct(entry['target'], 0)}",
            "-".join(sorted({f"{min(walls) / 60:.1f}", f"{max(walls) / 60:.1f}"}, key=float)) + " min",
            f"{recipe_range(before, loops)} ({recipe_runs_label(before)})" if before else "",
        ])  # fmt: skip
    header = ["recipe", "command (`--seed S` added)", "result", "measured", "promised", "wall time", "before"]
    return markdown(header, rows)


def readme_results() -> str:
    """The README's results table: a short line per headline result (:data:`README_ROWS`), every number read from
    the JSON its page's tables are generated from; the page has the command and the details."""
    return markdown(README_HEADER, [row() for row in README_ROWS])


README_HEADER = ["result", "here", "the paper", "seeds", "page"]


def _stars_at(kind: str, loops: int, relative: str = "stars_addition/results.json") -> float:
    """Exact match of the STARS addition run ``kind`` (2-digit unless ``relative`` says otherwise) at ``loops``."""
    return load(relative)["results"][kind]["accuracy"][str(loops)]


def recipes_row() -> list[str]:
    """The documented training commands (``recipes.json``): each one's lowest-highest at the count its page reads."""
    entries = load("recipes.json")["recipes"]
    shown = {"readme-ouro": "Ouro", "readme-dory": "Dory", "demo": "demo's STARS", "readme-fine-tune": "fine-tune"}
    cells = [
        f"{label} {recipe_range(entries[name]['runs'], entries[name]['loops'])} at {entries[name]['loops']} loops"
        for name, label in shown.items()
        if name in entries
    ]
    seeds = sorted({run["seed"] for name in shown if name in entries for run in entries[name]["runs"]})
    return [
        "the README's training commands, as written",
        "exact match on held-out sums: " + ", ".join(cells),
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


def stars_cost_cheaper() -> str:
    """The cheaper penalty forms against a plain step, and the subsample's error against the full penalty."""
    cost = load("stars_cost.json")["by_loops"]
    rows = []
    for n, row in cost.items():
        error = row["sampling_error"]
        rows.append(
            [
                n,
                *(f"{row[f]:.2f}x" for f in ("vjp@1", "batch@1", "vjp@1 rows 1/4", "batch@1 rows 1/4")),
                f"{100 * error['relative_bias']:+.1f}%",
                f"{100 * error['mean_relative_error']:.0f}%",
                f"{error['gradient_cosine']:.2f}",
            ]
        )
    header = [
        "loops",
        "vjp@1, every sequence",
        "batch probe (the reference code's)",
        "vjp@1, 1/4 of the sequences",
        "batch probe, 1/4",
        "subsample: bias",
        "mean abs. error",
        "gradient cosine",
    ]
    return markdown(header, rows)


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


def gpu_section(name: str) -> dict | None:
    """The section ``name`` of the prepared GPU run (``docs/results/gpu/NAME.json``, ``gpu_run.py``), or ``None``."""
    path = engine.RESULTS / "gpu" / f"{name}.json"
    return json.loads(path.read_text()) if path.is_file() else None


GPU_NOT_RUN = "(not run on a GPU yet: the device commands above write it)"


def gpu_stars_reference() -> str:
    """Per arm of ``stars_reference``: the seeds run, the mean exact match at each test loop count (± s.e. over
    seeds), and where it ran."""
    section = gpu_section("stars_reference")
    if not section or not section["stars_reference"].get("summary"):
        return GPU_NOT_RUN
    summary, runs = section["stars_reference"]["summary"]["accuracy"], section["stars_reference"]["runs"]
    loops = sorted(next(iter(summary.values())), key=int)
    rows = [
        [arm, ", ".join(sorted(runs[arm], key=int)), *[percent_se(summary[arm][n]) for n in loops]] for arm in summary
    ]
    where = f"{section['device']}, torch {section['torch']}, transformers {section['transformers']}"
    return markdown(["arm", "seeds", *[f"{n} loops" for n in loops]], rows) + f"\n\nRan on {where}."


def percent_se(row: dict) -> str:
    return f"{100 * row['mean']:.1f}%" + ("" if row.get("se") is None else f" ± {100 * row['se']:.1f}")


def gpu_ouro_real_size() -> str:
    """``ouro_real_size``: decode speed against the Llama of equal depth, the compiled and early-exit decodes, the
    training steps and the bf16 logits' distance from float32 CPU ones."""
    section = gpu_section("ouro_real_size")
    if not section:
        return GPU_NOT_RUN
    r, rows = section["ouro_real_size"], []
    for batch, row in r.get("decode", {}).items():
        for mode in ("per_loop", "last_loop"):
            vs = row[f"{mode}_vs_llama"]
            rows.append([f"decode, batch {batch}, `{mode}`", f"{row['tokens_per_s'][mode]:.1f} tokens/s",
                         "{:.3f} [{:.3f}, {:.3f}] of the equal-depth Llama's time".format(vs["ratio"], *vs["range"]),
                         gib(row["peak_bytes"][mode])])  # fmt: skip
    if "compiled_decode" in r:
        c = r["compiled_decode"]
        rows.append(["static cache, compiled step, batch 1", f"first call {c['first_call_s']:.1f} s",
                     "{:.3f} [{:.3f}, {:.3f}] of eager decoding's time".format(c["ratio"], *c["range"]), "-"])  # fmt: skip
    if "early_exit" in r:
        e = r["early_exit"]
        rows.append([f"early exit at {e['threshold']} (mean {e['mean_exit_steps']:.2f} steps)", "-",
                     "{:.3f} [{:.3f}, {:.3f}] of the full loop's time".format(e["ratio"], *e["range"]), "-"])  # fmt: skip
    for adapter, steps in r.get("training_step", {}).items():
        for penalty in ("plain", "jsrr"):
            run, ratio = steps[penalty], steps.get("jsrr_over_plain")
            value = run["error"][:60] if "error" in run else f"{run['step_s']:.2f} s"
            rows.append([f"STARS step, {adapter}, penalty {'on' if penalty == 'jsrr' else 'off'}", value,
                         f"{ratio:.2f}x on / off" if penalty == "jsrr" and ratio else "",
                         gib(run.get("peak_bytes"))])  # fmt: skip
    for loops, d in r.get("logits_bf16_vs_cpu_fp32", {}).items():
        rows.append([f"bf16 logits vs float32 on the CPU, {loops} loops", f"top token agrees {d['top1_agreement']:.1%}",
                     f"max / mean |diff| {d['max_abs_over_std']:.3f} / {d['mean_abs_over_std']:.4f} std", "-"])  # fmt: skip
    skipped = ", ".join(s["part"] for s in r.get("skipped", [])) or "none"
    header = ["measure", "value", "ratio", "peak GPU memory (a decode: above the loaded models)"]
    return markdown(header, rows) + (
        f"\n\nRan on {section['device']} (torch {section['torch']}, transformers {section['transformers']}); "
        f"skipped: {skipped}."
    )


def gib(value: int | None) -> str:
    return "-" if value is None else f"{value / 2**30:.2f} GiB"


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


def eqr_depth_breadth(folder: str, seeds: tuple[int, ...]) -> str:
    """Per seed and depth, exact solve at each breadth of ``<folder>/seed<k>/eqr/eqr_sudoku.json``'s grid, the
    answer chosen by the lowest residual / by vote / by the halting head (a seed not run yet says so)."""
    rows, breadths = [], None
    for seed in seeds:
        path = engine.RESULTS / folder / f"seed{seed}" / "eqr" / "eqr_sudoku.json"
        if not path.exists():
            rows.append([f"seed {seed}", "not run yet"])
            continue
        grid = json.loads(path.read_text())["eqr"].get("grid")
        if grid is None:  # saved before its grid (the grid runs last)
            rows.append([f"seed {seed}", "grid not run yet"])
            continue
        cells = {tuple(int(x) for x in key.split("x")): value for key, value in grid.items()}
        breadths = breadths or sorted({b for _, b in cells})
        for depth in sorted({d for d, _ in cells}):
            rule = [cells.get((depth, b)) for b in breadths]
            rows.append(
                [f"seed {seed}", str(depth)]
                + [
                    "" if r is None else " / ".join(pct(r[k]) for k in ("residual", "vote", "halt") if k in r)
                    for r in rule
                ]
            )
    header = ["seed", "depth (iterations)"] + [f"breadth {b}" for b in (breadths or [1])]
    width = len(header)
    return markdown(header, [row + [""] * (width - len(row)) for row in rows])


def _halting_chosen(folder: str, seeds: tuple[int, ...]) -> dict[int, dict]:
    """Per seed run, ``<folder>/seed<k>/eqr_halting.json``'s chosen settings and their test comparison."""
    paths = {s: engine.RESULTS / folder / f"seed{s}" / "eqr_halting.json" for s in seeds}
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
        k: [load(f"{MAZE9_RUNS[s]}/{k}/eqr_sudoku.json") for s in MAZE9_RUNS] for k in ("eqr", "weight_tied", "untied")
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
        str(len(MAZE9_RUNS)),
        "[eqr_ablations](docs/benchmarks/eqr_ablations.md)",
    ]


def lazy_identity_audit_row() -> list[str]:
    paths = sorted((engine.RESULTS / "audit_reachability").glob("*-seed*/audit.json"))
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


NATIVE_CONTROLS = {
    "dory": "Dory",
    "hrm_text": "HRM-text",
    "inkling2_loop_text": "Inkling2-loop",
    "dory-lazy": "Dory, loop returning its start (negative control)",
}


def native_audit_controls() -> str:
    """The trained controls of transformers' looped LMs (``build_audit_control.py --family F [--lazy]``): loop scaling
    at 1 and 4 passes on held-out problems and the audit's verdict, T1 and probe on fresh ones."""
    rows = []
    for label, name in NATIVE_CONTROLS.items():
        path = engine.RESULTS / f"audit_control_{label}.json"
        if not path.is_file():
            continue
        control = load(path.name)
        accuracy, audit = control["loop_scaling"]["accuracy"], control["audit"]
        probe = audit["probe"]["change_points"] if audit.get("probe") else None
        rows.append([
            name, f"{control['folder_bytes'] / 1000:.0f} KB", pct(accuracy["1"], 1), pct(accuracy["4"], 1),
            f"{audit['accuracy']:.1%}", f"{audit['substitution']['change_points']:+.1f}",
            "-" if probe is None else f"{probe:+.1f}", audit["verdict"],
        ])  # fmt: skip
    header = ["model (4 passes, 2-digit addition)", "folder", "1 pass", "4 passes", "audited accuracy", "T1 (points)"]
    return markdown([*header, "probe h* - z0 (points)", "verdict"], rows)


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


TABLES: dict[str, Callable[[], str]] = {
    "cli-commands": cli_commands,
    "demo-loop-scaling": demo_loop_scaling,
    "demo-output": demo_output,
    "ouro-decode": ouro_decode,
    "ouro-cache-modes": ouro_cache_modes,
    "ouro-exit-at-one": ouro_exit_at_one,
    "ouro-exit-rows": ouro_exit_rows,
    "ouro-serving": ouro_serving,
    "ouro-compile": ouro_compile,
    "ouro-real-scale": ouro_real_scale,
    "gpu-stars-reference": gpu_stars_reference,
    "gpu-ouro-real-size": gpu_ouro_real_size,
    "stars-presets": stars_presets,
    "stars-addition": lambda: stars_accuracy("stars_addition/results.json"),
    "stars-addition-3digit": lambda: stars_accuracy("stars_addition_3digit/results.json"),
    "stars-dynamics": stars_dynamics,
    "stars-cost-cheaper": stars_cost_cheaper,
    "stars-reference-addition": lambda: stars_preset_runs("stars_reference_addition"),
    "stars-equilibria-addition4": lambda: stars_preset_runs("stars_equilibria_addition4"),
    "stars-addition-dory": lambda: stars_preset_runs("stars_addition_dory"),
    "native-audit-controls": native_audit_controls,
    "stars-norm-placement": stars_norm_placement,
    "stars-cost": stars_cost,
    "jsrr-estimator": jsrr_estimator,
    "jsrr-spread": jsrr_spread,
    "exit-gate": exit_gate,
    "solvers": solvers,
    "eqr-ablation-6x6": lambda: eqr_depths("eqr_ablation_6x6/summary.json"),
    "eqr-ablation-6x6-selection": lambda: eqr_selection("eqr_ablation_6x6/summary.json"),
    "eqr-ablation-maze7": lambda: eqr_depths("eqr_ablation_maze7/summary.json"),
    "eqr-ablation-maze7-selection": lambda: eqr_selection("eqr_ablation_maze7/summary.json"),
    "eqr-ablation-maze7-seed1": lambda: eqr_depths(
        "eqr_ablation_maze7_seed1/summary.json", title="seed 1: exact solve (mean final residual)", training=False
    ),
    "eqr-maze7-fullbackprop": lambda: eqr_depths(
        "eqr_maze7_fullbackprop/summary.json", suffix=", 8-step backprop", training=False
    ),
    "eqr-halting-6x6": lambda: eqr_halting("eqr_halting_6x6", (1, 2)),
    "eqr-halting-published-6x6": lambda: eqr_halting("eqr_halting_published_6x6", (0, 1, 2)),
    "eqr-depth-breadth-published-6x6": lambda: eqr_depth_breadth("eqr_published_6x6", (0, 1, 2)),
    "eqr-6x6-seeds": eqr_seeds,
    "eqr-maze9-seeds": lambda: eqr_seeds(
        ("untied", "weight_tied", "eqr"),
        (("eqr", "weight_tied"), ("eqr", "untied"), ("weight_tied", "untied")),
        (4, 8, 16, 32, 64),
        MAZE9_RUNS,
    ),
    "attractor-puzzles-sizes": lambda: eqr_seeds(
        ("weight_tied", "weight_tied (4 layers)", "eqr", "eqr (4 layers)", "attractor", "attractor (2 + 2 layers)"),
        (),
        (0, 4, 8, 16, 32, 64),
        PUZZLE_SIZE_RUNS,
        kind_folders={
            "attractor (2 + 2 layers)": PUZZLE_SIZE_SPLIT2_RUNS,
            "weight_tied (4 layers)": PUZZLE_SIZE_4LAYER_RUNS,
            "eqr (4 layers)": PUZZLE_SIZE_4LAYER_RUNS,
        },
    ),
    "attractor-puzzles-chosen": lambda: eqr_seeds(
        ("weight_tied", "eqr", "attractor (chosen settings)"),
        (("attractor (chosen settings)", "eqr"), ("attractor (chosen settings)", "weight_tied")),
        (0, 4, 8, 16, 32, 64),
        kind_folders={"attractor (chosen settings)": attractor_chosen_runs()},
    ),
    "attractor-puzzles-6x6": lambda: eqr_seeds(
        ("weight_tied", "eqr", "attractor"), (("attractor", "eqr"), ("attractor", "weight_tied")), (0, 4, 8, 16, 32, 64)
    ),
    "eqr-6x6-breadth": eqr_breadth,
    "audit-reachability": audit_reachability,
    "audit-reachability-holm": audit_holm,
    "lazy-identity-reachability": lambda: lazy_identity_audit("reachability"),
    "lazy-identity-entailment": lambda: lazy_identity_audit("entailment"),
    "lazy-identity-ablations-reachability": lambda: lazy_identity_ablations("reachability"),
    "lazy-identity-ablations-entailment": lambda: lazy_identity_ablations("entailment"),
    "lazy-identity-holm": lazy_identity_holm,
    "attractor-published": attractor_published,
    "attractor-published-singles": attractor_published_singles,
    "attractor-published-singles-sudoku": lambda: attractor_published_singles("sudoku"),
    "compat-matrix": compat_matrix,
    "forward-paths": forward_paths,
    "puzzle-generators": puzzle_generators,
    "puzzle-splits": puzzle_splits,
    "attractor-internalization": attractor_internalization,
    "attractor-forms": attractor_forms,
    "attractor-lm": attractor_lm,
    "attractor-memory": attractor_memory,
    "attractor-puzzles-select": attractor_puzzles_select,
    "attractor-smoke": attractor_smoke,
    "readme-results": readme_results,
    "recipes": recipes,
}


def render(text: str, where: str = "page") -> str:
    return engine.render(text, where, TABLES)


def stale_tables() -> list[str]:
    return engine.stale_tables(TABLES)


def stale_numbers() -> list[str]:
    return engine.stale_numbers()


def write_pages() -> list[str]:
    return engine.write_pages(TABLES)


def main(argv: list[str] | None = None) -> int:
    return engine.main(argv, TABLES)


if __name__ == "__main__":
    sys.exit(main())
