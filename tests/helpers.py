"""Shared test helpers, in one place: the backend targets every family test is parametrized by, the CPU build of the
CUDA kernels (the SIMT emulation), random inputs of every op, and the CUDA-graph capture harness.

bench/common.py imports the input generators and the capture harness from here, so tests and benchmarks build the
same inputs.

Backends (the `backend` fixture of tests/conftest.py, parametrized indirectly with these names):
  - "reference": the pure-PyTorch oracle, on CPU tensors;
  - "triton": the Triton kernels, on the GPU when there is one, else on CPU tensors in Triton's interpreter
    (tests/conftest.py sets TRITON_INTERPRET=1);
  - "cuda-emulation": csrc/cuda/*.cu compiled with g++ under -DSPOT_EMULATE (csrc/cuda/emulate.h) and run by a CPU
    SIMT emulation on CPU tensors; by default only where no GPU is present (SPOT_TEST_CUDA_EMULATION=1 forces it,
    =0 skips it). It checks the kernels' logic (indexing, reductions, merges, launch sequences), not speed,
    registers or the GPU memory model;
  - "cuda": the compiled CUDA kernels on the GPU;
  - "cpu": the C++ CPU kernels (csrc/cpu/) on CPU tensors, for the ops of CPU_OPS only (the tree_attention family,
    attention and tree masks, has none: its tests do not take "cpu", so nothing there passes for it).
A backend that cannot run here is skipped, never passed.
"""

from __future__ import annotations

import hashlib
import math
import os
import shutil
import threading

import torch

try:
    import pytest
except ImportError:  # bench/gpu_bench.py imports the input generators where pytest may be missing
    pytest = None

import spot_kernels
from spot_kernels import backends, registry
from spot_kernels.ops import OPS

I64 = torch.int64
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ON_GPU_DEVICE = torch.cuda.is_available()
WITH_CUDA = bool(spot_kernels.HAS_C_EXTENSION and getattr(spot_kernels._C, "WITH_CUDA", 0))
ON_GPU = WITH_CUDA and ON_GPU_DEVICE
WITH_CPU = bool(spot_kernels.HAS_C_EXTENSION and getattr(spot_kernels._C, "WITH_CPU", 0))
# the ops csrc/cpu/ has a kernel for
CPU_OPS = ("commit_rule", "expand_frontier", "expand_steps", "noise_uniform", "order_logits", "score",
           "select_children", "verify_steps", "verify_tree")
DEVICE = torch.device("cuda" if ON_GPU_DEVICE else "cpu")
BACKENDS = ("reference", "triton", "cuda-emulation", "cuda", "cpu")
CUDA_KERNELS = ("cuda-emulation", "cuda")  # the CUDA C++ kernels: on the GPU, or emulated on CPU
CPP_KERNELS = CUDA_KERNELS + ("cpu",)  # every C++ kernel: the CUDA ones and the CPU ones (CPU_OPS only)
KERNEL_BACKENDS = ("triton",) + CPP_KERNELS  # every backend held to the reference (CPU_OPS for "cpu")
NO_CPU_REASON = "needs spot_kernels._C built with the C++ CPU kernels (csrc/cpu/, spot_kernels._C.WITH_CPU)"
gpu_only = pytest.mark.skipif(not ON_GPU_DEVICE, reason="needs a CUDA GPU") if pytest else None
needs_cpu_build = pytest.mark.skipif(not WITH_CPU, reason=NO_CPU_REASON) if pytest else None

# The cpu backend against the reference, on the same inputs: identical tokens, top-K ids, commit positions, children,
# accepted chains and noise words; probabilities and log-probabilities within PROB_TOL. The reference's softmax sums
# V float32 terms in float32; the kernel sums chunks in double, so most of the difference is the reference's own
# rounding: over float16 / bfloat16 / float32 logits, V up to 151,936 and logit scales up to 10, the largest measured
# |p_cpu - p_ref| was 1.4e-5 (2.3e-5 relative, probabilities >= 1e-6; the kernel's error against a float64 softmax
# stayed below 7e-7 relative) and 2.6e-14 for float64 (neg_entropy: 5.9e-5 and 2.8e-14 absolute). PROB_TOL covers
# the smaller shapes tested: (rtol, atol) by compute dtype; neg_entropy, a sum over V of p log p, is compared with
# the absolute tolerance scaled by log(V) + 1.
PROB_TOL = {torch.float32: (1e-5, 2e-6), torch.float64: (1e-12, 1e-13)}


