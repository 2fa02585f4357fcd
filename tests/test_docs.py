"""Every code snippet of README.md and docs/**/*.md runs, and the docs' generated settings page is well formed.

The convention for snippets (also in docs/contributing.md):

- ```` ```python ```` blocks of one page run in order, in one namespace, in a fresh temporary working directory,
  on the CPU (``CULORADS_DEVICE=cpu``). A snippet that raises fails the page's test.
- ```` ```console ```` blocks: each line that starts with ``$ `` is a command (the other lines are its output);
  ```` ```bash ```` and ```` ```sh ```` blocks: each line is a command. Commands that start with ``culorads`` or
  ``python -m cvxpy_culorads`` (``python3`` too) run through the shell in the page's directory, after the Python
  blocks above them, and must exit with status 0. Other commands (``pip install``, ``pytest``, the examples) are
  shown, not run here: CI runs the install and the tests itself.
- A block right after the line ``<!-- skip-test: why -->`` (the last non-blank line before its fence) is not run:
  for snippets that need a GPU, several GPUs or files the reader must supply. Blocks in other languages (``text``,
  ``yaml``) are never run.

Keep snippets small: the whole file runs in CI on two cores, and a page should take a few seconds.
"""
from __future__ import annotations

import importlib.util
import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = sorted([ROOT / "README.md", *(ROOT / "docs").rglob("*.md")])
SKIP_MARK = re.compile(r"^\s*<!--\s*skip-test\b.*-->\s*$")
FENCE = re.compile(r"^(?P<indent>\s*)(?P<fence>`{3,}|~{3,})\s*(?P<info>[^`\s]*)")
CLI_COMMAND = re.compile(r"^(culorads(\s|$)|python3? -m cvxpy_culorads(\s|$))")
SHELL_LANGUAGES = {"console": True, "bash": False, "sh": False, "shell": False}  # language: prompts with "$ "


@dataclass
class Block:
    language: str
    text: str
    line: int  # of the block's first line of code, 1-based
    skipped: bool


def blocks(path: Path) -> list[Block]:
    """The fenced code blocks of a Markdown file, dedented to their fence."""
    lines = path.read_text(encoding="utf-8").splitlines()
    found, i = [], 0
    while i < len(lines):
        match = FENCE.match(lines[i])
        if not match:
            i += 1
            continue
        indent, fence = len(match["indent"]), match["fence"]
        language = match["info"].split("{")[0].lower()
        previous = next((line for line in reversed(lines[:i]) if line.strip()), "")
        body, j = [], i + 1
        while j < len(lines) and not lines[j].strip().startswith(fence):
            body.append(lines[j][indent:] if lines[j][:indent].strip() == "" else lines[j])
            j += 1
        found.append(Block(language, "\n".join(body) + "\n", i + 2, bool(SKIP_MARK.match(previous))))
        i = j + 1
    return found


def commands(block: Block) -> list[str]:
    """The command lines of a shell block that this test runs (see the module's docstring)."""
    prompted = SHELL_LANGUAGES[block.language]
    selected = []
    for line in block.text.splitlines():
        line = line.strip()
        if prompted:
            if not line.startswith("$ "):
                continue
            line = line[2:].strip()
        if CLI_COMMAND.match(line):
            selected.append(line)
    return selected


def runnable(block: Block) -> bool:
    if block.skipped:
        return False
    if block.language == "python":
        return True
    return block.language in SHELL_LANGUAGES and bool(commands(block))


def pages_with_snippets() -> list[Path]:
    return [path for path in PAGES if any(runnable(block) for block in blocks(path))]


def shell_command(line: str) -> str:
    """``line`` with this interpreter for ``python``, and ``python -m cvxpy_culorads`` for ``culorads`` where the
    entry point is not on the PATH (a source tree that pip has not installed)."""
    executable = shlex.quote(sys.executable)
    if line.startswith("culorads"):
        return line if shutil.which("culorads") else f"{executable} -m cvxpy_culorads" + line[len("culorads"):]
    return executable + line[line.index(" "):]


