"""The package's architecture: the layer contract of ``pyproject.toml`` and the samplers' privacy.

The contract (``[tool.importlinter]``) orders the top-level modules and subpackages of
``cactus_theory`` in layers, from the command line down to the shared conventions; a module may
import only from layers below its own (function-local imports included), and no package has an
import circle among its modules. ``lint-imports`` checks it; these tests run it, prove that the
same kind of contract fails on a planted violation, and pin that the contract has no exception
list. A third contract keeps private modules private: a module whose name starts with ``_`` (or
any module inside such a package) is imported only from within the package that holds it; what
another package needs of it, that package lends through its ``internal.py`` (see CONTRIBUTING),
whose ledger these tests keep exact. A second check reads the code outside
``cactus_theory/samplers/`` (the rest of the package, the tests and the scripts) for uses of the
samplers' private names.
"""

import ast
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SAMPLERS = ROOT / "cactus_theory" / "samplers"
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def _lint(cwd, *args, pythonpath=None):
    env = None
    if pythonpath is not None:
        import os

        env = {**os.environ, "PYTHONPATH": str(pythonpath)}
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache", "--no-logo", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )


def _contracts():
    tomllib = pytest.importorskip("tomllib")  # Python >= 3.11
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]


# --------------------------------------------------------------------------- the layer contract


def test_the_layer_contract_is_kept():
    res = _lint(ROOT)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "0 broken" in res.stdout


def test_the_contract_has_no_exception_list_and_covers_every_module():
    cfg = _contracts()
    assert cfg["root_package"] == "cactus_theory"
    contracts = cfg["contracts"]
    assert {c["type"] for c in contracts} == {"layers", "acyclic_siblings", "private_modules"}
    for c in contracts:
        assert "ignore_imports" not in c, c["name"]
    layers = next(c for c in contracts if c["type"] == "layers")
    assert layers["exhaustive"] is True and layers["containers"] == ["cactus_theory"]
    # the two ends of the order: the command line on top, the shared conventions at the bottom
    assert layers["layers"][0] == "cli" and layers["layers"][-1] == "conventions"
    acyclic = next(c for c in contracts if c["type"] == "acyclic_siblings")
    assert acyclic["ancestors"] == ["cactus_theory"]
    # every private module of the package: no list of packages narrows the check
    private = next(c for c in contracts if c["type"] == "private_modules")
    assert "packages_with_private_modules" not in private


def _plant(tmp_path, files, contract):
    for name, text in files.items():
        path = tmp_path / "planted" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    (tmp_path / "pyproject.toml").write_text(textwrap.dedent(contract))
    return _lint(tmp_path, pythonpath=tmp_path)


def test_the_check_fails_on_a_function_local_import_up_the_layers(tmp_path):
    res = _plant(
        tmp_path,
        {
            "__init__.py": "",
            "high.py": "X = 1\n",
            "low.py": """
            def f():
                from .high import X   # function-local: still an import of the higher layer
                return X
        """,
        },
        """
        [tool.importlinter]
        root_package = "planted"

        [[tool.importlinter.contracts]]
        name = "layers"
        type = "layers"
        containers = ["planted"]
        exhaustive = true
        layers = ["high", "low"]
    """,
    )
    assert res.returncode == 1, res.stdout + res.stderr
    assert "planted.low -> planted.high" in res.stdout


def test_the_check_fails_on_a_circle_inside_a_package(tmp_path):
    res = _plant(
        tmp_path,
        {
            "__init__.py": "",
            "sub/__init__.py": "",
            "sub/a.py": "from . import b\n",
            "sub/b.py": """
            def g():
                from . import a
                return a
        """,
        },
        """
        [tool.importlinter]
        root_package = "planted"

        [[tool.importlinter.contracts]]
        name = "no circles"
        type = "acyclic_siblings"
        ancestors = ["planted"]
    """,
    )
    assert res.returncode == 1, res.stdout + res.stderr
    assert "planted.sub" in res.stdout


