"""Corpus builder and tokenizer of the embedded target (docs/data.md)."""

import ast
import filecmp
import hashlib
import json
import random
import re
from fractions import Fraction

import numpy as np
import pytest

from spot.lab.pipeline import corpus
from spot.lab.pipeline.corpus import (build_corpus, check_math_text, chunk_python_source, math_problem,
                                      read_documents, split_of)

SMALL = dict(total_mb=0.25, max_files=6, heldout_fraction=0.2)


@pytest.fixture(scope="module")
def small_corpus(tmp_path_factory):
    out = tmp_path_factory.mktemp("corpus_a")
    manifest = build_corpus(out, seed=0, **SMALL)
    return out, manifest


def test_builder_is_deterministic(small_corpus, tmp_path):
    out_a, man_a = small_corpus
    man_b = build_corpus(tmp_path, seed=0, **SMALL)
    assert man_a == man_b
    for name in ("train.jsonl", "heldout.jsonl", "manifest.json"):
        assert filecmp.cmp(out_a / name, tmp_path / name, shallow=False), name
    # another seed changes the generated math, not the code
    other = build_corpus(tmp_path / "s1", seed=1, **SMALL)
    assert other["splits"]["train"]["sha256"] != man_a["splits"]["train"]["sha256"]


def test_small_corpus_has_every_source(small_corpus):
    out, man = small_corpus
    for src in ("code", "docs", "math"):
        assert man["splits"]["train"]["sources"][src]["documents"] > 0, src
    recs = list(read_documents(out, "train"))
    assert len(recs) == man["splits"]["train"]["documents"]
    assert all(r["text"].endswith("\n") and r["text"].strip() for r in recs)


def test_heldout_is_disjoint_by_document(small_corpus):
    out, man = small_corpus
    train = list(read_documents(out, "train"))
    held = list(read_documents(out, "heldout"))
    assert held, "held-out split is empty"
    assert {r["id"] for r in train}.isdisjoint({r["id"] for r in held})
    assert {r["group"] for r in train}.isdisjoint({r["group"] for r in held})
    assert {r["text"] for r in train}.isdisjoint({r["text"] for r in held})
    for r in train[:200]:
        assert split_of(r["group"], SMALL["heldout_fraction"]) == "train"
    for r in held:
        assert split_of(r["group"], SMALL["heldout_fraction"]) == "heldout"


def test_split_of_fraction():
    groups = [f"g{i}" for i in range(20000)]
    share = sum(split_of(g, 0.03) == "heldout" for g in groups) / len(groups)
    assert 0.025 < share < 0.035
    with pytest.raises(ValueError, match="heldout_fraction"):
        split_of("x", 1.5)


_EQ = re.compile(r"(-?\d+(?:\.\d+)?(?: [-+*/] -?\d+(?:\.\d+)?)+) = (-?\d+(?:\.\d+)?)")


def _independent_eval(expr: str) -> Fraction:
    """Evaluate 'a op b op c' with Python's own precedence over exact Fractions."""
    py = re.sub(r"\d+(?:\.\d+)?", lambda m: f"F('{m.group(0)}')", expr)
    tree = ast.parse(py, mode="eval")
    allowed = (ast.Expression, ast.BinOp, ast.UnaryOp, ast.Add, ast.Sub, ast.Mult, ast.Div, ast.USub, ast.Call,
               ast.Name, ast.Load, ast.Constant)
    assert all(isinstance(n, allowed) for n in ast.walk(tree)), expr
    return eval(compile(tree, "<expr>", "eval"), {"__builtins__": {}, "F": Fraction})


def test_math_answers_are_correct():
    seen_templates = set()
    n_eq = 0
    for seed in (0, 7):
        for i in range(1500):
            text = math_problem(seed, i)
            assert text.startswith("Question: ") and "\nSolution:\n" in text
            body = text.replace("$", "")
            sol = body.split("\nSolution:\n", 1)[1]
            last = None
            for m in _EQ.finditer(sol):
                assert _independent_eval(m.group(1)) == Fraction(m.group(2)), (m.group(0), text)
                last = Fraction(m.group(2))
                n_eq += 1
            answer = re.search(r"\nAnswer: (-?\d+(?:\.\d+)?)\n$", body)
            assert answer is not None, text
            assert last == Fraction(answer.group(1)), text
            check_math_text(text)  # the module's own checker agrees
            seen_templates.add(text.split("\n", 1)[0][:12])
    assert n_eq > 5000
    assert len(seen_templates) > 20  # many templates in play


