"""The model protocol (`ModelSpec`) and a small library of example models in plain torch.

A profiled model is anything a factory turns into a `ModelSpec`: the module, a way to make a
synthetic batch of any size, and the loss. The examples are CIFAR-sized (32x32 images, 10
classes) so that they profile on a CPU in seconds; each has size knobs (``width``, ``depth``,
...) passed as factory keyword arguments (`--arg width=32` on the command line).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import torch
from torch import nn
from torch.nn import functional as F

Batch = tuple[torch.Tensor, torch.Tensor]


@dataclass
class ModelSpec:
    """What the profiler and `jobscripts/train_example.py` need to run training steps.

    ``make_batch(b, device)`` returns ``(inputs, target)`` for a batch of ``b`` samples;
    ``loss(model(inputs), target)`` returns a scalar tensor; ``optimizer(params)`` builds the
    optimizer whose step is part of the timed training step (default: SGD with momentum).
    """

    name: str
    model: nn.Module
    make_batch: Callable[[int, Any], Batch]
    loss: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] = F.cross_entropy
    optimizer: Callable[[Any], torch.optim.Optimizer] | None = None
    args: dict[str, Any] = field(default_factory=dict)  # factory keyword arguments, for the record

    def make_optimizer(self) -> torch.optim.Optimizer:
        if self.optimizer is not None:
            return self.optimizer(self.model.parameters())
        return torch.optim.SGD(self.model.parameters(), lr=0.01, momentum=0.9)

    def sample_shape(self) -> tuple[int, ...]:
        """Shape of one input sample (part of the model signature: it changes the cost)."""
        x, _ = self.make_batch(1, "cpu")
        return tuple(x.shape[1:])


def image_batches(channels: int, size: int, classes: int) -> Callable[[int, Any], Batch]:
    def make_batch(b: int, device: Any = "cpu") -> Batch:
        x = torch.randn(b, channels, size, size, device=device)
        y = torch.randint(0, classes, (b,), device=device)
        return x, y

    return make_batch


def vector_batches(dim: int, classes: int) -> Callable[[int, Any], Batch]:
    def make_batch(b: int, device: Any = "cpu") -> Batch:
        return torch.randn(b, dim, device=device), torch.randint(0, classes, (b,), device=device)

    return make_batch


# ---------------------------------------------------------------- ResNet-style (CIFAR ResNet)


class BasicBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.shortcut: nn.Module = nn.Identity()
        if stride != 1 or cin != cout:
            self.shortcut = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + self.shortcut(x))


class ResNet(nn.Module):
    """CIFAR ResNet (He et al.): 3 stages of ``depth`` basic blocks, widths w, 2w, 4w.
    depth=3, width=16 is ResNet-20."""

    def __init__(self, width: int = 16, depth: int = 1, classes: int = 10) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, width, 3, 1, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU())
        layers: list[nn.Module] = []
        cin = width
        for stage, mult in enumerate((1, 2, 4)):
            for i in range(depth):
                cout = width * mult
                layers.append(BasicBlock(cin, cout, 2 if (stage > 0 and i == 0) else 1))
                cin = cout
        self.blocks = nn.Sequential(*layers)
        self.fc = nn.Linear(cin, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.blocks(self.stem(x))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


# ---------------------------------------------------------------- VGG-style


class VGG(nn.Module):
    """VGG-style: conv3x3-BN-ReLU stacks with max-pooling, widths w, 2w, 4w, 8w, 8w.
    ``layers`` picks how many convs per stage (1 = VGG-11 layout)."""

    def __init__(self, width: int = 16, layers: int = 1, image_size: int = 32, classes: int = 10) -> None:
        super().__init__()
        feats: list[nn.Module] = []
        cin, size = 3, image_size
        per_stage = (1, 1, 1 + layers, 1 + layers, 1 + layers)
        for mult, n in zip((1, 2, 4, 8, 8), per_stage):
            for _ in range(n):
                feats += [nn.Conv2d(cin, width * mult, 3, padding=1, bias=False), nn.BatchNorm2d(width * mult), nn.ReLU()]
                cin = width * mult
            if size >= 2:
                feats.append(nn.MaxPool2d(2))
                size //= 2
        self.features = nn.Sequential(*feats)
        hidden = 8 * width * 4
        self.classifier = nn.Sequential(
            nn.Flatten(), nn.Linear(cin * size * size, hidden), nn.ReLU(), nn.Linear(hidden, classes)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.features(x))


# ---------------------------------------------------------------- MobileNet-style (v1)


def _dw_separable(cin: int, cout: int, stride: int) -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(cin, cin, 3, stride, 1, groups=cin, bias=False), nn.BatchNorm2d(cin), nn.ReLU(),
        nn.Conv2d(cin, cout, 1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(),
    )


class MobileNet(nn.Module):
    """MobileNet-v1-style: depthwise-separable blocks; ``width`` scales every channel count."""

    # (output channels at width 32, stride) — v1's stack, shortened for 32x32 inputs
    PLAN = ((64, 1), (128, 2), (128, 1), (256, 2), (256, 1), (512, 2), (512, 1), (1024, 2))

    def __init__(self, width: int = 16, classes: int = 10) -> None:
        super().__init__()
        scale = width / 32
        cin = width
        blocks: list[nn.Module] = [nn.Conv2d(3, cin, 3, 1, 1, bias=False), nn.BatchNorm2d(cin), nn.ReLU()]
        for c, s in self.PLAN:
            cout = max(8, int(c * scale))
            blocks.append(_dw_separable(cin, cout, s))
            cin = cout
        self.features = nn.Sequential(*blocks)
        self.fc = nn.Linear(cin, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(self.features(x), 1), 1))


# ---------------------------------------------------------------- MLP


class MLP(nn.Module):
    def __init__(self, input_dim: int = 784, width: int = 512, depth: int = 2, classes: int = 10) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        d = input_dim
        for _ in range(depth):
            layers += [nn.Linear(d, width), nn.ReLU()]
            d = width
        layers.append(nn.Linear(d, classes))
        self.net = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


# ---------------------------------------------------------------- recommendation (embedding-heavy)


class RecSys(nn.Module):
    """DLRM-like click model: a large embedding table (most of the parameters, little compute)
    looked up by a few categorical ids per sample, plus a small MLP over dense features.
    Its gradient is dense (DDP all-reduces the whole table), so communication dominates."""

    def __init__(self, rows: int = 200_000, dim: int = 64, fields: int = 8, dense: int = 13, width: int = 128) -> None:
        super().__init__()
        self.rows, self.fields, self.dense = rows, fields, dense
        self.emb = nn.EmbeddingBag(rows, dim, mode="sum")
        self.bottom = nn.Sequential(nn.Linear(dense, dim), nn.ReLU())
        self.top = nn.Sequential(nn.Linear(dim * 2, width), nn.ReLU(), nn.Linear(width, 2))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        ids = x[:, self.dense:].long()  # the ids travel as floats in one input tensor
        e = self.emb(ids)
        return self.top(torch.cat([self.bottom(x[:, : self.dense]), e], dim=1))


def recsys_batches(rows: int, fields: int, dense: int) -> Callable[[int, Any], Batch]:
    def make_batch(b: int, device: Any = "cpu") -> Batch:
        ids = torch.randint(0, rows, (b, fields), device=device).float()
        x = torch.cat([torch.randn(b, dense, device=device), ids], dim=1)
        return x, torch.randint(0, 2, (b,), device=device)

    return make_batch


# ---------------------------------------------------------------- transformer language model


class TinyLM(nn.Module):
    """Small causal transformer language model (token + position embeddings, pre-norm encoder
    layers with a causal mask, tied output projection)."""

    mask: torch.Tensor  # a registered buffer

    def __init__(self, vocab: int = 8000, dim: int = 128, layers: int = 2, heads: int = 4, seq: int = 32) -> None:
        super().__init__()
        self.seq = seq
        self.tok = nn.Embedding(vocab, dim)
        self.pos = nn.Parameter(torch.zeros(seq, dim))
        layer = nn.TransformerEncoderLayer(dim, heads, 4 * dim, dropout=0.0, batch_first=True, norm_first=True)
        self.blocks = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(dim)
        self.register_buffer("mask", nn.Transformer.generate_square_subsequent_mask(seq), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.tok(x) + self.pos[: x.shape[1]]
        h = self.norm(self.blocks(h, mask=self.mask[: x.shape[1], : x.shape[1]], is_causal=True))
        return h @ self.tok.weight.t()  # (b, seq, vocab): sample-major, so a batch splits by sample


def token_batches(vocab: int, seq: int) -> Callable[[int, Any], Batch]:
    def make_batch(b: int, device: Any = "cpu") -> Batch:
        x = torch.randint(0, vocab, (b, seq), device=device)
        return x, torch.randint(0, vocab, (b, seq), device=device)  # one target row per sample

    return make_batch


def token_loss(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Next-token cross-entropy over every position: (b, seq, vocab) logits, (b, seq) targets.
    Inputs and targets both keep the sample as their first dimension, so `train_example.py` can
    give each rank its share of a global batch by slicing dimension 0."""
    return F.cross_entropy(logits.flatten(0, 1), target.flatten())


