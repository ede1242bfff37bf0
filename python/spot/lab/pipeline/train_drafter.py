"""`spot build drafter`: fit the order model to the target's recorded trajectories (see collect.py).

An example is (a block's trajectory, stale step k, depth d): the drafter sees the stale features of the pass on
state s_k and the node state s_{k+1+d}, and must name the position the target commits at s_{k+1+d}. Prompts are
split for held-out evaluation (every `heldout_every`-th prompt), so held-out accuracy measures generalisation
to new text, not to new steps of seen text.
"""

from __future__ import annotations

import json
import math
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from safetensors import safe_open
from safetensors.torch import save_file
from tqdm import tqdm

from .collect import pair_name
from ...loading import atomic_write, remove_stale_temporaries
from ...order_model import OrderModel, OrderModelConfig, resampled_confidence, save_order_model


@dataclass
class DrafterTrainConfig:
    steps: int = 3000
    batch_size: int = 256
    lr: float = 2e-3
    weight_decay: float = 0.01
    max_depth: int = 7  # training depths 0..max_depth (trees rarely accept deeper chains)
    heldout_every: int = 8  # prompt % heldout_every == 0 -> held out
    eval_every: int = 500
    seed: int = 0
    # Weight of the soft target: besides the committed position (one label), the node's own pass ranks every
    # masked position by confidence; matching softmax(log confidence / soft_temperature) gives B labels' worth
    # of signal per example (0 turns it off).
    soft_weight: float = 0.0
    soft_temperature: float = 0.25
    # Every this many steps the run saves out_dir/checkpoint.safetensors (model, AdamW moments, step, RNG states);
    # training again into the same out_dir resumes from it and ends with the weights of an uninterrupted run.
    # Not part of a run's identity: resuming with another value is allowed.
    checkpoint_every: int = 250


def check_train_config(cfg: DrafterTrainConfig) -> None:
    """A training run's settings, refused (naming the field) before anything is trained or written: a run of no
    steps would write untrained weights, a batch of none a NaN loss."""
    for name in ("steps", "batch_size", "max_depth", "heldout_every", "eval_every"):
        if getattr(cfg, name) < 1:
            raise ValueError(f"{name}: expected >= 1, got {getattr(cfg, name)}")
    if cfg.checkpoint_every < 0:
        raise ValueError(f"checkpoint_every: expected >= 0 (0: no checkpoints), got {cfg.checkpoint_every}")
    for name in ("lr", "soft_temperature"):
        if not math.isfinite(getattr(cfg, name)) or getattr(cfg, name) <= 0:
            raise ValueError(f"{name}: expected a finite number > 0, got {getattr(cfg, name)}")
    if not math.isfinite(cfg.soft_weight) or cfg.soft_weight < 0 or not math.isfinite(cfg.weight_decay) \
            or cfg.weight_decay < 0:
        raise ValueError(f"soft_weight, weight_decay: expected finite numbers >= 0, got {cfg.soft_weight}, "
                         f"{cfg.weight_decay}")