def assert_probs_close(a, b, cdtype, scale=1.0):
    """The cpu backend's probabilities `a` against the reference's `b` within PROB_TOL[cdtype] (atol times scale)."""
    rtol, atol = PROB_TOL[cdtype]
    assert a.dtype == b.dtype and a.shape == b.shape
    assert torch.equal(torch.isnan(a), torch.isnan(b))
    torch.testing.assert_close(a, b, rtol=rtol, atol=atol * scale, equal_nan=True)


# ------------------------------------------------------------------------------------------------ targets

class Target:
    """One backend on one device: run(op, *args) calls its kernel of `op` (schema arguments without backend)."""

    def __init__(self, name: str, device, emulated_ops=None):
        self.name = name
        self.device = torch.device(device)
        self.emulated_ops = emulated_ops

    def run(self, op, *args):
        if self.emulated_ops is not None:
            return getattr(self.emulated_ops, f"_{op}_cuda")(*args)
        return getattr(torch.ops.spot, op)(*args, backend=self.name)

    @staticmethod
    def ref(op, *args):
        """The reference on the same tensors."""
        return getattr(torch.ops.spot, op)(*args, backend="reference")

    def both(self, op, *args):
        """(this backend's output, the reference's output)."""
        return self.run(op, *args), self.ref(op, *args)

    def to(self, *values):
        return tuple(v.to(self.device) if isinstance(v, torch.Tensor) else v for v in values)

    def opcheck(self, op, *args):
        """torch.library.opcheck of this backend's kernel of `op`: the emulated private op itself, else the public op
        with this backend (its router and kernel)."""
        if self.emulated_ops is not None:
            return torch.library.opcheck(getattr(self.emulated_ops, f"_{op}_cuda").default, args)
        return torch.library.opcheck(getattr(torch.ops.spot, op).default, args, {"backend": self.name})


def target(name: str, request) -> Target:
    """The Target of a backend name, or pytest.skip when it cannot run here."""
    if name == "reference":
        return Target("reference", "cpu")
    if name == "triton":
        if not backends.triton_importable():
            pytest.skip("triton is not installed")
        if DEVICE.type == "cpu" and os.environ.get("TRITON_INTERPRET") != "1":
            pytest.skip("no GPU and TRITON_INTERPRET is not 1")
        return Target("triton", DEVICE)
    if name == "cuda":
        if not ON_GPU:
            pytest.skip("needs a CUDA GPU and the CUDA build of spot_kernels._C")
        return Target("cuda", "cuda")
    if name == "cuda-emulation":
        return Target("cuda", "cpu", request.getfixturevalue("cuda_emulation"))
    if name == "cpu":
        if not WITH_CPU:
            pytest.skip(NO_CPU_REASON)
        return Target("cpu", "cpu")
    raise ValueError(f"unknown backend {name!r}; expected one of {BACKENDS}")


_emulation_libraries = []


def build_cuda_emulation():
    """torch.ops.spot_emu: every csrc/cuda/<family>.cu built with g++ -DSPOT_EMULATE (or pytest.skip)."""
    mode = os.environ.get("SPOT_TEST_CUDA_EMULATION", "")
    if mode == "0":
        pytest.skip("SPOT_TEST_CUDA_EMULATION=0")
    if ON_GPU and mode != "1":
        pytest.skip("the real kernels run on this GPU (SPOT_TEST_CUDA_EMULATION=1 runs the emulation too)")
    if shutil.which(os.environ.get("CXX", "c++")) is None:
        pytest.skip("no C++ compiler for the emulation build")
    from torch.utils import cpp_extension

    # The schemas come from the one Python definition, as for the shipped extension (spot_kernels/registry.py), and
    # the fake implementations from the public ops' (the private schema is the public one without `backend`), so
    # that torch.library.opcheck can check the emulated kernels as it checks the public ops.
    if not hasattr(torch.ops.spot_emu, "_score_cuda"):
        lib = registry.define_schemas(OPS.values(), "spot_emu", public=False)
        for d in OPS.values():
            torch.library.register_fake(f"spot_emu::_{d.name}_cuda", d.fake, lib=lib)
        _emulation_libraries.append(lib)
    build = os.path.join(ROOT, "build", "cuda_emulation")
    os.makedirs(build, exist_ok=True)
    cuda_dir = os.path.join(ROOT, "csrc", "cuda")
    sources = []
    for family in sorted({f for f in spot_kernels.ops.FAMILIES.values()}):
        if not os.path.exists(os.path.join(cuda_dir, family + ".cu")):
            continue  # a family without a CUDA kernel (tests/ops/test_registry.py, WITHOUT_CUDA_KERNEL)
        wrapper = os.path.join(build, f"emu_{family}.cpp")
        text = f'#include "{os.path.join(cuda_dir, family + ".cu")}"\n'
        if not os.path.exists(wrapper) or open(wrapper).read() != text:
            with open(wrapper, "w") as f:
                f.write(text)
        sources.append(wrapper)
    # Headers are not tracked by the build's dependency check: hash them into the extension name.
    digest = hashlib.sha1()
    for name in sorted(os.listdir(cuda_dir)):
        with open(os.path.join(cuda_dir, name), "rb") as f:
            digest.update(f.read())
    cpp_extension.load(name=f"spot_cuda_emulation_{digest.hexdigest()[:12]}", sources=sources,
                       extra_cflags=["-DSPOT_EMULATE", "-O2", "-Wno-unknown-pragmas"], build_directory=build,
                       is_python_module=False, verbose=False)
    return torch.ops.spot_emu


