"""Generated code imports tensorwire.runtime only, and refuses to run on a runtime it was not written for."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import tensorwire.runtime as runtime
from tensorwire import __version__
from tensorwire.gen import check, generate
from tests.conftest import CLIP, write_schemas

GENERATED = Path(runtime.__file__).parent / "generated"


def test_the_checked_in_generated_code_imports_the_runtime_module_only() -> None:
    for path in sorted(GENERATED.glob("*.py")):
        imports = re.findall(r"^(?:from|import) (tensorwire[\w.]*)", path.read_text(), flags=re.M)
        assert set(imports) == {"tensorwire.runtime"}, (path.name, imports)


def test_require_accepts_the_surfaces_this_release_provides() -> None:
    for api in range(runtime.OLDEST_API, runtime.API + 1):
        runtime.require(api, runtime.SINCE)


def test_code_for_a_newer_runtime_says_what_to_install() -> None:
    with pytest.raises(ImportError) as caught:
        runtime.require(runtime.API + 1, "9.1.0")
    assert str(caught.value) == (
        f"this code was generated for tensorwire runtime API {runtime.API + 1} (tensorwire 9.1.0 and later); "
        f"this is tensorwire {__version__} (runtime API {runtime.API}): install tensorwire>=9.1.0, or "
        "re-run `tensorwire gen` with the installed version"
    )


def test_code_for_a_retired_runtime_says_to_regenerate() -> None:
    with pytest.raises(ImportError, match=r"runtime API 0 \(tensorwire 0\.0\.1\), which tensorwire .* no longer "):
        runtime.require(runtime.OLDEST_API - 1, "0.0.1")


def test_a_generated_package_for_a_newer_runtime_fails_at_import(tmp_path: Path) -> None:
    schemas = write_schemas(tmp_path / "schemas", {"audio/Clip.v1.json": CLIP})
    generate(schemas, tmp_path / "pkg" / "gen")
    (tmp_path / "pkg" / "__init__.py").write_text("")
    module = tmp_path / "pkg" / "gen" / "audio.py"
    text = module.read_text()
    assert f'require({runtime.API}, "{runtime.SINCE}")' in text
    module.write_text(text.replace(f'require({runtime.API}, "{runtime.SINCE}")', 'require(99, "42.0.0")'))
    out = subprocess.run(
        [sys.executable, "-c", "import pkg.gen.audio"], capture_output=True, text=True, cwd=tmp_path, check=False
    )
    assert out.returncode == 1
    assert "ImportError: this code was generated for tensorwire runtime API 99 (tensorwire 42.0.0 and later)" in (
        out.stderr
    )


def test_moving_the_schema_directory_is_not_drift(tmp_path: Path) -> None:
    first = write_schemas(tmp_path / "schemas", {"audio/Clip.v1.json": CLIP})
    generate(first, tmp_path / "out")
    moved = tmp_path / "elsewhere" / "contracts"
    shutil.copytree(first, moved)
    assert check(moved, tmp_path / "out") == ""
