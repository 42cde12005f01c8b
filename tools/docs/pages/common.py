"""What the tables of several pages share: formatting helpers, run readers and rows."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from tools.docs import results as docs_results
from tools.docs.results import load, markdown, mean_se, pct


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


def difference_cell(values: list[float], scale: float = 1.0, digits: int = 1) -> str:
    """``+mean ± SE`` of paired differences (times ``scale``); no ``±`` for one value, empty for none."""
    if not values:
        return ""
    mean, se = mean_se(values)
    spread = f" ± {scale * se:.{digits}f}" if len(values) > 1 else ""  # one seed: no standard error
    return f"{scale * mean:+.{digits}f}{spread}"


def seeds_label(n: int) -> str:
    return f"{n} seed{'s' if n != 1 else ''}"


def run_set(name: str):
    """The run folders of the run set ``name`` in ``docs/results/run_sets.json`` (what a multi-run table reads: a
    list, or label -> folder, a seed's label as an int); ``KeyError`` naming the sets."""
    sets = load("run_sets.json")
    if name not in sets or name == "about":
        raise KeyError(
            f"no run set {name!r} in docs/results/run_sets.json; the sets are {sorted(set(sets) - {'about'})}"
        )
    runs = sets[name]["runs"]
    return runs if isinstance(runs, list) else {int(k) if k.isdigit() else k: v for k, v in runs.items()}


def run_label(key: int | str) -> str:
    return f"seed {key}" if isinstance(key, int) else key


def eqr_seeds(
    kinds: tuple[str, ...] = ("weight_tied", "eqr"),
    pairs: tuple[tuple[str, str], ...] = (("eqr", "weight_tied"),),
    depths: tuple[int, ...] = (4, 8, 16, 32, 64),
    folders: dict[int | str, str] | None = None,
    kind_folders: dict[str, dict[int | str, str]] | None = None,
) -> str:
    """Exact solve per seed and kind on the runs in ``folders`` (seed, or a row label such as ``"width 64, seed
    0"``, -> folder of per-kind runs; default the run set ``eqr_6x6_seeds``; a run not made yet says so), then for each pair ``(a, b)``
    and depth the mean over the seeds that have both kinds of the per-seed difference ``a - b``, with its standard
    error (the spread of the per-seed differences, n - 1 degrees of freedom). A depth a kind was not evaluated at is
    blank. ``kind_folders`` gives a row kind such as ``"attractor (chosen settings)"`` its own folders (seed ->
    folder); its results are read under the kind's first word."""
    folders = run_set("eqr_6x6_seeds") if folders is None else folders
    runs: dict[int, dict] = {}
    for seed in folders:
        runs[seed] = {}
        for k in kinds:
            folder = (kind_folders or {}).get(k, folders).get(seed)  # None: this kind has no run for this row
            path = docs_results.RESULTS / str(folder) / k.split()[0] / "eqr_sudoku.json"
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


def lazy_runs(task: str) -> dict[str, list[dict]]:
    """The lazy-identity regime's run records of ``task``, by model (the benchmark's order), each sorted by seed."""
    by_model: dict[str, list[dict]] = {}
    for path in sorted((docs_results.RESULTS / "lazy_identity" / task).glob("*-seed*/run.json")):
        run = json.loads(path.read_text())
        by_model.setdefault(run["model"], []).append(run)
    order = ["lazy", "lazy_no_anchor", "lazy_noisy", "lazy_no_direct", "lazy_control"]
    return {m: sorted(by_model[m], key=lambda r: r["seed"]) for m in sorted(by_model, key=order.index)}


def internalization_run(name: str) -> dict | None:
    """The internalization run ``name`` (a folder of the run set ``attractor_internalization``); ``None`` until it is made."""
    path = docs_results.RESULTS / "attractor_internalization" / name / "internalization.json"
    return json.loads(path.read_text()) if path.exists() else None


PUBLISHED_CHOICES = ("gates", "neumann", "batch_stop", "optimizer")  # bench_attractor_internalization's order


def _published_files(task: str | None = None) -> list[Path]:
    pattern = f"published-*-{task}-seed*" if task else "published-*"
    return sorted((docs_results.RESULTS / "attractor_internalization").glob(f"{pattern}/internalization.json"))


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
        path = docs_results.RESULTS / "attractor_puzzles_select" / name / "attractor" / "eqr_sudoku.json"
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
    return {0: f"attractor_puzzles_select/{chosen}", **run_set("attractor_chosen_seeds")}


def memory_runs() -> dict[str, dict]:
    """The memory benchmark's runs, ``"<form>/<mode>@<budget>"`` -> its measurement; empty until it is run."""
    path = docs_results.RESULTS / "attractor_memory" / "memory.json"
    return json.loads(path.read_text())["runs"] if path.exists() else {}


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
            for p in sorted((docs_results.RESULTS / "attractor_lm" / kind).glob("seed*.json"))
        }
        for kind in LM_KINDS
    }


def lm_paired(lm: dict[str, dict[int, dict]], kind: str, other: str = "llama") -> list[float]:
    """``kind``'s validation perplexity minus ``other``'s, per seed that both have (of :func:`lm_runs`)."""
    return [r["val_perplexity"] - lm[other][s]["val_perplexity"] for s, r in lm[kind].items() if s in lm[other]]


def lm_iterations(runs) -> str:
    """The solver's mean iterations per logged step, averaged over seeds: first, least and last (empty without a solver)."""
    curves = [r["solver_steps"] for r in runs if r.get("solver_steps")]
    if not curves:
        return ""
    mean = [sum(c[i] for c in curves) / len(curves) for i in range(min(map(len, curves)))]
    return f"{mean[0]:.1f} → {min(mean):.1f} → {mean[-1]:.1f}"


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


def gib(value: int | None) -> str:
    return "-" if value is None else f"{value / 2**30:.2f} GiB"
