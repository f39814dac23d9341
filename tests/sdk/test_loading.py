"""load_environment ids, example datasets, ensure_keys."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest

import verifiers as vf
from verifiers.ids import EnvId, format_env_id, parse_env_id
from verifiers.utils import env_loading


@pytest.fixture
def env_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    name = "vf_test_tiny_env"
    (tmp_path / f"{name}.py").write_text(
        textwrap.dedent(
            """
            import verifiers as vf

            def load_environment(num_rows: int = 3, **kwargs):
                rows = [{"question": f"q{i}", "answer": str(i)} for i in range(num_rows)]
                return vf.SingleTurnEnv(dataset=rows, **kwargs)
            """
        )
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    yield name
    sys.modules.pop(name, None)


def test_parse_and_format_env_ids() -> None:
    for text, parts in [
        ("gsm8k", (None, "gsm8k", None)),
        ("primeintellect/wordle", ("primeintellect", "wordle", None)),
        ("org/my-env@1.2.0", ("org", "my-env", "1.2.0")),
    ]:
        parsed = parse_env_id(text)
        assert (parsed.owner, parsed.name, parsed.version) == parts
        assert format_env_id(*parts) == text
    assert parse_env_id("org/my-env@1.2.0").module == "my_env"
    with pytest.raises(ValueError):
        parse_env_id("a/b/c")


def test_load_environment_by_name_and_owner_id(env_module: str) -> None:
    env = vf.load_environment(env_module, num_rows=2)
    assert isinstance(env, vf.SingleTurnEnv) and len(env.get_dataset()) == 2
    assert env.env_id == env_module and env.env_args == {"num_rows": 2}
    hyphenated = vf.load_environment(f"someone/{env_module.replace('_', '-')}@0.1.0", system_prompt="S")
    assert hyphenated.get_dataset()[0]["prompt"][0]["content"] == "S"


def test_missing_environment_errors_clearly(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(vf.EnvironmentNotFoundError, match="not installed"):
        vf.load_environment("definitely-not-installed-env")
    calls = []

    def fake_install(env_id: EnvId) -> None:
        calls.append(str(env_id))
        raise vf.EnvironmentNotFoundError("hub unavailable")

    monkeypatch.setattr(env_loading, "_INSTALLERS", [])
    monkeypatch.setattr(env_loading, "INSTALLER_GROUP", "verifiers.test-no-installers")
    env_loading.register_installer(fake_install)
    # Installing from the hub needs the caller's permission ...
    monkeypatch.delenv("VF_AUTO_INSTALL", raising=False)
    with pytest.raises(vf.EnvironmentNotFoundError, match=r"install=True\) or VF_AUTO_INSTALL=1"):
        vf.load_environment("owner/definitely-not-installed-env@2.0")
    assert calls == []
    # ... given either way.
    with pytest.raises(vf.EnvironmentNotFoundError, match="hub unavailable"):
        vf.load_environment("owner/definitely-not-installed-env@2.0", install=True)
    monkeypatch.setenv("VF_AUTO_INSTALL", "1")
    with pytest.raises(vf.EnvironmentNotFoundError, match="hub unavailable"):
        vf.load_environment("owner/definitely-not-installed-env")
    assert calls == ["owner/definitely-not-installed-env@2.0", "owner/definitely-not-installed-env"]
    # With no installer at all, the error says how to get one.
    env_loading.unregister_installer(fake_install)
    with pytest.raises(vf.EnvironmentNotFoundError, match="no installer is registered"):
        vf.load_environment("owner/definitely-not-installed-env", install=True)


def test_default_hub_hook_explains_an_unreachable_hub(monkeypatch: pytest.MonkeyPatch) -> None:
    from verifiers.hub_client.hook import install_for_loader

    monkeypatch.setenv("VF_HUB_URL", "http://127.0.0.1:1")
    with pytest.raises(vf.EnvironmentNotFoundError, match=r"could not install owner/x@1\.0 from the hub: cannot reach"):
        install_for_loader(EnvId("owner", "x", "1.0"))


def test_toy_datasets_are_offline_and_deterministic() -> None:
    # The generated sets, under their own names; the classic names load the real datasets
    # (tests/compat/test_example_datasets.py).
    train = vf.load_example_dataset("toy-gsm8k", split="train")
    again = vf.load_example_dataset("toy-gsm8k", "train")
    test = vf.load_example_dataset("toy-gsm8k", "test")
    assert train.column_names[:2] == ["question", "answer"] and len(train) == 500 and len(test) == 100
    assert train[0] == again[0] and train[0] != test[0]
    assert all(row["answer"].lstrip("-").isdigit() for row in train.select(range(50)))
    assert vf.extract_hash_answer(train[0]["solution"]) == train[0]["answer"]
    math = vf.load_example_dataset("toy-math", "test")
    assert len(math) == 100 and math[0]["answer"]
    rev = vf.load_example_dataset("toy-reverse-text", "train")
    assert rev[0]["question"].endswith(rev[0]["answer"][::-1])
    with pytest.raises(ValueError, match="known"):
        vf.load_example_dataset("nope")


def test_ensure_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VF_TEST_KEY_A", "x")
    monkeypatch.delenv("VF_TEST_KEY_B", raising=False)
    vf.ensure_keys(["VF_TEST_KEY_A"])
    with pytest.raises(vf.MissingKeyError, match="VF_TEST_KEY_B") as info:
        vf.ensure_keys(["VF_TEST_KEY_A", "VF_TEST_KEY_B", "VF_TEST_KEY_C"])
    assert info.value.keys == ["VF_TEST_KEY_B", "VF_TEST_KEY_C"]  # what classic handlers read
    assert isinstance(info.value, ValueError)


def test_missing_key_error_the_classic_way() -> None:
    import pickle

    exc = vf.MissingKeyError(["OPENAI_API_KEY"])  # the classic signature: the key names
    assert exc.keys == ["OPENAI_API_KEY"] and "OPENAI_API_KEY" in str(exc)
    again = pickle.loads(pickle.dumps(exc))  # crosses process boundaries (worker pools) intact
    assert (type(again), again.keys, str(again)) == (vf.MissingKeyError, ["OPENAI_API_KEY"], str(exc))
    plain = vf.MissingKeyError("set MY_KEY first")
    assert (str(plain), plain.keys) == ("set MY_KEY first", [])


# ------------------------------------------------------------------ entry points, paths, installers
def _write_dist(site: Path, name: str, version: str, entry_points: dict[str, str]) -> None:
    """A minimal installed distribution (as pip leaves it) declaring ``verifiers.environments``."""
    info = site / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    lines = "".join(f"{key} = {value}\n" for key, value in entry_points.items())
    (info / "entry_points.txt").write_text(f"[verifiers.environments]\n{lines}")


FACTORY = """
import verifiers as vf

