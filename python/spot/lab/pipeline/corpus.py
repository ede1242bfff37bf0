"""Deterministic, offline training corpus for the embedded default target.

Three sources, all available without a network and all licence-clean:

* ``code``  - Python standard-library source files of the running interpreter (PSF licence), split into documents
  of whole top-level statements (functions, classes, import blocks) of a few hundred to a few thousand characters.
* ``docs``  - the Python reference topics shipped in ``pydoc_data.topics`` plus pydoc-style help pages rendered
  (by ``ast``, without importing anything) from the docstrings of the same standard-library modules (PSF licence).
* ``math``  - grade-school arithmetic word problems with worked, step-by-step solutions from the templates in
  ``word_problems.toml`` beside this file, evaluated by ``_word_problem`` (the project's own text). Every
  ``a op b = c`` in a solution is exact and the final line is ``Answer: N``.

Output (``build_corpus``): ``train.jsonl`` and ``heldout.jsonl`` (one JSON object per line:
``{"id", "source", "group", "text"}``) and ``manifest.json`` (sizes, counts, checksums). The split is by document
group (the stdlib file a code or docstring document came from, the pydoc topic, the single math problem), decided
by a SHA-256 hash of the group, so no held-out document shares a source file with a training document. Train
documents are shuffled with a fixed seed; held-out documents are sorted by id. Same interpreter + same arguments
=> the same bytes.

Command: ``spot build corpus`` (writes ``.cache/corpus``).
"""
from __future__ import annotations

import ast
import functools
import hashlib
import inspect
import json
import math as _math
import os
import random
import re
import string
import sys
import sysconfig
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

__all__ = [
    "DEFAULT_MIX",
    "Document",
    "build_corpus",
    "check_math_text",
    "chunk_python_source",
    "code_documents",
    "docs_documents",
    "math_documents",
    "math_problem",
    "normalise_text",
    "read_documents",
    "split_of",
    "stdlib_files",
]

SPLITS = ("train", "heldout")
DEFAULT_MIX = {"code": 0.5, "docs": 0.1, "math": 0.4}
DEFAULT_TOTAL_MB = 20.0
DEFAULT_HELDOUT_FRACTION = 0.03
DEFAULT_MAX_CHARS = 3000
FORMAT_VERSION = 1


@dataclass(frozen=True)
class Document:
    id: str      # unique, e.g. "code/json/decoder.py#2", "docs/topic/assert#0", "math/000123"
    source: str  # "code" | "docs" | "math"
    group: str   # the split key: documents of one group always land in the same split
    text: str

    def to_json(self) -> str:
        return json.dumps({"id": self.id, "source": self.source, "group": self.group, "text": self.text},
                          ensure_ascii=False, sort_keys=True)


# ----------------------------------------------------------------------------------------------- helpers

def normalise_text(text: str) -> str:
    """Minimal normalisation that keeps indentation: LF line ends, no trailing whitespace, no form feeds,
    at most two consecutive blank lines, no leading blank lines, exactly one final newline."""
    text = text.replace("\r\n", "\n").replace("\r", "\n").replace("\f", "")
    text = text.replace("\ufeff", "")
    lines = [ln.rstrip() for ln in text.split("\n")]
    out: list[str] = []
    blank = 0
    for ln in lines:
        if ln == "":
            blank += 1
            if blank > 2 or not out:
                continue
        else:
            blank = 0
        out.append(ln)
    while out and out[-1] == "":
        out.pop()
    return "\n".join(out) + "\n" if out else ""


def split_of(group: str, heldout_fraction: float = DEFAULT_HELDOUT_FRACTION) -> str:
    """Deterministic split of a document group: 'heldout' for a ``heldout_fraction`` share of groups."""
    if not 0.0 <= heldout_fraction < 1.0:
        raise ValueError(f"heldout_fraction must be in [0, 1), got {heldout_fraction!r}")
    h = int.from_bytes(hashlib.sha256(("spot-split:" + group).encode("utf-8")).digest()[:8], "big")
    return "heldout" if h / 2.0 ** 64 < heldout_fraction else "train"


def _stable_key(s: str) -> bytes:
    return hashlib.sha256(s.encode("utf-8")).digest()


