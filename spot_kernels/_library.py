"""Registration of the `torch.ops.spot.*` ops: schemas (when the C++ extension is absent), routers, fake impls.

The router is registered under CompositeExplicitAutograd, i.e. once for every device: the reference is plain
PyTorch and runs anywhere, and the router itself picks a device-specific kernel (backends.resolve). Registering
per dispatch key (CPU, CUDA) would duplicate that choice and leave other devices without the reference. The ops
define no autograd formula (decoding runs without gradients; integer outputs are not differentiable).
"""

from __future__ import annotations

import warnings

import torch

from . import backends, checks
from .reference import noise, score as scoring, select_children as drafter, tree_attention, verify_tree as verify
from .reference.score import compute_dtype
from .schemas import SCHEMAS

_REFERENCE = {
    "noise_uniform": noise.noise_uniform,
    "score": scoring.score,
    "select_children": drafter.select_children,
    "tree_mask": tree_attention.tree_mask,
    "tree_mask_additive": tree_attention.tree_mask_additive,
    "tree_mask_packed": tree_attention.tree_mask_packed,
    "tree_position_ids": tree_attention.tree_position_ids,
    "verify_tree": verify.verify_tree,
    "tree_attention": tree_attention.tree_attention,
}


def _tree_validator(op: str):
    if op == "tree_mask_additive":
        def validate(key_start, prefix_len, num_new, num_nodes, block_size, dtype, *, values):
            checks.additive_dtype(op, dtype)
            return checks.tree(op, key_start, prefix_len, num_new, num_nodes, block_size, values=values)
    else:
        def validate(key_start, prefix_len, num_new, num_nodes, block_size, *, values):
            return checks.tree(op, key_start, prefix_len, num_new, num_nodes, block_size, values=values)
    return validate


_VALIDATORS = {
    "noise_uniform": checks.noise_uniform,
    "score": checks.score,
    "select_children": checks.select_children,
    "verify_tree": checks.verify_tree,
    "tree_attention": checks.tree_attention,
    **{op: _tree_validator(op) for op in ("tree_mask", "tree_mask_additive", "tree_mask_packed",
                                          "tree_position_ids")},
}


def _full_args(schema_args, args: tuple, kwargs: dict) -> list:
    """All schema arguments in order: the dispatcher leaves out trailing arguments that equal their defaults."""
    full = list(args)
    for arg in schema_args[len(args):]:
        full.append(kwargs[arg.name] if arg.name in kwargs else arg.default_value)
    return full


def _router(op: str):
    validate = _VALIDATORS[op]
    schema_args = getattr(torch.ops.spot, op).default._schema.arguments

    def route(*args, **kwargs):
        *call_args, backend = _full_args(schema_args, args, kwargs)
        device = validate(*call_args, values=True)
        out = backends.resolve(op, device, backend)(*call_args)
        # Contiguous, freshly allocated outputs whatever the backend (the fake impls promise this layout).
        if isinstance(out, torch.Tensor):
            return out.contiguous()
        return tuple(t.contiguous() for t in out)

    route.__name__ = f"spot_{op}_router"
    return route


# ------------------------------------------------------------------------------------------------ fake impls
# All output shapes follow from argument shapes and scalars, so every op is fully traceable.

def _fake_noise_uniform(seed, rows, positions, steps, vocab_ids, backend="auto"):
    checks.noise_uniform(seed, rows, positions, steps, vocab_ids, values=False)
    shape = torch.broadcast_shapes(rows.shape, positions.shape, steps.shape, vocab_ids.shape)
    return rows.new_empty(shape, dtype=torch.float32)


def _fake_score(logits, masked, seed, rows, block_start, steps, temperature, confidence="prob", top_k=32,
                backend="auto"):
    checks.score(logits, masked, seed, rows, block_start, steps, temperature, confidence, top_k, values=False)
    lead_b = logits.shape[:-1]
    cdtype = compute_dtype(logits.dtype)
    return (
        logits.new_empty(lead_b, dtype=torch.int64),
        logits.new_empty(lead_b, dtype=cdtype),
        logits.new_empty((*lead_b, top_k), dtype=cdtype),
        logits.new_empty((*lead_b, top_k), dtype=torch.int64),
        logits.new_empty(logits.shape[:-2], dtype=torch.int64),
    )


def _fake_select_children(position_logits, masked, path_logprob, stale_topk_probs, stale_topk_ids, seed, rows,
                          block_start, steps, temperature, k, backend="auto"):
    checks.select_children(position_logits, masked, path_logprob, stale_topk_probs, stale_topk_ids, seed, rows,
                           block_start, steps, temperature, k, values=False)
    frontier = position_logits.shape[0]
    return (
        position_logits.new_empty((frontier, k), dtype=torch.int64),
        position_logits.new_empty((frontier, k)),
        position_logits.new_empty((frontier, k), dtype=torch.int64),
    )


