"""Deterministic, offline training corpus for the embedded default target.

Three sources, all available without a network and all licence-clean:

* ``code``  - Python standard-library source files of the running interpreter (PSF licence), split into documents
  of whole top-level statements (functions, classes, import blocks) of a few hundred to a few thousand characters.
* ``docs``  - the Python reference topics shipped in ``pydoc_data.topics`` plus pydoc-style help pages rendered
  (by ``ast``, without importing anything) from the docstrings of the same standard-library modules (PSF licence).
* ``math``  - grade-school arithmetic word problems with worked, step-by-step solutions from the template
  generator in this file (the project's own text). Every ``a op b = c`` in a solution is exact and the final line
  is ``Answer: N``.

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
import hashlib
import inspect
import json
import math as _math
import os
import random
import re
import sys
import sysconfig
import time
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Callable, Iterator, Sequence

__all__ = [
    "Document",
    "DEFAULT_MIX",
    "build_corpus",
    "read_documents",
    "split_of",
    "stdlib_files",
    "code_documents",
    "docs_documents",
    "math_documents",
    "math_problem",
    "chunk_python_source",
    "normalise_text",
    "check_math_text",
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
            if rel in _EXCLUDED_FILES or fn.startswith("test_") or fn.startswith("_sysconfigdata"):
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


def _statement_pieces(lines: list[str], body: list[ast.stmt], lo: int, hi: int) -> list[tuple[int, int, ast.stmt | None]]:
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
    except Exception:  # pragma: no cover - defensive
        args = "..."
    ret = ""
    if node.returns is not None:
        try:
            ret = " -> " + ast.unparse(node.returns)
        except Exception:  # pragma: no cover
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
                        members.append(" |  " + _signature(sub) + "\n" + _indent(inspect.cleandoc(sdoc) + "\n", " |      "))
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

_FEMALE = ["Anna", "Maria", "Lena", "Sofia", "Emma", "Olivia", "Ava", "Mia", "Chloe", "Grace", "Lily", "Zoe",
           "Nora", "Ruth", "Alice", "Julia", "Hannah", "Sara", "Priya", "Mei", "Fatima", "Amara", "Elena", "Rosa",
           "Ines", "Leah", "Clara", "Tara", "Nina", "Ivy"]
_MALE = ["Tom", "James", "Leo", "Omar", "Ben", "Sam", "Jack", "Noah", "Liam", "Ethan", "Lucas", "David", "Carlos",
         "Ravi", "Kenji", "Ali", "Mark", "Paul", "Hugo", "Felix", "Oscar", "Max", "Daniel", "Peter", "Ivan",
         "Marco", "Jonah", "Adam", "Eli", "Theo"]


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
        name = r.choice(_FEMALE if female else _MALE)
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

    @property
    def r(self) -> str:
        """Just the result, formatted like the equation's right-hand side."""
        return ("$" if self.money else "") + _fmt(self.v, self.money)


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


_Problem = tuple[str, list[str], "_Eq"]

_SHOP_ITEMS = [("notebook", "notebooks"), ("pen", "pens"), ("apple", "apples"), ("book", "books"),
               ("toy car", "toy cars"), ("candle", "candles"), ("cupcake", "cupcakes"), ("shirt", "shirts"),
               ("ticket", "tickets"), ("plant", "plants"), ("mug", "mugs"), ("puzzle", "puzzles"),
               ("sandwich", "sandwiches"), ("bracelet", "bracelets"), ("comic book", "comic books"),
               ("pair of socks", "pairs of socks"), ("bag of rice", "bags of rice"), ("loaf of bread", "loaves of bread")]
_COUNT_ITEMS = ["stickers", "marbles", "cards", "stamps", "beads", "shells", "coins", "buttons", "pencils",
                "crayons", "candies", "cookies", "balloons", "blocks", "erasers", "rocks"]
_FOODS = ["apples", "oranges", "lemons", "peaches", "muffins", "carrots", "eggs", "tomatoes", "bananas", "plums"]
_CROPS = ["corn", "tomatoes", "beans", "carrots", "sunflowers", "lettuce", "peppers", "potatoes"]
_PRODUCTS = ["toys", "chairs", "bottles", "bricks", "shoes", "lamps", "boxes", "bicycles", "tables", "cups"]
_TASKS = [("wash a car", "wash", "cars"), ("paint a fence panel", "paint", "fence panels"),
          ("bake a cake", "bake", "cakes"), ("mow a lawn", "mow", "lawns"), ("clean a room", "clean", "rooms"),
          ("fix a bike", "fix", "bikes"), ("knit a scarf", "knit", "scarves")]


