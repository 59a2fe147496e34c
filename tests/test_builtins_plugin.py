"""The built-in types as a plug-in of the core: ``tensorwire.builtins`` uses the public API only, the
core never imports it, and its validators come through the ``tensorwire.validators`` entry-point
group as any distribution's may (tested with one installed from a temporary directory)."""

from __future__ import annotations

import ast
import copy
import json
import subprocess
import sys
import textwrap
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest

import tensorwire.builtins
from tensorwire.rules import VALIDATOR_ENTRY_POINTS
from tests.conftest import CLIP, REPO, run_in, write_schemas
from tests.interrupts import InterruptedAcquire, free_elsewhere

CODEC = REPO / "codec"


def _imports(path: Path) -> set[str]:
    """Every module ``path`` imports (``from X import y`` gives X and X.y)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


def test_no_core_module_imports_the_built_ins() -> None:
    # the command line (its schema commands record the built-ins' golden cases) and the ZeroMQ layer
    # (its RPC speaks the built-in rpc envelopes) sit above them
    above = [p for p in CODEC.rglob("*.py") if p.name in ("cli.py", "_schema_commands.py") or "zmq" in p.parts]
    above_names = {p.relative_to(CODEC).as_posix() for p in above}
    assert {"cli.py", "_schema_commands.py", "zmq/__init__.py", "zmq/_rpc.py"} <= above_names  # the glob finds them
    core = [p for p in CODEC.rglob("*.py") if "builtins" not in p.parts and p not in above]
    assert len(core) > 30
    offenders = {p.relative_to(CODEC).as_posix() for p in core if any("builtins" in m for m in _imports(p))}
    assert offenders == set()


def test_the_built_ins_import_only_public_modules_and_names() -> None:
    modules = sorted((CODEC / "builtins").glob("*.py"))
    assert [p.stem for p in modules] == [
        "__init__",
        "demo",
        "diffusion",
        "golden",
        "media",
        "registry",
        "rpc",
        "rpc_demo",
        "validators",
    ]
    for path in modules:
        for name in _imports(path):
            if name.startswith("tensorwire") and not name.startswith("tensorwire.builtins"):
                assert not any(part.startswith("_") for part in name.split(".")), (path.name, name)


def test_importing_the_built_ins_needs_no_torch() -> None:
    script = (
        "import json, sys, tensorwire.builtins as b\n"
        "before = 'torch' in sys.modules\n"
        "names = sorted(b.__all__)\n"
        "from tensorwire.builtins import REGISTRY, media\n"
        "print(json.dumps([before, names, str(b.SCHEMA_DIR.name), len(REGISTRY.infos()), media.__name__]))\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False)
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads(out.stdout) == [
        False,
        ["REGISTRY", "SCHEMA_DIR", "diffusion", "media", "rpc"],
        "schemas",
        9,
        "tensorwire.builtins.media",
    ]


def test_tw_builtins_is_the_plug_in_imported_when_first_named() -> None:
    script = (
        "import json, sys, tensorwire as tw\n"
        "before = 'tensorwire.builtins' in sys.modules\n"
        "listed = 'builtins' in dir(tw)\n"
        "video = tw.builtins.REGISTRY.type('media.Video').__name__\n"
        "same = tw.builtins is sys.modules['tensorwire.builtins']\n"
        "print(json.dumps([before, listed, video, same, 'builtins' in dir(tw), 'builtins' in tw.__all__]))\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False)
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads(out.stdout) == [False, False, "Video", True, True, False]


def test_the_lazy_names_are_the_generated_modules_own() -> None:
    from tensorwire.builtins import registry

    assert tensorwire.builtins.REGISTRY is registry.REGISTRY
    assert tensorwire.builtins.media is sys.modules["tensorwire.builtins.media"]
    with pytest.raises(AttributeError, match=r"module 'tensorwire.builtins' has no attribute 'video'"):
        _ = tensorwire.builtins.video
    assert sorted((tensorwire.builtins.SCHEMA_DIR / "media").glob("*.json"))


def test_the_built_in_validators_are_an_entry_point_of_the_distribution() -> None:
    entries = {e.name: e.value for e in metadata.entry_points(group=VALIDATOR_ENTRY_POINTS)}
    assert entries == {"builtins": "tensorwire.builtins.validators"}


PLUGIN = textwrap.dedent(
    '''
    """Validators of namespace audio, registered when imported."""
    import tensorwire as tw
    from tensorwire.rules import violation

    @tw.register_validator("audio.rate_limit")
    def rate_limit(clip):
        if clip.sample_rate > 96_000:
            raise violation("audio.Clip", "RATE_TOO_HIGH", f"{clip.sample_rate} Hz")
    '''
)
USE = textwrap.dedent(
    """
    import json, sys, torch
    import tensorwire as tw

    try:
        reg = tw.load_schemas(sys.argv[1])
    except ValueError as exc:
        print(json.dumps({"error": str(exc)}))
        sys.exit(0)
    Clip = reg.type("audio.Clip")
    ok = Clip(samples=torch.zeros(1, 4), sample_rate=48_000, window=(0, 4)).sample_rate
    try:
        Clip(samples=torch.zeros(1, 4), sample_rate=192_000, window=(0, 4))
    except tw.ValidationError as exc:
        print(json.dumps({"ok": ok, "refused": str(exc)}))
    """
)


def _install_and_use(tmp_path: Path, entry: str) -> dict[str, Any]:
    site = _fake_distribution(tmp_path, "audio_rules", PLUGIN, entry)
    doc = copy.deepcopy(CLIP)
    doc["x-validators"] = ["audio.rate_limit"]
    schemas = write_schemas(tmp_path / "schemas", {"audio/Clip.v1.json": doc})
    return run_in(site, USE, str(schemas))


def _fake_distribution(tmp_path: Path, module: str, source: str, entry: str) -> Path:
    """A site directory holding ``module`` (``source``) and a distribution whose
    ``tensorwire.validators`` entry point is ``entry``."""
    site = tmp_path / "site"
    site.mkdir()
    (site / f"{module}.py").write_text(source)
    info = site / f"{module}-1.0.dist-info"
    info.mkdir()
    name = module.replace("_", "-")
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(f"[tensorwire.validators]\n{entry}\n")
    (info / "RECORD").write_text("")
    return site


def test_a_distribution_s_validators_are_found_by_a_schema_that_names_them(tmp_path: Path) -> None:
    found = _install_and_use(tmp_path, "audio = audio_rules")
    assert found == {"ok": 48_000, "refused": "audio.Clip: rule RATE_TOO_HIGH: 192000 Hz"}


def test_a_validator_plug_in_that_fails_to_import_is_named(tmp_path: Path) -> None:
    found = _install_and_use(tmp_path, "audio = audio_rules_missing")
    assert found["error"].startswith(
        "entry point 'audio' (audio_rules_missing) of group 'tensorwire.validators' failed to load: "
        "ModuleNotFoundError: No module named 'audio_rules_missing'"
    ), found


SLOW_PLUGIN = textwrap.dedent(
    '''
    """A plug-in that takes a while to import, then registers its validator."""
    import time

    import tensorwire as tw

    time.sleep(1.0)

    @tw.register_validator("audio.slow_rule")
    def slow_rule(clip):
        pass
    '''
)
RACE = textwrap.dedent(
    """
    import json, threading, time
    from tensorwire.rules import known_validators, validator

    loading = threading.Thread(target=known_validators)  # the first use: it loads the plug-ins
    loading.start()
    time.sleep(0.3)  # while the plug-in imports
    found = validator("audio.slow_rule")
    loading.join()
    print(json.dumps({"found": found is not None, "known": "audio.slow_rule" in known_validators()}))
    """
)


def test_a_lookup_while_another_thread_loads_the_plug_ins_waits_for_them(tmp_path: Path) -> None:
    """Two threads of a server use validators first at once: the one that does not load the
    plug-ins finds theirs (it missed them, and a message was refused: no validator named ...)."""
    site = _fake_distribution(tmp_path, "slow_rules", SLOW_PLUGIN, "slow = slow_rules")
    assert run_in(site, RACE) == {"found": True, "known": True}


def test_a_lookup_waits_for_another_threads_plugin_load_only_so_long(monkeypatch: pytest.MonkeyPatch) -> None:
    """A thread that loads the plug-ins may itself wait for a module the looking-up thread is
    importing; the lookup then goes on without them after ``PLUGIN_WAIT`` instead of waiting forever."""
    import threading
    import time

    from tensorwire import rules

    monkeypatch.setattr(rules, "_loaded", False)
    monkeypatch.setattr(rules, "PLUGIN_WAIT", 0.2)
    held, done = threading.Event(), threading.Event()

    def loading() -> None:  # holds the load, as a thread stuck importing would
        with rules._LOADING:
            held.set()
            done.wait(10)

    loader = threading.Thread(target=loading, daemon=True)
    loader.start()
    try:
        assert held.wait(10)
        began = time.monotonic()
        assert rules.validator("no.such_rule") is None
        assert 0.15 < time.monotonic() - began < 5
    finally:
        done.set()
        loader.join(10)


def test_an_interrupt_landing_as_a_lookup_took_the_plug_in_lock_lets_go_of_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """As ``acquire()`` returned, before the load's ``try``: the lock stayed held, so the plug-ins
    never loaded and every later lookup waited ``PLUGIN_WAIT`` for nothing."""
    from tensorwire import rules

    lock = rules._LOADING
    monkeypatch.setattr(rules, "_loaded", False)
    monkeypatch.setattr(rules, "_LOADING", InterruptedAcquire(lock))
    with pytest.raises(KeyboardInterrupt):
        rules.validator("no.such_rule")
    assert free_elsewhere(lock)
    assert rules.validator("no.such_rule") is None
    assert rules._loaded