def _pack(pieces: Sequence[str], max_chars: int) -> list[str]:
    """Greedily concatenate consecutive pieces into chunks of at most ``max_chars`` (a single longer piece stays
    whole; callers split those first)."""
    chunks: list[str] = []
    cur = ""
    for p in pieces:
        if cur and len(cur) + len(p) > max_chars:
            chunks.append(cur)
            cur = ""
        cur += p
    if cur:
        chunks.append(cur)
    return chunks


def _split_paragraphs(text: str, max_chars: int) -> list[str]:
    """Split text at blank lines (then, for over-long paragraphs, at line ends) into chunks <= max_chars."""
    lines = text.splitlines(keepends=True)
    paras: list[str] = []
    cur: list[str] = []
    for ln in lines:
        cur.append(ln)
        if ln.strip() == "":
            paras.append("".join(cur))
            cur = []
    if cur:
        paras.append("".join(cur))
    pieces: list[str] = []
    for p in paras:
        if len(p) <= max_chars:
            pieces.append(p)
        else:
            pieces.extend(_pack(p.splitlines(keepends=True), max_chars))
    return _pack(pieces, max_chars)


# ----------------------------------------------------------------------------------------------- code

_EXCLUDED_DIRS = {
    "site-packages", "dist-packages", "test", "tests", "idle_test", "idlelib", "lib2to3", "pydoc_data",
    "__pycache__", "lib-dynload", "ensurepip", "__phello__",
}
_EXCLUDED_FILES = {
    "html/entities.py",     # generated entity table
    "stringprep.py",        # generated Unicode tables
    "locale.py",            # mostly a huge generated alias table
    "__hello__.py", "antigravity.py", "this.py",
}
_MAX_FILE_BYTES = 400_000


def stdlib_files(stdlib_dir: str | os.PathLike | None = None) -> list[str]:
    """Sorted relative paths of the standard-library ``.py`` files used for the code source."""
    root = Path(stdlib_dir or sysconfig.get_paths()["stdlib"])
    out: list[str] = []
    for dirpath, dirnames, filenames in os.walk(root):
        rel_dir = Path(dirpath).relative_to(root)
        dirnames[:] = sorted(
            d for d in dirnames
            if d not in _EXCLUDED_DIRS and not d.startswith("config-") and not d.startswith(".")
        )
        for fn in sorted(filenames):
            if not fn.endswith(".py"):
                continue
            rel = (rel_dir / fn).as_posix()
            if rel in _EXCLUDED_FILES or fn.startswith(("test_", "_sysconfigdata")):
                continue
            path = root / rel
            if path.stat().st_size > _MAX_FILE_BYTES:
                continue
            out.append(rel)
    return sorted(out)