def _t_change(r: random.Random) -> _Problem:
    (p,) = _people(r, 1)
    item, items = r.choice(_SHOP_ITEMS)
    n = r.randint(2, 9)
    price = _money(r, 1, 15)
    total = _Eq(n, "*", _M(price), money=True)
    bill = next(b for b in (5, 10, 20, 50, 100, 200) if b >= total.v + 1)
    change = _Eq(_M(bill), "-", _M(total.v), money=True)
    q = r.choice([
        f"{p.name} buys {n} {items} that cost {_d(price)} each. {p.He} pays with a ${bill} bill. "
        f"How much change does {p.he} get?",
        f"One {item} costs {_d(price)}. {p.name} buys {n} of them and pays with a ${bill} bill. "
        f"How much change should {p.he} receive?",
    ])
    steps = [f"The {items} cost {total} in total.", f"{p.His} change is {change}."]
    return q, steps, change


def _t_two_items(r: random.Random) -> _Problem:
    (p,) = _people(r, 1)
    (i1, s1), (i2, s2) = r.sample(_SHOP_ITEMS, 2)
    a, b = r.randint(2, 8), r.randint(2, 8)
    p1, p2 = _money(r, 1, 12), _money(r, 1, 20)
    e1 = _Eq(a, "*", _M(p1), money=True)
    e2 = _Eq(b, "*", _M(p2), money=True)
    tot = _Eq(_M(e1.v), "+", _M(e2.v), money=True)
    q = f"{p.name} buys {a} {s1} at {_d(p1)} each and {b} {s2} at {_d(p2)} each. How much does {p.he} spend in total?"
    steps = [f"The {s1} cost {e1}.", f"The {s2} cost {e2}.", f"In total {p.he} spends {tot}."]
    return q, steps, tot


def _t_discount(r: random.Random) -> _Problem:
    item, _ = r.choice(_SHOP_ITEMS)
    price = r.randint(2, 40) * 5
    pct = r.choice([10, 15, 20, 25, 30, 40, 50])
    disc = _Eq(_M(price), "*", pct, "/", 100, money=True)
    sale = _Eq(_M(price), "-", _M(disc.v), money=True)
    q = r.choice([
        f"A {item} costs ${price}. It is on sale for {pct}% off. What is the sale price?",
        f"A store sells a {item} for ${price}. During a sale, the price is reduced by {pct}%. "
        f"How much does the {item} cost during the sale?",
    ])
    steps = [f"The discount is {disc}.", f"The sale price is {sale}."]
    return q, steps, sale


def _t_ages(r: random.Random) -> _Problem:
    a, b = _people(r, 2)
    x, y, z = r.randint(2, 30), r.randint(3, 40), r.randint(2, 15)
    age_a = _Eq(y, "+", x)
    if r.random() < 0.5:
        fut = _Eq(age_a.v, "+", z)
        q = f"{a.name} is {x} years older than {b.name}. {b.name} is {y} years old. How old will {a.name} be in {z} years?"
        steps = [f"{a.name} is {age_a} years old now.", f"In {z} years {a.he} will be {fut} years old."]
        return q, steps, fut
    tot = _Eq(age_a.v, "+", y)
    q = f"{b.name} is {y} years old. {a.name} is {x} years older than {b.name}. What is the sum of their ages?"
    steps = [f"{a.name} is {age_a} years old.", f"The sum of their ages is {tot}."]
    return q, steps, tot


def _t_age_times(r: random.Random) -> _Problem:
    a, b = _people(r, 2)
    k, y = r.randint(2, 6), r.randint(2, 15)
    age_a = _Eq(k, "*", y)
    diff = _Eq(age_a.v, "-", y)
    q = f"{a.name} is {k} times as old as {b.name}. If {b.name} is {y} years old, how many years older is {a.name}?"
    steps = [f"{a.name} is {age_a} years old.", f"{a.name} is {diff} years older than {b.name}."]
    return q, steps, diff