def test_the_check_fails_on_a_private_module_imported_from_another_package(tmp_path):
    res = _plant(
        tmp_path,
        {
            "__init__.py": "",
            "_shared.py": "X = 1\n",  # a private module of the root: the whole package's
            "sub/__init__.py": "",
            "sub/_impl.py": "from .._shared import X\n",
            "sub/internal.py": "from ._impl import X\n",  # what sub lends: allowed
            "sub/_k/__init__.py": "",
            "sub/_k/blocks.py": "Y = 2\n",  # inside a private package: private to sub
            "sub/user.py": "from ._k.blocks import Y\n",
            "other/__init__.py": "",
            "other/ok.py": "from ..sub.internal import X\nfrom .. import _shared\n",
            "other/bad.py": """
            def f():
                from ..sub._impl import X   # function-local: still an import of sub's private module
                return X
        """,
            "other/deep.py": "from ..sub._k import blocks\n",
        },
        """
        [tool.importlinter]
        root_package = "planted"

        [[tool.importlinter.contracts]]
        name = "private modules"
        type = "private_modules"
    """,
    )
    assert res.returncode == 1, res.stdout + res.stderr
    broken = sorted(line.split("(")[0].strip() for line in res.stdout.splitlines() if line.startswith("- "))
    assert broken == [
        "- planted.other.bad -> planted.sub._impl",
        "- planted.other.deep -> planted.sub._k.blocks",
    ], res.stdout


def _circles(imports: dict) -> list:
    """The strongly connected components of more than one module of the graph ``imports``
    (module -> the modules it imports), each sorted: Tarjan's algorithm, iteratively."""
    index, low, on_stack, stack, out, counter = {}, {}, set(), [], [], [0]
    for root in sorted(imports):
        if root in index:
            continue
        work = [(root, iter(sorted(imports.get(root, ()))))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            v, children = work[-1]
            w = next(children, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(imports.get(w, ())))))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return sorted(out)


def test_the_circle_finder_finds_a_package_and_its_child():
    # a package that imports its module, which imports the package back (the siblings contract
    # does not see this pair: they are parent and child)
    graph = {"p": {"p.a", "q"}, "p.a": {"p"}, "q": set(), "r": {"q"}}
    assert _circles(graph) == [["p", "p.a"]]
    assert _circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _circles({"a": {"b"}, "b": set()}) == []


def test_no_module_imports_itself_through_others():
    grimp = pytest.importorskip("grimp")  # installed with import-linter
    graph = grimp.build_graph("cactus_theory", cache_dir=None)
    imports = {m: graph.find_modules_directly_imported_by(m) for m in graph.modules}
    assert _circles(imports) == []


# --------------------------------------------------------------------------- samplers' privacy


def _sampler_private_names():
    """Private names of ``cactus_theory/samplers/``: ``(methods, module_level)``.

    Methods: ``def _x`` in a class body and ``self._x = ...``; module level: ``def _x``,
    ``class _X`` and ``_X = ...`` at the top of a module. Dunder names are not private.
    Submodule names (``_kernels``, ``_blocks``) are modules, not entries of a sampler."""
    methods, module_level = set(), set()
    private = lambda s: s.startswith("_") and not s.startswith("__")  # noqa: E731
    for f in SAMPLERS.rglob("*.py"):
        tree = ast.parse(f.read_text())
        for cls in (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)):
            methods |= {
                n.name
                for n in cls.body
                if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and private(n.name)
            }
        methods |= {
            n.attr
            for n in ast.walk(tree)
            if isinstance(n, ast.Attribute)
            and isinstance(n.ctx, ast.Store)
            and isinstance(n.value, ast.Name)
            and n.value.id == "self"
            and private(n.attr)
        }
        for n in tree.body:
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and private(n.name):
                module_level.add(n.name)
            elif isinstance(n, (ast.Assign, ast.AnnAssign)):
                for t in n.targets if isinstance(n, ast.Assign) else [n.target]:
                    if isinstance(t, ast.Name) and private(t.id):
                        module_level.add(t.id)
    return methods, module_level - methods


