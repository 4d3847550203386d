"""The organism lab depends on the library one way: vrh (src/vrh) never imports vrh_lab, except
``vrh organism ...`` inside its command function, and vrh_lab (and the lab's scripts and benchmarks) use
only vrh's public names."""

import ast
import subprocess
import sys
from pathlib import Path

import vrh

SRC = Path(vrh.__file__).resolve().parent
LAB = SRC.parents[1] / "lab"
COMMAND = SRC / "commands" / "organism.py"  # the one module allowed to import the lab, inside a function


def _imports(tree: ast.AST):
    """(node, imported module) for every import in ``tree``, and importlib.import_module("...") calls."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from ((node, a.name) for a in node.names)
        elif isinstance(node, ast.ImportFrom) and not node.level:
            yield node, node.module or ""
        elif (isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", "")) == "import_module"
              and node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
            yield node, node.args[0].value


def _is_lab(module: str) -> bool:
    return module == "vrh_lab" or module.startswith("vrh_lab.")


def test_vrh_imports_the_lab_only_inside_the_organism_command():
    found = []
    for path in sorted(SRC.rglob("*.py")):
        tree = ast.parse(path.read_text())
        in_function = {id(n) for f in ast.walk(tree) if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))
                       for n in ast.walk(f)}
        for node, module in _imports(tree):
            if _is_lab(module) and not (path == COMMAND and id(node) in in_function):
                found.append(f"{path.relative_to(SRC.parent)}:{node.lineno} imports {module}")
    assert not found, found
    assert any(_is_lab(m) for _, m in _imports(ast.parse(COMMAND.read_text())))  # the check sees the command's


def test_importing_every_vrh_module_loads_no_lab_module():
    code = ("import pkgutil, importlib, sys, vrh\n"
            "for m in pkgutil.walk_packages(vrh.__path__, 'vrh.'):\n"
            "    if m.name != 'vrh.__main__':  # that one runs the CLI\n"
            "        importlib.import_module(m.name)\n"
            "print(sorted(n for n in sys.modules if n == 'vrh_lab' or n.startswith('vrh_lab.')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=300)
    assert out.stdout.strip() == "[]"


def test_the_lab_uses_only_public_names_of_vrh():
    files = sorted(LAB.rglob("*.py"))
    assert LAB / "vrh_lab" / "organism" / "train.py" in files
    found = []
    for path in files:
        tree = ast.parse(path.read_text())
        aliases = set()  # names bound to vrh modules or objects, whose private attributes are off limits too
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for a in node.names:
                    if a.name == "vrh" or a.name.startswith("vrh."):
                        aliases.add(a.asname or a.name.split(".")[0])
                        if any(p.startswith("_") for p in a.name.split(".")):
                            found.append(f"{path.name}:{node.lineno} imports {a.name}")
            elif isinstance(node, ast.ImportFrom) and not node.level and (node.module or "").split(".")[0] == "vrh":
                parts = node.module.split(".")
                for a in node.names:
                    aliases.add(a.asname or a.name)
                    if any(p.startswith("_") and p != "__future__" for p in [*parts, a.name]):
                        found.append(f"{path.name}:{node.lineno} imports {node.module}.{a.name}")
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases
                    and node.attr.startswith("_") and not node.attr.startswith("__")):
                found.append(f"{path.name}:{node.lineno} uses {node.value.id}.{node.attr}")
    assert not found, found


def test_vrh_organism_says_when_the_lab_is_missing():
    # a fresh interpreter where vrh_lab cannot be imported (as with vrh installed without lab/)
    code = ("import sys; sys.modules['vrh_lab'] = None\n"
            "from vrh.cli import main\n"
            "sys.exit(main(['organism', 'build', '--out', 'never-written']))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and "the organism lab (package vrh_lab) is not installed" in out.stderr
    assert "Traceback" not in out.stderr
