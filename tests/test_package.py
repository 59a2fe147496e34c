"""The installed package: one namespace, ``tensorwire``, and the public surface its ``__all__`` says."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

import tensorwire as tw

TOP_LEVEL = {
    "__version__",
    "DTYPES",
    "DTYPE_NAMES",
    "CodecError",
    "CompatError",
    "DecodeError",
    "DecodeOptions",
    "Decoder",
    "EncodeOptions",
    "Encoder",
    "EncodeError",
    "Limits",
    "Registry",
    "SchemaError",
    "TransportError",
    "TypeInfo",
    "UnknownTypeError",
    "ValidationError",
    "join",
    "load_schemas",
    "register_validator",
    "split",
    "transports",
}
TRANSPORTS = {
    "ENTRY_POINTS",
    "CudaCallError",
    "CudaRuntime",
    "CudaShmTransport",
    "Handle",
    "InlineHandle",
    "InlineTransport",
    "QueueHandle",
    "QueueTransport",
    "SHM_DIR",
    "Segment",
    "ShmHandle",
    "ShmTransport",
    "SlotHandle",
    "TorchCudaRuntime",
    "Transport",
    "available",
    "by_name",
    "held_memfds",
    "list_segments",
    "our_segments",
    "reap",
}


def test_the_top_level_surface_is_what_all_says() -> None:
    assert set(tw.__all__) == TOP_LEVEL
    for name in tw.__all__:
        assert getattr(tw, name) is not None, name
    assert tw.transports.ShmTransport is importlib.import_module("tensorwire.transports.shm").ShmTransport


def test_dir_lists_the_public_surface_and_public_submodules_only() -> None:
    listed = set(dir(tw))
    assert TOP_LEVEL <= listed
    assert {"errors", "options", "registry"} <= listed  # submodules the package imports itself
    assert not listed & {"os", "importlib", "Any", "TYPE_CHECKING", "annotations", "ModuleType", "_version", "_wire"}
    for name in listed - TOP_LEVEL:
        assert importlib.import_module(f"tensorwire.{name}") is getattr(tw, name), name


def test_the_transports_surface_is_what_all_says() -> None:
    assert set(tw.transports.__all__) == TRANSPORTS
    for name in tw.transports.__all__:
        assert getattr(tw.transports, name) is not None, name


def test_version_is_the_distribution_s() -> None:
    from importlib.metadata import version

    assert tw.__version__ == version("tensorwire")
    out = subprocess.run(
        [sys.executable, "-m", "tensorwire.cli", "--version"], capture_output=True, text=True, check=False
    )
    assert out.returncode == 0 and out.stdout.strip() == f"tensorwire {tw.__version__}", out


def test_outside_the_repository_only_tensorwire_is_importable() -> None:
    script = (
        "import importlib.util, json, tensorwire, tensorwire.transports\n"
        "print(json.dumps({n: importlib.util.find_spec(n) is not None for n in ('codec', 'transports')}))\n"
        "print(tensorwire.__file__)\n"
    )
    with tempfile.TemporaryDirectory() as cwd:
        out = subprocess.run(
            [sys.executable, "-c", script], capture_output=True, text=True, cwd=cwd, env={"PATH": ""}, check=False
        )
    assert out.returncode == 0, out.stderr
    found, path = out.stdout.strip().splitlines()
    assert found == '{"codec": false, "transports": false}'
    assert Path(path).name == "__init__.py" and Path(path).parent.name == "tensorwire"


PUBLIC_MODULES = {
    "tensorwire",
    *(f"tensorwire.{m}" for m in ("cli", "config", "dtypes", "errors", "golden", "inspection", "options", "pipe")),
    *(f"tensorwire.{m}" for m in ("lint", "placement", "registry", "rules", "runtime")),
    "tensorwire.builtins",
    *(f"tensorwire.builtins.{m}" for m in ("demo", "diffusion", "golden", "media", "registry", "rpc")),
    *(f"tensorwire.builtins.{m}" for m in ("rpc_demo", "validators")),
    "tensorwire.compat",
    "tensorwire.gen",
    "tensorwire.schema",
    "tensorwire.schema.ir",
    "tensorwire.transports",
    *(f"tensorwire.transports.{m}" for m in ("base", "cuda_runtime", "cuda_shm", "inline", "shm", "torch_queue")),
    "tensorwire.zmq",
}
"""Every module a user may import; the others have a leading underscore in their name or a folder's."""


def _modules() -> list[str]:
    import pkgutil

    return ["tensorwire", *(m.name for m in pkgutil.walk_packages(tw.__path__, prefix="tensorwire."))]


def test_the_public_modules_are_those_without_a_leading_underscore() -> None:
    names = _modules()
    public = {n for n in names if not any(part.startswith("_") for part in n.split("."))}
    assert public == PUBLIC_MODULES
    private = sorted(set(names) - public)
    assert "tensorwire._encoder" in private and "tensorwire.transports._pool" in private
    assert "tensorwire.schema._build" in private and len(private) >= 20


