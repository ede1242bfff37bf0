"""Tiny targets, order models and inputs shared by the decoder tests (imported by them; not a test file)."""

import torch
from spot.model import BlockDiffusionLM, ModelConfig
from spot.order_model import OrderModel, OrderModelConfig
from spot.target import ModelTarget, Session, Target

TINY = ModelConfig(vocab_size=97, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, d_ff=64)
PROMPTS = [[5, 9, 14], [7] * 11, [3, 50, 60, 70, 80, 90, 11], [42]]


def sharp_target(seed=0, scale=0.3, dtype=torch.float64):
    """A tiny random target whose predictions are peaked, so drafted trees are actually accepted."""
    torch.manual_seed(seed)
    model = BlockDiffusionLM(TINY)
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() >= 2:
                p.normal_(0, scale)
    return ModelTarget(model.to(dtype))


def target_with_sessions(session_class=None, capturable: bool = False, seed: int = 0):
    """sharp_target(seed)'s model behind a target whose sessions are `session_class` (a ModelSession subclass;
    default ModelSession) with `Kernels(capturable=capturable)`: capturable, the pass has a GPU's shapes on a CPU
    and offers itself to a compiled round (`Session.capturable_pass`)."""
    from spot.model import Kernels
    from spot.target import ModelSession

    session_class = session_class or ModelSession

    class SessionTarget(ModelTarget):
        def start(self, prompts, max_new_tokens, block_size, *, backend="auto"):
            return session_class(self, prompts, max_new_tokens, block_size,
                                 Kernels(self.kernels, backend, capturable=capturable))

    return SessionTarget(sharp_target(seed).model)


def recording_capturable_target(seed: int = 0):
    """(target, whole): `target_with_sessions` with capturable kernels, whose sessions append to the list `whole`,
    at every pass, whether it offered itself to a compiled round (`Session.capturable_pass`)."""
    from spot.target import ModelSession

    whole = []

    class Recorded(ModelSession):
        def capturable_pass(self):
            forward = super().capturable_pass()
            whole.append(forward is not None)
            return forward

    return target_with_sessions(Recorded, capturable=True, seed=seed), whole


SMALL = OrderModelConfig(d_model=32, n_layers=1, n_heads=4, d_ff=64)


def small_model(seed=0, cfg=SMALL):
    torch.manual_seed(seed)
    return OrderModel(cfg).eval()


def random_inputs(n, B, K=32, seed=0, dtype=torch.float32):
    """Stale features as the decoder hands them over: sorted top-K probabilities, the node a descendant of the
    stale state (its masked positions a subset of the stale ones), at least one masked position per node."""
    g = torch.Generator().manual_seed(seed)
    probs = torch.softmax(torch.randn(n, B, K, generator=g, dtype=torch.float64) * 2, -1)
    probs = probs.sort(-1, descending=True).values.to(dtype)
    conf = probs[..., 0].float() * torch.rand(n, B, generator=g).add(0.5).clamp(max=1)
    stale = torch.rand(n, B, generator=g) < 0.8
    node = stale & (torch.rand(n, B, generator=g) < 0.7)
    if n:
        node[torch.arange(n), torch.randint(B, (n,), generator=g)] = True
        stale |= node
    depth = torch.randint(0, 20, (n,), generator=g)
    return probs, conf, stale, node, depth


class StateBlindTarget(Target):
    """Logits depend only on (sequence, absolute position), never on the block state: the stale top-K are the
    current ones, so the target's next commit at a node IS the argmax of resampled_confidence at that node's step
    (V <= K, so the top-K hold the whole vocabulary)."""

    def __init__(self, vocab=24, seed=0):
        self.vocab_size, self.mask_id, self.eos_id, self.device = vocab, vocab - 1, None, torch.device("cpu")
        self.table = torch.randn(4, 128, vocab, generator=torch.Generator().manual_seed(seed), dtype=torch.float64) * 2

    def start(self, prompts, max_new_tokens, block_size, *, backend="auto"):
        return _BlindSession(self, prompts)


class _BlindSession(Session):
    def __init__(self, target, prompts):
        self.target, self.batch, self.passes = target, len(prompts), 0
        self._start = torch.tensor([len(p) for p in prompts])

    @property
    def block_start(self):
        return self._start.clone()

    def score(self, nodes):
        self.passes += 1
        b, n, B = nodes.shape
        logits = self.target.table[torch.arange(b)[:, None], self._start[:, None] + torch.arange(B)]
        return logits[:, None].expand(b, n, B, -1).clone()

    def append(self, block):
        self._start += block.shape[1]


class ResampledOrder(torch.nn.Module):
    """A stand-in order model that drafts by the resampled confidence alone: exact on a StateBlindTarget."""

    def __init__(self):
        super().__init__()
        self.cfg = OrderModelConfig(resampled=True)
        self.head = torch.nn.Linear(1, 1)

    def forward(self, probs, conf, stale_masked, node_masked, depth, resampled=None, top_ids=None):
        return resampled.float().log().masked_fill(~node_masked, float("-inf"))


def synthetic_shard(n, B, K=32, seed=0, rule="random", blocks_per_prompt=2):
    """A shard shaped like collect's. rule="random": random commit orders; rule="confidence": each block has a fixed
    per-position confidence and commits in descending order of it (so the stale confidence ranks the rest)."""
    g = torch.Generator().manual_seed(seed)
    conf = torch.rand(n, B, generator=g)
    if rule == "confidence":
        order = conf.argsort(1, descending=True)
    else:
        order = torch.stack([torch.randperm(B, generator=g) for _ in range(n)])
    conf_steps = conf[:, None].expand(n, B, B) if rule == "confidence" else torch.rand(n, B, B, generator=g)
    probs = torch.softmax(torch.randn(n, B, B, K, generator=g) * 2, -1).sort(-1, descending=True).values
    if rule == "confidence":
        probs = probs * 0.3  # keep the probabilities uninformative, but below the confidence
    rank = torch.empty_like(order).scatter_(1, order, torch.arange(B).expand(n, B))
    masked = rank[:, None, :] >= torch.arange(B)[None, :, None]  # masked[b, k, j]: j not among order[b, :k]
    return {
        "topk_probs": probs.half(),
        "topk_ids": torch.randint(0, 1000, (n, B, B, K), generator=g).short(),
        "tokens": torch.randint(0, 1000, (n, B, B), generator=g).short(),
        "confidence": conf_steps.float().contiguous(),
        "masked": masked,
        "order": order.to(torch.int8),
        "prompt": (torch.arange(n) // blocks_per_prompt).int(),
        "block_index": (torch.arange(n) % blocks_per_prompt).int(),
        "block_start": (torch.arange(n) % blocks_per_prompt) * B + 3,
    }


COLLECT_CFG = ModelConfig(vocab_size=64, d_model=32, n_layers=1, n_heads=4, n_kv_heads=2, d_ff=64)


COLLECT_PROMPTS = [[5, 9, 14], [7] * 6, [3, 50, 60, 11, 12]]
