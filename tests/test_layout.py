"""The package's layout: no import cycles (counting the imports inside functions), and the command layer (the
``equilibria`` CLI and what runs its subcommands) on top, imported by nothing below it."""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
COMMAND_LAYER = {
    "equilibria.cli",
    "equilibria.__main__",
    "equilibria.commands",
    "equilibria.train",
    "equilibria.train.train_arguments",
    "equilibria.train.building",
    "equilibria.train.results",
    "equilibria.demo",
    "equilibria.command_arguments",
}


def module_name(path: Path, root: Path = SRC) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(path: Path, modules: set[str], root: Path = SRC) -> set[str]:
    """The package's modules that ``path`` imports anywhere in it (top level or inside functions)."""
    name = module_name(path, root)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parent + ([node.module] if node.module else []))
            candidates = [base, *(f"{base}.{alias.name}" for alias in node.names)]
        elif isinstance(node, ast.Import):
            candidates = [alias.name for alias in node.names]
        else:
            continue
        found.update(c for c in candidates if c in modules and c != name)
    return found


def import_graph(root: Path = SRC, folder: str = "equilibria") -> dict[str, set[str]]:
    """Which of the modules under ``root / folder`` each of them imports (``folder=""``: the scripts of a folder
    that import each other by their bare names, as the benchmarks do)."""
    files = {module_name(p, root): p for p in (root / folder).rglob("*.py")}
    return {name: imported_modules(path, set(files), root) for name, path in files.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index, low, on_stack, stack, found = {}, {}, set(), [], []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_the_cycle_finder_finds_a_cycle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert cycles(graph) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_the_import_graph_sees_imports_inside_functions(tmp_path):
    package = tmp_path / "equilibria"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "sub" / "__init__.py").write_text("")
    (package / "top.py").write_text("from .sub import low\n")
    (package / "sub" / "low.py").write_text("def f():\n    from ..top import g\n")
    graph = import_graph(tmp_path)
    assert graph["equilibria.top"] == {"equilibria.sub", "equilibria.sub.low"}
    assert graph["equilibria.sub.low"] == {"equilibria.top"}
    assert cycles(graph) == [["equilibria.sub.low", "equilibria.top"]]


def test_src_has_no_import_cycle():
    assert cycles(import_graph()) == []


def test_the_benchmarks_import_no_cycle_and_the_docs_table_renderer_imports_no_benchmark(tmp_path):
    """The benchmarks import ``doc_tables`` (their results' tables and ``save_results``), so it imports none of them,
    and no two benchmarks import each other, imports inside functions counted."""
    (tmp_path / "first.py").write_text("def table():\n    from second import cell\n")
    (tmp_path / "second.py").write_text("import first\n")
    assert cycles(import_graph(tmp_path, "")) == [["first", "second"]]  # the check sees a script's cycle
    graph = import_graph(SRC.parent / "benchmarks", "")
    assert "doc_tables" in graph and "bench_eqr_sudoku" in graph
    assert cycles(graph) == []
    assert graph["doc_tables"] == set()


def test_the_docs_tool_imports_no_cycle_and_its_pages_share_a_leaf_not_the_engine():
    """tools/ as src/: no import circle; the table builders (tools/docs/pages) and the engine share
    tools/docs/results.py, which imports nothing of the tool."""
    graph = import_graph(SRC.parent, "tools")
    assert "tools.docs.engine" in graph and "tools.docs.pages.readme" in graph
    assert cycles(graph) == []
    assert not {
        m for m, targets in graph.items() if m.startswith("tools.docs.pages") and "tools.docs.engine" in targets
    }
    assert graph["tools.docs.results"] == set()


