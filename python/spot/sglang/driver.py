"""`SpotDriver`: what `Spot.run` does, over SGLang's ForwardBatch and ModelRunner by duck typing (no SGLang import).

Per scheduler round (`--dllm-fdfo`, SGLang's default) `run` does ONE forward: every request's draft tree as a tree
batch (spot.sglang.layout) with the Triton backend's flat custom mask, then `spot_round` scores and verifies it and
writes the accepted commits into `forward_batch.input_ids`. A block is reported done (accept length B) only in the
round whose forward had no masked position left, so the forward that persisted its final K/V is the one that
reports it, as SGLang's built-in algorithms do. Without `--dllm-fdfo`, `run` repeats rounds until every block is
done, inside one call.

`spot.sglang.algorithm.Spot` is this class plus SGLang's `DllmAlgorithm` base and the launch/request checks. Kept
apart so the tests can run the very same code on a machine without SGLang. What touches SGLang internals beyond the
`DllmAlgorithm` contract (the tree ForwardBatch fields, attention planning, the TP broadcast) has not run on a GPU
yet (docs/serving.md, "unverified").
"""

from __future__ import annotations

import copy
import sys
from typing import Any, List, Optional

import torch

from ..drafters import ConfidenceDrafter, drafter_limits
from ..tree import Tree
from .layout import TreeLayout, node_logits, tree_cache_loc, tree_layout, tree_tokens
from .rounds import RoundResult, SpotOptions, make_drafter, spot_round


