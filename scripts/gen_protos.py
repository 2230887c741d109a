"""Generate the Python gRPC stubs from protos/ into engram_api/ (committed).

    python scripts/gen_protos.py          # regenerate in place
    python scripts/gen_protos.py --check  # regenerate into a temp dir and diff; exit 1 on drift
"""

from __future__ import annotations

import argparse
import filecmp
import sys
import tempfile
from pathlib import Path

from grpc_tools import protoc  # type: ignore[import-untyped]
import grpc_tools

ROOT = Path(__file__).resolve().parent.parent
PROTO_ROOT = ROOT / "protos"
PACKAGE = "engram_api"
INIT_TEXT = '"""Generated gRPC stubs (scripts/gen_protos.py). Do not edit."""\n'


def generate(out: Path) -> None:
    protos = sorted(str(p.relative_to(PROTO_ROOT)) for p in PROTO_ROOT.rglob("*.proto"))
    include = Path(grpc_tools.__file__).parent / "_proto"
    args = [
        "grpc_tools.protoc",
        f"-I{PROTO_ROOT}",
        f"-I{include}",
        f"--python_out={out}",
        f"--pyi_out={out}",
        f"--grpc_python_out={out}",
        *protos,
    ]
    if protoc.main(args) != 0:
        raise SystemExit("protoc failed")
    for directory in [out / PACKAGE, *(p for p in (out / PACKAGE).rglob("*") if p.is_dir())]:
        if directory.name == "__pycache__":
            continue
        (directory / "__init__.py").write_text(INIT_TEXT)


def tree(root: Path) -> dict[str, Path]:
    return {
        str(p.relative_to(root)): p
        for p in (root / PACKAGE).rglob("*")
        if p.is_file() and "__pycache__" not in p.parts
    }


def check() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        generate(Path(tmp))
        fresh, committed = tree(Path(tmp)), tree(ROOT)
        drift = sorted(set(fresh) ^ set(committed))
        drift += sorted(
            name for name in set(fresh) & set(committed)
            if not filecmp.cmp(fresh[name], committed[name], shallow=False)
        )
    if drift:
        print("generated stubs are stale; run: python scripts/gen_protos.py", file=sys.stderr)
        for name in drift:
            print(f"  {name}", file=sys.stderr)
        return 1
    print(f"stubs fresh: {len(fresh)} files under {PACKAGE}/")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--check", action="store_true", help="fail if committed stubs differ")
    opts = parser.parse_args()
    if opts.check:
        return check()
    generate(ROOT)
    print(f"generated {len(tree(ROOT))} files under {PACKAGE}/")
    return 0


if __name__ == "__main__":
    sys.exit(main())