# ---------------------------------------------------------------- recurrent speech model


class SpeechRNN(nn.Module):
    """DeepSpeech2-like acoustic model: a strided 1-D convolution over log-mel frames, a GRU
    stack and a per-frame character classifier. Recurrent: its compute is a chain of small
    sequential steps (one per frame), a family none of the other examples belongs to."""

    def __init__(self, features: int = 80, width: int = 128, layers: int = 2, classes: int = 29) -> None:
        super().__init__()
        self.conv = nn.Sequential(nn.Conv1d(features, width, 5, stride=2, padding=2), nn.ReLU())
        self.rnn = nn.GRU(width, width, layers, batch_first=True)
        self.out = nn.Linear(width, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.conv(x.transpose(1, 2)).transpose(1, 2)  # (b, ceil(frames/2), width)
        h, _ = self.rnn(h)
        return self.out(h)  # (b, ceil(frames/2), classes): sample-major, so a batch splits by sample


def speech_batches(features: int, frames: int, classes: int) -> Callable[[int, Any], Batch]:
    def make_batch(b: int, device: Any = "cpu") -> Batch:
        x = torch.randn(b, frames, features, device=device)
        return x, torch.randint(0, classes, (b, (frames + 1) // 2), device=device)  # a label per output frame

    return make_batch


# ---------------------------------------------------------------- single-shot object detector


class TinyDetector(nn.Module):
    """YOLO-style single-shot detector: a strided conv-BN-ReLU backbone down to a grid of cells,
    and a 1x1 head predicting per cell a box (4), an objectness logit and class logits."""

    def __init__(self, width: int = 32, classes: int = 20) -> None:
        super().__init__()

        def block(cin: int, cout: int, stride: int) -> nn.Sequential:
            return nn.Sequential(nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout), nn.ReLU())

        w = width
        self.backbone = nn.Sequential(block(3, w, 2), block(w, 2 * w, 2), block(2 * w, 4 * w, 2), block(4 * w, 4 * w, 1))
        self.head = nn.Conv2d(4 * w, 5 + classes, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.backbone(x)).permute(0, 2, 3, 1)  # (b, grid, grid, 5 + classes)


def detection_batches(size: int, classes: int) -> Callable[[int, Any], Batch]:
    grid = (size + 7) // 8  # three stride-2 convolutions

    def make_batch(b: int, device: Any = "cpu") -> Batch:
        x = torch.randn(b, 3, size, size, device=device)
        box = torch.rand(b, grid, grid, 4, device=device)
        obj = (torch.rand(b, grid, grid, 1, device=device) < 0.1).float()
        cls = torch.randint(0, classes, (b, grid, grid, 1), device=device).float()
        return x, torch.cat([box, obj, cls], dim=-1)  # per cell: box, object present, class id

    return make_batch


def detection_loss(out: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Box regression where an object is, objectness everywhere, classes where an object is; every
    term a mean over all cells of the batch, so the loss of a batch is the mean of its halves'."""
    obj = target[..., 4]
    box = ((out[..., :4].sigmoid() - target[..., :4]) ** 2).sum(-1) * obj
    objectness = F.binary_cross_entropy_with_logits(out[..., 4], obj, reduction="none")
    cls = F.cross_entropy(out[..., 5:].flatten(0, 2), target[..., 5].long().flatten(), reduction="none").view_as(obj) * obj
    return (5.0 * box + objectness + cls).mean()


# ---------------------------------------------------------------- factories (the library)


def resnet(width: int = 16, depth: int = 1, image_size: int = 32, classes: int = 10, name: str = "resnet") -> ModelSpec:
    """ResNet-style CNN; default is ResNet-8 (depth=1), ``resnet20`` is depth=3."""
    return ModelSpec(name, ResNet(width, depth, classes), image_batches(3, image_size, classes),
                     args=dict(width=width, depth=depth, image_size=image_size, classes=classes))


def vgg(width: int = 16, layers: int = 1, image_size: int = 32, classes: int = 10, name: str = "vgg") -> ModelSpec:
    """VGG-style CNN; width=64 is VGG-11's channel plan."""
    return ModelSpec(name, VGG(width, layers, image_size, classes), image_batches(3, image_size, classes),
                     args=dict(width=width, layers=layers, image_size=image_size, classes=classes))


def mobilenet(width: int = 16, image_size: int = 32, classes: int = 10, name: str = "mobilenet") -> ModelSpec:
    """MobileNet-v1-style CNN; width=32 is v1's width multiplier 1.0."""
    return ModelSpec(name, MobileNet(width, classes), image_batches(3, image_size, classes),
                     args=dict(width=width, image_size=image_size, classes=classes))


def mlp(input_dim: int = 784, width: int = 512, depth: int = 2, classes: int = 10, name: str = "mlp") -> ModelSpec:
    """Multi-layer perceptron over flattened 28x28 inputs."""
    return ModelSpec(name, MLP(input_dim, width, depth, classes), vector_batches(input_dim, classes),
                     args=dict(input_dim=input_dim, width=width, depth=depth, classes=classes))


def recsys(rows: int = 200_000, dim: int = 64, fields: int = 8, dense: int = 13, width: int = 128,
           name: str = "recsys") -> ModelSpec:
    """Embedding-heavy recommendation model (12.8 M embedding parameters by default)."""
    return ModelSpec(name, RecSys(rows, dim, fields, dense, width), recsys_batches(rows, fields, dense),
                     optimizer=lambda ps: torch.optim.SGD(ps, lr=0.01),
                     args=dict(rows=rows, dim=dim, fields=fields, dense=dense, width=width))


def transformer(vocab: int = 8000, dim: int = 128, layers: int = 2, heads: int = 4, seq: int = 32,
                name: str = "transformer") -> ModelSpec:
    """Small causal transformer language model over random tokens."""
    return ModelSpec(name, TinyLM(vocab, dim, layers, heads, seq), token_batches(vocab, seq),
                     loss=token_loss, optimizer=lambda ps: torch.optim.AdamW(ps, lr=1e-3),
                     args=dict(vocab=vocab, dim=dim, layers=layers, heads=heads, seq=seq))


def speech(features: int = 80, frames: int = 100, width: int = 128, layers: int = 2, classes: int = 29,
           name: str = "speech") -> ModelSpec:
    """Recurrent speech model (conv + GRU) over random log-mel frames, per-frame labels."""
    return ModelSpec(name, SpeechRNN(features, width, layers, classes), speech_batches(features, frames, classes),
                     loss=token_loss, optimizer=lambda ps: torch.optim.Adam(ps, lr=1e-3),
                     args=dict(features=features, frames=frames, width=width, layers=layers, classes=classes))


def detector(width: int = 32, image_size: int = 64, classes: int = 20, name: str = "detector") -> ModelSpec:
    """Single-shot object detector over random 64x64 images and random boxes (8x8 grid)."""
    return ModelSpec(name, TinyDetector(width, classes), detection_batches(image_size, classes), loss=detection_loss,
                     args=dict(width=width, image_size=image_size, classes=classes))


# name -> (factory, default keyword arguments); `--arg k=v` overrides the defaults.
EXAMPLES: dict[str, tuple[Callable[..., ModelSpec], dict[str, Any]]] = {
    "mlp": (mlp, {}),
    "mlp-large": (mlp, dict(width=2048, depth=3)),
    "resnet": (resnet, {}),
    "resnet20": (resnet, dict(depth=3)),
    "vgg": (vgg, {}),
    "vgg11": (vgg, dict(width=64)),
    "mobilenet": (mobilenet, {}),
    "recsys": (recsys, {}),
    "transformer": (transformer, {}),
    "speech": (speech, {}),
    "detector": (detector, {}),
}


def example(name: str, **kwargs: Any) -> ModelSpec:
    """Build the library model ``name`` (see `EXAMPLES`), overriding its knobs with ``kwargs``."""
    if name not in EXAMPLES:
        raise KeyError(f"unknown example model {name!r} (known: {', '.join(EXAMPLES)})")
    factory, defaults = EXAMPLES[name]
    return factory(**{**defaults, **kwargs, "name": name})
