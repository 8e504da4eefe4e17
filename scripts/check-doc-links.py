#!/usr/bin/env python3
"""Every design citation in the repository resolves, and none points where a newcomer cannot go.

Code comments, scripts and manifests cite the design as `docs/<page>.md#<section>`; Markdown
files link to each other with relative paths. A citation whose page or section does not exist
sends the reader nowhere, so this checks, over every file git tracks (or would track):

* each `docs/<page>.md` and `docs/<page>.md#<anchor>` mentioned anywhere names a page that
  exists and, with an anchor, a heading on that page;
* each relative Markdown link `[text](path.md#anchor)` in a `.md` file resolves the same way
  (paths relative to the file; `#anchor` alone is a heading of the file itself);
* each repository path a `.md` file names in backticks (`filter/src/machine/driver.rs`,
  `lease-store/src/longpoll/`) exists, so a file that moves takes its mentions with it;
* nothing cites the sources the repository does not contain (the product spec, the field
  notes, seed issues by number): `docs/` explains in its own words.

Anchors follow GitHub's rule: the heading lower-cased, punctuation dropped, spaces turned into
hyphens, `-1`, `-2`, … for repeats. Fast (a second), no dependencies; `make test` runs it.

Usage: check-doc-links.py [REPO_ROOT]
"""

import pathlib
import re
import subprocess
import sys

CITATION = re.compile(r"(?<![\w./-])((?:\.\./)*docs/[a-z0-9-]+\.md)(?:#([a-z0-9-]+))?")
MD_LINK = re.compile(r"\]\(([^)\s]+)\)")
# A repository path in backticks: a top-level directory, then a file with an extension or a
# directory ending in `/` (globs and placeholders are not paths).
REPO_PATH = re.compile(
    r"`((?:filter|filter-wasm|filter-native|lease-store|protocol|testkit|e2e|client|chaos|bench|demo-upstream"
    r"|effects|model|scripts|deploy|envoy|images|fuzz|docs)/[\w./-]*(?:\.[a-z]+|/))`"
)
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
FENCE = re.compile(r"^\s*(```|~~~)")
# Sources outside the repository. Built from parts so this file does not cite them itself.
FORBIDDEN = [
    re.compile("SPEC" + r" §"),
    re.compile("FIELD" + "-NOTES"),
    re.compile(r"\b[Ss]eed" + r" 0\d\d\b"),
]
SKIPPED_DIRS = ("deploy/checks/schemas/",)
TEXT_SUFFIXES = {
    ".rs", ".md", ".toml", ".yaml", ".yml", ".sh", ".py", ".json", ".sql", ".in", ".txt", "",
}


def slug(heading):
    text = re.sub(r"`([^`]*)`", r"\1", heading)
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
    text = text.strip().lower()
    text = "".join(c for c in text if c.isalnum() or c in " -_")
    return text.replace(" ", "-")


def anchors(path, cache={}):
    if path not in cache:
        seen = {}
        found = set()
        in_fence = False
        for line in path.read_text(encoding="utf-8").splitlines():
            if FENCE.match(line):
                in_fence = not in_fence
                continue
            match = None if in_fence else HEADING.match(line)
            if match:
                base = slug(match.group(2))
                n = seen.get(base, 0)
                seen[base] = n + 1
                found.add(base if n == 0 else f"{base}-{n}")
        cache[path] = found
    return cache[path]


def files(root):
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
        cwd=root, capture_output=True, text=True, check=True,
    ).stdout.splitlines()
    for name in listed:
        path = root / name
        if name.startswith(SKIPPED_DIRS) or not path.is_file():
            continue
        if path.suffix in TEXT_SUFFIXES or name == "Makefile":
            yield name, path


def check(root):
    problems = []
    cited = 0
    for name, path in files(root):
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        if name != "scripts/check-doc-links.py":
            for pattern in FORBIDDEN:
                for match in pattern.finditer(text):
                    line = text.count("\n", 0, match.start()) + 1
                    problems.append(f"{name}:{line}: cites {match.group(0)!r}, which the repository does not contain")
        for match in CITATION.finditer(text):
            cited += 1
            page = root / re.sub(r"^(\.\./)+", "", match.group(1))
            line = text.count("\n", 0, match.start()) + 1
            problems.extend(resolve(name, line, page, match.group(2)))
        if path.suffix == ".md":
            for match in REPO_PATH.finditer(text):
                cited += 1
                # From the root, or from the file's own directory (a crate's README).
                if not any((base / match.group(1)).exists() for base in (root, path.parent)):
                    line = text.count("\n", 0, match.start()) + 1
                    problems.append(f"{name}:{line}: `{match.group(1)}` does not exist")
            for match in MD_LINK.finditer(text):
                target = match.group(1)
                if re.match(r"^[a-z]+:", target) or "docs/" in target:
                    continue  # external, or a docs/ citation checked above
                file_part, _, anchor = target.partition("#")
                if file_part and not file_part.endswith(".md"):
                    continue
                cited += 1
                page = (path.parent / file_part).resolve() if file_part else path
                line = text.count("\n", 0, match.start()) + 1
                problems.extend(resolve(name, line, page, anchor or None))
    return cited, problems


def resolve(name, line, page, anchor):
    if not page.is_file():
        return [f"{name}:{line}: {page} does not exist"]
    if anchor and anchor not in anchors(page):
        return [f"{name}:{line}: {page.name} has no section #{anchor}"]
    return []


def main():
    root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else ".").resolve()
    cited, problems = check(root)
    if problems:
        print("\n".join(f"FAIL   {p}" for p in problems), file=sys.stderr)
        sys.exit(1)
    print(f"ok     {cited} design citations and Markdown links resolve")


if __name__ == "__main__":
    main()