def _t_travel(r: random.Random) -> _Problem:
    (p,) = _people(r, 1)
    s1, s2 = r.randint(3, 14) * 5, r.randint(3, 14) * 5
    h1, h2 = r.randint(1, 5), r.randint(1, 4)
    d1 = _Eq(s1, "*", h1)
    d2 = _Eq(s2, "*", h2)
    tot = _Eq(d1.v, "+", d2.v)
    vehicle = r.choice(["drives", "rides a motorbike", "travels by train"])
    q = (f"{p.name} {vehicle} at {s1} miles per hour for {h1} hours, then at {s2} miles per hour for {h2} hours. "
         f"How many miles does {p.he} travel in total?")
    steps = [f"First {p.he} travels {d1} miles.", f"Then {p.he} travels {d2} miles.",
             f"In total {p.he} travels {tot} miles."]
    return q, steps, tot


def _t_production(r: random.Random) -> _Problem:
    prod = r.choice(_PRODUCTS)
    n, h, d = r.randint(5, 60), r.randint(4, 12), r.randint(2, 7)
    per_day = _Eq(n, "*", h)
    tot = _Eq(per_day.v, "*", d)
    place = r.choice(["A factory", "A workshop", "A machine", "A small company"])
    q = f"{place} makes {n} {prod} per hour. It works {h} hours a day. How many {prod} does it make in {d} days?"
    steps = [f"In one day it makes {per_day} {prod}.", f"In {d} days it makes {tot} {prod}."]
    return q, steps, tot


def _t_fraction_give(r: random.Random) -> _Problem:
    p, f = _people(r, 2)
    thing = r.choice(_COUNT_ITEMS)
    a, b = r.choice([(1, 2), (1, 3), (2, 3), (1, 4), (3, 4), (1, 5), (2, 5), (3, 5)])
    n = b * r.randint(3, 20)
    m = r.randint(2, 25)
    give = _Eq(n, "*", a, "/", b)
    left = _Eq(n, "-", give.v)
    now = _Eq(left.v, "+", m)
    q = (f"{p.name} has {n} {thing}. {p.He} gives {a}/{b} of them to {f.name}. Then {p.he} buys {m} more. "
         f"How many {thing} does {p.he} have now?")
    steps = [f"{p.He} gives away {give} {thing}.", f"{p.He} has {left} {thing} left.",
             f"After buying more, {p.he} has {now} {thing}."]
    return q, steps, now


def _t_percent_class(r: random.Random) -> _Problem:
    n = 20 * r.randint(1, 6)
    pct = 5 * r.randint(2, 18)
    girls = _Eq(n, "*", pct, "/", 100)
    boys = _Eq(n, "-", girls.v)
    where = r.choice(["in a class", "in a school club", "on a field trip", "in a music school"])
    q = f"There are {n} students {where}. {pct}% of them are girls. How many boys are there?"
    steps = [f"There are {girls} girls.", f"There are {boys} boys."]
    return q, steps, boys


def _t_savings(r: random.Random) -> _Problem:
    (p,) = _people(r, 1)
    thing = r.choice(["bike", "game console", "guitar", "telescope", "tablet", "pair of skates", "camera"])
    w, s, h = r.randint(2, 20), r.randint(2, 25), r.randint(0, 60)
    goal = h + s * w
    need = _Eq(goal, "-", h)
    weeks = _Eq(need.v, "/", s)
    q = (f"{p.name} wants to buy a {thing} that costs ${goal}. {p.He} has ${h} saved and saves ${s} each week. "
         f"How many weeks will it take {p.him} to have enough money?")
    steps = [f"{p.He} still needs {_Eq(_M(goal), '-', _M(h), money=True)}.", f"It will take {weeks} weeks."]
    return q, steps, weeks


def _t_recipe(r: random.Random) -> _Problem:
    a, b, m = r.randint(1, 5), r.choice([6, 8, 10, 12, 20, 24]), r.randint(2, 6)
    c = b * m
    ing = r.choice(["cups of flour", "eggs", "spoons of sugar", "cups of milk", "sticks of butter"])
    food = r.choice(["cookies", "pancakes", "muffins", "biscuits"])
    batches = _Eq(c, "/", b)
    need = _Eq(a, "*", batches.v)
    q = f"A recipe uses {a} {ing} to make {b} {food}. How many {ing} are needed to make {c} {food}?"
    steps = [f"{c} {food} is {batches} batches.", f"That needs {need} {ing}."]
    return q, steps, need