@pytest.mark.parametrize("page", pages_with_snippets(), ids=lambda path: str(path.relative_to(ROOT)))
def test_snippets_run(page: Path, tmp_path, monkeypatch):
    monkeypatch.setenv("CULORADS_DEVICE", "cpu")
    monkeypatch.chdir(tmp_path)
    namespace = {"__name__": "__docs__"}
    for block in blocks(page):
        if not runnable(block):
            continue
        where = f"{page.relative_to(ROOT)}:{block.line}"
        if block.language == "python":
            code = compile("\n" * (block.line - 1) + block.text, str(page), "exec")
            exec(code, namespace)  # a snippet that raises fails the test with its page and line in the traceback
            continue
        for line in commands(block):
            run = subprocess.run(shell_command(line), shell=True, cwd=tmp_path, capture_output=True, text=True,
                                 timeout=300, env={**os.environ, "CULORADS_DEVICE": "cpu"})
            assert run.returncode == 0, f"{where}: `{line}` exited with {run.returncode}\n{run.stdout}\n{run.stderr}"


def test_convention_finds_snippets():
    """The parser sees the README's snippets and the skip marker (guards against a convention that runs nothing)."""
    readme = blocks(ROOT / "README.md")
    assert sum(block.language == "python" and runnable(block) for block in readme) >= 2
    assert any(block.language == "console" and runnable(block) for block in readme)
    assert len((ROOT / "README.md").read_text(encoding="utf-8").splitlines()) <= 350


def test_readme_links_resolve():
    """The README's relative links and images point at files of the repository (the docs' own links are checked by
    the strict MkDocs build)."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    targets = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text)
    local = [target for target in targets if "://" not in target]
    assert local and not [target for target in local if not (ROOT / target).exists()]


def test_skip_marker_and_commands(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("text\n\n<!-- skip-test: needs two GPUs -->\n```python\nraise SystemExit\n```\n\n"
                    "```console\n$ pip install -e .\n$ culorads --help\nusage: ...\n```\n\n"
                    "- item\n\n    ```python\n    x = 1\n    ```\n")
    found = blocks(page)
    assert [(block.language, block.skipped) for block in found] == [("python", True), ("console", False),
                                                                       ("python", False)]
    assert commands(found[1]) == ["culorads --help"]
    assert found[2].text == "x = 1\n" and found[2].line == 17


def _hooks():
    spec = importlib.util.spec_from_file_location("docs_hooks", ROOT / "docs" / "hooks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_settings_page_from_rows():
    rows = [
        {"group": "main", "name": "tol", "flag": "--tol", "default": "1e-05", "allowed": "a number > 0 and < 1",
         "help": "tolerance | with a bar, *stars* and sum_k"},
        {"group": "main", "name": "device", "flag": "--device", "default": "'auto'", "allowed": "'auto' | 'cpu'",
         "help": "where"},
        {"group": "split", "name": "shard_order", "flag": "--shard-order", "default": "'auto'", "allowed": "'auto'",
         "help": "order"},
    ]
    page = _hooks().settings_markdown(rows)
    assert page.index("## Main settings") < page.index("`tol`") < page.index("`device`") < page.index("## Several")
    assert r"tolerance \| with a bar, \*stars\* and sum\_k" in page
    assert r"| 'auto' \| 'cpu' |" in page  # allowed values are plain text, their bars escaped for the table
    table_rows = [line for line in page.splitlines() if line.startswith("| `")]
    assert len(table_rows) == 3 and all(line.count(" | ") == 4 for line in table_rows)


def test_settings_rows_have_the_documented_keys():
    from cvxpy_culorads import settings

    rows = settings.reference_rows()
    assert rows and all(set(row) == {"group", "name", "flag", "default", "allowed", "help"} for row in rows)
    assert all(isinstance(value, str) for row in rows for value in row.values())
    assert _hooks().settings_markdown(rows).count("\n| `") == len(rows)
