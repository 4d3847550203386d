"""The package's import graph: no cycles (imports inside functions count too), and no command module
imports another command module (commands are thin wiring over library modules)."""

import ast
from pathlib import Path

import vrh

SRC = Path(vrh.__file__).resolve().parent


def _module_name(path: Path) -> str:
    rel = path.relative_to(SRC.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in SRC.rglob("*.py")}


def import_graph() -> dict[str, set[str]]:
    """module -> vrh modules it imports anywhere in its source (``from pkg import mod`` resolves to the module)."""
    mods = _modules()
    graph: dict[str, set[str]] = {m: set() for m in mods}
    for name, path in mods.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text())):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else []))
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base for a in node.names]
            for t in targets:
                while t and t not in mods:
                    t = t.rpartition(".")[0]
                if t.startswith("vrh") and t != name and t != "vrh":
                    graph[name].add(t)
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle as a list of modules, or None."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(m: str) -> list[str] | None:
        state[m] = 1
        stack.append(m)
        for n in sorted(graph.get(m, ())):
            if state.get(n) == 1:
                return stack[stack.index(n):] + [n]
            if n not in state:
                found = visit(n)
                if found:
                    return found
        stack.pop()
        state[m] = 2
        return None

    for m in sorted(graph):
        if m not in state:
            found = visit(m)
            if found:
                return found
    return None


def test_cycle_finder_finds_a_planted_cycle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_no_import_cycles_in_vrh():
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_commands_do_not_import_each_other():
    graph = import_graph()
    commands = {m for m in graph if m.startswith("vrh.commands.") and not m.rpartition(".")[2].startswith("_")}
    assert {"vrh.commands.data", "vrh.commands.report", "vrh.commands.study"} <= commands
    bad = {m: sorted(graph[m] & commands) for m in commands if graph[m] & commands}
    assert not bad, f"command modules import other commands: {bad}"


def _analysis_of(module: str) -> str | None:
    """``vrh.analyses.sweep.section`` -> ``sweep``; None for the registry and the package's own modules."""
    parts = module.split(".")
    return parts[2] if len(parts) > 2 and parts[:2] == ["vrh", "analyses"] and (SRC / "analyses" / parts[2]).is_dir() \
        else None


def test_analyses_do_not_import_each_other():
    """An analysis folder is the analysis: it imports the shared machinery (vrh.experiments, ...) and the registry,
    never another analysis' folder (so that removing a folder removes only it)."""
    graph = import_graph()
    assert {"vrh.analyses.detect", "vrh.analyses.evaluate", "vrh.analyses.demo"} <= set(graph)
    bad = {m: sorted(t for t in graph[m] if _analysis_of(t) not in (None, _analysis_of(m)))
           for m in graph if _analysis_of(m)}
    assert not {m: t for m, t in bad.items() if t}, f"analyses import other analyses: {bad}"


def test_command_modules_import_only_options_and_settings_at_module_level():
    """So that ``vrh --help`` does not import torch: library imports live inside ``run``; the settings types
    (the commands' ``Config``) import only the options. An analysis' registration (its folder's ``__init__``)
    and settings likewise: ``vrh --help`` imports every registration."""
    paths = [*(SRC / "commands").glob("*.py"), *(SRC / "analyses").glob("*/__init__.py"),
             *(SRC / "analyses").glob("*/settings.py"), SRC / "analyses" / "registry.py"]
    for path in paths:
        if path.name.startswith("_") and path.name != "__init__.py":
            continue
        own = f"vrh.analyses.{path.parent.name}.settings"
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("vrh"):
                assert node.module in ("vrh.options", "vrh.experiments.settings", "vrh.analyses.registry",
                                       "vrh.infra.discovery", own), f"{path} imports {node.module} at module level"
            if isinstance(node, ast.Import):
                assert not any(a.name.startswith(("vrh", "torch")) for a in node.names), path


def test_the_cli_imports_without_torch():
    """``vrh --help`` builds every parser (--mask-mode's choices come from vrh.core.masking) without torch."""
    import subprocess
    import sys

    code = "import sys, vrh.cli; vrh.cli.build_parser(); print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


def test_the_report_imports_without_torch_or_transformers():
    """``vrh report`` reads run folders: building one never loads torch or transformers (seconds, and a GPU
    library on a machine that only reads results)."""
    import subprocess
    import sys

    code = ("import sys, vrh.report.build, vrh.report.study; "
            "print('torch' in sys.modules or 'transformers' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


# The layers, lowest first: a module may import modules of its own layer and of the layers below, never above.
# (docs/architecture.md draws them; a name is a module or a package prefix.)
LAYERS = (
    ("infra", ("vrh.infra",)),  # the foundation: console, distributed, oom
    ("runs", ("vrh.runs",)),  # the run-folder contract and the record of what vrh wrote
    ("data", ("vrh.data",)),  # the dataset format, boxes, benchmark sources: never a task
    ("tasks", ("vrh.tasks",)),  # judging answers against the data
    ("models", ("vrh.models",)),
    ("core", ("vrh.core",)),
    ("scoring", ("vrh.scoring",)),
    ("options", ("vrh.options",)),  # the option groups: they read the masking registry (core)
    ("report", ("vrh.report",)),  # reads run folders only; the demo builds its report, compare draws its figure
    ("experiments", ("vrh.experiments", "vrh.organism", "vrh.testing")),
    ("analyses", ("vrh.analyses",)),  # one folder per analysis: its registration, settings, run (the registry a leaf)
    ("interface", ("vrh.commands", "vrh.cli", "vrh.__main__", "vrh.study")),  # study runs the library calls
)


def layer_of(module: str) -> int | None:
    """Index into LAYERS of ``module`` (the longest matching prefix), None for ``vrh`` itself."""
    best = None
    for i, (_, prefixes) in enumerate(LAYERS):
        for p in prefixes:
            if (module == p or module.startswith(p + ".")) and (best is None or len(p) > best[1]):
                best = (i, len(p))
    return None if best is None else best[0]


def test_every_module_has_a_layer():
    missing = sorted(m for m in _modules() if m != "vrh" and layer_of(m) is None)
    assert not missing, f"modules in no layer (add them to LAYERS and docs/architecture.md): {missing}"


def test_imports_only_go_down_the_layers():
    up = []
    for mod, targets in import_graph().items():
        for t in targets:
            if layer_of(mod) is not None and layer_of(t) is not None and layer_of(t) > layer_of(mod):
                up.append(f"{mod} ({LAYERS[layer_of(mod)][0]}) -> {t} ({LAYERS[layer_of(t)][0]})")
    assert not up, "imports up the layers: " + "; ".join(sorted(up))


def test_the_report_never_runs_a_model():
    """The report reads run folders only: nothing of models/ or core/ (nor torch through them)."""
    graph = import_graph()
    bad = {m: sorted(t for t in graph[m] if t.startswith(("vrh.models", "vrh.core"))) for m in graph
           if m.startswith("vrh.report")}
    assert not {m: t for m, t in bad.items() if t}, bad


def test_layer_finder_on_examples():
    assert LAYERS[layer_of("vrh.options")][0] == "options"
    assert LAYERS[layer_of("vrh.infra.console")][0] == "infra"
    assert layer_of("vrh.data.lengths") < layer_of("vrh.tasks.answer_rules")
    assert LAYERS[layer_of("vrh.models.adapters.qwen_vl")][0] == "models"
    assert layer_of("vrh") is None
