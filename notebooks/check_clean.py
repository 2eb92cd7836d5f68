#!/usr/bin/env python3
"""Checks that the committed notebooks carry no outputs, execution counts or execution timings
(ctest notebooks.clean). Outputs belong to the executed copies under build/<preset>/notebooks/,
never to the repository: they bloat diffs and go stale. Standard library only.
Usage: check_clean.py [--fix] [NOTEBOOK ...]   (default: every notebooks/*.ipynb)"""
import json
import sys
from pathlib import Path


def problems(nb):
    """What in `nb` (a parsed notebook) records an execution: outputs, counts, timings."""
    found = []
    for i, cell in enumerate(nb.get("cells", [])):
        if cell.get("cell_type") != "code":
            continue
        if cell.get("outputs"):
            found.append(f"cell {i} has {len(cell['outputs'])} output(s)")
        if cell.get("execution_count") is not None:
            found.append(f"cell {i} has execution_count {cell['execution_count']}")
        if "execution" in cell.get("metadata", {}):
            found.append(f"cell {i} has execution timings in its metadata")
    return found


def clean(nb):
    """Clears every code cell's outputs, execution count and timings in place."""
    for cell in nb.get("cells", []):
        if cell.get("cell_type") == "code":
            cell["outputs"] = []
            cell["execution_count"] = None
            cell.get("metadata", {}).pop("execution", None)


def main(argv):
    fix = "--fix" in argv
    paths = [Path(a) for a in argv if a != "--fix"] or sorted(Path(__file__).parent.glob("*.ipynb"))
    if not paths:
        print("check_clean: expected notebooks in notebooks/, found none", file=sys.stderr)
        return 1
    dirty = 0
    for path in paths:
        nb = json.loads(path.read_text(encoding="utf-8"))
        found = problems(nb)
        if found and fix:
            clean(nb)
            path.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
            print(f"check_clean: cleared {path}")
        elif found:
            dirty += 1
            print(f"check_clean: {path}: expected no outputs and no execution counts, found "
                  f"{'; '.join(found)}", file=sys.stderr)
    if dirty:
        print("check_clean: fix: notebooks/check_clean.py --fix (or Jupyter's 'Clear All Outputs' "
              "before saving); the executed copies live in build/default/notebooks/",
              file=sys.stderr)
        return 1
    print(f"check_clean: {len(paths)} notebooks, no outputs, no execution counts")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