def test_math_generator_is_pure_and_varied():
    assert math_problem(3, 41) == math_problem(3, 41)
    texts = [d.text for d in corpus.math_documents(0, max_docs=3000)]
    questions = {t.split("\nSolution:")[0] for t in texts}
    assert len(questions) == len(texts)  # de-duplicated
    with pytest.raises(AssertionError):
        check_math_text("Question: q\nSolution:\nShe buys 3 * 4 = 13 apples.\nAnswer: 13\n")


# SHA-256 of "".join(math_problem(0, i) for i in range(2000)), computed from the template code the shipped model's
# corpus was generated with. It changes if any template's text, arithmetic or order of random draws changes: the
# corpus must stay reproducible byte for byte.
MATH_SHA256_SEED0_2000 = "320ec1abfe3fd592724ce2eb91d3e924b8bdae4f44b575548639b24da7b3ab85"


def test_math_problems_are_byte_identical_to_the_training_corpus():
    text = "".join(math_problem(0, i) for i in range(2000))
    assert hashlib.sha256(text.encode("utf-8")).hexdigest() == MATH_SHA256_SEED0_2000


def _template_paths(template):
    """Every way through a word-problem template: each `either` branch (its let lines after the template's) with
    each of its question variants, as a template without choices."""
    branches = [{**b, "let": template.get("let", []) + b.get("let", [])} for b in template.get("either", [])]
    for b in branches or [template]:
        questions = b["question"] if isinstance(b["question"], list) else [b["question"]]
        for q in questions:
            yield {k: v for k, v in b.items() if k != "either"} | {"question": q}


def test_every_word_problem_template_is_used_and_correct():
    lists, templates = corpus._word_problems()
    names = [t["name"] for t in templates]
    assert len(names) == len(set(names)) == 38
    assert {"FEMALE", "MALE", "SHOP_ITEMS", "COUNT_ITEMS", "FOODS"} <= set(lists)
    # math_problem picks the template with the first draw of its generator: all of them occur in the first 2000
    picked = {random.Random(f"spot-math:0:{i}").randrange(len(templates)) for i in range(2000)}
    assert picked == set(range(len(templates)))
    n_paths = 0
    for t in templates:
        for path in _template_paths(t):
            n_paths += 1
            for s in range(150):
                q, steps, answer = corpus._word_problem(path, random.Random(s))
                assert "{" not in q + "".join(steps) and str(answer) in steps[-1], (t["name"], q, steps)
                text = f"Question: {q}\nSolution:\n" + "\n".join(steps) + f"\nAnswer: {corpus._fmt(answer.v)}\n"
                n_eq, got = check_math_text(text)
                assert got == answer.v and n_eq >= 1, (t["name"], text)
    assert n_paths == 38 + 3 + 2  # ages, fence, reading have two endings; change, discount two questions


def test_word_problem_lines_are_data_not_code():
    bad = {"let": ["x = ().__class__"], "question": "{x}", "steps": ["{x}"], "answer": "x"}
    with pytest.raises(ValueError, match="not a plain assignment"):
        corpus._word_problem(bad, random.Random(0))
    with pytest.raises(ValueError, match="not a plain assignment"):
        corpus._word_problem({**bad, "let": ["import os"]}, random.Random(0))
    ok = {"let": ["a, b = randint(1, 9), randint(1, 9) until a < b", "c = eq(b - a)", "d = eq($c * 1.5)"],
          "question": "{a} {b}?", "steps": ["It is {c}, then {d}."], "answer": "d"}
    q, steps, answer = corpus._word_problem(ok, random.Random(3))
    a, b = map(int, q[:-1].split())
    half_again = corpus._d((b - a) * Fraction(3, 2))
    assert a < b and steps == [f"It is {b} - {a} = {b - a}, then ${b - a} * 1.5 = {half_again}."]
    assert answer.money


def test_long_class_is_chunked_into_valid_python():
    methods = "\n".join(
        f"    def method_{i}(self, x):\n        \"\"\"Doc {i}.\"\"\"\n" + "".join(
            f"        x = x + {j}\n" for j in range(8)) + "        return x\n" for i in range(40))
    src = ("import os\n\n\n@decorator\nclass Big(Base):\n    \"\"\"A big class.\"\"\"\n\n" + methods
           + "\n\ndef tail():\n    return 1\n")
    chunks = chunk_python_source(src, max_chars=1000)
    assert len(chunks) > 4
    for c in chunks:
        ast.parse(c)
        assert len(c) <= 1100
    assert sum(c.count("def method_") for c in chunks) == 40
    assert all("class Big(Base):" in c for c in chunks if "def method_" in c)