def _t_fence(r: random.Random) -> _Problem:
    l, w = r.randint(4, 40), r.randint(3, 30)
    if r.random() < 0.5:
        c = r.randint(2, 15)
        per = _Eq(2, "*", l, "+", 2, "*", w)
        cost = _Eq(per.v, "*", _M(c), money=True)
        q = (f"A rectangular garden is {l} meters long and {w} meters wide. Fencing costs ${c} per meter. "
             f"How much does it cost to put a fence around the garden?")
        steps = [f"The perimeter is {per} meters.", f"The fence costs {cost}."]
        return q, steps, cost
    k = r.randint(2, 9)
    area = _Eq(l, "*", w)
    seeds = _Eq(area.v, "*", k)
    q = (f"A rectangular field is {l} meters long and {w} meters wide. A farmer plants {k} seeds in each square "
         f"meter. How many seeds does the farmer plant?")
    steps = [f"The area is {area} square meters.", f"The farmer plants {seeds} seeds."]
    return q, steps, seeds


def _t_cartons(r: random.Random) -> _Problem:
    (p,) = _people(r, 1)
    k = r.choice([4, 6, 8, 10, 12])
    q_, rem = r.randint(2, 15), r.randint(1, k - 1)
    n = k * q_ + rem
    food = r.choice(_FOODS)
    full = _Eq(k, "*", q_)
    left = _Eq(n, "-", full.v)
    q = (f"{p.name} packs {n} {food} into boxes that hold {k} each. {p.He} fills as many boxes as possible. "
         f"How many {food} are left over?")
    steps = [f"{p.He} can fill {q_} boxes, which hold {full} {food}.", f"So {left} {food} are left over."]
    return q, steps, left


def _t_inventory(r: random.Random) -> _Problem:
    prod = r.choice(["shirts", "hats", "books", "plants", "bottles of juice", "lamps", "scarves", "kites"])
    a, b = r.randint(5, 60), r.randint(5, 60)
    n = a + b + r.randint(10, 200)
    c = r.randint(10, 120)
    sold = _Eq(a, "+", b)
    left = _Eq(n, "-", sold.v)
    now = _Eq(left.v, "+", c)
    d1, d2, d3 = r.choice([("Monday", "Tuesday", "Wednesday"), ("Thursday", "Friday", "Saturday"),
                           ("the morning", "the afternoon", "the evening")])
    q = (f"A store has {n} {prod}. It sells {a} on {d1} and {b} on {d2}. On {d3} it receives {c} more. "
         f"How many {prod} does the store have now?")
    steps = [f"The store sells {sold} {prod}.", f"It has {left} {prod} left.", f"Now it has {now} {prod}."]
    return q, steps, now


def _t_overtime(r: random.Random) -> _Problem:
    (p,) = _people(r, 1)
    w = r.randint(8, 30)
    h = r.randint(41, 55)
    base = _Eq(40, "*", _M(w), money=True)
    extra = _Eq(h, "-", 40)
    rate = _Eq(_M(w), "*", Fraction(3, 2), money=True)
    ot = _Eq(extra.v, "*", _M(rate.v), money=True)
    tot = _Eq(_M(base.v), "+", _M(ot.v), money=True)
    q = (f"{p.name} earns ${w} per hour. Hours over 40 in a week are paid at 1.5 times the normal rate. "
         f"{p.He} works {h} hours this week. How much does {p.he} earn?")
    steps = [f"For the first 40 hours {p.he} earns {base}.", f"{p.He} works {extra} extra hours.",
             f"The overtime rate is {rate} per hour.", f"The overtime pay is {ot}.", f"In total {p.he} earns {tot}."]
    return q, steps, tot


def _t_compare(r: random.Random) -> _Problem:
    a, b, c = _people(r, 3)
    thing = r.choice(_COUNT_ITEMS)
    x, y = r.randint(3, 40), r.randint(2, 25)
    k = r.choice([2, 3])
    word = {2: "twice", 3: "three times"}[k]
    nb = _Eq(x, "+", y)
    nc = _Eq(k, "*", nb.v)
    tot = _Eq(x, "+", nb.v, "+", nc.v)
    q = (f"{a.name} has {x} {thing}. {b.name} has {y} more {thing} than {a.name}. {c.name} has {word} as many "
         f"{thing} as {b.name}. How many {thing} do they have altogether?")
    steps = [f"{b.name} has {nb} {thing}.", f"{c.name} has {nc} {thing}.", f"Altogether they have {tot} {thing}."]
    return q, steps, tot