def make(rows: int = 2, **kwargs):
    return vf.SingleTurnEnv(dataset=[{"question": f"q{i}", "answer": str(i)} for i in range(rows)], **kwargs)
"""


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    import importlib

    folder = tmp_path / "site"
    folder.mkdir()
    monkeypatch.syspath_prepend(str(folder))
    yield folder
    importlib.invalidate_caches()
    for name in [m for m in sys.modules if m.startswith("vf_ep_")]:
        del sys.modules[name]


def test_entry_points_find_a_module_named_otherwise(site: Path) -> None:
    (site / "vf_ep_impl.py").write_text(FACTORY)
    _write_dist(site, "ep-env", "1.4.0", {"alice/ep-env": "vf_ep_impl:make", "ep-env": "vf_ep_impl:make"})
    source = env_loading.locate("alice/ep-env@1.4.0")
    assert (source.kind, source.target, source.version) == ("entry_point", "vf_ep_impl:make", "1.4.0")
    env = vf.load_environment("ep-env", rows=3)
    assert len(env.get_dataset()) == 3 and env.env_id == "ep-env" and env.env_version == "1.4.0"
    assert vf.load_environment("alice/ep-env@1.4.0").env_args == {}
    assert vf.load_environment("Alice/EP_Env").env_id == "EP_Env"  # names compare in PEP 503 form
    with pytest.raises(vf.EnvironmentNotFoundError, match=r"version 1\.4\.0 is installed"):
        vf.load_environment("alice/ep-env@2.0.0")
    # a pinned bare name is enforced too, and the error says how to get that version
    with pytest.raises(vf.EnvironmentNotFoundError, match=r"version 1\.4\.0 is installed\. Install version 2\.0\.0 .*"
                       r"pip install 'ep-env==2\.0\.0'.*vf install OWNER/ep-env@2\.0\.0"):
        vf.load_environment("ep-env@2.0.0")


def test_two_packages_claiming_one_id_is_an_error(site: Path) -> None:
    _write_dist(site, "first-env", "1.0", {"clash-env": "vf_ep_a:make"})
    _write_dist(site, "second-env", "1.0", {"clash-env": "vf_ep_b:make"})
    (site / "vf_ep_calm.py").write_text(FACTORY)
    _write_dist(site, "calm-env", "1.0", {"calm-env": "vf_ep_calm:make"})
    with pytest.raises(vf.EnvironmentNotFoundError, match="disagree about the environment 'clash-env'") as info:
        env_loading.locate("clash-env")
    assert "first-env (vf_ep_a:make)" in str(info.value) and "second-env (vf_ep_b:make)" in str(info.value)
    assert env_loading.locate("calm-env").target == "vf_ep_calm:make"  # other ids are unaffected


def test_paths_load_through_the_same_loader(tmp_path: Path) -> None:
    file = tmp_path / "vf_ep_file_env.py"
    file.write_text(FACTORY.replace("def make(", "def load_environment("))
    env = vf.load_environment(str(file), rows=1)
    assert env.env_id == "vf-ep-file-env" and len(env.get_dataset()) == 1
    folder = tmp_path / "pkg"
    (folder / "src").mkdir(parents=True)
    (folder / "src" / "vf_ep_folder_impl.py").write_text(FACTORY)
    (folder / "pyproject.toml").write_text(
        '[project]\nname = "folder-env"\nversion = "0.3.0"\n'
        '[project.entry-points."verifiers.environments"]\n"folder-env" = "vf_ep_folder_impl:make"\n'
    )
    source = env_loading.locate(folder)
    assert (source.kind, source.module, source.version, source.path) == ("folder", "vf_ep_folder_impl", "0.3.0", folder / "src")
    assert vf.load_environment(folder).env_id == "folder-env"
    with pytest.raises(vf.EnvironmentNotFoundError, match="does not exist"):
        vf.load_environment(str(tmp_path / "nowhere.py"))
    sys.modules.pop("vf_ep_file_env", None)
    sys.modules.pop("vf_ep_folder_impl", None)


def test_an_installer_makes_a_missing_hub_id_loadable(site: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[str] = []

    def installer(env_id: EnvId) -> None:  # what pip does: a module and its metadata appear
        asked.append(str(env_id))
        (site / "vf_ep_installed.py").write_text(FACTORY)
        _write_dist(site, "late-env", env_id.version or "1.0.0", {"bob/late-env": "vf_ep_installed:make"})

    monkeypatch.setattr(env_loading, "_INSTALLERS", [])
    env_loading.register_installer(installer)
    env_loading.register_installer(installer)  # idempotent
    env = vf.load_environment("bob/late-env@0.2.0", install=True, rows=1)
    assert asked == ["bob/late-env@0.2.0"] and env.env_version == "0.2.0" and len(env.get_dataset()) == 1


def test_ids_and_paths_share_one_grammar() -> None:
    from verifiers.ids import looks_like_path, module_name_for, parse_env_spec

    assert parse_env_spec("./x") == Path("x") and parse_env_spec("env.py") == Path("env.py")
    assert parse_env_spec("alice/wordle@latest") == EnvId("alice", "wordle", "latest")
    assert parse_env_id("alice/wordle@latest").pinned_version is None
    assert module_name_for("my.env") == module_name_for("my-env") == parse_env_id("a/my.env").module == "my_env"
    assert not looks_like_path("alice/wordle") and looks_like_path("a/b/c")
    for bad in ("", "a@", "@1", "/x@1", "a b"):
        with pytest.raises(ValueError):
            parse_env_id(bad)


# ----------------------------------------------------------------------------------- import graph
def _runtime_imports(root: Path, packages: tuple[str, ...] = ("verifiers",)) -> dict[str, set[str]]:
    """Module -> the modules of ``packages`` it imports anywhere (functions included, relative
    imports resolved, ``importlib.import_module("literal")`` counted), except under
    ``if TYPE_CHECKING:``. ``from pkg import name`` is an edge to ``pkg.name`` when that is a
    module, else to ``pkg``."""
    import ast

    modules = {}
    for package in packages:
        for path in (root / package).rglob("*.py"):
            rel = path.relative_to(root).with_suffix("")
            parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
            modules[".".join(parts)] = path
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        tree = ast.parse(path.read_text())
        skip = {
            id(n) for node in ast.walk(tree) if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
            for n in ast.walk(node)
        }
        edges: set[str] = set()
        for node in ast.walk(tree):
            if id(node) in skip:
                continue
            if isinstance(node, ast.Import):
                edges.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom):
                module = node.module
                if node.level:
                    base = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
                    base = base[: len(base) - (node.level - 1)]
                    module = ".".join([*base, *([module] if module else [])])
                if not module:
                    continue
                for alias in node.names:
                    full = f"{module}.{alias.name}"
                    edges.add(full if full in modules else module)
            elif (
                isinstance(node, ast.Call)
                and getattr(node.func, "attr", getattr(node.func, "id", None)) == "import_module"
                and node.args
                and isinstance(node.args[0], ast.Constant)
                and isinstance(node.args[0].value, str)
            ):
                edges.add(node.args[0].value)
        graph[name] = {e for e in edges if e in modules and e != name}
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (each holds an import cycle)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan's algorithm (the graph is a few hundred modules deep at most)
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_import_cycles_in_verifiers_or_hub() -> None:
    # Lazy (function-level) imports count: a cycle hidden in a function is still two modules that
    # cannot be understood, tested or moved apart.
    root = Path(__file__).resolve().parents[2]
    graph = _runtime_imports(root, ("verifiers", "hub"))
    assert {"verifiers.envs.environment", "hub.app"} <= set(graph)  # the walk saw both packages
    assert _cycles(graph) == []


def test_the_cycle_finder_finds_a_lazy_cycle(tmp_path: Path) -> None:
    pkg = tmp_path / "verifiers"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from verifiers import b\n")
    (pkg / "b.py").write_text("def f():\n    from . import a\n")
    (pkg / "c.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from verifiers import a\n")
    assert _cycles(_runtime_imports(tmp_path)) == [["verifiers.a", "verifiers.b"]]


def _reachable(graph: dict[str, set[str]], start: str) -> set[str]:
    seen, todo = set(), [start]
    while todo:
        for nxt in graph[todo.pop()]:
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return seen


def test_loader_and_hub_client_do_not_import_each_other() -> None:
    root = Path(__file__).resolve().parents[2]
    graph = _runtime_imports(root)
    assert graph["verifiers.ids"] == set(), "the id grammar is a leaf"
    from_loader = _reachable(graph, "verifiers.utils.env_loading")
    assert not {m for m in from_loader if m.startswith("verifiers.hub_client")}, from_loader
    assert "verifiers.utils.env_loading" in _reachable(graph, "verifiers.hub_client")  # the hook
    # No cycle through the loader, the grammar or any hub-client module.
    for name in graph:
        if name.startswith(("verifiers.hub_client", "verifiers.utils.env_loading", "verifiers.ids")):
            assert name not in _reachable(graph, name), f"{name} imports itself through a cycle"


def test_env_group_members_by_id_load_through_the_loader(site: Path, tmp_path: Path) -> None:
    (site / "vf_ep_member.py").write_text(FACTORY)
    _write_dist(site, "member-env", "0.5.0", {"member-env": "vf_ep_member:make"})
    file = tmp_path / "vf_ep_other_member.py"
    file.write_text(FACTORY.replace("def make(", "def load_environment("))
    group = vf.EnvGroup(["member-env", str(file)])
    assert group.env_names == ["member-env", "vf-ep-other-member"]
    assert group.env_map["member-env"].env_version == "0.5.0"
    assert len(group.get_dataset()) == 4
    with pytest.raises(TypeError, match="EnvGroup members are environments or environment ids, not int"):
        vf.EnvGroup([group.envs[0], 3])
    sys.modules.pop("vf_ep_other_member", None)


def test_the_verifiers_distribution_declares_the_hub_installer() -> None:
    import importlib
    import tomllib

    from verifiers.hub_client.hook import install_for_loader

    data = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())
    module, attr = env_loading.split_target(data["project"]["entry-points"][env_loading.INSTALLER_GROUP]["hub"])
    assert getattr(importlib.import_module(module), attr) is install_for_loader