class SpotDriver:
    """Needs `block_size`, `mask_id` and `fdfo` (set by DllmAlgorithm.__init__ in `Spot`)."""

    block_size: int
    mask_id: int
    fdfo: bool

    def init_spot(self, algorithm_config) -> None:
        """The options checked against the block size, and the drafter loaded (on the CPU; onto the batch's device
        at the first round), so that a config the block size or a drafter refuses fails here, at construction,
        with one `Spot:` line naming the key, never at a request."""
        self.options = SpotOptions.from_mapping(algorithm_config, self.block_size)
        self.drafter = _load_drafter(self.options, "cpu", self.block_size)
        self._drafter_ready = False
        self.forwards = 0  # tree forwards run by this process
        self.last_layout: TreeLayout | None = None

    def run(self, model_runner, forward_batch, algo_states: Optional[List[Any]] = None):
        """SGLang's contract: (logits_output, next_token_ids, accept_length_per_req or None, states or None,
        can_run_graph)."""
        if self.fdfo:
            return self._run_fdfo_round(model_runner, forward_batch, algo_states)
        return self._run_to_end(model_runner, forward_batch)

    def _run_fdfo_round(self, model_runner, forward_batch, algo_states):
        bs, B = forward_batch.batch_size, self.block_size
        res, out = self.spot_round(model_runner, forward_batch, algo_states)
        accept = [B if d else 0 for d in res.done]
        states = [None if d else s for d, s in zip(res.done, res.states)]
        return out.logits_output, forward_batch.input_ids.view(bs, B).tolist(), accept, states, out.can_run_graph

    def _run_to_end(self, model_runner, forward_batch):
        bs, B = forward_batch.batch_size, self.block_size
        ids = forward_batch.input_ids.view(bs, B)
        prompt = forward_batch.dllm_prompt_mask
        starts = (prompt if prompt is not None else ids != self.mask_id).sum(1).tolist()
        states, done = None, [False] * bs
        for _ in range(2 * B + 2):  # a block takes at most B commit rounds and one persisting round
            res, out = self.spot_round(model_runner, forward_batch, states)
            states, done = res.states, [a or b for a, b in zip(done, res.done)]
            if all(start == B for start in starts):  # nothing to denoise: as DllmAlgorithm._run_sync
                return out.logits_output, [], None, None, out.can_run_graph
            if all(done):
                break
        else:
            raise RuntimeError("Spot: a block did not finish within 2 B + 2 rounds")
        return out.logits_output, [ids[i, starts[i]:] for i in range(bs)], None, None, out.can_run_graph

    def spot_round(self, model_runner, forward_batch, states) -> tuple[RoundResult, Any]:
        """One round: draft, one tree forward, verify; the new blocks written into forward_batch.input_ids.
        Returns the round's result and the forward's output (its logits cut to the roots' rows)."""
        bs, B = forward_batch.batch_size, self.block_size
        mode = forward_batch.forward_mode
        if not mode.is_dllm_extend():
            raise RuntimeError(f"Spot: expected a DLLM_EXTEND batch, got {mode!r}")
        block = forward_batch.input_ids.view(bs, B)
        if not self._drafter_ready:
            if self.drafter is not None and block.device.type != "cpu" and not isinstance(self.drafter,
                                                                                          ConfidenceDrafter):
                self.drafter = _load_drafter(self.options, block.device, B)  # a learned drafter's weights there
            _check_drafter_vocabulary(self.drafter, getattr(getattr(model_runner, "model_config", None),
                                                            "vocab_size", None))
            self._drafter_ready = True
        rids = forward_batch.rids
        if rids is None or len(rids) != bs:
            raise RuntimeError("Spot: the forward batch carries no request ids (rids); they key the noise rows")
        block_starts = forward_batch.positions.view(bs, B)[:, 0].tolist()
        prefix = forward_batch.extend_prefix_lens_cpu
        prefix = list(prefix) if prefix is not None else forward_batch.extend_prefix_lens.tolist()
        held = {}

        def forward(node_states: torch.Tensor, num_nodes: list) -> torch.Tensor:
            layout = tree_layout(prefix, block_starts, num_nodes, B, device=block.device)
            tree_batch = self._tree_batch(forward_batch, tree_tokens(node_states, num_nodes), layout)
            self._plan_attention(model_runner, tree_batch, layout)
            out = model_runner.forward(tree_batch, pp_proxy_tensors=None)
            held["out"], held["layout"] = out, layout
            return node_logits(out.logits_output.full_logits, num_nodes, B, node_states.shape[1])

        res = spot_round(block, block_starts, rids, self._temperatures(forward_batch), states, forward,
                         options=self.options, drafter=self.drafter, mask_id=self.mask_id,
                         prompt=forward_batch.dllm_prompt_mask, broadcast=self._broadcast_tree)
        # In place: the scheduler reads the blocks from this tensor (and keeps its identity).
        forward_batch.input_ids.copy_(res.block.view(-1).to(forward_batch.input_ids.dtype))
        self.forwards += 1
        out, layout = held["out"], held["layout"]
        self.last_layout = layout
        full = out.logits_output.full_logits
        roots = (layout.token_indptr[:-1, None] + torch.arange(B, device=layout.token_indptr.device)).reshape(-1)
        logits_output = copy.copy(out.logits_output)
        logits_output.full_logits = full[roots.to(full.device)]
        out = copy.copy(out)
        out.logits_output = logits_output
        return res, out

    def _temperatures(self, forward_batch) -> list:
        """Per request: 0 for greedy requests (SGLang stores temperature 0 as top_k 1), else the temperature; the
        config's temperature when the batch carries no sampling info."""
        bs = forward_batch.batch_size
        info = getattr(forward_batch, "sampling_info", None)
        temps = getattr(info, "temperatures", None)
        if temps is None:
            return [self.options.temperature] * bs
        top_ks = getattr(info, "top_ks", None)
        top_ks = top_ks.view(-1).tolist() if top_ks is not None else [0] * bs
        return [0.0 if k == 1 else float(t) for t, k in zip(temps.view(-1).tolist(), top_ks)]

    def _tree_batch(self, forward_batch, input_ids: torch.Tensor, layout: TreeLayout):
        """A shallow copy of the scheduler's batch with every request's block replaced by its N nodes."""
        bs, B = forward_batch.batch_size, self.block_size
        dev = forward_batch.input_ids.device
        t = copy.copy(forward_batch)
        ext = layout.extend_lens
        seq = [p + e for p, e in zip(layout.prefix_lens, ext)]
        t.input_ids = input_ids.to(device=dev, dtype=forward_batch.input_ids.dtype)
        t.positions = layout.positions.to(device=dev, dtype=forward_batch.positions.dtype)
        t.out_cache_loc = tree_cache_loc(forward_batch.out_cache_loc.view(bs, B), layout.num_nodes)
        if getattr(forward_batch, "origin_out_cache_loc", None) is not None:
            t.origin_out_cache_loc = t.out_cache_loc
        t.extend_seq_lens = torch.tensor(ext, dtype=torch.int32, device=dev)
        t.extend_seq_lens_cpu = ext
        t.extend_num_tokens = layout.num_tokens
        t.extend_start_loc = layout.token_indptr[:-1].to(device=dev, dtype=torch.int32)
        t.seq_lens = torch.tensor(seq, dtype=forward_batch.seq_lens.dtype, device=dev)
        if getattr(forward_batch, "seq_lens_cpu", None) is not None:
            t.seq_lens_cpu = torch.tensor(seq, dtype=forward_batch.seq_lens_cpu.dtype)
        t.seq_lens_sum = sum(seq)
        if getattr(forward_batch, "global_num_token_non_padded", None) is not None:  # EP / DP gather: no pad rows
            count = torch.tensor(layout.num_tokens, dtype=forward_batch.global_num_token_non_padded.dtype, device=dev)
            t.global_num_token_non_padded, t.global_num_token_non_padded_cpu = count, layout.num_tokens
            t.num_token_non_padded = count.clone() if forward_batch.num_token_non_padded is not None else None
        t.dllm_prompt_mask = None
        t.forward_metadata_ready = False
        return t

    @staticmethod
    def _plan_attention(model_runner, tree_batch, layout: TreeLayout) -> None:
        """Plan the tree batch's attention as an ordinary extend, then hand the backend the tree mask; marking the
        batch planned keeps the forward from planning it again (ForwardBatch.mark_forward_metadata_ready)."""
        backend = model_runner.attn_backend
        backend.init_forward_metadata(tree_batch)
        metadata = getattr(backend, "forward_metadata", None)
        if metadata is None or not hasattr(metadata, "custom_mask"):
            raise RuntimeError(f"Spot: attention backend {type(backend).__name__} has no custom-mask metadata; "
                               "launch with --attention-backend triton")
        metadata.custom_mask = layout.custom_mask
        metadata.mask_indptr = layout.mask_indptr
        tree_batch.mark_forward_metadata_ready()

    def _broadcast_tree(self, tree: Tree) -> Tree:
        """Tensor parallel: rank 0's draft trees on every rank (docs/serving.md, determinism). One broadcast of
        bs x budget x (B + 4) int64 per round; a no-op in one process."""
        group = _tp_group()
        if group is None or group.world_size == 1:
            return tree
        bs, n, B = tree.states.shape
        cap = max(self.options.budget, n)
        packed = torch.full((bs, cap, B + 4), -1, dtype=torch.long, device=tree.states.device)
        packed[:, :n, :B] = tree.states
        for j, x in enumerate((tree.parents, tree.positions, tree.tokens, tree.depth)):
            if x is not None:  # a rule's step tree has no per-node commits (every rank knows the rule)
                packed[:, :n, B + j] = x
        group.broadcast(packed, src=0)
        n = int((packed[:, 1:, B] >= 0).sum(1).max()) + 1 if cap > 1 else 1
        states = torch.where(packed[:, :n, :B] >= 0, packed[:, :n, :B], packed[:, :1, :B])
        parents, positions, tokens, depth = (packed[:, :n, B + j].contiguous() for j in range(4))
        if tree.positions is None:
            positions = tokens = None
        return Tree(states, parents, positions, tokens, depth.clamp_min(0))


