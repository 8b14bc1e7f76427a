"""Every Python block of README.md and docs/*.rst runs as a reader would paste it.

Each page runs in a fresh interpreter, in a fresh temporary directory, its blocks in page
order sharing one namespace (as pasted into one session). ``>>>`` blocks run as doctests
(NORMALIZE_WHITESPACE, ELLIPSIS) in that namespace; other Python blocks run as code.
``namedschema`` is imported from this checkout; nothing else is set up. (This test is what
runs the docs' ``>>>`` examples: setup.cfg no longer collects docs/*.rst as doctests.)

What counts as a Python block
    README.md: a fence tagged ``python`` (or ``pycon``, ``py``). Every fence must carry a
    language; use ``text``/``console``/``bash`` for output and shell commands.
    docs/*.rst: ``.. code-block:: python`` (``code``, ``sourcecode``; ``pycon``, ``py``,
    ``python3`` too) and every ``>>>`` block. A bare ``::`` literal block is refused
    (Sphinx would highlight it as Python, so a reader cannot tell): write
    ``.. code-block:: python`` (runs here) or ``.. code-block:: text`` / ``console``.

Markers (a comment on the line(s) just before a block; blank lines between are fine)
    README.md: ``<!-- doc-test: MARK -->``    docs/*.rst: ``.. doc-test: MARK``
    Several marks may be joined with ``;``. The marks:

    ``needs rlpyt``
        The block needs rlpyt (imported from RLPYT_SRC, as an installed rlpyt would be).
        Mark every block that needs rlpyt or a name an earlier rlpyt block defined.
        A page with such blocks gets two tests: ``[page]`` runs the unmarked blocks
        (always), ``[page+rlpyt]`` runs all blocks and is a real-rlpyt test (marker
        ``rlpyt``: skipped with a reason without RLPYT_SRC, required in CI).
    ``needs MODULE``
        The block needs an optional module that the test extra does not install (say,
        a GPU build). As for rlpyt; ``[page+MODULE]`` is skipped, with that reason,
        where the module cannot be imported. Modules of the test extra (torch, ray,
        optree, matplotlib, ale_py, ...) need no mark.
    ``file NAME``
        The block is the content of a file (``train.py``) a later block imports or runs:
        it is written to NAME in the page's directory instead of being run.

Nothing is skipped silently: an unknown mark, an untagged fence or a bare ``::`` block
fails the test of its page. Keep blocks fast (the whole set runs in CI on every change).
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
import textwrap
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.conftest import rlpyt_src
from tests.helpers import REPO_ROOT

ROOT = Path(REPO_ROOT)
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.rst"))]
PYTHON_LANGS = {"python", "python3", "py", "pycon"}
MARK_RE = {"md": re.compile(r"^\s*<!--\s*doc-test:\s*(.*?)\s*-->\s*$"),
           "rst": re.compile(r"^\s*\.\.\s+doc-test:\s*(.*?)\s*$")}


@dataclass
class Block:
    page: str
    line: int                      # 1-based line of the block's first source line
    source: str
    doctest: bool
    needs: list[str] = field(default_factory=list)
    file: str | None = None


class PageError(ValueError):
    """The page breaks the conventions above (reported as the page's test failure)."""


def _apply_marks(text: str, where: str) -> tuple[list[str], str | None]:
    needs: list[str] = []
    file = None
    for mark in filter(None, (m.strip() for m in text.split(";"))):
        words = mark.split()
        if len(words) == 2 and words[0] == "needs":
            needs.append(words[1])
        elif len(words) == 2 and words[0] == "file":
            file = words[1]
        else:
            raise PageError(f"{where}: unknown doc-test mark {mark!r} "
                            "(known: 'needs rlpyt', 'needs MODULE', 'file NAME')")
    return needs, file


def _pending_marks(lines: list[str], start: int, kind: str) -> list[str]:
    """The marks on the comment lines just above line index ``start`` (blank lines skipped)."""
    marks = []
    i = start - 1
    while i >= 0 and not lines[i].strip():
        i -= 1
    while i >= 0 and (match := MARK_RE[kind].match(lines[i])):
        marks.append(match[1])
        i -= 1
        while i >= 0 and not lines[i].strip():
            i -= 1
    return marks


def _block(page: str, lines: list[str], at: int, first: int, body: list[str],
           kind: str) -> Block:
    needs: list[str] = []
    file = None
    for text in _pending_marks(lines, at, kind):
        more_needs, more_file = _apply_marks(text, f"{page}:{at + 1}")
        needs += more_needs
        file = more_file or file
    source = textwrap.dedent("\n".join(body)).strip("\n") + "\n"
    lead = len(body) - len("\n".join(body).lstrip("\n").split("\n"))
    doctest = source.lstrip().startswith(">>>")
    if doctest and file:
        raise PageError(f"{page}:{at + 1}: a '>>>' block cannot be a 'file' block")
    return Block(page, first + lead + 1, source, doctest, needs, file)


def markdown_blocks(path: Path) -> list[Block]:
    page = path.name
    lines = path.read_text().splitlines()
    blocks: list[Block] = []
    i = 0
    while i < len(lines):
        match = re.match(r"^(\s*)(`{3,}|~{3,})\s*([\w+-]*)", lines[i])
        if not match:
            i += 1
            continue
        fence, lang = match[2], match[3].lower()
        end = i + 1
        while end < len(lines) and not lines[end].strip().startswith(fence):
            end += 1
        if not lang:
            raise PageError(f"{page}:{i + 1}: a code fence without a language; tag it "
                            "python (runs in tests/meta/test_doc_blocks.py), text, console or bash")
        if lang in PYTHON_LANGS:
            blocks.append(_block(page, lines, i, i + 1, lines[i + 1:end], "md"))
        elif _pending_marks(lines, i, "md"):
            raise PageError(f"{page}:{i + 1}: a doc-test mark on a {lang} block")
        i = end + 1
    return blocks


def _indented_body(lines: list[str], start: int, indent: int) -> tuple[list[str], int]:
    """The lines from ``start`` indented deeper than ``indent`` (blank lines inside)."""
    end = start
    while end < len(lines) and (not lines[end].strip()
                                or len(lines[end]) - len(lines[end].lstrip()) > indent):
        end += 1
    while end > start and not lines[end - 1].strip():
        end -= 1
    return lines[start:end], end


def rst_blocks(path: Path) -> list[Block]:
    page = f"docs/{path.name}"
    lines = path.read_text().splitlines()
    blocks: list[Block] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        stripped = line.strip()
        indent = len(line) - len(line.lstrip())
        directive = re.match(r"^\s*\.\.\s+(code-block|code|sourcecode)::\s*(\S*)", line)
        if directive:
            lang = directive[2].lower()
            # skip the directive's options (":linenos:" ...) and the blank line
            j = i + 1
            while j < len(lines) and re.match(r"^\s+:[\w-]+:", lines[j]):
                j += 1
            body, end = _indented_body(lines, j, indent)
            if lang in PYTHON_LANGS or lang == "":
                if lang == "":
                    raise PageError(f"{page}:{i + 1}: a code-block without a language")
                blocks.append(_block(page, lines, i, j, body, "rst"))
            elif _pending_marks(lines, i, "rst"):
                raise PageError(f"{page}:{i + 1}: a doc-test mark on a {lang} block")
            i = max(end, i + 1)
            continue
        if stripped.startswith(">>>") and (i == 0 or not lines[i - 1].strip()):
            end = i
            while end < len(lines) and lines[end].strip():
                end += 1
            blocks.append(_block(page, lines, i, i, lines[i:end], "rst"))
            i = end
            continue
        if (stripped.endswith("::") and not stripped.startswith("..")
                and not re.match(r"^\s*\.\.\s+[\w:-]+::", line)):
            # a literal block follows (after a blank line), unless the paragraph is a
            # directive's option or a section title
            j = i + 1
            while j < len(lines) and not lines[j].strip():
                j += 1
            if j < len(lines) and len(lines[j]) - len(lines[j].lstrip()) > indent:
                raise PageError(
                    f"{page}:{i + 1}: a bare '::' literal block; write '.. code-block:: "
                    "python' (it then runs in tests/meta/test_doc_blocks.py) or '.. code-block:: "
                    "text' / 'console' so readers and this test know what it is")
        i += 1
    return blocks


def page_blocks(path: Path) -> list[Block]:
    return markdown_blocks(path) if path.suffix == ".md" else rst_blocks(path)


# The runner executes in the page's fresh interpreter; its argv[1] is the blocks' JSON.
RUNNER = r'''
import doctest, json, sys, traceback, types
sys.path[0] = ""   # as in an interactive session: the current directory, not this script's
blocks = json.load(open(sys.argv[1]))
main = types.ModuleType("__main__")       # the reader's session: a fresh __main__ that
sys.modules["__main__"] = main            # pickle finds classes defined in the blocks in
namespace = main.__dict__
flags = doctest.NORMALIZE_WHITESPACE | doctest.ELLIPSIS
for block in blocks:
    where = f"{block['page']}:{block['line']}"
    if block["file"]:
        with open(block["file"], "w") as out:
            out.write(block["source"])
        continue
    print(f"--- {where}", flush=True)
    if block["doctest"]:
        test = doctest.DocTestParser().get_doctest(
            block["source"], namespace, where, block["page"], block["line"] - 1)
        runner = doctest.DocTestRunner(optionflags=flags)
        result = runner.run(test, clear_globs=False)
        namespace.update(test.globs)
        if result.failed:
            sys.exit(f"{where}: {result.failed} of {result.attempted} examples failed")
    else:
        code = compile("\n" * (block["line"] - 1) + block["source"], block["page"], "exec")
        try:
            exec(code, namespace)
        except BaseException:
            traceback.print_exc()
            sys.exit(f"{where}: the block above raised")
'''


# Optional dependencies (in the test extra, so blocks need no mark for them): a page whose
# blocks import one that is missing here skips, saying which, instead of failing.
OPTIONAL_MODULES = ("torch", "ray", "matplotlib", "optree", "ale_py", "cv2", "gymnasium",
                    "cloudpickle", "dill", "safetensors", "joblib", "psutil")
_IMPORT_RE = re.compile(r"^\s*(?:>>>|\.\.\.)?\s*(?:from\s+(\w+)|import\s+([\w., ]+))", re.M)


def missing_optional_modules(text: str) -> list[str]:
    """The optional dependencies that ``text`` (code, doctests) imports and this Python lacks."""
    imported = set()
    for from_name, names in _IMPORT_RE.findall(text):
        imported.update([from_name] if from_name else
                        [n.split()[0].split(".")[0] for n in names.split(",") if n.strip()])
    return sorted(m for m in imported & set(OPTIONAL_MODULES)
                  if importlib.util.find_spec(m) is None)


def _variants() -> list:
    params = []
    for path in PAGES:
        name = path.relative_to(ROOT).as_posix()
        try:
            needs = sorted({need for block in page_blocks(path) for need in block.needs})
        except PageError:
            needs = []
        params.append(pytest.param(path, None, id=name))
        for need in needs:
            marks = [pytest.mark.rlpyt] if need == "rlpyt" else []
            params.append(pytest.param(path, need, id=f"{name}+{need}", marks=marks))
    return params


def _run_page(path: Path, blocks: list[Block], extra_path: list[str], tmp_path: Path):
    script = tmp_path / "_blocks.json"
    script.write_text(json.dumps([block.__dict__ for block in blocks]))
    runner = tmp_path / "_run_blocks.py"
    runner.write_text(RUNNER)
    workdir = tmp_path / "page"
    workdir.mkdir()
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([REPO_ROOT, *extra_path,
                                         *filter(None, [env.get("PYTHONPATH")])])
    env.pop("PYTHONSTARTUP", None)
    return subprocess.run([sys.executable, str(runner), str(script)], cwd=workdir, env=env,
                          capture_output=True, text=True, timeout=600)


@pytest.mark.subprocess
@pytest.mark.parametrize(("path", "need"), _variants())
def test_page_blocks_run_as_written(path: Path, need: str | None, tmp_path: Path):
    blocks = page_blocks(path)
    extra_path = []
    if need is None:
        blocks = [block for block in blocks if not block.needs]
    elif need == "rlpyt":
        extra_path.append(str(rlpyt_src()))   # the rlpyt marker skips when unset
    elif importlib.util.find_spec(need) is None:
        pytest.skip(f"{path.name}: blocks marked 'needs {need}' need {need}, "
                    "which cannot be imported here")
    if not any(not block.file for block in blocks):
        return
    missing = missing_optional_modules("\n".join(block.source for block in blocks))
    if missing:
        pytest.skip(f"{path.name}: its blocks import {', '.join(missing)}, an optional "
                    "dependency (in the test extra) this Python lacks")
    proc = _run_page(path, blocks, extra_path, tmp_path)
    assert proc.returncode == 0, (proc.stdout[-6000:] + proc.stderr[-6000:])


# ------------------------------------------------------------------ the test can fail
def _fake_page(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


@pytest.mark.subprocess
def test_a_block_that_raises_fails_its_page(tmp_path):
    path = _fake_page(tmp_path, "page.md", "```python\nx = 1\n```\n\n```python\nx + y\n```\n")
    proc = _run_page(path, page_blocks(path), [], tmp_path)
    assert proc.returncode != 0 and "NameError" in proc.stderr and "page.md:6" in proc.stderr


@pytest.mark.subprocess
def test_a_wrong_doctest_fails_and_blocks_share_one_namespace(tmp_path):
    text = ".. code-block:: python\n\n    x = 2\n\nText.\n\n>>> x + 1\n4\n"
    path = _fake_page(tmp_path, "page.rst", text)
    proc = _run_page(path, page_blocks(path), [], tmp_path)
    assert proc.returncode != 0 and "examples failed" in proc.stderr
    again = tmp_path / "again"
    again.mkdir()
    path.write_text(text.replace("4\n", "3\n"))
    assert _run_page(path, page_blocks(path), [], again).returncode == 0


@pytest.mark.subprocess
def test_file_blocks_are_written_and_marks_parsed(tmp_path):
    text = ("<!-- doc-test: file train.py -->\n```python\nVALUE = 7\n```\n\n"
            "<!-- doc-test: needs rlpyt -->\n```python\nimport rlpyt\n```\n\n"
            "```python\nimport train\nassert train.VALUE == 7\n```\n")
    path = _fake_page(tmp_path, "page.md", text)
    blocks = page_blocks(path)
    assert [(b.file, b.needs) for b in blocks] == [("train.py", []), (None, ["rlpyt"]),
                                                     (None, [])]
    proc = _run_page(path, [b for b in blocks if not b.needs], [], tmp_path)
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize("text", [
    "```\nprint(1)\n```\n",                                   # untagged fence
    "<!-- doc-test: skip -->\n```python\nprint(1)\n```\n",    # unknown mark
])
def test_markdown_conventions_are_enforced(tmp_path, text):
    with pytest.raises(PageError):
        page_blocks(_fake_page(tmp_path, "page.md", text))


def test_bare_literal_blocks_are_refused(tmp_path):
    with pytest.raises(PageError, match="bare '::'"):
        page_blocks(_fake_page(tmp_path, "page.rst", "Example::\n\n    x = 1\n"))