def _t_average(r: random.Random) -> _Problem:
    (p,) = _people(r, 1)
    k = r.choice([3, 4, 5])
    while True:
        scores = [r.randint(55, 100) for _ in range(k)]
        if sum(scores) % k == 0:
            break
    terms: list = []
    for i, s in enumerate(scores):
        if i:
            terms.append("+")
        terms.append(s)
    tot = _Eq(*terms)
    avg = _Eq(tot.v, "/", k)
    listed = ", ".join(str(s) for s in scores[:-1]) + f" and {scores[-1]}"
    q = f"{p.name} scored {listed} on {['', '', '', 'three', 'four', 'five'][k]} tests. What is {p.his} average score?"
    steps = [f"The total is {tot}.", f"The average is {avg}."]
    return q, steps, avg


def _t_task_time(r: random.Random) -> _Problem:
    (p,) = _people(r, 1)
    task, verb, objs = r.choice(_TASKS)
    m = r.choice([10, 12, 15, 20, 30, 40, 45])
    step = 60 // _math.gcd(60, m)
    n = step * r.randint(1, 6)
    mins = _Eq(n, "*", m)
    hours = _Eq(mins.v, "/", 60)
    q = f"It takes {p.name} {m} minutes to {task}. How many hours does it take {p.him} to {verb} {n} {objs}?"
    steps = [f"It takes {mins} minutes.", f"That is {hours} hours."]
    return q, steps, hours


def _t_dozens(r: random.Random) -> _Problem:
    (p,) = _people(r, 1)
    d = r.randint(1, 8)
    total = 12 * d
    u = r.randint(1, total - 1)
    food = r.choice(["eggs", "rolls", "donuts", "cookies", "roses"])
    n = _Eq(d, "*", 12)
    left = _Eq(n.v, "-", u)
    use = {"eggs": "uses", "rolls": "eats", "donuts": "gives away", "cookies": "sells", "roses": "gives away"}[food]
    q = f"{p.name} buys {d} dozen {food}. {p.He} {use} {u} of them. How many {food} are left?"
    steps = [f"{p.He} buys {n} {food}.", f"{left} {food} are left."]
    return q, steps, left