def _tree_sizes(prefix_len, num_new, num_nodes, block_size):
    return num_new + num_nodes * block_size, prefix_len + num_nodes * block_size


def _fake_tree_mask(key_start, prefix_len, num_new, num_nodes, block_size, backend="auto"):
    checks.tree("tree_mask", key_start, prefix_len, num_new, num_nodes, block_size, values=False)
    n_q, n_k = _tree_sizes(prefix_len, num_new, num_nodes, block_size)
    return key_start.new_empty((key_start.shape[0], 1, n_q, n_k), dtype=torch.bool)


def _fake_tree_mask_additive(key_start, prefix_len, num_new, num_nodes, block_size, dtype, backend="auto"):
    checks.additive_dtype("tree_mask_additive", dtype)
    checks.tree("tree_mask_additive", key_start, prefix_len, num_new, num_nodes, block_size, values=False)
    n_q, n_k = _tree_sizes(prefix_len, num_new, num_nodes, block_size)
    return key_start.new_empty((key_start.shape[0], 1, n_q, n_k), dtype=dtype)


def _fake_tree_mask_packed(key_start, prefix_len, num_new, num_nodes, block_size, backend="auto"):
    checks.tree("tree_mask_packed", key_start, prefix_len, num_new, num_nodes, block_size, values=False)
    n_q, n_k = _tree_sizes(prefix_len, num_new, num_nodes, block_size)
    return key_start.new_empty((key_start.shape[0], n_q, (n_k + 31) // 32), dtype=torch.int32)


def _fake_tree_position_ids(key_start, prefix_len, num_new, num_nodes, block_size, backend="auto"):
    checks.tree("tree_position_ids", key_start, prefix_len, num_new, num_nodes, block_size, values=False)
    n_q, _ = _tree_sizes(prefix_len, num_new, num_nodes, block_size)
    return key_start.new_empty((key_start.shape[0], n_q), dtype=torch.int64)


def _fake_verify_tree(parents, draft_pos, draft_tokens, target_pos, target_tokens, block, backend="auto"):
    checks.verify_tree(parents, draft_pos, draft_tokens, target_pos, target_tokens, block, values=False)
    b = parents.shape[0]
    return (
        parents.new_empty(parents.shape),
        parents.new_empty(parents.shape),
        parents.new_empty((b,)),
        block.new_empty(block.shape),
        parents.new_empty((b,)),
    )


def _fake_tree_attention(q, k_prefix, v_prefix, k_nodes, v_nodes, key_start, scale=None, backend="auto"):
    checks.tree_attention(q, k_prefix, v_prefix, k_nodes, v_nodes, key_start, scale, values=False)
    return q.new_empty(q.shape)


_FAKES = {
    "noise_uniform": _fake_noise_uniform,
    "score": _fake_score,
    "select_children": _fake_select_children,
    "tree_mask": _fake_tree_mask,
    "tree_mask_additive": _fake_tree_mask_additive,
    "tree_mask_packed": _fake_tree_mask_packed,
    "tree_position_ids": _fake_tree_position_ids,
    "verify_tree": _fake_verify_tree,
    "tree_attention": _fake_tree_attention,
}


def register(define_schemas: bool) -> list[torch.library.Library]:
    """Register everything; returns the Library objects, which must stay alive for the registrations to last."""
    libs = []
    if define_schemas:
        schema_lib = torch.library.Library("spot", "DEF")
        for schema in SCHEMAS.values():
            schema_lib.define(schema)
        libs.append(schema_lib)
    else:
        # An extension built from older sources lacks newer ops: define those from Python and say so.
        missing = [op for op in SCHEMAS if not hasattr(torch.ops.spot, op)]
        if missing:
            warnings.warn(f"spot_kernels._C predates the ops {missing} (rebuild with pip install "
                          "--no-build-isolation -e .); defining their schemas from Python", stacklevel=3)
            schema_lib = torch.library.Library("spot", "FRAGMENT")
            for op in missing:
                schema_lib.define(SCHEMAS[op])
            libs.append(schema_lib)
    impl_lib = torch.library.Library("spot", "IMPL")
    for op in SCHEMAS:
        backends.register(op, "reference", _REFERENCE[op])
        impl_lib.impl(op, _router(op), "CompositeExplicitAutograd")
        torch.library.register_fake(f"spot::{op}", _FAKES[op], lib=impl_lib)
    libs.append(impl_lib)
    return libs
