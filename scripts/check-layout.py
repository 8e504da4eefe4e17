#!/usr/bin/env python3
"""The README's "Repository layout" table names every crate and top-level directory.

A newcomer finds their way by that table, so a crate added to the workspace (the `members`
of the root Cargo.toml) or a top-level directory git tracks (hidden ones aside) without a row
there is a part of the repository nobody is told about. This fails naming each one missing,
and each row whose directory no longer exists. Fast, no dependencies; `make lint` runs it.

Usage: check-layout.py [REPO_ROOT]
"""

import pathlib
import re
import subprocess
import sys
import tomllib

SECTION = "## Repository layout"
# A table row whose first cell is one top-level directory in backticks: | `filter-wasm/` | …
ROW = re.compile(r"^\|\s*`([^`/]+)/`\s*\|")


def layout_rows(readme: str) -> set[str]:
    """The directories the layout table's rows name (its first column)."""
    lines = readme.splitlines()
    try:
        start = lines.index(SECTION) + 1
    except ValueError:
        sys.exit(f"README.md has no '{SECTION}' section")
    rows = set()
    for line in lines[start:]:
        if line.startswith("## "):
            break
        if match := ROW.match(line):
            rows.add(match.group(1))
    return rows


def top_level_dirs(root: pathlib.Path) -> set[str]:
    """Top-level directories holding a file git tracks or would track, hidden ones aside."""
    files = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
        cwd=root,
        check=True,
        capture_output=True,
        text=True,
    ).stdout.splitlines()
    return {f.split("/", 1)[0] for f in files if "/" in f and not f.startswith(".")}


def main() -> int:
    root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else ".").resolve()
    rows = layout_rows((root / "README.md").read_text())
    with open(root / "Cargo.toml", "rb") as manifest:
        members = set(tomllib.load(manifest)["workspace"]["members"])
    dirs = top_level_dirs(root)

    problems = [
        f"README.md, Repository layout: no row for the workspace member `{m}/` (Cargo.toml)"
        for m in sorted(members - rows)
    ]
    problems += [
        f"README.md, Repository layout: no row for the top-level directory `{d}/`"
        for d in sorted(dirs - rows - members)
    ]
    problems += [
        f"README.md, Repository layout: the row `{r}/` names no directory"
        for r in sorted(rows - dirs - members)
        if not (root / r).is_dir()
    ]
    for problem in problems:
        print(problem, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
