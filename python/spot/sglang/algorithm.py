"""`Spot`: SGLang's `DllmAlgorithm` over `spot.sglang.driver.SpotDriver` (docs/serving.md). Imports SGLang.

`SpotDriver` holds the execution (one draft-tree forward per scheduler round); this file adds what SGLang asks of
an algorithm class: the architectures it serves, the launch-time refusals (`configure_server_args`) and the
request-time ones (`validate_request`).
"""

from __future__ import annotations

from typing import Optional

from sglang.srt.dllm.algorithm.base import DllmAlgorithm
from sglang.srt.dllm.config import DllmConfig

from .driver import SpotDriver

_TOP_K_ALL = 1 << 30  # sglang.srt.sampling.sampling_params.TOP_K_ALL: the whole vocabulary


class Spot(SpotDriver, DllmAlgorithm):
    """Lossless speculative decoding by commit-order prediction: the tokens of one-commit-per-forward decoding
    (docs/design.md §2.2) with the project's coupled noise, in fewer forwards."""

    supported_architectures = ("LLaDA2MoeModelLM", "SDARForCausalLM", "SDARMoeForCausalLM")
    supported_attention_backends = ("triton",)

    def __init__(self, config: DllmConfig):
        DllmAlgorithm.__init__(self, config)  # block_size, mask_id, fdfo
        self.init_spot(config.algorithm_config)

    # -- configuration ------------------------------------------------------------------------------------------
    @classmethod
    def configure_server_args(cls, server_args) -> None:
        """Refuse what a tree batch cannot run on, naming the flags that fix it (runs at launch, in
        sglang.srt.arg_groups.dllm_hook, after SGLang's own dLLM attention-backend pass)."""
        from sglang.srt.arg_groups.overrides import declare_resolution, resolving_view

        cfg = resolving_view(server_args)
        problems = []
        backends = {name: getattr(cfg, name, None)
                    for name in ("attention_backend", "prefill_attention_backend", "decode_attention_backend")}
        bad = {k: v for k, v in backends.items() if v not in (None, "triton")}
        if bad:
            problems.append(f"the triton attention backend (got {bad}): pass --attention-backend triton; Spot "
                            "hands it a per-request tree mask (custom_mask / mask_indptr), which no other backend's "
                            "dLLM path reads")
        graphs = getattr(cfg, "cuda_graph_config", None)
        on = [phase for phase in ("decode", "prefill")
              if str(getattr(getattr(graphs, phase, None), "backend", None) or "disabled").lower() != "disabled"]
        if on:
            problems.append(f"CUDA graphs off (on for {on}): a tree batch holds N x B tokens per request (N = 1 at a "
                            "block's first pass, the tree's node slots after it) under a per-request tree mask, "
                            "while SGLang's graphs capture block_size tokens per request under its own block mask; "
                            "pass --disable-decode-cuda-graph --disable-prefill-cuda-graph")
        if getattr(cfg, "enable_dp_attention", False):
            problems.append("no --enable-dp-attention: its padded, gathered batches have not been checked against "
                            "the tree layout")
        if problems:
            raise ValueError("--dllm-algorithm Spot needs " + "; and ".join(problems) + " (docs/serving.md)")
        if backends["attention_backend"] is None:
            declare_resolution(server_args, cls.__name__, attention_backend="triton")

    @classmethod
    def validate_request(cls, req) -> Optional[str]:
        """A request whose sampling Spot would not reproduce exactly is refused with the reason."""
        sp = req.sampling_params
        bad = [name for name, value, default in (
            ("frequency_penalty", sp.frequency_penalty, 0.0), ("presence_penalty", sp.presence_penalty, 0.0),
            ("repetition_penalty", sp.repetition_penalty, 1.0), ("min_p", sp.min_p, 0.0),
            ("top_p", sp.top_p, 1.0), ("sampling_seed", getattr(sp, "sampling_seed", None), None),
            ("min_new_tokens", getattr(sp, "min_new_tokens", 0), 0)) if value != default]
        if sp.top_k not in (1, -1, _TOP_K_ALL):
            bad.append("top_k")
        if getattr(sp, "logit_bias", None):
            bad.append("logit_bias")
        bad += [name for name in ("json_schema", "regex", "ebnf", "structural_tag")
                if getattr(sp, name, None) is not None]
        logprob = getattr(req, "logprob", None)
        bad += [name for name, value in (
            ("return_logprob", getattr(req, "return_logprob", False)),
            ("top_logprobs_num", getattr(logprob, "top_logprobs_num", 0)),
            ("token_ids_logprob", getattr(logprob, "token_ids_logprob", None)),
            ("custom_logit_processor", getattr(req, "custom_logit_processor", None)),
            ("grammar", getattr(req, "grammar", None))) if value]
        config = getattr(req, "dllm_config", None)
        if config is not None and config.mask_id in getattr(req, "origin_input_ids", ()):
            bad.append("a prompt containing the mask token")
        if not bad:
            return None
        return ("--dllm-algorithm Spot does not support " + ", ".join(bad) + ": it reproduces one-commit-per-step "
                "decoding with the project's coupled noise (temperature only; seed from --dllm-algorithm-config, "
                "noise row from the request id), docs/serving.md")

    def step(self, forward_batch, full_logits, states):
        raise NotImplementedError("Spot runs whole rounds (draft, one tree forward, verify) in run()")


Algorithm = Spot
