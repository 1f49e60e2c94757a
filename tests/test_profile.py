"""Profiler, example library, spec loading, signatures and the FLOP estimate (real torch on CPU)."""

import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from lyasched.profile import ProfileError, ProfileResult, estimate_profile, load_spec, model_signature, profile_model
from lyasched.profile.models import EXAMPLES, ModelSpec, example, mlp
from lyasched.profile.profiler import fit_points
from lyasched.profile.signature import device_type
from lyasched.profile.spec import SpecError, parse_args

SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "profiles"


def mlp_params(d_in=784, w=64, classes=10):
    return d_in * w + w + w * w + w + w * classes + classes


# ---------------------------------------------------------------- fits on recorded data


def test_fit_on_recorded_single_gpu_cifar10_profile():
    """Philly/Pollux cifar10 single-GPU step times (compute part) are linear in the batch."""
    path = SHARED / "cifar10" / "placements.csv"
    if not path.exists():
        pytest.skip("../shared/data/profiles not present")
    rows = [r for r in csv.DictReader(path.open()) if r["placement"] == "1"]
    b = [int(r["local_bsz"]) for r in rows]
    t = [float(r["step_time"]) - float(r["sync_time"]) for r in rows]
    tfit, _ = fit_points(b, t, [0.0] * len(b))
    assert len(rows) == 11 and tfit.r2 > 0.99
    assert 0 < tfit.intercept < 0.03 and 6e-4 < tfit.slope < 7e-4
    for bi, ti in zip(b, t):  # the line predicts every recorded point within 15%
        assert tfit.intercept + tfit.slope * bi == pytest.approx(ti, rel=0.15)


def test_fit_points_memory_line():
    tfit, mfit = fit_points([1, 2, 4, 8], [0.011, 0.012, 0.014, 0.018], [1100.0, 1200.0, 1400.0, 1800.0])
    assert (mfit.intercept, mfit.slope, mfit.r2) == pytest.approx((1000.0, 100.0, 1.0))
    assert tfit.slope == pytest.approx(0.001)


# ---------------------------------------------------------------- real profiling on CPU


def test_profile_tiny_mlp_on_cpu():
    r = profile_model("mlp", model_args={"width": 64}, batches=[1, 2, 4, 8], warmup=1, repeats=3, device="cpu", threads=1)
    assert r.source == "measured" and r.device_type == "cpu" and r.batches == [1, 2, 4, 8]
    assert r.params == mlp_params() and r.bytes_per_param == 4 and r.grad_bytes == 4 * mlp_params()
    assert all(t > 0 for t in r.step_times) and [len(s) for s in r.step_samples] == [3, 3, 3, 3]
    assert r.step_times == [sorted(s)[1] for s in r.step_samples]  # median of the repeats
    assert 0.0 <= r.r2 <= 1.0 and r.alpha >= 0 and r.beta >= 0
    # memory: weights + grads + momentum are the base; input + saved activations grow with b
    assert r.mem_points == sorted(r.mem_points) and r.mem_r2 == pytest.approx(1.0)
    assert r.m0 >= 3 * 4 * mlp_params()
    assert 784 * 4 + 8 <= r.m1 <= 2 * (784 * 4 + 8)
    assert r.threads == 1 and r.torch_version == torch.__version__
    assert r.signature == model_signature(mlp(width=64).model, (784,))
    p = r.to_profile()
    assert (p.alpha, p.beta, p.params, p.mem_base, p.mem_per_sample) == (r.alpha, r.beta, r.params, r.m0, r.m1)
    back = ProfileResult.from_json(r.to_json())
    assert back == r and json.loads(r.to_json())["schema_version"] == 1


def test_profile_default_sweep_caps_at_max_batch():
    r = profile_model("resnet", model_args={"width": 4}, max_batch=4, warmup=0, repeats=1, device="cpu")
    assert r.batches == [1, 2, 4] and r.stopped == "cap" and r.max_batch == 4
    r = profile_model("mlp", model_args={"width": 8}, batches=[48, 1], warmup=0, repeats=1, device="cpu")
    assert r.batches == [1, 48] and r.stopped == "done"  # an explicit list is not cut at the CPU default 32