# ------------------------------------------------------------------------------------------------- inputs
# Each generator draws with a generator on `device` (seeded: the same values on every run) and returns tensors there.

def _generator(seed, device):
    """(generator, keyword arguments that draw with it on `device`)."""
    g = torch.Generator(device=device).manual_seed(seed)
    return g, {"generator": g, "device": device}


def score_inputs(lead, block, vocab, dtype=torch.float32, seed=0, scale=3.0, mask_p=0.7, peaked=False,
                 device="cpu"):
    """(logits [*lead, block, vocab], masked, rows, block_start, steps) for spot::score.

    peaked: rows like a language model's, a few strong candidates over a broad tail (else scale * N(0, 1)).
    """
    g, kw = _generator(seed, device)
    logits = torch.randn(*lead, block, vocab, dtype=torch.float64, **kw) * (2.5 if peaked else scale)
    if peaked:
        top = torch.randint(0, vocab, (*lead, block, 4), **kw)
        logits.scatter_add_(-1, top, 8 + 4 * torch.rand(top.shape, dtype=torch.float64, **kw))
    masked = torch.rand(*lead, block, **kw) < mask_p
    rows = torch.randint(0, 1000, lead, **kw)
    block_start = torch.randint(0, 4096, lead, **kw)
    steps = torch.randint(0, block + 1, lead, **kw)
    return logits.to(dtype), masked, rows, block_start, steps


def children_inputs(frontier, block, top, k, pdt=torch.float32, qdt=torch.float32, temperature=1.0, seed=0,
                    expand=False, vocab=32000, device="cpu"):
    """Every argument of spot::select_children, with NaN / -inf / tied logits, zero and padded stale entries."""
    g, kw = _generator(seed, device)
    logits = torch.randn(frontier, block, dtype=torch.float64, **kw).to(pdt)
    if frontier and block > 3:
        logits[0, 1] = math.nan
        logits[0, 2] = -math.inf
        logits[-1, 0] = logits[-1, 3]  # an exact tie
    masked = torch.rand(frontier, block, **kw) < 0.7
    path = torch.randn(frontier, dtype=torch.float64, **kw).to(pdt)
    probs = torch.softmax(torch.randn(frontier, block, top, dtype=torch.float64, **kw), -1).to(qdt)
    ids = torch.randint(0, vocab, (frontier, block, top), **kw)
    if top > 1:
        ids[..., -1] = -1
        zero = torch.rand(frontier, block, **kw) < 0.2
        probs[..., 0] = torch.where(zero, 0.0, probs[..., 0].double()).to(qdt)
    if expand:
        probs, ids = probs[:, :, :1].expand(frontier, block, top), ids[:, :1, :].expand(frontier, block, top)
    rows, bs, steps = (torch.randint(0, 100, (frontier,), **kw) for _ in range(3))
    return logits, masked, path, probs, ids, 77 + seed, rows, bs, steps, temperature, k