def test_a_model_type_is_named_only_by_its_configuration_and_its_record():
    """Layers ask a family's record (its capabilities, its config class's model_type), not its name: a model type
    in quotes or backquotes (docstrings and comments included; as a recipe's name, "<type>/<task>", too) appears in
    its configuration file and its record's module in families/, a transformers model's nowhere."""
    import re

    from equilibria.families import FAMILIES

    sources = {path: path.read_text() for path in (SRC / "equilibria").rglob("*.py")}
    for model_type, family in FAMILIES.items():
        pattern = re.compile(rf"[\"'`]{re.escape(model_type)}[\"'`/]")  # "ouro", `ouro`, "ouro/addition"
        named = {path.relative_to(SRC).as_posix() for path, text in sources.items() if pattern.search(text)}
        config_file = family.config_class.__module__.replace(".", "/") + ".py"
        others = named - {config_file}
        if not config_file.startswith("equilibria/"):  # transformers' model: its record reads the type from it
            assert not named, f"{model_type!r} is named in {sorted(named)}: read it from transformers' config class"
        assert len(others) <= 1 and all(f.startswith("equilibria/families/") for f in others), (
            f"{model_type!r} is named in {sorted(others)} besides its configuration: ask its record instead"
        )


def test_the_command_layer_is_imported_by_nothing_below_it():
    graph = import_graph()
    assert COMMAND_LAYER - {"equilibria.__main__"} <= set(graph), "a module of the command layer was renamed"
    upward = {
        (module, target)
        for module, targets in graph.items()
        if module not in COMMAND_LAYER
        for target in targets & COMMAND_LAYER
    }
    assert upward == set()
    assert {module for module, targets in graph.items() if "equilibria.cli" in targets} <= {"equilibria.__main__"}


# the package's modules and subpackages from the top floor down (docs/development.md's Layout lists them in this order):
# a module imports only from its own entry or the ones below it
LAYERS = (
    "cli",
    "commands",
    "train",
    "demo",
    "command_arguments",
    "evaluation",
    "scaling",
    "loading",
    "trainers",
    "serving",
    "diagnostics",
    "hub_cards",
    "lm_eval_loops",
    "plots",
    "families",
    "loops",
    "tasks",
    "provenance",
    "modeling",
    "wording",
)


def layer_of(module: str) -> str:
    return module.split(".")[1] if module.count(".") else ""


def upward_imports(graph: dict[str, set[str]], layers: tuple[str, ...] = LAYERS) -> list[tuple[str, str]]:
    """``(module, target)`` for every import (top level or inside a function) of a module from a layer above its
    own."""
    rank = {name: i for i, name in enumerate(layers)}
    return sorted(
        (module, target)
        for module, targets in graph.items()
        if layer_of(module) in rank
        for target in targets
        if layer_of(target) in rank and rank[layer_of(target)] < rank[layer_of(module)]
    )


def test_imports_walk_down_the_layers():
    graph = import_graph()
    assert {layer_of(m) for m in graph} - {""} - {"__main__"} == set(LAYERS), "a module is missing from LAYERS"
    assert upward_imports(graph) == []


def test_the_layer_rule_sees_an_upward_import_inside_a_function(tmp_path):
    package = tmp_path / "equilibria"
    (package / "low").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "low" / "__init__.py").write_text("def f():\n    from ..top import g\n")
    (package / "top.py").write_text("from .low import f\n")
    graph = import_graph(tmp_path)
    assert upward_imports(graph, ("top", "low")) == [("equilibria.low", "equilibria.top")]
    assert upward_imports(graph, ("low", "top")) == [("equilibria.top", "equilibria.low")]


# a string naming a class by its module path, "package.module:Class" or "package.module.Class": a link the import
# graph cannot see
CLASS_PATH = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*[:.][A-Z]\w*$")
# where such strings belong: the auto_map a saved config carries ("modeling_ouro.OuroForCausalLM"), which transformers
# resolves in the saved folder's own remote code
SAVED_AUTO_MAPS = {"auto_map", "_remote_auto_map"}


def class_path_strings(source: str) -> list[str]:
    """The string constants of ``source`` that name a class by its module path, except the values of an
    ``auto_map`` / ``_remote_auto_map`` dict; and any call of ``importlib.import_module`` or ``__import__`` (a
    module imported by a computed name)."""
    tree = ast.parse(source)
    saved = set()
    for node in ast.walk(tree):
        targets = (
            node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        )
        names = {getattr(t, "id", None) or getattr(t, "attr", None) for t in targets}
        if names & SAVED_AUTO_MAPS and isinstance(node.value, ast.Dict):
            saved.update(id(value) for value in node.value.values)
    found = [
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and CLASS_PATH.match(node.value)
        if id(node) not in saved
    ]
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            name = getattr(node.func, "attr", None) or getattr(node.func, "id", None)
            if name in ("import_module", "__import__"):
                found.append(f"{name}(...)")
    return found