@pytest.mark.parametrize("module", sorted(PUBLIC_MODULES))
def test_each_public_module_names_what_it_exports(module: str) -> None:
    loaded = importlib.import_module(module)
    exported = getattr(loaded, "__all__", None)
    assert exported is not None, f"{module} has no __all__"
    assert len(set(exported)) == len(exported), f"{module}.__all__ repeats a name"
    for name in exported:
        assert hasattr(loaded, name), (module, name)
        assert not name.startswith("_") or name == "__version__", (module, name)


def test_no_module_of_the_package_takes_a_standard_library_name() -> None:
    import pkgutil

    names = [m.name for m in pkgutil.walk_packages(tw.__path__, prefix="tensorwire.")]
    assert "tensorwire.transports.shm" in names and "tensorwire.gen._source" in names
    # a module compiled into the interpreter (``builtins``, ``sys``) is found before any file, so a
    # folder of that name shadows nothing: tensorwire.builtins is the built-in types' package
    shadowing = sys.stdlib_module_names - set(sys.builtin_module_names)
    clashing = [n for n in names if n.rsplit(".", 1)[-1] in shadowing]
    assert clashing == []
    assert "tensorwire.builtins" in names and "builtins" in sys.builtin_module_names


def test_the_installed_built_in_schemas_are_the_repository_s() -> None:
    from tensorwire.builtins import SCHEMA_DIR as installed
    from tests.conftest import BUILTIN_SCHEMAS

    ours = sorted(p.relative_to(BUILTIN_SCHEMAS) for p in BUILTIN_SCHEMAS.rglob("*.json"))
    theirs = sorted(p.relative_to(installed) for p in installed.rglob("*.json"))
    assert theirs == ours and len(ours) == 10
    assert all((installed / p).read_bytes() == (BUILTIN_SCHEMAS / p).read_bytes() for p in ours)


def test_every_built_in_namespace_folder_is_a_package_of_the_distribution() -> None:
    import tomllib

    from tests.conftest import REPO

    config = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    folders = sorted(p.name for p in (REPO / "schemas").iterdir() if p.is_dir())
    listed = sorted(p.split(".")[-1] for p in config["packages"] if p.startswith("tensorwire.builtins.schemas."))
    assert listed == folders
    data = config["package-data"]
    assert all(data[f"tensorwire.builtins.schemas.{name}"] == ["*.json"] for name in folders)


def test_the_built_in_types_built_from_the_installed_schemas_match_the_generated_ones() -> None:
    from tensorwire.builtins import REGISTRY, SCHEMA_DIR

    assert tw.load_schemas(SCHEMA_DIR).infos() == REGISTRY.infos()


def test_the_dependency_floors_are_the_releases_make_floor_tests() -> None:
    import re
    import tomllib

    from tests.conftest import REPO

    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    floors = dict(d.split(">=") for d in [*project["dependencies"], *project["optional-dependencies"]["zmq"]])
    pinned = re.findall(r"^FLOOR_PINS := (.*)$", (REPO / "Makefile").read_text(), re.M)
    pins = dict(p.split("==") for p in pinned[0].split())
    assert floors == pins and set(floors) == {"torch", "numpy", "msgspec", "jsonschema", "pyzmq"}
    assert project["requires-python"] == ">=3.11"  # the Python of `make test` and `make floor`
    assert "make floor" in (REPO / ".ci" / "run").read_text()


def test_the_pythons_named_are_the_ones_ci_tests() -> None:
    """The classifiers name 3.11 (`make test`, `make floor`) and the releases `make pythons`
    checks by default, no more; CI runs `make pythons`."""
    import tomllib

    from tests.conftest import REPO
    from tools.other_pythons import VERSIONS

    classifiers = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["classifiers"]
    named = {c.rsplit(" :: ", 1)[1] for c in classifiers if c.startswith("Programming Language :: Python :: 3.")}
    assert named == {"3.11", *VERSIONS}
    assert "make pythons" in (REPO / ".ci" / "run").read_text()
    assert "\npythons: $(STAMP)\n\t$(PY) -m tools.other_pythons\n" in (REPO / "Makefile").read_text()


@pytest.mark.skipif(os.environ.get("TENSORWIRE_PURE_PYTHON") == "1", reason="switched off in this run")
def test_the_compiled_paths_are_built_and_taken_here() -> None:
    """The package builds them where a compiler is found (as here): a build that failed, which the
    install lets pass (the extension is optional), fails this."""
    from tensorwire._native import SPEEDUPS

    assert SPEEDUPS is not None  # (not under test_speedups.py's skip where it is not built)
    assert tw.Encoder()._native is not None and tw.Decoder(tw.builtins.REGISTRY)._native is not None