def _read_source(path: Path) -> str | None:
    try:
        raw = path.read_bytes()
        text = raw.decode("utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    if "decoding_table" in text and "Codec" in text:  # generated charmap codecs (encodings/cp*.py, ...)
        return None
    return normalise_text(text)


def _node_start(node: ast.AST) -> int:
    """0-based first line of a statement, decorators included."""
    start = node.lineno
    for d in getattr(node, "decorator_list", []) or []:
        start = min(start, d.lineno)
    return start - 1


def _statement_pieces(lines: list[str], body: list[ast.stmt], lo: int,
                      hi: int) -> list[tuple[int, int, ast.stmt | None]]:
    """Cut lines[lo:hi] at the starts of the statements in ``body`` (comment lines directly above a statement
    stay with it). Returns (start, end, node) with node None for a leading piece without a statement."""
    starts: list[tuple[int, ast.stmt]] = []
    prev_end = lo
    for node in body:
        s = max(_node_start(node), prev_end)
        while s - 1 >= prev_end and lines[s - 1].lstrip().startswith("#"):
            s -= 1
        starts.append((s, node))
        prev_end = max(prev_end, node.end_lineno or s + 1)
    pieces: list[tuple[int, int, ast.stmt | None]] = []
    if starts and starts[0][0] > lo:
        pieces.append((lo, starts[0][0], None))
    for i, (s, node) in enumerate(starts):
        e = starts[i + 1][0] if i + 1 < len(starts) else hi
        pieces.append((s, e, node))
    if not starts:
        pieces.append((lo, hi, None))
    return pieces


def chunk_python_source(src: str, max_chars: int = DEFAULT_MAX_CHARS) -> list[str]:
    """Split a Python module into documents of whole top-level statements, each at most ``max_chars`` where
    possible. An over-long class is split into its members; every continuation chunk repeats the class header
    line(s) so it stays valid, readable Python. An over-long function is split at blank lines."""
    lines = src.splitlines(keepends=True)
    try:
        tree = ast.parse(src)
    except SyntaxError:
        return _split_paragraphs(src, max_chars)

    def expand(lo: int, hi: int, body: list[ast.stmt], prefix: str) -> list[str]:
        out: list[str] = []
        for s, e, node in _statement_pieces(lines, body, lo, hi):
            text = "".join(lines[s:e])
            if len(text) + len(prefix) <= max_chars:
                out.append(text)
                continue
            if isinstance(node, ast.ClassDef) and node.body:
                first = _node_start(node.body[0])
                header = "".join(lines[s:first])
                head_line = "".join(lines[_node_start(node):node.body[0].lineno - 1])
                if len(head_line) > 300:
                    out.extend(_split_paragraphs(text, max_chars))
                    continue
                sub = expand(first, e, node.body, head_line)
                # first member chunk gets the full header (comments, decorators, class line); later ones just the
                # class line, marked as a continuation by the blank line after it.
                packed = _pack(sub, max(200, max_chars - len(head_line) - 1))
                for i, chunk in enumerate(packed):
                    out.append((header if i == 0 else head_line + "\n") + chunk)
                continue
            out.extend(_split_paragraphs(text, max_chars))
        return out

    pieces = expand(0, len(lines), tree.body, "")
    # A piece produced by expanding a class is already a full chunk; packing below may still join small
    # neighbours, which keeps documents from being tiny.
    chunks = _pack(pieces, max_chars)
    return [normalise_text(c) for c in chunks if c.strip()]


def code_documents(stdlib_dir: str | os.PathLike | None = None, max_files: int | None = None,
                   max_chars: int = DEFAULT_MAX_CHARS) -> list[Document]:
    """Documents from stdlib source files (in sorted file order)."""
    root = Path(stdlib_dir or sysconfig.get_paths()["stdlib"])
    files = stdlib_files(root)
    if max_files is not None:
        files = files[:max_files]
    docs: list[Document] = []
    for rel in files:
        src = _read_source(root / rel)
        if not src:
            continue
        for i, chunk in enumerate(chunk_python_source(src, max_chars)):
            if len(chunk) < 40:
                continue
            docs.append(Document(f"code/{rel}#{i}", "code", f"stdlib/{rel}", chunk))
    return docs


# ----------------------------------------------------------------------------------------------- docs

def _indent(text: str, prefix: str) -> str:
    return "".join(prefix + ln if ln.strip() else prefix.rstrip() + ln for ln in text.splitlines(keepends=True))


def _signature(node: ast.FunctionDef | ast.AsyncFunctionDef) -> str:
    try:
        args = ast.unparse(node.args)
    except Exception:  # noqa: BLE001  # pragma: no cover - defensive
        args = "..."
    ret = ""
    if node.returns is not None:
        try:
            ret = " -> " + ast.unparse(node.returns)
        except Exception:  # noqa: BLE001  # pragma: no cover
            ret = ""
    prefix = "async " if isinstance(node, ast.AsyncFunctionDef) else ""
    return f"{prefix}{node.name}({args}){ret}"


def _module_name(rel: str) -> str:
    parts = rel[:-3].split("/")
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _help_entries(src: str, modname: str) -> tuple[str, list[str]]:
    """pydoc-style help text of a module's public, documented classes and functions: (module header, entries)."""
    tree = ast.parse(src)
    header = f"Help on module {modname}:\n\nNAME\n    {modname}"
    mdoc = ast.get_docstring(tree)
    if mdoc:
        first, _, rest = inspect.cleandoc(mdoc).partition("\n")
        header += f" - {first.strip()}\n"
        if rest.strip():
            header += "\nDESCRIPTION\n" + _indent(rest.strip("\n") + "\n", "    ")
    else:
        header += "\n"
    entries: list[str] = []
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
            doc = ast.get_docstring(node)
            members: list[str] = []
            for sub in node.body:
                if isinstance(sub, (ast.FunctionDef, ast.AsyncFunctionDef)) and (
                        not sub.name.startswith("_") or sub.name == "__init__"):
                    sdoc = ast.get_docstring(sub)
                    if sdoc:
                        body = _indent(inspect.cleandoc(sdoc) + "\n", " |      ")
                        members.append(" |  " + _signature(sub) + "\n" + body)
            if not doc and not members:
                continue
            bases = ", ".join(ast.unparse(b) for b in node.bases)
            text = f"class {node.name}" + (f"({bases})" if bases else "") + "\n"
            if doc:
                text += _indent(inspect.cleandoc(doc) + "\n", " |  ")
            if members:
                text += " |\n |  Methods defined here:\n |\n" + " |\n".join(members)
            entries.append(text)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and not node.name.startswith("_"):
            doc = ast.get_docstring(node)
            if doc:
                entries.append(_signature(node) + "\n" + _indent(inspect.cleandoc(doc) + "\n", "    "))
    return header, entries


def docs_documents(stdlib_dir: str | os.PathLike | None = None, max_files: int | None = None,
                   max_chars: int = DEFAULT_MAX_CHARS, include_help: bool = True) -> list[Document]:
    """Reference topics from ``pydoc_data.topics`` (sorted by topic) then pydoc-style module help rendered from
    stdlib docstrings (sorted by file)."""
    from pydoc_data.topics import topics

    docs: list[Document] = []
    for name in sorted(topics):
        text = normalise_text(topics[name])
        for i, chunk in enumerate(_split_paragraphs(text, max_chars)):
            chunk = normalise_text(chunk)
            if chunk.strip():
                docs.append(Document(f"docs/topic/{name}#{i}", "docs", f"topic/{name}", chunk))
    if not include_help:
        return docs
    root = Path(stdlib_dir or sysconfig.get_paths()["stdlib"])
    files = stdlib_files(root)
    if max_files is not None:
        files = files[:max_files]
    for rel in files:
        src = _read_source(root / rel)
        if not src:
            continue
        try:
            header, entries = _help_entries(src, _module_name(rel))
        except SyntaxError:
            continue
        if not entries and "DESCRIPTION" not in header:
            continue
        sections: list[str] = []
        funcs = [e for e in entries if not e.startswith("class ")]
        classes = [e for e in entries if e.startswith("class ")]
        for title, group in (("CLASSES", classes), ("FUNCTIONS", funcs)):
            for e in group:
                body = _indent(e, "    ")
                for piece in (_split_paragraphs(body, max_chars) if len(body) > max_chars else [body]):
                    sections.append(title + "\n" + piece)
        chunks: list[str] = []
        if not sections:
            chunks = [header]
        else:
            cur = header
            last_title = None
            for sec in sections:
                title, _, body = sec.partition("\n")
                add = ("\n" + title + "\n" if title != last_title else "\n") + body
                if len(cur) + len(add) > max_chars and cur != header:
                    chunks.append(cur)
                    cur = f"Help on module {_module_name(rel)}:\n"
                    add = "\n" + title + "\n" + body
                cur += add
                last_title = title
            chunks.append(cur)
        for i, chunk in enumerate(chunks):
            chunk = normalise_text(chunk)
            if len(chunk) >= 80:
                docs.append(Document(f"docs/help/{rel}#{i}", "docs", f"stdlib/{rel}", chunk))
    return docs


# ----------------------------------------------------------------------------------------------- math
#
# The word problems are data: python/spot/lab/pipeline/word_problems.toml holds the word lists and the templates (what
# each draws, its question, its solution steps, its answer) and documents their format. `_word_problem` below is the
# whole interpreter.

_WORD_PROBLEMS = Path(__file__).with_name("word_problems.toml")


class _Person:
    def __init__(self, name: str, female: bool):
        self.name = name
        self.he, self.him, self.his = ("she", "her", "her") if female else ("he", "him", "his")
        self.He, self.His = self.he.capitalize(), self.his.capitalize()


def _people(r: random.Random, k: int) -> list[_Person]:
    out: list[_Person] = []
    used: set[str] = set()
    while len(out) < k:
        female = r.random() < 0.5
        name = r.choice(_word_problems()[0]["FEMALE" if female else "MALE"])
        if name not in used:
            used.add(name)
            out.append(_Person(name, female))
    return out


def _fmt(x: Fraction | int, money: bool = False) -> str:
    """Exact decimal text of ``x``: integers plain; money with two decimals; other values with the fewest
    decimals (at most two) that represent them exactly."""
    x = Fraction(x)
    if (x * 100).denominator != 1:
        raise ValueError(f"value {x} is not representable with two decimals")
    if x.denominator == 1:
        return str(x.numerator)
    sign = "-" if x < 0 else ""
    cents = abs(x * 100).numerator
    frac = f"{cents % 100:02d}"
    if not money:
        frac = frac.rstrip("0")
    return f"{sign}{cents // 100}.{frac}"


class _M:
    """A money amount: printed with a dollar sign."""
    __slots__ = ("v",)

    def __init__(self, v):
        self.v = Fraction(v)


class _Eq:
    """``a op b op c = result`` with exact arithmetic and normal operator precedence."""

    def __init__(self, *terms, money: bool = False):
        if len(terms) < 3 or len(terms) % 2 == 0:
            raise ValueError("terms must be operand (op operand)+")
        vals = []
        parts = []
        for i, t in enumerate(terms):
            if i % 2:
                if t not in ("+", "-", "*", "/"):
                    raise ValueError(f"bad operator {t!r}")
                parts.append(t)
            else:
                is_money = isinstance(t, _M)
                v = t.v if is_money else Fraction(t)
                vals.append(v)
                parts.append(("$" if is_money else "") + _fmt(v, is_money))
        self.v = _eval_terms(vals, [terms[i] for i in range(1, len(terms), 2)])
        self.money = money
        self.text = " ".join(parts) + " = " + ("$" if money else "") + _fmt(self.v, money)

    def __str__(self) -> str:
        return self.text


def _eval_terms(vals: list[Fraction], ops: list[str]) -> Fraction:
    # precedence: first * and /, left to right, then + and -
    vs = [vals[0]]
    os_: list[str] = []
    for op, v in zip(ops, vals[1:]):
        if op == "*":
            vs[-1] = vs[-1] * v
        elif op == "/":
            if v == 0:
                raise ZeroDivisionError
            vs[-1] = vs[-1] / v
        else:
            os_.append(op)
            vs.append(v)
    out = vs[0]
    for op, v in zip(os_, vs[1:]):
        out = out + v if op == "+" else out - v
    return out


def _money(r: random.Random, lo: int, hi: int, cents: Sequence[int] = (0, 0, 0, 25, 50, 75)) -> Fraction:
    return Fraction(r.randint(lo, hi)) + Fraction(r.choice(cents), 100)


def _d(x: Fraction | int) -> str:
    return "$" + _fmt(x, True)


def _functions(r: random.Random) -> dict:
    """The functions a template's `let` lines may call (documented in word_problems.toml); the first group draws
    from ``r``, in the order the expression calls them."""
    return {
        "person": lambda: _people(r, 1)[0],
        "people": lambda k: _people(r, k),
        "randint": r.randint,
        "randints": lambda k, lo, hi: [r.randint(lo, hi) for _ in range(k)],
        "choice": r.choice,
        "sample": r.sample,
        "coin": lambda: r.random() < 0.5,
        "money": lambda lo, hi, *cents: _money(r, lo, hi, *cents),
        "int": int, "max": max, "min": min, "sum": sum, "gcd": _math.gcd,
        "first_at_least": lambda values, x: next(v for v in values if v >= x),
        "listing": lambda xs: ", ".join(str(x) for x in xs[:-1]) + f" and {xs[-1]}",
    }


# A `let` line is one Python assignment built from these nodes only (no attributes, no statements beyond `=`).
_ALLOWED_NODES = (ast.Module, ast.Expression, ast.Assign, ast.Name, ast.Load, ast.Store, ast.Tuple, ast.List,
                  ast.Constant, ast.BinOp, ast.UnaryOp, ast.USub, ast.Add, ast.Sub, ast.Mult, ast.FloorDiv, ast.Mod,
                  ast.Compare, ast.Eq, ast.NotEq, ast.Lt, ast.LtE, ast.Gt, ast.GtE, ast.In, ast.IfExp, ast.Call,
                  ast.Subscript)
_EQ_LINE = re.compile(r"(\w+) = eq\((.+)\)")


@functools.cache
def _compiled(src: str, mode: str):
    tree = ast.parse(src, mode=mode)
    bad = sorted({type(n).__name__ for n in ast.walk(tree) if not isinstance(n, _ALLOWED_NODES)})
    if bad or (mode == "exec" and not (len(tree.body) == 1 and isinstance(tree.body[0], ast.Assign))):
        raise ValueError(f"word_problems.toml: {src!r} is not a plain assignment/expression ({', '.join(bad)})")
    return compile(tree, "word_problems.toml", mode)


def _equation(spec: str, values: dict) -> _Eq:
    """``eq(a * $b - 3)``: names and numbers between the operators; ``$`` marks money (a money operand makes the
    result money); a name bound to a list stands for its items added."""
    tokens: list[str] = []
    for i, tok in enumerate(spec.split()):
        items = values.get(tok) if i % 2 == 0 else None
        tokens.extend(" + ".join(str(x) for x in items).split() if isinstance(items, list) else [tok])
    terms: list = []
    for i, tok in enumerate(tokens):
        if i % 2:
            terms.append(tok)  # an operator; _Eq checks it
            continue
        name = tok.removeprefix("$")
        v = values[name] if name.isidentifier() else Fraction(name)
        terms.append(_M(v) if tok.startswith("$") else v)
    return _Eq(*terms, money=any(t.startswith("$") for t in tokens[::2]))


def _run_lets(lines: list[str], values: dict, equations: dict) -> None:
    """Run a template's `let` lines in order: ``values`` maps names to numbers/words (an equation to its result),
    ``equations`` maps the names of equations to the equations (for the text)."""
    for line in lines:
        m = _EQ_LINE.fullmatch(line)
        if m:
            eq = _equation(m.group(2), values)
            values[m.group(1)] = eq.v
            equations[m.group(1)] = eq
            continue
        stmt, _, until = line.partition(" until ")
        while True:
            exec(_compiled(stmt, "exec"), values)  # noqa: S102 - an assignment of whitelisted nodes
            if not until or eval(_compiled(until, "eval"), values):
                break


class _Text(string.Formatter):
    """str.format with one extra spec: ``{price:$}`` writes a money amount ($2.50, $3)."""

    def format_field(self, value, format_spec):
        return _d(value) if format_spec == "$" else super().format_field(value, format_spec)


def _word_problem(template: dict, r: random.Random) -> tuple[str, list[str], _Eq]:
    """Evaluate one template of word_problems.toml: (question, solution steps, answer equation)."""
    values: dict = {"__builtins__": {}, **_word_problems()[0], **_functions(r)}
    equations: dict[str, _Eq] = {}
    _run_lets(template.get("let", []), values, equations)
    if "either" in template:
        template = template["either"][0 if r.random() < 0.5 else 1]
        _run_lets(template.get("let", []), values, equations)
    question = template["question"]
    if isinstance(question, list):
        question = r.choice(question)
    names = {**values, **equations}
    text = _Text()
    return (text.vformat(question, (), names), [text.vformat(s, (), names) for s in template["steps"]],
            equations[template["answer"]])


@functools.cache
def _word_problems() -> tuple[dict[str, list], list[dict]]:
    """(word lists, templates) of word_problems.toml, in file order, read once."""
    try:
        import tomllib
    except ModuleNotFoundError as e:  # Python 3.10: the rest of the module works, the math source does not
        raise RuntimeError("the math source needs Python >= 3.11 (tomllib reads word_problems.toml)") from e
    with open(_WORD_PROBLEMS, "rb") as f:
        data = tomllib.load(f)
    return data["lists"], data["template"]


def math_problem(seed: int, index: int) -> str:
    """The ``index``-th generated problem for ``seed`` as text (a pure function of its arguments)."""
    r = random.Random(f"spot-math:{seed}:{index}")
    templates = _word_problems()[1]
    template = templates[r.randrange(len(templates))]
    q, steps, answer = _word_problem(template, r)
    if str(answer) not in steps[-1]:  # pragma: no cover - template bug
        raise AssertionError(f"{template['name']}: the last step does not state the answer")
    return "Question: " + q + "\nSolution:\n" + "\n".join(steps) + "\nAnswer: " + _fmt(answer.v, answer.money) + "\n"


def math_documents(seed: int = 0, max_bytes: int | None = None, max_docs: int | None = None) -> Iterator[Document]:
    """Generate distinct problems until ``max_bytes`` (UTF-8) or ``max_docs`` is reached."""
    if max_bytes is None and max_docs is None:
        raise ValueError("give max_bytes or max_docs")
    seen: set[str] = set()
    total = 0
    count = 0
    i = 0
    misses = 0
    while (max_bytes is None or total < max_bytes) and (max_docs is None or count < max_docs):
        text = math_problem(seed, i)
        i += 1
        q = text.split("\nSolution:", 1)[0]
        if q in seen:
            misses += 1
            if misses > 100_000:  # pragma: no cover - parameter space exhausted
                break
            continue
        seen.add(q)
        doc_id = f"math/{seed}/{i - 1:07d}"
        yield Document(doc_id, "math", doc_id, text)
        total += len(text.encode("utf-8"))
        count += 1


_EQ_RE = re.compile(r"(-?\d+(?:\.\d+)?(?: [-+*/] -?\d+(?:\.\d+)?)+) = (-?\d+(?:\.\d+)?)")


def check_math_text(text: str) -> tuple[int, Fraction]:
    """Recompute every ``a op b = c`` in a generated problem's solution and check the ``Answer:`` line equals the
    last equation's result. Returns (number of equations checked, answer). Raises AssertionError on a mistake."""
    body = text.replace("$", "")
    sol = body.split("\nSolution:\n", 1)[1]
    n = 0
    last = None
    for m in _EQ_RE.finditer(sol):
        toks = m.group(1).split(" ")
        vals = [Fraction(t) for t in toks[0::2]]
        got = _eval_terms(vals, toks[1::2])
        want = Fraction(m.group(2))
        assert got == want, f"{m.group(0)!r}: recomputed {got}"
        n += 1
        last = want
    ans = re.search(r"\nAnswer: (-?\d+(?:\.\d+)?)\n?$", body)
    assert ans is not None, "no Answer line"
    answer = Fraction(ans.group(1))
    assert n > 0 and last == answer, f"answer {answer} != last result {last}"
    return n, answer


# ----------------------------------------------------------------------------------------------- builder

def _take_budget(docs: Sequence[Document], budget: int | None) -> list[Document]:
    """Whole groups, in a fixed pseudo-random group order, until the byte budget is met (all docs if None)."""
    if budget is None:
        return list(docs)
    groups: dict[str, list[Document]] = {}
    for d in docs:
        groups.setdefault(d.group, []).append(d)
    out: list[Document] = []
    size = 0
    for g in sorted(groups, key=_stable_key):
        if size >= budget:
            break
        for d in groups[g]:
            out.append(d)
            size += len(d.text.encode("utf-8"))
    return out


def read_documents(corpus_dir: str | os.PathLike, split: str) -> Iterator[dict]:
    """Yield the JSON records of a split ('train' or 'heldout') in file order."""
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
    path = Path(corpus_dir) / f"{split}.jsonl"
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.strip():
                yield json.loads(line)


def build_corpus(out_dir: str | os.PathLike, seed: int = 0, total_mb: float = DEFAULT_TOTAL_MB,
                 mix: dict[str, float] | None = None, heldout_fraction: float = DEFAULT_HELDOUT_FRACTION,
                 max_files: int | None = None, max_chars: int = DEFAULT_MAX_CHARS,
                 stdlib_dir: str | os.PathLike | None = None, verbose: bool = False) -> dict:
    """Build the corpus into ``out_dir`` and return the manifest (also written as ``manifest.json``).

    ``mix`` maps source -> share of ``total_mb`` (defaults to ``DEFAULT_MIX``); a source that has less text than
    its share contributes all it has (the manifest records the shortfall). ``max_files`` limits the number of
    stdlib files read (for quick tests)."""
    t0 = time.perf_counter()
    mix = dict(DEFAULT_MIX if mix is None else mix)
    unknown = set(mix) - set(DEFAULT_MIX)
    if unknown:
        raise ValueError(f"mix: unknown sources {sorted(unknown)}; expected a subset of {sorted(DEFAULT_MIX)}")
    if any(v < 0 for v in mix.values()) or sum(mix.values()) <= 0:
        raise ValueError(f"mix: shares must be >= 0 with a positive sum, got {mix}")
    if total_mb <= 0:
        raise ValueError(f"total_mb must be > 0, got {total_mb}")
    s = sum(mix.values())
    budgets = {k: int(total_mb * 1e6 * mix.get(k, 0.0) / s) for k in DEFAULT_MIX}

    sources: dict[str, list[Document]] = {}
    available: dict[str, int] = {}
    if budgets["code"] > 0:
        code = code_documents(stdlib_dir, max_files=max_files, max_chars=max_chars)
        available["code"] = sum(len(d.text.encode()) for d in code)
        sources["code"] = _take_budget(code, budgets["code"])
    if budgets["docs"] > 0:
        docs = docs_documents(stdlib_dir, max_files=max_files, max_chars=max_chars)
        available["docs"] = sum(len(d.text.encode()) for d in docs)
        # topics first (always whole), then help pages up to the budget
        topics = [d for d in docs if d.id.startswith("docs/topic/")]
        helps = [d for d in docs if not d.id.startswith("docs/topic/")]
        tsize = sum(len(d.text.encode()) for d in topics)
        sources["docs"] = topics + _take_budget(helps, max(0, budgets["docs"] - tsize))
    if budgets["math"] > 0:
        sources["math"] = list(math_documents(seed, max_bytes=budgets["math"]))
        available["math"] = sum(len(d.text.encode()) for d in sources["math"])

    splits: dict[str, list[Document]] = {"train": [], "heldout": []}
    ids: set[str] = set()
    texts: set[bytes] = set()
    duplicates = 0
    for name in DEFAULT_MIX:
        for d in sources.get(name, []):
            if d.id in ids:  # pragma: no cover - ids are unique by construction
                raise RuntimeError(f"duplicate document id {d.id}")
            ids.add(d.id)
            th = hashlib.sha256(d.text.encode("utf-8")).digest()
            if th in texts:  # identical text (e.g. shared pydoc topic paragraphs): keep the first only, so no
                duplicates += 1  # held-out document repeats a training document verbatim
                continue
            texts.add(th)
            splits[split_of(d.group, heldout_fraction)].append(d)
    splits["heldout"].sort(key=lambda d: d.id)
    splits["train"].sort(key=lambda d: d.id)
    random.Random(f"spot-shuffle:{seed}").shuffle(splits["train"])

    out = Path(out_dir)
    from ...loading import check_output_path  # torch: only when writing

    check_output_path(out).mkdir(parents=True, exist_ok=True)
    manifest: dict = {
        "format_version": FORMAT_VERSION,
        "seed": seed,
        "total_mb": total_mb,
        "mix": mix,
        "heldout_fraction": heldout_fraction,
        "max_files": max_files,
        "max_chars": max_chars,
        "python": sys.version.split()[0],
        "math_templates": len(_word_problems()[1]),
        "budget_bytes": budgets,
        "available_bytes": available,
        "duplicates_dropped": duplicates,
        "splits": {},
    }
    for split, docs in splits.items():
        path = out / f"{split}.jsonl"
        h = hashlib.sha256()
        with open(path, "w", encoding="utf-8", newline="\n") as f:
            for d in docs:
                line = d.to_json() + "\n"
                f.write(line)
                h.update(line.encode("utf-8"))
        per_source = {}
        for name in DEFAULT_MIX:
            sel = [d for d in docs if d.source == name]
            per_source[name] = {"documents": len(sel), "bytes": sum(len(d.text.encode()) for d in sel)}
        manifest["splits"][split] = {
            "file": path.name,
            "documents": len(docs),
            "bytes": sum(v["bytes"] for v in per_source.values()),
            "sources": per_source,
            "sha256": h.hexdigest(),
        }
    total_bytes = sum(v["bytes"] for v in manifest["splits"].values())
    manifest["total_bytes"] = total_bytes
    manifest["share"] = {
        name: round(sum(manifest["splits"][sp]["sources"][name]["bytes"] for sp in SPLITS) / max(1, total_bytes), 4)
        for name in DEFAULT_MIX
    }
    with open(out / "manifest.json", "w", encoding="utf-8") as f:
        json.dump(manifest, f, indent=2, sort_keys=True)
        f.write("\n")
    if verbose:
        print(f"built corpus in {time.perf_counter() - t0:.1f}s -> {out}")
        for split in SPLITS:
            m = manifest["splits"][split]
            srcs = ", ".join(f"{k} {v['documents']} docs / {v['bytes'] / 1e6:.2f} MB" for k, v in m["sources"].items())
            print(f"  {split}: {m['documents']} docs, {m['bytes'] / 1e6:.2f} MB ({srcs})")
        print(f"  share: {manifest['share']}")
        for k, b in budgets.items():
            got = sum(manifest["splits"][sp]["sources"][k]["bytes"] for sp in SPLITS)
            if got < 0.95 * b:
                print(f"  note: source {k!r} has {got / 1e6:.2f} MB, less than its budget {b / 1e6:.2f} MB")
    return manifest