class _OomAbove(torch.nn.Module):
    """Stands in for a device that refuses allocations above ``limit`` samples."""

    def __init__(self, inner, limit):
        super().__init__()
        self.inner, self.limit = inner, limit

    def forward(self, x):
        if x.shape[0] > self.limit:
            raise torch.OutOfMemoryError(f"CUDA out of memory. Tried to allocate {x.shape[0]} MiB")
        return self.inner(x)


def _oom_above(limit):
    spec = mlp(width=16)
    spec.model = _OomAbove(spec.model, limit)
    return spec


def test_profile_stops_at_out_of_memory_and_records_the_cap():
    r = profile_model(_oom_above(2), batches=[1, 2, 4, 8], warmup=0, repeats=1, device="cpu")
    assert r.batches == [1, 2] and r.stopped == "oom" and r.oom_batch == 4 and r.max_batch == 2


def test_profile_out_of_memory_at_first_batch_is_an_error():
    with pytest.raises(ProfileError, match="out of memory already at batch 1"):
        profile_model(_oom_above(0), batches=[1, 2], warmup=0, repeats=1, device="cpu")


def test_other_errors_are_not_swallowed():
    spec = mlp(width=16)
    spec.loss = lambda out, target: (_ for _ in ()).throw(ValueError("bad loss"))
    with pytest.raises(ValueError, match="bad loss"):
        profile_model(spec, batches=[1], warmup=0, repeats=1, device="cpu")


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU error")
def test_cuda_requested_without_gpu():
    with pytest.raises(ProfileError, match="no CUDA device"):
        profile_model("mlp", batches=[1], device="cuda")


# every example at a size that trains in milliseconds (the rest: width=4)
SMALL = {"mlp": {"width": 8}, "mlp-large": {"width": 8}, "recsys": {"rows": 100, "width": 8},
         "transformer": {"vocab": 50, "dim": 16, "seq": 8}, "speech": {"width": 4, "frames": 15}}


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_every_example_trains_one_step(name):
    spec = example(name, **SMALL.get(name, {"width": 4}))
    x, y = spec.make_batch(2, "cpu")
    out = spec.model(x)
    classes = {"recsys": 2, "transformer": 50, "speech": 29}.get(name, 10)
    # a language model predicts every token, the speech model every (strided) frame; both stay
    # sample-major (dimension 0 = the sample)
    if name == "transformer":
        assert out.shape == (2, 8, classes) and y.shape == (2, 8)
    elif name == "speech":
        assert out.shape == (2, 8, classes) and y.shape == (2, 8)
    elif name == "detector":  # per cell of an 8x8 grid: box (4), objectness, 20 class logits
        assert out.shape == (2, 8, 8, 25) and y.shape == (2, 8, 8, 6)
    else:
        assert out.shape == (2, classes) and y.shape == (2,)
    spec.loss(out, y).backward()
    assert all(p.grad is not None for p in spec.model.parameters())


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_every_example_batch_splits_by_sample(name):
    """train_example.py gives rank r samples [r*b, (r+1)*b) of the global batch by slicing
    dimension 0 of inputs and targets: the loss over the halves must average to the whole's."""
    spec = example(name, **SMALL.get(name, {"width": 4}))
    spec.model.eval()  # batch norm: per-batch statistics in training mode
    torch.manual_seed(0)
    x, y = spec.make_batch(4, "cpu")
    assert x.shape[0] == 4 and y.shape[0] == 4
    with torch.no_grad():
        whole = spec.loss(spec.model(x), y)
        halves = [spec.loss(spec.model(x[i:i + 2]), y[i:i + 2]) for i in (0, 2)]
    assert torch.allclose(whole, sum(halves) / 2, rtol=1e-5, atol=1e-6)


def test_example_size_knobs_change_parameter_count():
    small, big = example("resnet", width=8), example("resnet", width=16)
    n = lambda s: sum(p.numel() for p in s.model.parameters())  # noqa: E731
    assert n(big) > 3 * n(small)
    assert n(example("resnet20")) > n(example("resnet"))


# ---------------------------------------------------------------- spec loading


USER_MODULE = '''
import torch
from torch import nn
from torch.nn import functional as F

def as_tuple(width=8):
    return nn.Linear(4, width), lambda b, device="cpu": (torch.randn(b, 4, device=device), torch.randn(b, width, device=device)), F.mse_loss

def as_dict():
    m, mb, loss = as_tuple()
    return {"model": m, "make_batch": mb, "loss": loss}

def broken():
    return 42

def raises():
    raise RuntimeError("boom")

NOT_CALLABLE = 3
'''