def test_no_class_is_named_by_a_string_in_src():
    """Trainers, audit adapters and the like are found by what they declare, never by a "module:Class" string a
    record below them holds (the layer rule above could not see that link)."""
    found = {
        str(path.relative_to(SRC)): strings
        for path in sorted((SRC / "equilibria").rglob("*.py"))
        if (strings := class_path_strings(path.read_text()))
    }
    assert found == {}


def test_the_class_path_check_finds_what_it_should():
    source = (
        'trainer: str = "equilibria.trainers:StarsTrainer"\n'
        'OTHER = "equilibria.diagnostics.adapters.OuroAdapter"\n'
        '_remote_auto_map = {"AutoConfig": "configuration_ouro.OuroConfig"}\n'
        'self.config.auto_map = {"AutoModel": "modeling_ouro.OuroModel"}\n'
        'TEXT = "a sentence. It is no class path"\n'
        "module = importlib.import_module(name)\n"
    )
    assert class_path_strings(source) == [
        "equilibria.trainers:StarsTrainer",
        "equilibria.diagnostics.adapters.OuroAdapter",
        "import_module(...)",
    ]


def test_the_development_page_lists_the_layers_in_their_order():
    readme = (SRC.parent / "docs" / "development.md").read_text()
    layout = readme[readme.index("## Layout") :]
    block = layout[layout.index("```") + 3 : layout.index("```", layout.index("```") + 3)]
    entries = [line.split()[0] for line in block.splitlines() if line.startswith("  ") and line[2:3].isalpha()]
    listed = [entry.removesuffix(".py").removesuffix("/") for entry in entries]
    assert [name for name in listed if name in LAYERS] == list(LAYERS)


@pytest.mark.parametrize("module", ["equilibria.commands", "equilibria.train"])
def test_the_subcommands_runners_import_no_cli_parser(module):
    assert "equilibria.cli" not in import_graph()[module]


def test_every_task_a_family_names_has_a_record():
    from equilibria.families import FAMILIES
    from equilibria.tasks.registry import TASK_RECORDS

    named = {task for family in FAMILIES.values() for task in family.tasks}
    assert named == set(TASK_RECORDS)


def test_a_new_task_is_one_record(monkeypatch):
    """A task added to the records alone is built, evaluated (held out of its training questions) and shaped for a
    config by the task splits (:mod:`equilibria.tasks.named_splits`), with no other change."""
    from datasets import Dataset, DatasetDict

    from equilibria.tasks import build_task, eval_split, named_splits, task_shape
    from equilibria.tasks.registry import TASK_RECORDS, Task

    def generate(width, train, test, seed):
        rows = [{"inputs": [(seed + i) % 7] * width, "labels": i % 2} for i in range(train + test)]
        return DatasetDict(train=Dataset.from_list(rows[:train]), test=Dataset.from_list(rows[train:]))

    toy = Task(
        name="toy",
        summary="a toy",
        shape_option="nodes",
        describe=lambda width: f"width-{width} toy",
        generate=generate,
        question=lambda row: str(row["inputs"]),
        shape_of=lambda config: config.input_size,
        metric="accuracy",
    )
    monkeypatch.setitem(TASK_RECORDS, "toy", toy)
    data = build_task("toy", 5, 2, seed=0, nodes=3)
    assert data.config_fields == {"input_size": 3, "num_labels": 2} and data.description.endswith(
        "width-3 toy problems (seed 0)"
    )
    config = type("Config", (), {"input_size": 3})()
    assert task_shape(config, "toy") == {"nodes": 3}
    first_fresh = Dataset.from_list([{"inputs": [1, 1, 1], "labels": 1}])  # what eval_split would draw first
    rows = eval_split(config, "toy", 3, seed=0, exclude=set(named_splits.fingerprints("toy", first_fresh)))
    assert len(rows) == 3 and [1, 1, 1] not in rows["inputs"]
    assert [1, 1, 1] in eval_split(config, "toy", 3, seed=0)["inputs"]
    with pytest.raises(ValueError, match="task must be one of"):
        build_task("nonesuch", 5, 2, seed=0)