def random_tree(rng, n, width, vocab=5, p_inactive=0.1, p_match=0.7):
    """One valid row as Python lists, for the brute-force oracle: drafts often equal the parent's target commit, so
    deep chains get accepted. Returns (parents, draft_pos, draft_tokens, target_pos, target_tokens).

    Valid as spot::verify_tree requires: no path commits a block position twice. Nodes are drawn in order, each
    keeping the positions committed on its path (its own draft and its ancestors'); a draft takes a position not yet
    committed on the parent's path, a target one not committed on the node's own path (-1 when none is left). A node
    whose drawn parent has a full path (every position committed) hangs from the grandparent instead."""
    parents, draft_pos, draft_tok, target_pos, target_tok = [], [], [], [], []
    committed = []  # committed[i]: the positions drafted on the root -> i path (empty for inactive nodes)
    for i in range(n):
        par = -1 if i == 0 or rng.random() < p_inactive else rng.randrange(i)
        if par >= 0 and len(committed[par]) == width:
            par = parents[par]  # a full path is at depth `width`: its parent's path has one free position
        parents.append(par)
        if par >= 0:
            if target_pos[par] >= 0 and rng.random() < p_match:
                pos, tok = target_pos[par], target_tok[par]
            else:
                pos = rng.choice([p for p in range(width) if p not in committed[par]])
                tok = rng.randrange(vocab)
            committed.append(committed[par] | {pos})
        else:
            pos, tok = rng.randrange(width), rng.randrange(vocab)  # the root's (or an inactive node's) draft is unused
            committed.append(frozenset())
        draft_pos.append(pos)
        draft_tok.append(tok)
        free = [p for p in range(width) if p not in committed[i]]
        t = rng.choice(free) if free and rng.random() >= 0.15 else rng.choice([-1] + free)
        target_pos.append(t)
        tok = rng.randrange(vocab)
        target_tok.append(tok if t >= 0 else rng.choice([-1, tok]))
    return parents, draft_pos, draft_tok, target_pos, target_tok


def random_trees(batch, nodes, block, seed=0, hit=0.6, p_inactive=0.05, vocab=50, device="cpu"):
    """Every argument of spot::verify_tree for `batch` random valid trees of `nodes` nodes, as tensors: a draft equals
    its parent's target commit with probability `hit`, else it is a valid position that misses.

    Valid as spot::verify_tree requires: no path commits a block position twice (the generator of random_tree, drawn
    node by node and vectorised over the batch). A draft that misses takes a position not committed on the parent's
    path other than the parent's target commit (the hit when that is the only one left); a target takes -1 with
    probability 1 / (block + 1), else a position not committed on the node's path (-1 when none is left). Drawn on
    the CPU (the node loop is host work), then moved to `device`."""
    g, kw = _generator(seed, "cpu")
    node = torch.arange(nodes)
    ar = torch.arange(batch)
    drawn = (torch.rand(batch, nodes, **kw) * node).long().where(node > 0, -1)
    drawn = torch.where(torch.rand(batch, nodes, **kw) < p_inactive, -1, drawn)  # inactive nodes
    hits = torch.rand(batch, nodes, **kw) < hit
    no_target = torch.rand(batch, nodes, **kw) < 1 / (block + 1)
    miss_noise = torch.rand(batch, nodes, block, **kw)
    target_noise = torch.rand(batch, nodes, block, **kw)
    target_tok = torch.randint(0, vocab, (batch, nodes), **kw)
    parents = torch.full((batch, nodes), -1, dtype=I64)
    draft_pos = torch.zeros(batch, nodes, dtype=I64)
    target_pos = torch.full((batch, nodes), -1, dtype=I64)
    committed = torch.zeros(batch, nodes, block, dtype=torch.bool)  # positions drafted on the root -> i path
    positions = torch.arange(block)
    for i in range(nodes):
        par = drawn[:, i]
        if i > 0:
            pc = par.clamp(min=0)
            full = committed[ar, pc].all(-1) & (par >= 0)
            par = torch.where(full, parents[ar, pc], par)  # a full path: hang from the grandparent (one free slot)
            pc = par.clamp(min=0)
            taken = committed[ar, pc]
            parent_target = target_pos[ar, pc]
            miss_ok = ~taken & (positions != parent_target[:, None])
            miss = torch.where(miss_ok, miss_noise[:, i], -1.0).argmax(-1)
            hit_i = (parent_target >= 0) & (hits[:, i] | ~miss_ok.any(-1))
            draft_pos[:, i] = torch.where(hit_i, parent_target, miss)
            parents[:, i] = par
            own = torch.nn.functional.one_hot(draft_pos[:, i], block).bool()
            committed[:, i] = (taken | own) & (par >= 0)[:, None]
        free = ~committed[:, i]
        pick = torch.where(free, target_noise[:, i], -1.0).argmax(-1)
        target_pos[:, i] = torch.where(no_target[:, i] | ~free.any(-1), -1, pick)
    draft_tok = target_tok.gather(1, parents.clamp(min=0))
    block_state = torch.randint(0, vocab, (batch, block), **kw)
    out = parents, draft_pos, draft_tok, target_pos, target_tok, block_state
    return tuple(t.to(device) for t in out)