def _load_drafter(options: SpotOptions, device, block_size: int):
    """The config's drafter (spot.sglang.rounds.make_drafter) on `device`; one that cannot be loaded, or whose
    largest block is smaller than the served block, is refused naming the `drafter` key."""
    try:
        drafter = make_drafter(options.drafter, device=device, rule=options.rule)
    except (OSError, ValueError, TypeError) as err:
        raise ValueError(f"Spot: drafter {options.drafter!r}: {err}") from None
    max_block = drafter_limits(drafter)[0]
    if isinstance(max_block, int) and block_size > max_block:
        raise ValueError(f"Spot: drafter {options.drafter!r} drafts blocks of at most {max_block} positions and the "
                         f"block size is {block_size}")
    return drafter


def _check_drafter_vocabulary(drafter, vocab_size) -> None:
    """A drafter trained with token buckets reads token ids of its training vocabulary (as spot.generate checks)."""
    trained = drafter_limits(drafter)[1]
    if trained and vocab_size and trained != vocab_size:
        raise ValueError(f"Spot: the drafter reads token ids of a {trained}-token vocabulary (token buckets) and the "
                         f"served model's has {vocab_size}; use a drafter trained without --token-buckets")


def _tp_group():
    """SGLang's tensor-parallel group, or None outside an initialised SGLang worker (never imports SGLang)."""
    parallel_state = sys.modules.get("sglang.srt.distributed.parallel_state")
    if parallel_state is None:
        return None
    try:
        return parallel_state.get_tp_group()
    except (AssertionError, AttributeError, RuntimeError):  # imported, but no distributed environment set up
        return None
