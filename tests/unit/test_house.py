"""One source of truth for shared vocabulary: label keys, squashfs compressor ids, targets, the --json protocol."""

from __future__ import annotations

import ast
from pathlib import Path

import buildkit
from buildkit.image import convert, inspect
from buildkit.image.squashfs import codec, reuse, writer
from buildkit.orchestration import build

SOURCE = Path(buildkit.__file__).parent


def _modules() -> list[tuple[Path, ast.Module]]:
    return [(path, ast.parse(path.read_text())) for path in sorted(SOURCE.rglob("*.py"))]


def _docstrings(tree: ast.Module) -> set[int]:
    """ids of the string constants that are docstrings (or other bare string statements)."""
    return {id(node.value) for node in ast.walk(tree) if isinstance(node, ast.Expr)
            and isinstance(node.value, ast.Constant)}


def test_label_keys_are_spelled_only_in_oci_labels() -> None:
    # apptainer's own labels (labels.json of a .sif) mirror apptainer byte for byte and stay with its rootfs files
    allowed = {SOURCE / "oci" / "labels.py", SOURCE / "image" / "rootfs" / "apptainer.py"}
    found = []
    for path, tree in _modules():
        docs = _docstrings(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs \
                    and node.value.startswith(("io.ckit.", "org.opencontainers.image.")) and path not in allowed:
                found.append(f"{path.relative_to(SOURCE)}:{node.lineno} {node.value}")
    assert not found, "use buildkit.oci.labels: " + ", ".join(found)


def test_results_speak_one_json_protocol() -> None:
    """``--json`` prints a result object's ``as_json()``; no second spelling of the same thing."""
    others = [f"{path.relative_to(SOURCE)}:{node.lineno}" for path, tree in _modules() for node in ast.walk(tree)
              if isinstance(node, ast.FunctionDef) and node.name in ("to_dict", "to_json", "asdict")]
    assert not others


def test_squashfs_compressor_ids_are_one_map_and_its_inverse() -> None:
    assert {name: number for number, name in codec.COMPRESSORS.items()} == codec.COMPRESSOR_IDS
    assert writer.COMPRESSOR_IDS is codec.COMPRESSOR_IDS is reuse.COMPRESSOR_IDS
    assert inspect.COMPRESSORS is codec.COMPRESSORS
    assert codec.COMPRESSOR_IDS["zstd"] == 6 and codec.COMPRESSORS[1] == "gzip"  # squashfs_fs.h


def test_build_targets_are_the_image_and_the_conversion_targets() -> None:
    assert build.TARGETS == ("image", *convert.TARGETS) == ("image", "sif", "sqsh")


def test_modules_and_functions_stay_short() -> None:
    """The house's sizes: a module at most 400 lines, a function's body at most 60 (a typer command's
    signature is its flags' declarations, so the body is what counts), in the package and in its tests."""
    roots = (SOURCE, Path(__file__).parents[1])
    long_modules, long_functions = [], []
    for path in sorted(p for root in roots for p in root.rglob("*.py")):
        text = path.read_text()
        if text.count("\n") > 400:
            long_modules.append(f"{path.name}: {text.count(chr(10))} lines")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                length = (node.end_lineno or node.lineno) - node.body[0].lineno + 1
                if length > 60:
                    long_functions.append(f"{path.name}:{node.lineno} {node.name}: {length} lines")
    assert not long_modules and not long_functions, long_modules + long_functions