# ------------------------------------------------------------------------------------------- tokenizer

@pytest.fixture(scope="module")
def tokenizer_mod():
    # Skips only the tokenizer tests where spot.lab.pipeline.tokenizer is absent (a module-level importorskip skipped
    # the whole file, the corpus tests included).
    return pytest.importorskip("spot.lab.pipeline.tokenizer")


@pytest.fixture(scope="module")
def tok(tokenizer_mod):
    return tokenizer_mod.load_tokenizer()


CODE = '''class Stack:
    """A LIFO stack."""

    def __init__(self, items=None):
        self._items = list(items or [])

    def push(self, x):
        if x is None:
            raise ValueError("x must not be None")
        self._items.append(x)

\tdef odd_tab(self):  # tabs, unicode: café → ∑
\t\treturn {"k": [1, 2.5, 0x1F], 'q': f"{self!r:>10}"}
'''
MATH = math_problem(0, 5) + math_problem(0, 6)


def test_special_ids(tok):
    assert (tok.pad_id, tok.eos_id, tok.mask_id) == (0, 1, 2)
    assert [tok.token_to_id(t) for t in ("<|pad|>", "<|eos|>", "<|mask|>")] == [0, 1, 2]
    assert tok.vocab_size == 4096


@pytest.mark.parametrize("text", [CODE, MATH, "", " leading and trailing  \n\n", "x\r\ny\n\n\n  z",
                                  "日本語 ünïcødé 🙂"])
def test_shipped_tokenizer_round_trips(tok, text):
    ids = tok.encode(text)
    assert all(3 <= i < tok.vocab_size for i in ids)
    assert tok.decode(ids) == text


def test_indentation_is_one_token(tok):
    for n in (4, 8, 12, 16):
        ids = tok.encode("x\n" + " " * n + "return y")
        assert len(tok.encode("\n" + " " * n)) == 1, n
        assert tok.decode(ids[1:2]) == "\n" + " " * n


def test_decode_special_tokens(tok):
    ids = tok.encode("a = 1") + [tok.mask_id, tok.eos_id] + tok.encode("b")
    assert tok.decode(ids) == "a = 1b"
    assert tok.decode(ids, skip_special_tokens=False) == "a = 1<|mask|><|eos|>b"
    assert tok.decode(np.array(ids)) == "a = 1b"
    with pytest.raises(ValueError, match="ids"):
        tok.decode([tok.vocab_size])
    with pytest.raises(TypeError):
        tok.encode(b"bytes")


def test_load_missing_tokenizer(tokenizer_mod, tmp_path):
    with pytest.raises(FileNotFoundError):
        tokenizer_mod.load_tokenizer(tmp_path / "nope.json")


def test_training_is_deterministic(tokenizer_mod, small_corpus, tmp_path):
    out, _ = small_corpus
    a = tokenizer_mod.train_tokenizer(out, vocab_size=600)
    b = tokenizer_mod.train_tokenizer(out, vocab_size=600)
    assert a.backend.to_str() == b.backend.to_str()
    assert a.vocab_size == 600 and (a.pad_id, a.eos_id, a.mask_id) == (0, 1, 2)
    a.save(tmp_path / "t.json")
    c = tokenizer_mod.load_tokenizer(tmp_path / "t.json")
    assert c.fingerprint() == a.fingerprint()
    assert c.decode(c.encode(CODE)) == CODE


def test_encode_documents(tokenizer_mod, small_corpus, tok, tmp_path):
    out, man = small_corpus
    arr = tokenizer_mod.encode_documents(out, tok, "heldout")
    assert arr.dtype == np.uint16
    texts = [r["text"] for r in read_documents(out, "heldout")]
    assert int((arr == tok.eos_id).sum()) == len(texts) and arr[-1] == tok.eos_id
    cuts = np.flatnonzero(arr == tok.eos_id)
    starts = np.concatenate(([0], cuts[:-1] + 1))
    assert [tok.decode(arr[s:e]) for s, e in zip(starts, cuts)] == texts
    assert (out / "tokens_heldout.npy").is_file()
    meta = json.loads((out / "tokens_heldout.json").read_text())
    assert meta["tokens"] == arr.size and meta["tokenizer_sha256"] == tok.fingerprint()
    again = tokenizer_mod.encode_documents(out, tok, "heldout")  # from the cache
    assert np.array_equal(arr, again)
    with pytest.raises(ValueError, match="split"):
        tokenizer_mod.encode_documents(out, tok, "validation")