def _uses(source: str, names: set) -> list:
    """``(line, name)`` of every attribute access ``x._name`` and every
    ``from cactus_theory.samplers... import _name`` of one of ``names`` in ``source``."""
    out = []
    for n in ast.walk(ast.parse(source)):
        if isinstance(n, ast.Attribute) and n.attr in names:
            out.append((n.lineno, n.attr))
        elif isinstance(n, ast.ImportFrom) and n.module and "samplers" in n.module:
            out += [(n.lineno, a.name) for a in n.names if a.name in names]
    return out


def _outside_files():
    files = [p for p in (ROOT / "cactus_theory").rglob("*.py") if SAMPLERS not in p.parents]
    return files + sorted((ROOT / "tests").glob("*.py")) + sorted((ROOT / "scripts").glob("*.py"))


def _uses_outside(names: set) -> list:
    return sorted(
        f"{p.relative_to(ROOT)}:{line} {name}"
        for p in _outside_files()
        for line, name in _uses(p.read_text(), names)
    )


def test_the_privacy_scan_finds_a_planted_use():
    methods, module_level = _sampler_private_names()
    planted = "from cactus_theory.samplers._fused import _secret\ns._accept_path(q, p)\nx.public()\n"
    assert _uses(planted, {"_accept_path", "_secret"}) == [(1, "_secret"), (2, "_accept_path")]
    assert methods and module_level  # the scan reads the samplers (a sampler has private helpers)


def test_no_code_outside_the_samplers_calls_a_private_sampler_method():
    methods, _ = _sampler_private_names()
    assert _uses_outside(methods) == []


def test_no_code_outside_the_samplers_uses_a_private_sampler_function():
    _, module_level = _sampler_private_names()
    assert _uses_outside(module_level) == []


# --------------------------------------------------------------------------- what a package lends


PACKAGE = ROOT / "cactus_theory"


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _lent_names(path: Path) -> set:
    """The names an ``internal.py`` lends: what it imports from its package's private modules,
    the keys of a table of names imported on first use, and the functions it defines."""
    names = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.ImportFrom) and node.level == 1 and node.module:
            names |= {a.asname or a.name for a in node.names}
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef)) and not node.name.startswith("__"):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)) and isinstance(node.value, ast.Dict):
            names |= {k.value for k in node.value.keys if isinstance(k, ast.Constant)}
    return names


#: a module named in a string, imported when needed: ``"cactus_theory.x.y"`` or ``"cactus_theory.x.y:name"``
_NAMED_MODULE = re.compile(r"^(cactus_theory(?:\.\w+)+)(?::(\w+))?$")


def _private_parent(module: str):
    """The package a module is private to (the parent of its innermost private component), or
    None for a public module: import-linter's ``private_modules`` rule."""
    parts = module.split(".")
    for i in range(len(parts) - 1, 0, -1):
        if parts[i].startswith("_") and not (parts[i].startswith("__") and parts[i].endswith("__")):
            return ".".join(parts[:i])
    return None


