"""A drafter that calibrates itself online, from the target's own commits (docs/drafter.md, "Online calibration").

Every verification pass reveals, for free, which positions the target committed: the accepted chain p_0, p_1, ...
of the pass. p_k is the exact answer to the drafter's question at depth k of that pass's tree (from the stale
features the tree was grown from, at the node "root + p_0 .. p_{k-1}"). `OnlineCalibrated` wraps any base drafter
and re-weighs its position logits with a few cheap, vocabulary-free features per block position,

    logits = w_d . [base logit, log stale confidence, ...]        (w_d: a handful of scalars per depth bucket d)

starting from w_d = (1, 0, ..., 0), i.e. the base drafter itself, and refits w_d by a few Newton steps on the softmax
cross-entropy of every observed commit (a ridge prior pulls w_d towards that start while the data are few).

The decoder hands it each pass's commits through the optional `observe` hook (spot.decode calls it after
`verify_tree`, for drafters that have one); everything `observe` needs comes with the call, so no per-row state is
kept across passes and rows may leave and join the batch freely. The learned weights and the examples live on the
object and are carried across `generate` calls (that is what lets it learn over many prompts); `reset()` forgets
them. Decoding stays exact whatever the weights are: the drafter only shapes the tree.
"""

from __future__ import annotations

import torch

from .drafters import Drafter, StaleFeatures

FEATURE_SETS = {
    # the simplest: the base drafter's logit and the log stale confidence of the position
    "basic": ("base", "log_conf"),
    # and where the position stands: the node's most confident masked position, relative position buckets to the
    # node's leftmost masked position, a committed left neighbour
    "rich": ("base", "log_conf", "is_top_conf", "rel0", "rel1", "rel2_3", "rel4_7", "left_done"),
    # and more of the same kind: the second most confident position, the base drafter's own first choice,
    # neighbours of a position committed since the stale pass, log(1 - confidence)
    "rich2": ("base", "log_conf", "is_top_conf", "rel0", "rel1", "rel2_3", "rel4_7", "left_done", "is_2nd_conf",
              "base_top", "near_new", "log1m_conf"),
    # "rich2" and a new linear head on the base OrderModel's last hidden states (d_model weights)
    "head": ("base", "log_conf", "is_top_conf", "rel0", "rel1", "rel2_3", "rel4_7", "left_done", "is_2nd_conf",
             "base_top", "near_new", "log1m_conf", "hidden"),
}


def position_features(base: torch.Tensor, stale: StaleFeatures, node_masked: torch.Tensor, node_row: torch.Tensor,
                      names, hidden: torch.Tensor | None = None) -> torch.Tensor:
    """Per-position features [F, B, k] (float64, 0 where the node is not masked), one per name ("hidden": one per
    dimension of `hidden`). base [F, B]: the base drafter's logits; node_masked bool [F, B]; node_row int64 [F];
    hidden [F, B, H]: the base OrderModel's last hidden states (after its final norm)."""
    m = node_masked
    conf = stale.confidence[node_row].to(torch.float64).nan_to_num(0.0, 0.0, 0.0)
    if stale.confidence_kind in ("prob", "raw_prob"):
        log_conf = conf.clamp_min(1e-6).log()
    else:
        log_conf = conf.clamp_min(-30.0)  # margin / negative entropy: already log-scale-like
    F_, B = m.shape
    j = torch.arange(B, device=m.device)
    first = torch.where(m.any(1), m.to(torch.int8).argmax(1), B)
    rel = j[None] - first[:, None]
    cols = []
    for name in names:
        if name == "base":
            col = base.to(torch.float64)
        elif name == "log_conf":
            col = log_conf
        elif name in ("is_top_conf", "is_2nd_conf"):
            masked_conf = log_conf.masked_fill(~m, float("-inf"))
            rank = masked_conf.argsort(dim=1, descending=True, stable=True).argsort(dim=1, stable=True)
            col = (rank == (0 if name == "is_top_conf" else 1)).to(torch.float64)
        elif name == "base_top":
            masked_base = base.to(torch.float64).masked_fill(~m, float("-inf"))
            col = (masked_base.argmax(1, keepdim=True) == j[None]).to(torch.float64)
        elif name == "near_new":
            new = (stale.masked[node_row] & ~m).to(torch.float64)  # committed since the stale pass
            col = (torch.nn.functional.pad(new, (1, 0))[:, :-1] + torch.nn.functional.pad(new, (0, 1))[:, 1:]) > 0
            col = col.to(torch.float64)
        elif name == "log1m_conf":
            col = (1 - conf).clamp_min(1e-6).log() if stale.confidence_kind in ("prob", "raw_prob") \
                else torch.zeros_like(conf)
        elif name == "hidden":
            if hidden is None:
                raise ValueError("feature 'hidden' needs a base drafter with an OrderModel")
            cols += [torch.where(m, h, 0.0) for h in hidden.to(torch.float64).unbind(-1)]
            continue
        elif name.startswith("rel"):
            lo, hi = {"rel0": (0, 0), "rel1": (1, 1), "rel2_3": (2, 3), "rel4_7": (4, 7)}[name]
            col = ((rel >= lo) & (rel <= hi)).to(torch.float64)
        elif name == "left_done":
            left = torch.cat((torch.zeros_like(m[:, :1]), ~m[:, :-1]), 1)  # position j - 1 committed in the node
            col = left.to(torch.float64)
        else:
            raise ValueError(f"unknown feature {name!r}")
        cols.append(torch.where(m, col.nan_to_num(0.0, 0.0, 0.0), 0.0))
    return torch.stack(cols, -1)