def commit_rule_inputs(lead, block, rule="threshold:0.9,steps:8", seed=0, mask_p=0.7, device="cpu"):
    """Every argument of spot::commit_rule: confidences like probabilities (skewed towards 1, NaN at 2%: no valid
    token), masks, step indices in [0, 8) and the tables of `rule` (spot.rules)."""
    from spot.rules import parse_rule

    g, kw = _generator(seed, device)
    conf = 1 - torch.rand(*lead, block, **kw) ** 3
    conf = torch.where(torch.rand(*lead, block, **kw) < 0.02, math.nan, conf)
    masked = torch.rand(*lead, block, **kw) < mask_p
    steps = torch.randint(0, 8, lead, **kw)
    tables = parse_rule(rule).tables(block, device)
    return conf, masked, steps, tables.quota, tables.thresholds, tables.inclusive


def step_trees(batch, nodes, block, seed=0, hit=0.7, per_step=3, vocab=50, device="cpu"):
    """Every argument of spot::verify_steps for `batch` random trees: node i hangs from a random earlier node, its
    state is the parent's successor with probability `hit`, else that successor with one token changed; each node
    commits about `per_step` of its masked positions (token id `vocab` is the mask). Drawn on the CPU (the node loop
    is host work), then moved to `device`. block >= 1."""
    g, kw = _generator(seed, "cpu")
    node = torch.arange(nodes)
    ar = torch.arange(batch)
    parents = (torch.rand(batch, nodes, **kw) * node).long().where(node > 0, -1)
    states = torch.full((batch, nodes, block), vocab, dtype=I64)
    commit = torch.zeros(batch, nodes, block, dtype=torch.bool)
    tokens = torch.randint(0, vocab, (batch, nodes, block), **kw)
    for i in range(nodes):
        if i > 0:
            par = parents[:, i]
            successor = torch.where(commit[ar, par], tokens[ar, par], states[ar, par])
            pos = torch.randint(0, block, (batch,), **kw)
            miss = torch.rand(batch, **kw) >= hit
            successor[ar, pos] = torch.where(miss, (successor[ar, pos] + 1) % (vocab + 1), successor[ar, pos])
            states[:, i] = successor
        commit[:, i] = (states[:, i] == vocab) & (torch.rand(batch, block, **kw) < per_step / block)
    return tuple(t.to(device) for t in (parents, states, commit, tokens))


def random_tree_configs(count, seed=0):
    """(key_start list, prefix_len, num_new, num_nodes, block_size) of random tree-mask layouts."""
    import random

    rng = random.Random(seed)
    for _ in range(count):
        prefix_len = rng.randint(0, 40)
        num_new = rng.randint(0, prefix_len)
        num_nodes = rng.randint(0, 4)
        block_size = rng.randint(1, 6)
        b = rng.randint(0, 3)
        key_start = [rng.randint(0, prefix_len) for _ in range(b)]
        yield key_start, prefix_len, num_new, num_nodes, block_size


def attention_inputs(b, hq, hkv, n, block, prefix, dim, dtype=torch.float64, seed=0, device="cpu"):
    """(q, k_prefix, v_prefix, k_nodes, v_nodes) of spot::tree_attention, N(0, 1) drawn in float64."""
    g, kw = _generator(seed, device)

    def rnd(*shape):
        return torch.randn(*shape, dtype=torch.float64, **kw).to(dtype)

    return (rnd(b, hq, n, block, dim), rnd(b, hkv, prefix, dim), rnd(b, hkv, prefix, dim),
            rnd(b, hkv, n, block, dim), rnd(b, hkv, n, block, dim))