def _strings_naming_private_modules(source: str, here: str) -> list:
    """``(line, string)`` of each string of ``source`` (the module ``here``) that names a module,
    as a lazy import does, private to a package that does not hold ``here``."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            match = _NAMED_MODULE.match(node.value)
            parent = match and _private_parent(match.group(1))
            if parent and here != parent and not here.startswith(parent + "."):
                out.append((node.lineno, node.value))
    return out


def test_the_string_scan_finds_a_lazily_named_private_module():
    planted = 'H = {"a": "cactus_theory.simulate._cli:run", "b": "cactus_theory.simulate.internal:run"}\n'
    assert _strings_naming_private_modules(planted, "cactus_theory.cli") == [
        (1, "cactus_theory.simulate._cli:run")
    ]
    assert _strings_naming_private_modules(planted, "cactus_theory.simulate.audit") == []


def test_no_string_names_another_packages_private_module():
    # what import-linter cannot see: a module imported by its name at run time
    found = [
        f"{path.relative_to(ROOT)}:{line} {text}"
        for path in sorted(PACKAGE.rglob("*.py"))
        for line, text in _strings_naming_private_modules(path.read_text(), _module_name(path))
    ]
    assert found == []


def _borrowed_names() -> dict:
    """{internal module: names} that the modules outside its package import from it, by an
    import statement or by name in a string (``"cactus_theory.x.internal:name"``)."""
    out = {}
    for path in PACKAGE.rglob("*.py"):
        here = _module_name(path)
        package = here.split(".") if path.name == "__init__.py" else here.split(".")[:-1]
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                match = _NAMED_MODULE.match(node.value)
                if match and match.group(1).endswith(".internal") and match.group(2):
                    out.setdefault(match.group(1), set()).add(match.group(2))
            if not isinstance(node, ast.ImportFrom):
                continue
            base = package[: len(package) - node.level + 1] if node.level else []
            target = ".".join(base + ([node.module] if node.module else []))
            if target.endswith(".internal"):
                lender = target.rsplit(".", 1)[0]
                assert not here.startswith(lender + "."), f"{here} imports its own package's internal.py"
                out.setdefault(target, set()).update(a.name for a in node.names)
    return out


def test_each_package_lends_exactly_what_the_rest_of_the_library_uses():
    import importlib

    lenders = {_module_name(p): p for p in PACKAGE.rglob("internal.py")}
    assert lenders, "no package lends anything: the scan reads nothing"
    borrowed = _borrowed_names()
    assert set(borrowed) <= set(lenders), f"imports of a missing internal.py: {set(borrowed) - set(lenders)}"
    for name, path in sorted(lenders.items()):
        module = importlib.import_module(name)
        assert module.__all__ == [], f"{name}: an internal module exports nothing"
        lent = _lent_names(path)
        unused = lent - borrowed.get(name, set())
        assert not unused, f"{name} lends names no other package imports (remove them): {sorted(unused)}"
        for attr in sorted(borrowed.get(name, ())):
            assert hasattr(module, attr), f"{name} does not lend {attr}"


def _imported_on_load(module: str) -> set:
    """The package's modules that importing ``module`` imports (statements at module level,
    and the parent packages of each imported module), transitively."""
    files = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    seen, todo = set(), [module]
    while todo:
        name = todo.pop()
        if name in seen or name not in files:
            continue
        seen.add(name)
        path = files[name]
        package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
        body = list(ast.parse(path.read_text()).body)
        while body:
            node = body.pop()
            if isinstance(node, (ast.If, ast.Try)):
                body += node.body + node.orelse
            elif isinstance(node, ast.Import):
                todo += [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = package[: len(package) - node.level + 1] if node.level else []
                target = ".".join(base + ([node.module] if node.module else []))
                todo += [target] + [f"{target}.{a.name}" for a in node.names]
        todo += [name.rsplit(".", i)[0] for i in range(1, name.count(".") + 1)]
    return seen


def test_an_internal_module_imports_nothing_its_package_does_not():
    # names whose modules the package does not import are lent on first use (_ON_FIRST_USE):
    # the command line's parser, the core without torch and vLLM's plugin stay as light as before
    assert "cactus_theory.logits._torch" in _imported_on_load("cactus_theory.logits.decode")
    for path in sorted(PACKAGE.rglob("internal.py")):
        name = _module_name(path)
        extra = _imported_on_load(name) - _imported_on_load(name.rsplit(".", 1)[0]) - {name}
        assert not extra, f"{name} imports on load what its package does not: {sorted(extra)}"


# ------------------------------------------------------------ each module has its test file

TESTS = ROOT / "tests"

#: modules (paths under cactus_theory/) that are public or over 300 lines and still lack their
#: test file: none (32 when the check was added); the list only shrinks, so a new public or long
#: module comes with its test file
_LACKING_A_TEST_FILE: set = set()


def _test_file_names(module: Path) -> set:
    """Where ``module``'s tests may live (CONTRIBUTING): ``tests/<subpackage>/test_<name>.py``,
    the name without its underscore, or with its package's name before it where two modules
    share one (``integrations/vllm/_rows.py``: ``tests/integrations/test_vllm_rows.py``)."""
    parts = module.with_suffix("").parts
    folder = "/".join(["tests", *parts[:1]]) if len(parts) > 1 else "tests"
    name = parts[-1].lstrip("_")
    names = {f"{folder}/test_{name}.py"}
    if len(parts) > 1:
        names.add(f"{folder}/test_{parts[-2].lstrip('_')}_{name}.py")
    return names


def _modules_lacking_a_test_file(package: Path, tests: Path) -> set:
    """Each module of ``package`` that is public (no ``_`` in its dotted path) or over 300
    lines, and has none of its test files under ``tests`` (packages' ``__init__.py`` and the
    lending ``internal.py`` modules are tested through what they hold)."""
    have = {p.relative_to(tests.parent).as_posix() for p in tests.rglob("test_*.py")}
    lacking = set()
    for path in package.rglob("*.py"):
        module = path.relative_to(package)
        if path.name in ("__init__.py", "internal.py"):
            continue
        public = not any(part.startswith("_") for part in module.with_suffix("").parts)
        if (public or len(path.read_text().splitlines()) > 300) and not (_test_file_names(module) & have):
            lacking.add(module.as_posix())
    return lacking


def test_the_test_file_check_finds_a_planted_module_without_one(tmp_path):
    package, tests = tmp_path / "pkg", tmp_path / "tests"
    for name, lines in {
        "__init__.py": 1,
        "public.py": 1,  # public: needs tests/test_public.py
        "_short.py": 10,  # private and short: needs none
        "_long.py": 301,  # private, over 300 lines: needs tests/test_long.py
        "sub/__init__.py": 1,
        "sub/_rows.py": 400,  # its test file carries the package's name
        "sub/deep/thing.py": 1,  # tests/sub/test_thing.py or tests/sub/test_deep_thing.py
        "sub/internal.py": 400,
    }.items():
        (package / name).parent.mkdir(parents=True, exist_ok=True)
        (package / name).write_text("x = 1\n" * lines)
    (tests / "sub").mkdir(parents=True)
    assert _modules_lacking_a_test_file(package, tests) == {
        "public.py",
        "_long.py",
        "sub/_rows.py",
        "sub/deep/thing.py",
    }
    for name in ("test_public.py", "test_long.py", "sub/test_sub_rows.py", "sub/test_thing.py"):
        (tests / name).write_text("")
    assert _modules_lacking_a_test_file(package, tests) == set()


def test_each_public_or_long_module_has_its_test_file():
    lacking = _modules_lacking_a_test_file(PACKAGE, TESTS)
    new = lacking - _LACKING_A_TEST_FILE
    assert not new, f"modules without tests/<subpackage>/test_<module>.py: {sorted(new)}"
    done = _LACKING_A_TEST_FILE - lacking
    assert not done, f"these have their test file now: remove them from the list: {sorted(done)}"


def test_test_file_basenames_are_unique():
    # the test folders are not packages: pytest imports each file by its basename, and a second
    # conftest.py or strategies.py would shadow the first
    seen = {}
    for path in sorted(TESTS.rglob("*.py")):
        assert path.name not in seen, f"{path} and {seen[path.name]} share a basename"
        seen[path.name] = path