@pytest.fixture
def user_module(tmp_path, monkeypatch):
    (tmp_path / "lya_user_models.py").write_text(USER_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    return "lya_user_models"


def test_load_user_factory_tuple_and_dict(user_module):
    spec = load_spec(f"{user_module}:as_tuple", {"width": 3})
    assert isinstance(spec, ModelSpec) and spec.model.out_features == 3 and spec.name == f"{user_module}:as_tuple"
    r = profile_model(spec, batches=[1, 2], warmup=0, repeats=1, device="cpu")
    assert r.params == 4 * 3 + 3
    assert isinstance(load_spec(f"{user_module}:as_dict").model, torch.nn.Linear)


@pytest.mark.parametrize("name, message", [
    ("nosuch", "unknown model"),
    ("no_such_module_xyz:f", "cannot import"),
    ("{m}:missing", "has no attribute"),
    ("{m}:NOT_CALLABLE", "not callable"),
    ("{m}:broken", "factory returned int"),
    ("{m}:raises", "RuntimeError: boom"),
])
def test_bad_specs_raise_one_line_spec_errors(user_module, name, message):
    with pytest.raises(SpecError, match=message) as ei:
        load_spec(name.format(m=user_module))
    assert "\n" not in str(ei.value)


def test_bad_example_argument():
    with pytest.raises(SpecError, match="bad model argument"):
        load_spec("mlp", {"nonsense": 1})


def test_parse_args():
    assert parse_args(["width=32", "name=abc", "scale=0.5"]) == {"width": 32, "name": "abc", "scale": 0.5}
    with pytest.raises(SpecError):
        parse_args(["novalue"])


# ---------------------------------------------------------------- signatures


SIG_SCRIPT = "from lyasched.profile.models import example; s = example('resnet'); " \
             "from lyasched.profile import model_signature; print(model_signature(s.model, s.sample_shape()))"


def test_signature_is_stable_across_processes():
    spec = example("resnet")
    here = model_signature(spec.model, spec.sample_shape())
    there = subprocess.run([sys.executable, "-c", SIG_SCRIPT], capture_output=True, text=True, check=True).stdout.strip()
    assert here == there and len(here) == 16


def test_signature_ignores_weights_but_not_shapes_dtype_or_input():
    a, b = example("mlp", width=32).model, example("mlp", width=32).model  # different random weights
    assert model_signature(a) == model_signature(b)
    assert model_signature(a) != model_signature(example("mlp", width=33).model)
    assert model_signature(a) != model_signature(example("mlp", width=32).model.double())
    assert model_signature(a, (784,)) != model_signature(a)
    r8, r16 = example("resnet", image_size=8).model, example("resnet", image_size=16).model
    assert model_signature(r8) == model_signature(r16)  # same parameters ...
    assert model_signature(r8, (3, 8, 8)) != model_signature(r16, (3, 16, 16))  # ... different cost
    assert model_signature(example("vgg").model) != model_signature(example("mobilenet").model)


def test_device_type_keys():
    assert device_type("NVIDIA A100-SXM4-40GB") == device_type("a100") == "a100"
    assert device_type("NVIDIA A10") == "a10"
    assert device_type("NVIDIA H100 80GB HBM3") == "h100"
    assert device_type("Tesla V100-SXM2-32GB") == "v100"
    assert device_type("NVIDIA L40S") == "l40s" and device_type("NVIDIA L4") == "l4"
    assert device_type("Quadro RTX 8000") == "quadro-rtx-8000"
    assert device_type("cpu") == "cpu"


# ---------------------------------------------------------------- FLOP estimate


def test_estimate_counts_training_flops_and_converts_with_the_table():
    r = estimate_profile("mlp", model_args={"width": 64}, batch=4, target="NVIDIA A100-SXM4-80GB")
    fwd = 2 * (784 * 64 + 64 * 64 + 64 * 10)
    expected = 2 * fwd + 2 * (64 * 64 + 64 * 10)  # forward + weight grads + input grads of layers 2, 3
    assert r.estimate["flops_per_sample"] == expected and r.estimate["flops_fixed"] == 0
    assert r.beta == pytest.approx(expected / (19.5e12 * 0.4))
    assert r.alpha > 0 and r.source == "estimated" and "ESTIMATE" in r.note
    assert r.device_type == "a100" and r.to_profile().source == "estimated"
    assert r.params == mlp_params() and r.m1 >= 784 * 4


def test_estimate_tf32_is_faster_and_unknown_target_fails():
    fp32 = estimate_profile("resnet", model_args={"width": 8}, target="a100")
    tf32 = estimate_profile("resnet", model_args={"width": 8}, target="a100", precision="tf32")
    assert tf32.beta == pytest.approx(fp32.beta * 19.5 / 156.0)
    with pytest.raises(ProfileError, match="no throughput entry"):
        estimate_profile("mlp", target="abacus")


def test_profile_threads_default_to_the_slurm_allocation_inside_a_job():
    """Inside a Slurm job the profiler uses the CPUs Slurm allotted (one rank's budget), not every
    core of the machine; $LYASCHED_PROFILE_THREADS wins; outside a job torch's default stays."""
    from lyasched.profile.profiler import ProfileError, env_threads

    assert env_threads({}) is None
    assert env_threads({"SLURM_CPUS_ON_NODE": "3"}) is None  # not inside a job
    job = {"SLURM_JOB_ID": "12"}
    assert env_threads({**job, "SLURM_CPUS_ON_NODE": "3"}) == 3
    assert env_threads({**job, "SLURM_CPUS_ON_NODE": "3", "SLURM_CPUS_PER_TASK": "2"}) == 2
    assert env_threads({**job, "SLURM_CPUS_ON_NODE": "3", "LYASCHED_PROFILE_THREADS": "5"}) == 5
    assert env_threads({**job, "SLURM_CPUS_ON_NODE": "bogus"}) is None
    assert env_threads({**job}) is None
    with pytest.raises(ProfileError, match="LYASCHED_PROFILE_THREADS"):
        env_threads({"LYASCHED_PROFILE_THREADS": "two"})


def test_gpu_profiles_analysis_of_the_recorded_h200_run(tmp_path):
    """benchmarks/gpu_profiles.py --from re-makes the GPU table without a GPU: every example model
    of the recorded run, its fitted line checked against its own points, and a bad file refused."""
    repo = Path(__file__).resolve().parent.parent
    src = repo / "benchmarks" / "data" / "gpu" / "h200.json"
    proc = subprocess.run([sys.executable, str(repo / "benchmarks" / "gpu_profiles.py"), "--from", str(src), "--json"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    rows = {r["model"]: r for r in json.loads(proc.stdout)["models"]}
    raw = {r["model"]: r for r in json.loads(src.read_text())}
    # every example of the time: speech and detector were added after the GPU session
    assert set(rows) == set(EXAMPLES) - {"speech", "detector"} and all(r["device"] == "NVIDIA H200" for r in rows.values())
    for name, r in rows.items():
        a, b = raw[name]["alpha"], raw[name]["beta"]
        want = [(a + b * x) / y - 1 for x, y in zip(raw[name]["batches"], raw[name]["step_times"])]
        assert r["fit_err"] == pytest.approx(want, abs=1e-4)
        assert r["fit_abs_err_max"] == pytest.approx(max(abs(e) for e in want), abs=1e-4)
        assert r["loo_abs_err_max"] >= r["fit_abs_err_max"] - 1e-9  # held-out points fit no better
        # the cost model's flat-then-linear t(b), each batch predicted from the others
        from lyasched.costmodel.batchshape import leave_one_batch_out
        loo = leave_one_batch_out(raw[name]["batches"], raw[name]["step_times"])
        assert r["shape"]["loo_err"] == pytest.approx(loo, abs=1e-4) and r["shape"]["knee"] >= 0
    assert json.loads(proc.stdout)["target"] == {"loo_median": 0.05, "loo_max": 0.15}
    assert sum(r["shape"]["knee"] > 0 for r in rows.values()) >= 5  # the GPU sweeps are flat, then linear
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    proc = subprocess.run([sys.executable, str(repo / "benchmarks" / "gpu_profiles.py"), "--from", str(bad)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and proc.stderr.startswith("error:") and len(proc.stderr.strip().splitlines()) == 1
