"""The `torch.ops.spot.*` schemas (docs/ops.md), one string per op.

`csrc/spot_ops.cpp` defines the same strings with `TORCH_LIBRARY(spot, m)`; when the C++ extension is absent
`spot_kernels._library` defines them from here. `tests/test_registry.py` asserts the two copies are identical.
Every op ends with `str backend="auto"`; a CUDA C++ kernel for op X is the private op `spot::_X_cuda` whose schema
is X's without that argument (see `spot_kernels.backends`).
"""

SCHEMAS: dict[str, str] = {
    "noise_uniform": (
        'noise_uniform(int seed, Tensor rows, Tensor positions, Tensor steps, Tensor vocab_ids, '
        'str backend="auto") -> Tensor'
    ),
    "score": (
        'score(Tensor logits, Tensor masked, int seed, Tensor rows, Tensor block_start, Tensor steps, '
        'float temperature, str confidence="prob", int top_k=32, str backend="auto") -> '
        '(Tensor tokens, Tensor confidence, Tensor topk_probs, Tensor topk_ids, Tensor commit_pos)'
    ),
    "select_children": (
        'select_children(Tensor position_logits, Tensor masked, Tensor path_logprob, Tensor stale_topk_probs, '
        'Tensor stale_topk_ids, int seed, Tensor rows, Tensor block_start, Tensor steps, float temperature, '
        'int k, str backend="auto") -> (Tensor child_pos, Tensor child_logprob, Tensor child_tokens)'
    ),
    "tree_mask": (
        'tree_mask(Tensor key_start, int prefix_len, int num_new, int num_nodes, int block_size, '
        'str backend="auto") -> Tensor'
    ),
    "tree_mask_additive": (
        'tree_mask_additive(Tensor key_start, int prefix_len, int num_new, int num_nodes, int block_size, '
        'ScalarType dtype, str backend="auto") -> Tensor'
    ),
    "tree_mask_packed": (
        'tree_mask_packed(Tensor key_start, int prefix_len, int num_new, int num_nodes, int block_size, '
        'str backend="auto") -> Tensor'
    ),
    "tree_position_ids": (
        'tree_position_ids(Tensor key_start, int prefix_len, int num_new, int num_nodes, int block_size, '
        'str backend="auto") -> Tensor'
    ),
    "verify_tree": (
        'verify_tree(Tensor parents, Tensor draft_pos, Tensor draft_tokens, Tensor target_pos, '
        'Tensor target_tokens, Tensor block, str backend="auto") -> (Tensor accepted_pos, '
        'Tensor accepted_tokens, Tensor num_accepted, Tensor new_block, Tensor last_node)'
    ),
    "tree_attention": (
        'tree_attention(Tensor q, Tensor k_prefix, Tensor v_prefix, Tensor k_nodes, Tensor v_nodes, '
        'Tensor key_start, float? scale=None, str backend="auto") -> Tensor'
    ),
}

# Op name -> op family: the file name shared by every backend (reference/<family>.py, triton/<family>.py,
# csrc/cuda/<family>.cu) and by the tests (tests/test_<family>.py).
FAMILIES: dict[str, str] = {
    "noise_uniform": "noise",
    "score": "score",
    "select_children": "select_children",
    "tree_mask": "tree_attention",
    "tree_mask_additive": "tree_attention",
    "tree_mask_packed": "tree_attention",
    "tree_position_ids": "tree_attention",
    "verify_tree": "verify_tree",
    "tree_attention": "tree_attention",
}