class OnlineCalibrated:
    """A `Drafter` wrapping `base` whose position logits are recalibrated online from the target's commits.

    features: a key of FEATURE_SETS or a tuple of feature names (the first must be "base").
    depth_buckets: tree depths 0 .. depth_buckets - 2 get their own weights, deeper nodes share the last bucket.
    prior: ridge strength pulling the weights towards their start (base logit weight 1, others 0).
    memory: the most recent examples kept per depth bucket (older ones are forgotten).
    refit_every: refit a bucket once this many new examples have come in since its last fit.
    newton_steps: Newton steps per refit (warm-started from the current weights).
    """

    def __init__(self, base: Drafter, features="rich2", depth_buckets: int = 4, prior: float = 1.0,
                 memory: int = 8192, refit_every: int = 16, newton_steps: int = 2, hidden_prior: float = 30.0):
        self.base = base
        self.names = tuple(FEATURE_SETS[features] if isinstance(features, str) else features)
        if not self.names or self.names[0] != "base":
            raise ValueError("features: the first feature must be 'base'")
        self.depth_buckets, self.prior, self.memory = depth_buckets, prior, memory
        self.refit_every, self.newton_steps = refit_every, newton_steps
        self._hidden = None
        self.n_features = len(self.names)
        if "hidden" in self.names:
            model = getattr(base, "model", None)
            if model is None or not hasattr(model, "norm"):
                raise ValueError("feature 'hidden' needs a base drafter with an OrderModel (a LearnedDrafter)")
            self.n_features += model.cfg.d_model - 1
        # the ridge strength of each weight: `prior`, and `hidden_prior` times that for the hidden-state head (many
        # weights, and the base logit is itself a linear function of the hidden states)
        self.prior_weights = torch.full((self.n_features,), float(prior), dtype=torch.float64)
        if "hidden" in self.names:
            at = self.names.index("hidden")
            self.prior_weights[at:at + model.cfg.d_model] *= hidden_prior
        self.reset()

    def _keep_hidden(self, module, inputs, output) -> None:
        self._hidden = output.detach()

    def _base(self, stale, node_masked, node_row, depth):
        """The base drafter's logits and (feature "hidden") its last hidden states."""
        self._hidden = None
        # the hook lives only for this call: the base drafter's model carries nothing of ours between calls
        hook = self.base.model.norm.register_forward_hook(self._keep_hidden) if "hidden" in self.names else None
        try:
            base = self.base.position_logits(stale, node_masked, node_row, depth)
        finally:
            if hook is not None:
                hook.remove()
        return base, self._hidden

    @property
    def branch(self):
        """The base drafter's tree branch (`spot.tree.tree_branch`)."""
        return getattr(self.base, "branch", None)

    @property
    def max_block(self):
        """The base drafter's largest block (the `Drafter` protocol)."""
        return getattr(self.base, "max_block", None)

    @property
    def token_vocab(self):
        """The vocabulary whose token ids the base drafter reads (the `Drafter` protocol)."""
        return getattr(self.base, "token_vocab", None)

    def reset(self) -> None:
        """Forget every observed commit: back to the base drafter."""
        k, n = self.n_features, self.depth_buckets
        self.init = torch.zeros(k, dtype=torch.float64)
        self.init[0] = 1.0
        self.weights = self.init.expand(n, k).clone()  # [buckets, features]
        self._x = [torch.zeros(0, 0, k, dtype=torch.float64) for _ in range(n)]  # [N, B, k] per bucket
        self._m = [torch.zeros(0, 0, dtype=torch.bool) for _ in range(n)]
        self._y = [torch.zeros(0, dtype=torch.long) for _ in range(n)]
        self._new = [0] * n
        self.observed = 0  # commits observed since the last reset
        # prequential top-1 per depth bucket: each commit predicted before it is learned from, by the calibrated
        # weights ("online") and by the base drafter alone ("base")
        self.seen, self.hits = [0] * n, {"online": [0] * n, "base": [0] * n}

    def _bucket(self, depth: torch.Tensor) -> torch.Tensor:
        return depth.clamp(0, self.depth_buckets - 1)

    @torch.no_grad()
    def position_logits(self, stale, node_masked, node_row, depth):
        base, hidden = self._base(stale, node_masked, node_row, depth)
        x = position_features(base, stale, node_masked, node_row, self.names, hidden)
        w = self.weights.to(x.device)[self._bucket(depth).to(x.device)]  # [F, k]
        logits = (x * w[:, None, :]).sum(-1)
        return logits.masked_fill(~node_masked, float("-inf")).to(base.dtype)

    @torch.no_grad()
    def observe(self, stale: StaleFeatures, root_masked: torch.Tensor, accepted_pos: torch.Tensor,
                n_acc: torch.Tensor, rows: torch.Tensor) -> None:
        """The commits of one pass: rows `rows` (bool [b]) had their tree grown from `stale`; root_masked bool
        [b, B] is their root's masked flags, accepted_pos int64 [b, n] / n_acc int64 [b] the target's commits
        in order. Commit k of a row is the label of the node root + commits 0 .. k-1 at depth k."""
        r, k = torch.nonzero(rows[:, None] & (torch.arange(accepted_pos.shape[1], device=rows.device)[None]
                                              < n_acc[:, None]), as_tuple=True)
        if not len(r):
            return
        label = accepted_pos[r, k]
        # the node at depth k: the root with the row's first k accepted positions committed
        before = torch.arange(accepted_pos.shape[1], device=rows.device)[None] < k[:, None]  # [E, n]
        j = torch.arange(root_masked.shape[1], device=rows.device)
        committed = ((accepted_pos[r][:, :, None] == j) & before[:, :, None]).any(1)  # [E, B]
        node_masked = root_masked[r] & ~committed
        ok = node_masked.gather(1, label[:, None]).squeeze(1)
        r, k, label, node_masked = r[ok], k[ok], label[ok], node_masked[ok]
        base, hidden = self._base(stale, node_masked, r, k)
        x = position_features(base, stale, node_masked, r, self.names, hidden).cpu()
        bucket = self._bucket(k).cpu()
        for d in range(self.depth_buckets):
            sel = bucket == d
            if not bool(sel.any()):
                continue
            self._score(d, x[sel], node_masked.cpu()[sel], label.cpu()[sel])
            self._add(d, x[sel], node_masked.cpu()[sel], label.cpu()[sel])
            if self._new[d] >= self.refit_every:
                self._fit(d)
        self.observed += len(label)

    def _score(self, d: int, x, m, y) -> None:
        """Count the prequential top-1 hits of examples not yet learned from."""
        for name, w in (("online", self.weights[d]), ("base", self.init)):
            z = (x @ w).masked_fill(~m, float("-inf"))
            self.hits[name][d] += int((z.argmax(1) == y).sum())
        self.seen[d] += len(y)

    def prequential_accuracy(self) -> dict[str, list[float]]:
        """Top-1 accuracy per depth bucket of every commit observed since the last reset, each predicted before it
        was learned from: {"online": the calibrated drafter's, "base": the base drafter's, "examples": counts}."""
        out = {name: [h / s if s else float("nan") for h, s in zip(hits, self.seen)]
               for name, hits in self.hits.items()}
        out["examples"] = list(self.seen)
        return out

    def _add(self, d: int, x, m, y) -> None:
        if self._x[d].shape[1] != x.shape[1]:  # the first examples, or another block size: start this bucket afresh
            self._x[d], self._m[d], self._y[d] = x[:0], m[:0], y[:0]
        self._x[d] = torch.cat((self._x[d], x))[-self.memory:]
        self._m[d] = torch.cat((self._m[d], m))[-self.memory:]
        self._y[d] = torch.cat((self._y[d], y))[-self.memory:]
        self._new[d] += len(y)

    def _fit(self, d: int) -> None:
        """Newton steps on sum_i CE_i(w) + prior / 2 * |w - init|^2 (convex in w)."""
        x, m, y = self._x[d], self._m[d], self._y[d]
        w = self.weights[d].clone()
        k = len(w)
        for _ in range(self.newton_steps):
            z = (x @ w).masked_fill(~m, float("-inf"))  # [N, B]
            p = torch.softmax(z, 1)
            onehot = torch.zeros_like(p).scatter_(1, y[:, None], 1.0)
            flat = x.reshape(-1, k)
            grad = flat.T @ (p - onehot).reshape(-1) + self.prior_weights * (w - self.init)
            xbar = torch.einsum("nb,nbk->nk", p, x)  # [N, k]
            hess = (flat * p.reshape(-1, 1)).T @ flat - xbar.T @ xbar + torch.diag(self.prior_weights)
            step = torch.linalg.solve(hess, grad)
            if not bool(torch.isfinite(step).all()):
                break
            w = w - step
        self.weights[d] = w
        self._new[d] = 0

    def accuracy(self, d: int) -> float:
        """Top-1 accuracy of the current weights on the examples kept for depth bucket d (NaN if none)."""
        x, m, y = self._x[d], self._m[d], self._y[d]
        if not len(y):
            return float("nan")
        z = (x @ self.weights[d]).masked_fill(~m, float("-inf"))
        return float((z.argmax(1) == y).double().mean())
