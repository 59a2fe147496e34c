"""Build the wheel and use it as a user would, from outside the repository.

    python -m tools.wheel_smoke [--keep]

Copies the tracked tree to a temporary directory, builds the wheel there (``pip wheel``, build
isolation on), installs it with ``--no-deps`` into a directory of its own and runs, with this
interpreter (whose torch, numpy, msgspec and jsonschema it uses) and that directory first on the
path, from a directory outside the repository:

- ``import tensorwire as tw``: the package comes from the wheel, with its compiled shorter paths
  (``tensorwire._speedups``), and neither ``codec`` nor ``transports`` can be imported;
  ``tw.__version__`` is the wheel's;
- ``tensorwire --version``, ``tensorwire schemas``, ``tensorwire demo`` (a spawned producer sends a
  diffusion result through shared memory);
- ``tensorwire gen`` of a small schema into a user package, mypy (strict) over a user script that
  imports it and ``tensorwire`` (found through the wheel's directory), and that package's message
  encoded in one process and decoded in a spawned one through the shared-memory pool.

Prints one line per step; exits 1 at the first failure.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

from tools.tracked import tracked_copy

__all__ = ["main"]

SCHEMA = {
    "$id": "shop.Order",
    "x-version": 1,
    "type": "object",
    "properties": {
        "order_id": {"type": "string"},
        "quantity": {"type": "integer", "minimum": 1},
        "image": {"x-tensor": {"dtypes": ["uint8"], "shape": [None, None, 3]}},
    },
    "required": ["order_id", "quantity", "image"],
}
USER_SCRIPT = textwrap.dedent(
    """
    from __future__ import annotations

    import multiprocessing as mp
    import sys
    from multiprocessing.connection import Connection

    import torch

    import tensorwire as tw
    from shop_pkg.generated import REGISTRY, shop


    def receive(conn: Connection) -> None:
        transport = tw.transports.ShmTransport()
        message = tw.Decoder(REGISTRY, transports=[transport]).decode(tw.split(conn.recv_bytes()))
        conn.send((message.order_id, message.quantity, int(message.image.sum())))


    def main() -> int:
        order = shop.Order(order_id="o-1", quantity=2, image=torch.full((64, 64, 3), 7, dtype=torch.uint8))
        transport = tw.transports.ShmTransport()
        frames = tw.Encoder(transport=transport, options=tw.EncodeOptions(inline_threshold=1)).encode(order)
        parent, child = mp.get_context("spawn").Pipe()
        proc = mp.get_context("spawn").Process(target=receive, args=(child,))
        proc.start()
        parent.send_bytes(tw.join(frames))
        got = parent.recv()
        proc.join(60)
        transport.close()
        expected = ("o-1", 2, 7 * 64 * 64 * 3)
        print("decoded in a spawned process:", got)
        return 0 if tuple(got) == expected and proc.exitcode == 0 else 1


    if __name__ == "__main__":
        sys.exit(main())
    """
)


WRONG_SCRIPT = (
    "from shop_pkg.generated import shop\n\n\ndef order_id(order: shop.Order) -> int:\n    return order.order_id\n"
)
WRONG_TYPE = 'Incompatible return value type (got "str", expected "int")'


def _run(step: str, args: list[str], cwd: Path, env: dict[str, str], timeout: int = 300) -> str:
    result = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False)
    if result.returncode != 0:
        print(f"FAIL {step}: exit {result.returncode}\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}")
        raise SystemExit(1)
    print(f"ok   {step}")
    return result.stdout


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Build the wheel and use it from outside the repository.")
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory and print its path")
    args = parser.parse_args(argv)
    root = Path(tempfile.mkdtemp(prefix="tw-wheel-smoke-"))
    try:
        source, dist, site, user = root / "source", root / "dist", root / "site", root / "user"
        tracked_copy(source)
        base_env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "MYPYPATH")}
        python = [sys.executable]
        _run(
            "build the wheel",
            [*python, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(dist), str(source)],
            root,
            base_env,
        )
        wheel = next(dist.glob("tensorwire-*.whl"))
        _run(
            "install it alone",
            [*python, "-m", "pip", "install", "-q", "--no-deps", "--target", str(site), str(wheel)],
            root,
            base_env,
        )
        user.mkdir()
        env = {**base_env, "PYTHONPATH": os.pathsep.join([str(site), str(user)])}
        probe = (
            "import importlib.util, json, tensorwire as tw, tensorwire._native\n"
            "print(json.dumps({'file': tw.__file__, 'version': tw.__version__,"
            " 'speedups': tw._native.SPEEDUPS is not None,"
            " 'codec': importlib.util.find_spec('codec') is not None,"
            " 'transports': importlib.util.find_spec('transports') is not None}))"
        )
        found = json.loads(_run("import tensorwire", [*python, "-c", probe], user, env))
        if not found["file"].startswith(str(site)) or found["codec"] or found["transports"]:
            print(f"FAIL the wheel's package is not the one imported, or a bare name is importable: {found}")
            return 1
        if not found["speedups"]:  # built with a compiler at hand (as here), the wheel holds them
            print(f"FAIL the wheel's compiled shorter paths (tensorwire._speedups) are not there: {found}")
            return 1
        cli = [*python, "-c", "import sys; from tensorwire.cli import main; sys.exit(main())"]
        shown = _run("tensorwire --version", [*cli, "--version"], user, env).strip()
        if shown != f"tensorwire {found['version']}" or not wheel.name.startswith(f"tensorwire-{found['version']}-"):
            print(f"FAIL version: {shown!r}, wheel {wheel.name}")
            return 1
        _run("tensorwire schemas", [*cli, "schemas"], user, env)
        same = (
            "import tensorwire as tw\nfrom tensorwire.builtins import REGISTRY, SCHEMA_DIR\n"
            "assert tw.load_schemas(SCHEMA_DIR).infos() == REGISTRY.infos()"
        )
        _run("the built-in schemas load from the wheel", [*python, "-c", same], user, env)
        _run("tensorwire demo", [*cli, "demo"], user, env)
        schemas = user / "schemas" / "shop"
        schemas.mkdir(parents=True)
        (schemas / "Order.v1.json").write_text(json.dumps(SCHEMA, indent=2))
        (user / "shop_pkg").mkdir()
        (user / "shop_pkg" / "__init__.py").write_text("")
        _run("tensorwire gen", [*cli, "gen", "schemas", "-o", "shop_pkg/generated"], user, env)
        if (user / "codec").exists():
            print("FAIL gen created a codec directory")
            return 1
        (user / "use_order.py").write_text(USER_SCRIPT)
        mypy_env = {**env, "MYPYPATH": str(site)}
        mypy = [*python, "-m", "mypy", "--strict", "--no-incremental"]
        _run("mypy --strict over the user's code", [*mypy, "use_order.py"], user, mypy_env)
        (user / "wrong_order.py").write_text(WRONG_SCRIPT)
        wrong = subprocess.run(
            [*mypy, "wrong_order.py"], cwd=user, env=mypy_env, capture_output=True, text=True, check=False
        )
        if wrong.returncode != 1 or WRONG_TYPE not in wrong.stdout:
            print(f"FAIL mypy did not read the generated types: {wrong.stdout[-2000:]}")
            return 1
        print("ok   mypy rejects a wrong use of a generated type")
        _run("encode here, decode in a spawned process", [*python, "use_order.py"], user, env)
        return 0
    finally:
        if args.keep:
            print(f"kept {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