def _t_garden_rows(r: random.Random) -> _Problem:
    crop = r.choice(_CROPS)
    rows, per = r.randint(3, 20), r.randint(4, 30)
    total = rows * per
    dead = r.randint(1, total // 3)
    n = _Eq(rows, "*", per)
    left = _Eq(n.v, "-", dead)
    q = (f"A farmer plants {rows} rows of {crop} with {per} plants in each row. {dead} of the plants do not grow. "
         f"How many plants grow?")
    steps = [f"The farmer plants {n} plants.", f"{left} plants grow."]
    return q, steps, left


def _t_bus(r: random.Random) -> _Problem:
    n = r.randint(10, 60)
    a = r.randint(1, n - 1)
    b = r.randint(1, 30)
    x = _Eq(n, "-", a)
    y = _Eq(x.v, "+", b)
    c = r.randint(1, int(y.v))
    z = _Eq(y.v, "-", c)
    veh = r.choice(["bus", "train", "tram", "ferry"])
    q = (f"A {veh} starts with {n} passengers. At the first stop, {a} people get off and {b} people get on. "
         f"At the second stop, {c} people get off. How many passengers are on the {veh} now?")
    steps = [f"After {a} get off, there are {x} passengers.", f"After {b} get on, there are {y} passengers.",
             f"After {c} get off, there are {z} passengers."]
    return q, steps, z


def _t_reading(r: random.Random) -> _Problem:
    (p,) = _people(r, 1)
    x, d = r.randint(5, 40), r.randint(2, 14)
    if r.random() < 0.5:
        pages = x * d + r.randint(10, 300)
        read = _Eq(x, "*", d)
        left = _Eq(pages, "-", read.v)
        q = (f"A book has {pages} pages. {p.name} reads {x} pages every day. After {d} days, how many pages does "
             f"{p.he} still have to read?")
        steps = [f"{p.He} reads {read} pages.", f"{p.He} still has {left} pages to read."]
        return q, steps, left
    pages = x * d
    days = _Eq(pages, "/", x)
    q = f"A book has {pages} pages. {p.name} reads {x} pages every day. How many days does it take {p.him} to finish the book?"
    steps = [f"It takes {days} days."]
    return q, steps, days


def _t_profit(r: random.Random) -> _Problem:
    t, price = r.randint(20, 300), _money(r, 1, 12, (0, 0, 50))
    income = _Eq(t, "*", _M(price), money=True)
    cost = r.randint(10, max(10, int(income.v) - 1))
    prof = _Eq(_M(income.v), "-", _M(cost), money=True)
    who = r.choice(["The school club", "A bakery", "The football team", "A small theatre", "The art class"])
    what = r.choice(["tickets", "cakes", "raffle tickets", "T-shirts", "calendars"])
    q = f"{who} sells {t} {what} for {_d(price)} each. It spent ${cost} on supplies. How much profit does it make?"
    steps = [f"The sales bring in {income}.", f"The profit is {prof}."]
    return q, steps, prof


def _t_tank(r: random.Random) -> _Problem:
    rate, mins = r.randint(2, 25), r.randint(3, 40)
    start = r.randint(0, 200)
    cap = start + rate * mins
    need = _Eq(cap, "-", start)
    t = _Eq(need.v, "/", rate)
    q = (f"A tank holds {cap} liters of water. It already has {start} liters in it. A pump adds {rate} liters per "
         f"minute. How many minutes does it take to fill the tank?")
    steps = [f"The tank needs {need} more liters.", f"It takes {t} minutes."]
    return q, steps, t


def _t_bill(r: random.Random) -> _Problem:
    k = r.randint(2, 6)
    meal = 20 * k * r.randint(1, 4)
    pct = r.choice([10, 15, 20, 25])
    tip = _Eq(_M(meal), "*", pct, "/", 100, money=True)
    tot = _Eq(_M(meal), "+", _M(tip.v), money=True)
    each = _Eq(_M(tot.v), "/", k, money=True)
    q = (f"{k} friends eat at a restaurant. The meal costs ${meal}. They leave a {pct}% tip and split the total "
         f"equally. How much does each friend pay?")
    steps = [f"The tip is {tip}.", f"The total is {tot}.", f"Each friend pays {each}."]
    return q, steps, each


def _t_truck(r: random.Random) -> _Problem:
    w, n = r.randint(5, 60), r.randint(10, 80)
    cap = w * n
    a = r.randint(1, n - 1)
    fit = _Eq(cap, "/", w)
    more = _Eq(fit.v, "-", a)
    q = (f"Each box weighs {w} kilograms. A truck can carry {cap} kilograms. The truck already has {a} boxes on it. "
         f"How many more boxes can it carry?")
    steps = [f"The truck can carry {fit} boxes.", f"It can carry {more} more boxes."]
    return q, steps, more


def _t_legs(r: random.Random) -> _Problem:
    a2 = r.choice(["chickens", "ducks", "geese"])
    a4 = r.choice(["cows", "pigs", "sheep", "goats", "horses"])
    c, g = r.randint(2, 40), r.randint(2, 30)
    l2 = _Eq(c, "*", 2)
    l4 = _Eq(g, "*", 4)
    tot = _Eq(l2.v, "+", l4.v)
    q = f"A farm has {c} {a2} and {g} {a4}. How many legs do these animals have in total?"
    steps = [f"The {a2} have {l2} legs.", f"The {a4} have {l4} legs.", f"In total there are {tot} legs."]
    return q, steps, tot


def _t_ratio(r: random.Random) -> _Problem:
    a, b = r.choice([(1, 2), (2, 3), (3, 4), (1, 3), (2, 5), (3, 5), (4, 5), (1, 4), (5, 7)])
    if r.random() < 0.5:
        a, b = b, a
    k = r.randint(2, 15)
    n = (a + b) * k
    c1, c2 = r.sample(["red", "blue", "green", "yellow", "white", "black"], 2)
    thing = r.choice(["marbles", "beads", "balloons", "pens", "socks"])
    s = _Eq(a, "+", b)
    part = _Eq(n, "/", s.v)
    res = _Eq(a, "*", part.v)
    q = (f"The ratio of {c1} {thing} to {c2} {thing} in a box is {a}:{b}. There are {n} {thing} in total. "
         f"How many {c1} {thing} are there?")
    steps = [f"There are {s} parts in total.", f"Each part is {part} {thing}.", f"There are {res} {c1} {thing}."]
    return q, steps, res


def _t_walk(r: random.Random) -> _Problem:
    (p,) = _people(r, 1)
    m = r.choice([30, 60, 90, 120, 150, 180])
    s = 2 * r.randint(1, 8)
    h = _Eq(m, "/", 60)
    d = _Eq(s, "*", h.v)
    verb = r.choice(["walks", "jogs", "cycles", "skates"])
    q = f"{p.name} {verb} at {s} kilometers per hour. How many kilometers does {p.he} cover in {m} minutes?"
    steps = [f"{m} minutes is {h} hours.", f"{p.He} covers {d} kilometers."]
    return q, steps, d


def _t_chores(r: random.Random) -> _Problem:
    (p,) = _people(r, 1)
    a, b = r.choice([(1, 2), (1, 3), (2, 3), (1, 4), (3, 4), (1, 5), (2, 5)])
    while True:
        e, n = r.randint(2, 15), r.randint(2, 12)
        if (e * n) % b == 0:
            break
    earned = _Eq(n, "*", _M(e), money=True)
    spent = _Eq(_M(earned.v), "*", a, "/", b, money=True)
    left = _Eq(_M(earned.v), "-", _M(spent.v), money=True)
    toy = r.choice(["book", "game", "kite", "ball", "puzzle", "model plane"])
    q = (f"{p.name} earns ${e} for each chore. {p.He} does {n} chores and spends {a}/{b} of the money on a {toy}. "
         f"How much money does {p.he} have left?")
    steps = [f"{p.He} earns {earned}.", f"{p.He} spends {spent}.", f"{p.He} has {left} left."]
    return q, steps, left


def _t_growth(r: random.Random) -> _Problem:
    h, g, w = r.randint(2, 60), r.randint(1, 9), r.randint(2, 12)
    thing = r.choice(["plant", "tree", "sunflower", "bean plant", "puppy"])
    unit = "centimeters"
    grow = _Eq(g, "*", w)
    tall = _Eq(h, "+", grow.v)
    q = f"A {thing} is {h} {unit} tall. It grows {g} {unit} each week. How tall is it after {w} weeks?"
    steps = [f"It grows {grow} {unit}.", f"It is {tall} {unit} tall."]
    return q, steps, tall


def _t_doubling(r: random.Random) -> _Problem:
    (p,) = _people(r, 1)
    a = r.randint(2, 30)
    months = ["January", "February", "March", "April"]
    e1 = _Eq(a, "*", 2)
    e2 = _Eq(e1.v, "*", 2)
    e3 = _Eq(e2.v, "*", 2)
    tot = _Eq(a, "+", e1.v, "+", e2.v, "+", e3.v)
    q = (f"{p.name} saves ${a} in {months[0]}. Each month {p.he} saves twice as much as the month before. "
         f"How much does {p.he} save from {months[0]} to {months[3]}?")
    steps = [f"In {months[1]} {p.he} saves {e1}.", f"In {months[2]} {p.he} saves {e2}.",
             f"In {months[3]} {p.he} saves {e3}.", f"In total {p.he} saves {tot}."]
    return q, steps, tot


def _t_coins(r: random.Random) -> _Problem:
    (p,) = _people(r, 1)
    q_, d, n = r.randint(1, 15), r.randint(1, 15), r.randint(1, 15)
    e1, e2, e3 = _Eq(q_, "*", 25), _Eq(d, "*", 10), _Eq(n, "*", 5)
    tot = _Eq(e1.v, "+", e2.v, "+", e3.v)
    q = f"{p.name} has {q_} quarters, {d} dimes and {n} nickels. How many cents does {p.he} have?"
    steps = [f"The quarters are worth {e1} cents.", f"The dimes are worth {e2} cents.",
             f"The nickels are worth {e3} cents.", f"In total {p.he} has {tot} cents."]
    return q, steps, tot


def _t_pizza(r: random.Random) -> _Problem:
    k, s = r.randint(2, 6), r.choice([6, 8, 10, 12])
    total = k * s
    ppl = r.randint(2, 8)
    e = r.randint(1, max(1, total // ppl))
    food = r.choice([("pizzas", "slices"), ("pies", "pieces"), ("cakes", "pieces"), ("loaves", "slices")])
    n = _Eq(k, "*", s)
    eaten = _Eq(ppl, "*", e)
    left = _Eq(n.v, "-", eaten.v)
    q = (f"There are {k} {food[0]}, each cut into {s} {food[1]}. {ppl} people each eat {e} {food[1]}. "
         f"How many {food[1]} are left?")
    steps = [f"There are {n} {food[1]}.", f"The people eat {eaten} {food[1]}.", f"{left} {food[1]} are left."]
    return q, steps, left


def _t_tiles(r: random.Random) -> _Problem:
    t = r.choice([2, 3, 4, 5, 6, 9])
    while True:
        l, w = r.randint(4, 30), r.randint(3, 25)
        if (l * w) % t == 0:
            break
    area = _Eq(l, "*", w)
    n = _Eq(area.v, "/", t)
    q = f"A floor is {l} feet long and {w} feet wide. Each tile covers {t} square feet. How many tiles are needed?"
    steps = [f"The floor is {area} square feet.", f"It needs {n} tiles."]
    return q, steps, n


def _t_temperature(r: random.Random) -> _Problem:
    t, a = r.randint(-5, 25), r.randint(2, 15)
    b = r.randint(2, 20)
    noon = _Eq(t, "+", a)
    night = _Eq(noon.v, "-", b)
    city = r.choice(["In the morning", "At 6 a.m.", "At sunrise"])
    q = (f"{city} the temperature is {t} degrees. It rises {a} degrees by noon and then falls {b} degrees by night. "
         f"What is the temperature at night?")
    steps = [f"At noon it is {noon} degrees.", f"At night it is {night} degrees."]
    return q, steps, night


def _t_unit_price(r: random.Random) -> _Problem:
    (p,) = _people(r, 1)
    food = r.choice(_FOODS)
    n = r.choice([2, 4, 5, 10])
    unit = _money(r, 1, 4, (0, 25, 50, 75)) if n in (2, 4) else _money(r, 1, 4, (0, 20, 40, 60, 80))
    price = unit * n
    m = r.randint(2, 12)
    u = _Eq(_M(price), "/", n, money=True)
    cost = _Eq(m, "*", _M(u.v), money=True)
    q = f"{n} {food} cost {_d(price)}. How much do {m} {food} cost?"
    steps = [f"One costs {u}.", f"{m} cost {cost}."]
    return q, steps, cost


def _t_sum_after(r: random.Random) -> _Problem:
    a, b = _people(r, 2)
    thing = r.choice(_COUNT_ITEMS)
    x = r.randint(10, 80)
    g = r.randint(1, x - 1)
    y = r.randint(2, 50)
    ax = _Eq(x, "-", g)
    by = _Eq(y, "+", g)
    diff_word, diff = (("more", _Eq(ax.v, "-", by.v)) if ax.v >= by.v else ("fewer", _Eq(by.v, "-", ax.v)))
    q = (f"{a.name} has {x} {thing} and {b.name} has {y} {thing}. {a.name} gives {g} {thing} to {b.name}. "
         f"How many {diff_word} {thing} does {a.name} have than {b.name} now?")
    steps = [f"{a.name} has {ax} {thing}.", f"{b.name} has {by} {thing}.",
             f"{a.name} has {diff} {diff_word} {thing}."]
    return q, steps, diff


_TEMPLATES: list[Callable[[random.Random], _Problem]] = [
    _t_change, _t_two_items, _t_discount, _t_ages, _t_age_times, _t_travel, _t_production, _t_fraction_give,
    _t_percent_class, _t_savings, _t_recipe, _t_fence, _t_cartons, _t_inventory, _t_overtime, _t_compare,
    _t_average, _t_task_time, _t_dozens, _t_garden_rows, _t_bus, _t_reading, _t_profit, _t_tank, _t_bill,
    _t_truck, _t_legs, _t_ratio, _t_walk, _t_chores, _t_growth, _t_doubling, _t_coins, _t_pizza, _t_tiles,
    _t_temperature, _t_unit_price, _t_sum_after,
]
N_MATH_TEMPLATES = len(_TEMPLATES)


def math_problem(seed: int, index: int) -> str:
    """The ``index``-th generated problem for ``seed`` as text (a pure function of its arguments)."""
    r = random.Random(f"spot-math:{seed}:{index}")
    template = _TEMPLATES[r.randrange(len(_TEMPLATES))]
    q, steps, answer = template(r)
    if str(answer) not in steps[-1]:  # pragma: no cover - template bug
        raise AssertionError(f"{template.__name__}: the last step does not state the answer")
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
    out.mkdir(parents=True, exist_ok=True)
    manifest: dict = {
        "format_version": FORMAT_VERSION,
        "seed": seed,
        "total_mb": total_mb,
        "mix": mix,
        "heldout_fraction": heldout_fraction,
        "max_files": max_files,
        "max_chars": max_chars,
        "python": sys.version.split()[0],
        "math_templates": N_MATH_TEMPLATES,
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