def test_trainers_and_adapters_take_their_family_from_their_own_declaration():
    from equilibria.diagnostics import ADAPTERS, adapter_class_for
    from equilibria.families import FAMILIES
    from equilibria.trainers import LoopTrainer, StarsTrainer, trainer_for
    from equilibria.trainers.for_family import TRAINERS

    for family in FAMILIES.values():
        for head in family.heads:  # the one adapter of its head's kind and its loop's form
            assert [adapter_class_for(family.model_type, head.kind)] == family.fitting(ADAPTERS, head.kind)
        if issubclass(trainer_for(family.model_type), LoopTrainer):
            assert family in trainer_for(family.model_type).families()
    for declared in TRAINERS:  # each declares families with records (one, or with transformers' looped LMs)
        assert declared.model_types and set(declared.model_types) <= set(FAMILIES)
    for adapter in ADAPTERS:  # the adapters name no family: a head kind and a loop form
        assert adapter.head_kinds and not hasattr(adapter, "model_types")
    assert type("MyStars", (StarsTrainer,), {}).families()[0] is FAMILIES["ouro"]  # a subclass keeps its families
    with pytest.raises(ValueError, match="Orphan declares no family"):
        type("Orphan", (LoopTrainer,), {}).families()


def test_every_head_kind_has_one_adapter_one_evaluator_and_its_card_text():
    from equilibria.diagnostics import ADAPTERS
    from equilibria.families import FAMILIES, HEAD_KINDS
    from equilibria.hub_cards import FAMILY_TEXTS
    from equilibria.scaling import EVALUATORS

    assert set(EVALUATORS) == set(HEAD_KINDS)
    assert set(FAMILY_TEXTS) == set(FAMILIES)
    for family in FAMILIES.values():
        for head in family.heads:
            assert len(family.fitting(ADAPTERS, head.kind)) == 1, (family.model_type, head.kind)
            assert head.kind in FAMILY_TEXTS[family.model_type].usage


