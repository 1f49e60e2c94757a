"""A small library of CNN training profiles for simulated workloads.

Parameter counts are the torchvision models' (exact). Per-sample and fixed step times are
plausible fp32 figures for one V100-class GPU at 224x224 (ImageNet) input; CIFAR-10 (32x32)
profiles divide the per-sample time by 3 and the activation memory by 10, the ratio seen in
the Pollux artifact's measured ResNet (../shared/data/profiles). docs/simulator.md lists the
sources and assumptions. These are *simulation inputs*, marked ``source="estimated"``.
"""

from __future__ import annotations

from dataclasses import dataclass

from lyasched.costmodel.cost import Profile


@dataclass(frozen=True)
class ModelSpec:
    """One network: exact parameter count and V100 fp32 ImageNet-resolution timing."""

    name: str
    params: int
    alpha: float  # s per step, independent of batch
    beta: float  # s per sample at 224x224
    act_bytes: float  # activation memory per sample at 224x224 (bytes)
    local_batch: int  # a typical per-GPU batch (power of two)


MODELS: dict[str, ModelSpec] = {
    m.name: m
    for m in (
        ModelSpec("alexnet", 61_100_840, 0.008, 0.45e-3, 12e6, 128),
        ModelSpec("vgg16", 138_357_544, 0.015, 4.3e-3, 180e6, 32),
        ModelSpec("resnet18", 11_689_512, 0.008, 0.85e-3, 40e6, 64),
        ModelSpec("resnet50", 25_557_032, 0.012, 2.8e-3, 105e6, 32),
        ModelSpec("mobilenet_v2", 3_504_872, 0.010, 1.4e-3, 75e6, 64),
        ModelSpec("inception_v3", 27_161_264, 0.015, 3.3e-3, 110e6, 32),
        ModelSpec("densenet121", 7_978_856, 0.020, 2.4e-3, 140e6, 32),
    )
}

# Other domains, for the synthetic workloads (lyasched.sim.synth) only: kept out of MODELS so the
# seed groups and the trace mapping, which index MODELS, stay as they were. Timings are plausible
# V100 fp32 figures per sample (a sequence, an utterance, a batch row), same caveats as above.
OTHER_MODELS: dict[str, ModelSpec] = {
    m.name: m
    for m in (
        ModelSpec("bert_base", 110_000_000, 0.020, 6.0e-3, 120e6, 32),  # language, seq 128
        ModelSpec("gpt2_medium", 355_000_000, 0.030, 18.0e-3, 300e6, 8),  # language, seq 1024
        ModelSpec("transformer_big", 213_000_000, 0.025, 9.0e-3, 200e6, 16),  # translation
        ModelSpec("deepspeech2", 87_000_000, 0.020, 8.0e-3, 250e6, 16),  # speech
        ModelSpec("wav2vec2_base", 95_000_000, 0.025, 10.0e-3, 300e6, 8),  # speech
        ModelSpec("dlrm", 540_000_000, 0.010, 0.02e-3, 2e6, 2048),  # recommendation: embedding-heavy
        ModelSpec("ncf", 30_000_000, 0.004, 0.01e-3, 1e6, 1024),  # recommendation, small
    )
}

# dataset -> (samples per epoch, per-sample time divisor, activation memory divisor)
DATASETS: dict[str, tuple[int, float, float]] = {
    "cifar10": (50_000, 3.0, 10.0),
    "imagenet": (1_281_167, 1.0, 1.0),
    "native": (1_000_000, 1.0, 1.0),  # the model's own input (OTHER_MODELS): timings as listed
}

# weights + gradients + SGD momentum in fp32, plus ~1 GB of CUDA context and workspace
_STATE_BYTES_PER_PARAM = 12
_CONTEXT_BYTES = 1.0e9


def profile(model: str, dataset: str = "imagenet") -> Profile:
    """The cost-model profile of ``model`` trained on ``dataset``."""
    if model not in MODELS and model not in OTHER_MODELS:
        raise ValueError(f"unknown model {model!r}; known: {', '.join([*MODELS, *OTHER_MODELS])}")
    if dataset not in DATASETS:
        raise ValueError(f"unknown dataset {dataset!r}; known: {', '.join(DATASETS)}")
    m = MODELS[model] if model in MODELS else OTHER_MODELS[model]
    _, beta_div, mem_div = DATASETS[dataset]
    return Profile(
        model=f"{model}/{dataset}",
        alpha=m.alpha,
        beta=m.beta / beta_div,
        params=m.params,
        mem_base=_CONTEXT_BYTES + _STATE_BYTES_PER_PARAM * m.params,
        mem_per_sample=m.act_bytes / mem_div,
        source="estimated",
    )


def epoch_iterations(dataset: str, global_batch: int) -> float:
    """Iterations in one pass over ``dataset`` at ``global_batch``."""
    return DATASETS[dataset][0] / global_batch