def ragged_key_start(b, prefix, step=5, device="cpu"):
    """Left padding that differs per row: key_start[r] = (step * r) % (prefix + 1)."""
    return torch.tensor([(step * r) % (prefix + 1) for r in range(b)], dtype=I64, device=device)


# --------------------------------------------------------------------------------------------- CUDA graphs

def capture(fn, calls=1):
    """Warm `fn` up on a side stream, then capture `calls` calls of it in a CUDA graph: (graph, last outputs).

    The outputs live in the graph's memory: every replay rewrites them from the inputs' current contents.
    """
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(2):
            fn()  # compiles the kernels and warms the allocator outside the capture
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(calls):
            out = fn()
    return graph, out


def assert_score_equal(got, want, probs_atol=2e-6, cpu_scale=None):
    """A backend's score outputs against the reference's: integers equal, probabilities close. cpu_scale (the cpu
    backend): probabilities within helpers.PROB_TOL, the confidence's atol times cpu_scale."""
    tokens, conf, probs, ids, commit = got
    w_tokens, w_conf, w_probs, w_ids, w_commit = want
    assert [(x.shape, x.dtype, x.device) for x in got] == [(x.shape, x.dtype, x.device) for x in want]
    assert all(x.is_contiguous() for x in got)
    assert torch.equal(tokens, w_tokens)
    assert torch.equal(ids, w_ids)
    assert torch.equal(commit, w_commit)
    assert torch.equal(conf.isnan(), w_conf.isnan())
    if cpu_scale is not None:
        assert_probs_close(conf, w_conf, conf.dtype, cpu_scale)
        assert_probs_close(probs, w_probs, conf.dtype)
        return
    tol = dict(rtol=1e-12, atol=1e-14) if conf.dtype == torch.float64 else dict(rtol=2e-5, atol=2e-6)
    torch.testing.assert_close(conf, w_conf, equal_nan=True, **tol)
    torch.testing.assert_close(probs, w_probs, **{**tol, "atol": min(tol["atol"], probs_atol)})


def assert_backend_reaches_tree_ops(monkeypatch, target, prompts, tree_ops: set, **kw) -> None:
    """generate(backend=...) reaches `target`'s own tree ops (`tree_ops`, e.g. {"tree_mask", "tree_position_ids"}),
    observed at backends.resolve: "reference" as asked, "cpu" (no tree-op kernels) covered by the reference; the
    tokens equal the "auto" decode's; an unknown backend is refused when a session starts."""
    import pytest
    import spot

    want = spot.generate(target, prompts, "confidence", **kw).tokens
    real, asked = backends.resolve, []

    def recording(op, device, backend="auto"):
        asked.append((op, backend))
        return real(op, device, backend)

    monkeypatch.setattr(backends, "resolve", recording)
    for backend, tree_backend in (("reference", "reference"), ("cpu", "reference")):
        if backend == "cpu" and "cpu" not in spot_kernels.available_backends("score", "cpu"):
            continue  # the extension was built without its CPU kernels: the round could not run under "cpu"
        asked.clear()
        assert spot.generate(target, prompts, "confidence", backend=backend, **kw).tokens == want
        seen = {(op, b) for op, b in asked if op.startswith("tree_")}
        assert {op for op, _ in seen} == tree_ops
        assert {b for _, b in seen} == {tree_backend}, seen
    with pytest.raises(ValueError, match="backend must be one of"):
        target.start(prompts, kw["max_new_tokens"], kw["block_size"], backend="gpu")


def cli_error_line(argv, capsys) -> str:
    """The one line `spot ARGV` ends with (SystemExit's message, or argparse's on stderr), checked to be one line
    that starts with `spot: error: ` and carries no traceback."""
    from spot.cli import main

    with pytest.raises(SystemExit) as done:
        main(argv)
    code = done.value.code
    text = code if isinstance(code, str) else capsys.readouterr().err
    lines = text.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("spot: error: ") and "Traceback" not in text, text
    return lines[0]


def within(seconds: float, fn):
    """fn()'s result or exception, failing the test when it has not returned after `seconds` (a read that blocks on
    a FIFO would otherwise hang the suite: it is left behind in a daemon thread)."""
    box = {}

    def run():
        try:
            box["value"] = fn()
        except BaseException as e:  # noqa: BLE001 (handed back to the test)
            box["error"] = e

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"still running after {seconds} s (blocked on a FIFO or device?)"
    if "error" in box:
        raise box["error"]
    return box.get("value")