def test_the_portable_files_import_no_other_model_and_nothing_of_the_package_above_them():
    """Files under ``modeling/`` travel as remote code: they import the standard library, torch, transformers (not
    another model's internals under ``transformers.models``), huggingface_hub, safetensors, and each other."""
    allowed = {"torch", "transformers", "huggingface_hub", "safetensors"}
    for path in sorted((SRC / "equilibria" / "modeling").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level:
                assert node.level == 1, f"{path.name}: only single-dot relative imports travel with the folder"
                continue
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            names += [node.module] if isinstance(node, ast.ImportFrom) else []
            for name in names:
                top = name.split(".")[0]
                assert top in allowed or top in sys.stdlib_module_names, f"{path.name} imports {name}"
                assert not name.startswith("transformers.models"), f"{path.name} imports {name}"


def test_the_portable_classes_override_no_private_transformers_method():
    """No class under ``modeling/`` (nor a mixin it inherits) defines a ``_name`` method that one of its
    transformers base classes also has (such a method is free to change between releases), except
    ``_init_weights``, the hook every transformers model defines. Seen to fail with the heads' old overrides of
    ``GenerationMixin._prepare_generation_config`` and the like."""
    import importlib
    import inspect

    allowed = {"_init_weights"}
    found = set()
    for path in sorted((SRC / "equilibria" / "modeling").glob("*.py")):
        module = importlib.import_module(f"equilibria.modeling.{path.stem}")
        for cls in vars(module).values():
            if not inspect.isclass(cls) or cls.__module__ != module.__name__:
                continue
            ours = [b for b in cls.__mro__ if b.__module__.startswith("equilibria.")]
            theirs = [b for b in cls.__mro__ if b.__module__.startswith("transformers.")]
            for owner in ours:
                for name, value in vars(owner).items():
                    method = inspect.isfunction(value) or isinstance(value, (classmethod, staticmethod))
                    private = method and name.startswith("_") and not name.startswith("__")
                    if private and name not in allowed and any(hasattr(b, name) for b in theirs):
                        found.add(f"{owner.__name__}.{name}")
    assert not found, f"private transformers methods overridden: {sorted(found)}"


def test_the_old_name_of_the_named_splits_module_still_imports_and_warns(monkeypatch):
    import importlib

    from equilibria.tasks import named_splits

    monkeypatch.delitem(sys.modules, "equilibria.tasks.catalog", raising=False)
    with pytest.warns(DeprecationWarning, match="equilibria.tasks.named_splits"):
        old = importlib.import_module("equilibria.tasks.catalog")
    assert old.split_census is named_splits.split_census


#: what makes a test an integration run: another process (torchrun, a remote-code check, a shell command) or a
#: benchmark's quick mode
INTEGRATION_CALLS = (
    "run_two_processes(", "two_process_run", "remote_code_run(", "zero3_run(", "run_in_own_session(", "subprocess.run(",
    "subprocess.Popen(", "subprocess.check_output(", '.main(["--quick"',
)  # fmt: skip


def slow_marked(node: ast.FunctionDef, module: ast.Module) -> bool:
    """Whether a test function carries ``pytest.mark.slow``, on itself or through its module's ``pytestmark``."""
    own = any("pytest.mark.slow" in ast.unparse(d) for d in node.decorator_list)
    marks = [n for n in module.body if isinstance(n, ast.Assign) and ast.unparse(n.targets[0]) == "pytestmark"]
    return own or any("pytest.mark.slow" in ast.unparse(n.value) for n in marks)


def unmarked_integration_tests(tests: Path) -> list[str]:
    """``file::test`` for every test whose body makes an integration call and that is not marked slow (this file's
    own tests name those calls as data)."""
    found = []
    for path in sorted(tests.glob("test_*.py")):
        if path.name == Path(__file__).name:
            continue
        source = path.read_text()
        module = ast.parse(source)
        for node in module.body:
            if isinstance(node, ast.FunctionDef) and node.name.startswith("test_"):
                body = ast.get_source_segment(source, node)
                if any(call in body for call in INTEGRATION_CALLS) and not slow_marked(node, module):
                    found.append(f"{path.name}::{node.name}")
    return found


def test_every_integration_test_is_marked_slow():
    """``./run test -m "not slow"`` is the unit run: every test that starts another process or runs a benchmark's
    quick mode is marked ``slow``."""
    assert unmarked_integration_tests(Path(__file__).parent) == []


def test_the_slow_check_finds_an_unmarked_torchrun_test(tmp_path):
    (tmp_path / "test_x.py").write_text(
        "import pytest\n\n\ndef test_a(tmp_path):\n    run_two_processes('x.py', tmp_path)\n\n\n"
        "@pytest.mark.slow\ndef test_b(tmp_path):\n    run_two_processes('x.py', tmp_path)\n"
    )
    assert unmarked_integration_tests(tmp_path) == ["test_x.py::test_a"]


def test_no_test_file_imports_another():
    """What several test files share lives in ``tests/conftest.py``: a test file imports no other test file."""
    found = []
    for path in sorted(Path(__file__).parent.glob("test_*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("test_"):
                found.append(f"{path.name} imports {node.module}")
            if isinstance(node, ast.Import):
                found += [f"{path.name} imports {a.name}" for a in node.names if a.name.startswith("test_")]
    assert found == []


def test_no_function_is_over_90_lines():
    """The package, the docs tool, the benchmarks and the examples: a function a reader takes in whole."""
    root = SRC.parent
    long = [
        f"{path.relative_to(root)}:{node.lineno} {node.name} ({node.end_lineno - node.lineno + 1} lines)"
        for folder in ("src", "tools", "benchmarks", "examples")
        for path in sorted((root / folder).rglob("*.py"))
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno - node.lineno + 1 > 90
    ]
    assert long == []