class Trajectories:
    """The blocks of one shard (one block size), split by prompt into train and held-out. `temperature` and `seed`
    are those of the collecting run (the shard's metadata): with the stored top-K ids, prompt (= noise row) and
    block start they give every example's `resampled_confidence`."""

    def __init__(self, tensors: dict[str, torch.Tensor], heldout_every: int, name: str = "", *,
                 temperature: float = 0.0, seed: int = 0):
        self.name, self.temperature, self.seed = name, temperature, seed
        self.topk = tensors["topk_probs"]
        self.topk_ids = tensors.get("topk_ids")  # [blocks, B, B, K]; only [..., :1] in shards loaded at T = 0
        self.top1_ids = None if self.topk_ids is None else self.topk_ids[..., 0]
        self.block_start = tensors.get("block_start")  # absent in shards collected before it was recorded
        self.prompt = tensors["prompt"].long()
        self.conf = tensors["confidence"]
        self.masked = tensors["masked"]
        self.order = tensors["order"].long()
        self.B = self.order.shape[1]
        n = self.order.shape[0]
        # rank[b, j] = the step at which position j is committed in block b; steps[b]: block b's steps (a commit
        # rule's shard records both; one commit per step: B steps, the order's places)
        self.sets = "step_of" in tensors  # recorded step by step: labels from each step's set
        if self.sets:
            self.rank, self.steps = tensors["step_of"].long(), tensors["steps"].long()
        else:
            self.rank = torch.empty_like(self.order).scatter_(1, self.order, torch.arange(self.B).expand(n, -1))
            self.steps = torch.full((n,), self.B, dtype=torch.long)
        held = self.prompt % heldout_every == 0
        self.train_blocks = torch.nonzero(~held).squeeze(1)
        self.heldout_blocks = torch.nonzero(held).squeeze(1)

    @classmethod
    def load(cls, paths, heldout_every: int) -> "Trajectories":
        """One shard file, or several runs of one (block size, temperature) pair merged (prompt numbers must not
        repeat: see `spot build collect --skip-prompts`)."""
        paths = [paths] if isinstance(paths, (str, Path)) else list(paths)
        names = ["topk_probs", "topk_ids", "confidence", "masked", "order", "prompt", "block_start", "steps", "step_of"]
        parts, metas = [], []
        for path in paths:
            with safe_open(str(path), "pt") as f:
                meta = f.metadata() or {}
                greedy = float(meta.get("temperature", 0)) == 0  # the noise coordinates are needed at T > 0 only
                skip = {"topk_ids", "block_start"} if greedy else set()
                part = {k: f.get_tensor(k) for k in names if k in f.keys() and k not in skip}
                if greedy and "topk_ids" in f.keys():  # read only the top-1 ids, not the whole top-K
                    part["topk_ids"] = f.get_slice("topk_ids")[:, :, :, :1]
                parts.append(part)
                metas.append(meta)
        for key in ("block_size", "temperature", "seed", "rule"):
            if len({m.get(key) for m in metas}) > 1:
                raise ValueError(f"cannot merge shards with different {key}: {[str(p) for p in paths]}")
        prompts = torch.cat([t["prompt"].unique() for t in parts])
        if len(prompts.unique()) < len(prompts):
            raise ValueError(f"shards {[str(p) for p in paths]} repeat prompt numbers")
        tensors = {k: torch.cat([t[k] for t in parts]) for k in parts[0] if all(k in t for t in parts)}
        name = pair_name(paths[0])
        return cls(tensors, heldout_every, name, temperature=float(metas[0].get("temperature", 0)),
                   seed=int(metas[0].get("seed", 0)))

    def batch(self, blocks, k, d):
        """Model inputs (probs, conf, stale masked, node masked, depth, resampled, top-1 ids) and labels for
        examples (block, stale step k, depth d); k + 1 + d < B. `resampled` is None when a T > 0 shard lacks the
        noise coordinates, the ids when a shard lacks top-K ids."""
        t = k + 1 + d
        node_masked = self.rank[blocks] >= t[:, None]
        probs = self.topk[blocks, k].float()
        resampled = self._resampled(probs, blocks, k, t)
        top_ids = None if self.top1_ids is None else self.top1_ids[blocks, k].long()
        inputs = (probs, self.conf[blocks, k], self.masked[blocks, k], node_masked, d, resampled, top_ids)
        return inputs, self.label(blocks, t)

    def label(self, blocks, t):
        """The position committed at step t: the order's t-th; of a commit rule's step, the set's most confident
        position (the one a single commit would take; the soft targets rank the rest)."""
        if not self.sets:
            return self.order[blocks, t]
        in_step = self.rank[blocks] == t[:, None]
        conf = self.conf[blocks, t].nan_to_num(-1.0)
        return torch.where(in_step, conf, -math.inf).argmax(1)

    def _resampled(self, probs, blocks, k, t):
        """resampled_confidence at the node's step t (the drafter's root is s_{k+1}, so depth d = step k+1+d)."""
        if self.temperature == 0:
            return probs[..., 0]
        if self.topk_ids is None or self.block_start is None:
            return None
        return resampled_confidence(probs, self.topk_ids[blocks, k].long(), self.seed, self.prompt[blocks],
                                    self.block_start[blocks], t, self.temperature, backend="reference")

    def node_confidence(self, blocks, k, d):
        """The confidences of the target's own pass on each example's node state s_{k+1+d} (its commit is their
        argmax over the node's masked positions)."""
        return self.conf[blocks, k + 1 + d]

    def sample(self, n: int, max_depth: int, gen: torch.Generator, heldout: bool = False):
        pool = self.heldout_blocks if heldout else self.train_blocks
        if len(pool) == 0:
            raise ValueError(f"{self.name}: no {'held-out' if heldout else 'training'} blocks to sample")
        blocks = pool[torch.randint(len(pool), (n,), generator=gen)]
        steps = self.steps[blocks]
        k = (torch.rand(n, generator=gen) * (steps - 1)).long()  # stale step 0 .. steps - 2
        room = (steps - 2 - k).clamp(max=max_depth)
        d = (torch.rand(n, generator=gen) * (room + 1)).long()
        return (*self.batch(blocks, k, d), self.node_confidence(blocks, k, d))

    def examples_at_depth(self, d: int, heldout: bool = True):
        """Every (block, k) of the split at depth d."""
        blocks, k = self.example_index(d, heldout)
        return self.batch(blocks, k, torch.full((len(blocks),), d))

    def example_index(self, d: int, heldout: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
        """(blocks, stale steps k) of every example of the split at depth d, in `examples_at_depth`'s order."""
        pool = self.heldout_blocks if heldout else self.train_blocks
        k = torch.arange(max(self.B - 1 - d, 0))
        blocks = pool.repeat_interleave(len(k))
        k = k.repeat(len(pool))
        keep = k + 1 + d < self.steps[blocks]  # a commit rule's block takes fewer steps
        return blocks[keep], k[keep]


def example_weights(shards: list[Trajectories]) -> torch.Tensor:
    """Sampling weight of each shard: its training (block, stale step) pairs, so every example is equally likely
    (a B = 32 shard of 256 prompts weighs four times a B = 16 shard of 128)."""
    return torch.tensor([float(len(s.train_blocks) * s.B) for s in shards])


def soft_targets(node_conf: torch.Tensor, node_masked: torch.Tensor, temperature: float) -> torch.Tensor:
    """softmax(log confidence / temperature) over the node's masked positions: the target's own ranking of its
    candidates, peaked at the committed one."""
    score = node_conf.double().clamp_min(1e-30).log().nan_to_num(-math.inf) / temperature
    return torch.softmax(score.masked_fill(~node_masked, -math.inf), dim=1).float()


def order_loss(logits: torch.Tensor, labels: torch.Tensor, soft: torch.Tensor | None = None,
               soft_weight: float = 0.0) -> torch.Tensor:
    """Cross-entropy on the committed position, plus `soft_weight` x cross-entropy on the soft targets."""
    loss = F.cross_entropy(logits, labels)
    if soft is not None and soft_weight > 0:
        logp = torch.log_softmax(logits, dim=1).masked_fill(soft == 0, 0.0)  # -inf where not masked
        loss = loss - soft_weight * (soft * logp).sum(1).mean()
    return loss


@torch.no_grad()
def evaluate(model: OrderModel, data: Trajectories, depths=(0, 1, 2, 3), chunk: int = 4096,
             heldout: bool = True) -> dict:
    """Held-out (or training-split) top-1/top-4 accuracy of the drafter, and of two orderings without a model: the
    stale confidence (what `confidence` drafts) and, where the shard has it, the resampled confidence at the
    node's step; per depth."""
    was_training = model.training
    model.eval()
    out = {}
    for d in depths:
        inputs, labels = data.examples_at_depth(d, heldout)
        if len(labels) == 0:
            continue
        names = ("", "confidence_", "resampled_") if inputs[5] is not None else ("", "confidence_")
        hits = torch.zeros(len(names), 2)
        for s in range(0, len(labels), chunk):
            x = tuple(None if t is None else t[s:s + chunk] for t in inputs)
            y = labels[s:s + chunk, None]
            orderings = [model(*x)] + [f.double().nan_to_num(-math.inf).masked_fill(~x[3], -math.inf)
                                       for f in (x[1], x[5])[:len(names) - 1]]
            for i, scores in enumerate(orderings):
                top = topk_lowest(scores, min(4, scores.shape[1]))
                hits[i, 0] += (top[:, :1] == y).any(1).sum()
                hits[i, 1] += (top == y).any(1).sum()
        n = len(labels)
        out[d] = {f"{name}top{k}": hits[i, j].item() / n for i, name in enumerate(names) for j, k in enumerate((1, 4))}
        out[d]["examples"] = n
    model.train(was_training)
    return out


def topk_lowest(scores: torch.Tensor, k: int) -> torch.Tensor:
    """Indices of the k largest scores, ties to the lower position (as select_children breaks them)."""
    B = scores.shape[1]
    key = scores.double() - torch.arange(B, dtype=torch.float64) * 1e-12
    return torch.topk(key, k, dim=1).indices


def format_evaluation(ev: dict) -> str:
    """One line per shard: drafter top-1/top-4 per depth, (the model-free orderings) in brackets."""
    return "  ".join(
        f"d{d} top1 {e['top1']:.3f} top4 {e['top4']:.3f} (conf {e['confidence_top1']:.3f}/{e['confidence_top4']:.3f}"
        + (f", resampled {e['resampled_top1']:.3f}/{e['resampled_top4']:.3f}" if "resampled_top1" in e else "")
        + ")" for d, e in ev.items())


def _log(line: str) -> None:
    tqdm.write(line)
    sys.stdout.flush()  # visible at once in a log file


CHECKPOINT = "checkpoint.safetensors"


def _run_identity(cfg: DrafterTrainConfig, model_cfg: OrderModelConfig, shards: list[Trajectories]) -> dict:
    """What must match for a checkpoint to be resumed: the training and model configs and the data."""
    train = {k: v for k, v in asdict(cfg).items() if k != "checkpoint_every"}
    data = [[s.name, s.B, len(s.train_blocks), len(s.heldout_blocks)] for s in shards]
    return {"train": train, "model": asdict(model_cfg), "shards": data}


def _save_checkpoint(path: Path, model, opt, gen: torch.Generator, step: int, identity: dict, history: list) -> None:
    """One safetensors file (atomically replaced): model, optimizer state, RNG states as tensors; step, run identity
    and history as JSON metadata. Nothing is pickled."""
    tensors = {f"model.{k}": v.detach().contiguous() for k, v in model.state_dict().items()}
    for index, state in opt.state_dict()["state"].items():
        for key, value in state.items():
            tensors[f"opt.{index}.{key}"] = torch.as_tensor(value).detach().contiguous()
    tensors["rng.generator"] = gen.get_state()
    tensors["rng.torch"] = torch.get_rng_state()
    meta = {"checkpoint": json.dumps({"step": step, "run": identity, "history": history})}
    atomic_write(path, lambda tmp: save_file(tensors, tmp, metadata=meta))


def _load_checkpoint(path: Path, model, opt, gen: torch.Generator, identity: dict) -> tuple[int, list]:
    """Restore a run saved by `_save_checkpoint` into `model`, `opt` and `gen`; returns (step, history)."""
    try:
        with safe_open(str(path), "pt") as f:
            meta = json.loads((f.metadata() or {})["checkpoint"])
            tensors = {k: f.get_tensor(k) for k in f.keys()}
    except Exception as e:  # noqa: BLE001 (any unreadable file is reported the same way)
        raise ValueError(f"{path}: not a readable drafter checkpoint ({e}); delete it to start over") from None
    if meta["run"] != identity:
        differs = []
        for part, value in identity.items():
            saved = meta["run"].get(part)
            if isinstance(value, dict) and isinstance(saved, dict):
                differs += [f"{part}.{k}" for k in sorted(set(value) | set(saved)) if saved.get(k) != value.get(k)]
            elif saved != value:
                differs.append(part)
        raise ValueError(f"{path}: a checkpoint of another run (its {', '.join(differs)} differ); delete it or "
                         "train into another --out")
    model.load_state_dict({k[6:]: v for k, v in tensors.items() if k.startswith("model.")})
    state: dict = {}
    for key, value in tensors.items():
        if key.startswith("opt."):
            _, index, name = key.split(".", 2)
            state.setdefault(int(index), {})[name] = value
    opt.load_state_dict({"state": state, "param_groups": opt.state_dict()["param_groups"]})
    gen.set_state(tensors["rng.generator"])
    torch.set_rng_state(tensors["rng.torch"])
    history = [{**h, "heldout": {name: {int(d): e for d, e in ev.items()} for name, ev in h["heldout"].items()}}
               for h in meta["history"]]  # JSON made the depths strings
    return meta["step"], history


def train_drafter(shards: list[Trajectories], cfg: DrafterTrainConfig, out_dir, *, model_cfg=None,
                  init: OrderModel | None = None, progress: bool = True, log=None) -> dict:
    """Train one order model on every shard (each batch from one shard, drawn in proportion to its training
    examples); `init` continues from a trained model (its config wins). Returns the parameter count and the
    evaluation history. Checkpoints every `cfg.checkpoint_every` steps into `out_dir` and resumes from one found
    there (refusing one of another run), so an interrupted run, started again, ends with the same weights; the
    checkpoint is deleted once the weights are saved."""
    log = log or _log
    check_train_config(cfg)
    torch.manual_seed(cfg.seed)
    gen = torch.Generator().manual_seed(cfg.seed)
    model = OrderModel(init.cfg if init is not None else model_cfg or OrderModelConfig())
    if init is not None:
        model.load_state_dict(init.state_dict())
    linear = {id(m.weight) for m in model.modules() if isinstance(m, torch.nn.Linear)}
    decay = [p for p in model.parameters() if id(p) in linear]  # not embeddings, norms or biases
    rest = [p for p in model.parameters() if id(p) not in linear]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": cfg.weight_decay},
                             {"params": rest, "weight_decay": 0.0}], lr=cfg.lr, betas=(0.9, 0.98))
    params = sum(p.numel() for p in model.parameters())
    log(f"order model: {params} parameters; shards: " + ", ".join(
        f"{s.name} ({len(s.train_blocks)} train / {len(s.heldout_blocks)} held-out blocks)" for s in shards))
    shard_weights = example_weights(shards)
    out_dir = Path(out_dir)
    checkpoint, identity = out_dir / CHECKPOINT, _run_identity(cfg, model.cfg, shards)
    start, history = 0, []
    for stale in remove_stale_temporaries(checkpoint):  # a save killed mid-write (SIGKILL) left it
        log(f"removed {stale}, left by an interrupted checkpoint save")
    if checkpoint.is_file():
        start, history = _load_checkpoint(checkpoint, model, opt, gen, identity)
        log(f"resuming from {checkpoint} at step {start}")
    t0 = time.perf_counter()
    bar = tqdm(range(start, cfg.steps), initial=start, total=cfg.steps, desc="train-drafter", disable=not progress)
    for step in bar:
        lr = cfg.lr * min(1.0, (step + 1) / 100) * 0.5 * (1 + math.cos(math.pi * step / cfg.steps))
        for g in opt.param_groups:
            g["lr"] = lr
        data = shards[int(torch.multinomial(shard_weights, 1, generator=gen))]
        inputs, labels, node_conf = data.sample(cfg.batch_size, cfg.max_depth, gen)
        soft = soft_targets(node_conf, inputs[3], cfg.soft_temperature) if cfg.soft_weight > 0 else None
        loss = order_loss(model(*inputs), labels, soft, cfg.soft_weight)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        bar.set_postfix(loss=f"{loss.item():.3f}")
        if (step + 1) % cfg.eval_every == 0 or step + 1 == cfg.steps:
            evals = {s.name: evaluate(model, s) for s in shards}
            history.append({"step": step + 1, "loss": loss.item(), "minutes": (time.perf_counter() - t0) / 60,
                            "heldout": evals})
            for name, ev in evals.items():
                log(f"step {step + 1} {name}: " + format_evaluation(ev))
        if cfg.checkpoint_every and (step + 1) % cfg.checkpoint_every == 0 and step + 1 < cfg.steps:
            out_dir.mkdir(parents=True, exist_ok=True)
            _save_checkpoint(checkpoint, model, opt, gen, step + 1, identity, history)
    save_order_model(model.eval(), out_dir, extra={"train": asdict(cfg), "parameters": params,
                                                   "history": history})
    checkpoint.unlink(missing_ok=True)  # the run is complete: its weights are saved
    return {"parameters": params, "history": history}
