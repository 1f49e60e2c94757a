"""Cost summary grammar (docs/cost-summary.md): round trip, bounds, garbage."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lyasched.costmodel.cost import Profile
from lyasched.summary import MAX_LEN, PREFIX, CostSummary, new_uid

GOOD = (
    "lyasched:v1;id=0123456789abcdef;sig=resnet18.b3f2:cpu;b=256;it=1000;gmin=1;gmax=8;"
    "a=0.0125;bt=3.2e-05;p=11689512;bpp=4;m0=180000000.0;m1=2500000.0;src=m"
)


def test_decode_good_example() -> None:
    s = CostSummary.decode(GOOD)
    assert s.uid == "0123456789abcdef"
    assert s.sig == "resnet18.b3f2:cpu"
    assert (s.global_batch, s.iterations, s.min_gpus, s.max_gpus) == (256, 1000, 1, 8)
    assert s.alpha == 0.0125 and s.beta == 3.2e-05
    assert s.params == 11689512 and s.bytes_per_param == 4
    assert s.source == "m"
    assert CostSummary.decode(s.encode()) == s


def test_keys_in_any_order() -> None:
    body = GOOD[len(PREFIX) :].split(";")
    shuffled = PREFIX + ";".join(reversed(body))
    assert CostSummary.decode(shuffled) == CostSummary.decode(GOOD)


def test_to_profile() -> None:
    p = CostSummary.decode(GOOD).to_profile()
    assert isinstance(p, Profile)
    assert p.model == "resnet18.b3f2:cpu"
    assert p.alpha == 0.0125 and p.beta == 3.2e-05 and p.params == 11689512
    assert p.mem_base == 180000000.0 and p.mem_per_sample == 2500000.0
    assert p.source == "measured"
    est = CostSummary.decode(GOOD.replace("src=m", "src=e")).to_profile()
    assert est.source == "estimated"


def test_from_profile_round_trip() -> None:
    p = Profile("mlp", alpha=0.001, beta=1e-6, params=1000, bytes_per_param=2, mem_base=1e6, mem_per_sample=10.0,
                source="estimated")
    s = CostSummary.from_profile(p, uid=new_uid(), sig="mlp:cpu", global_batch=64, iterations=10, min_gpus=1,
                                 max_gpus=4)
    assert s.source == "e"
    back = s.to_profile()
    assert dataclasses.replace(back, model="mlp") == p


@pytest.mark.parametrize(
    "text, fragment",
    [
        ("", "does not start"),
        ("lyasched:v2;id=0123456789abcdef", "does not start"),
        (GOOD.replace("b=256", "b=0"), "out of bounds"),
        (GOOD.replace("b=256", "b=1048577"), "out of bounds"),
        (GOOD.replace("it=1000", "it=-5"), "out of bounds"),
        (GOOD.replace("gmax=8", "gmax=1025"), "out of bounds"),
        (GOOD.replace("gmin=1", "gmin=9"), "below gmin"),
        (GOOD.replace("a=0.0125", "a=nan"), "not a plain decimal"),
        (GOOD.replace("a=0.0125", "a=inf"), "not a plain decimal"),
        (GOOD.replace("a=0.0125", "a=0x1p-3"), "not a plain decimal"),
        (GOOD.replace("a=0.0125", "a=1_0"), "not a plain decimal"),
        (GOOD.replace("a=0.0125", "a=1e999"), "finite"),
        (GOOD.replace("a=0.0125", "a=1000.5"), "out of bounds"),
        (GOOD.replace("bt=3.2e-05", "bt=-1e-3"), "out of bounds"),
        (GOOD.replace("bpp=4", "bpp=9"), "out of bounds"),
        (GOOD.replace("m1=2500000.0", "m1=2e12"), "out of bounds"),
        (GOOD.replace("p=11689512", "p=0"), "out of bounds"),
        (GOOD.replace("b=256", "b=2.5"), "not an integer"),
        (GOOD.replace("b=256", "b= 256"), "not an integer"),
        (GOOD.replace("src=m", "src=x"), "source"),
        (GOOD.replace("id=0123456789abcdef", "id=short"), "job uid"),
        (GOOD.replace("id=0123456789abcdef", "id=0123456789abcde_"), "job uid"),
        (GOOD.replace("sig=resnet18.b3f2:cpu", "sig=a b"), "model signature"),
        (GOOD.replace("sig=resnet18.b3f2:cpu", "sig="), "model signature"),
        (GOOD + ";b=256", "twice"),
        (GOOD + ";zz=1", "unknown key"),
        (GOOD + ";Bad=1", "bad key"),
        (GOOD + ";", "not key=value"),
        (GOOD.replace(";bpp=4", ""), "missing bpp"),
        (GOOD + ";zz=" + "1" * MAX_LEN, "longer than"),
        (GOOD + ";mb=512", "mb and lr go together"),
        (GOOD + ";lr=sqrt", "mb and lr go together"),
        (GOOD + ";mb=128;lr=sqrt", "mb=128 is below b=256"),
        (GOOD + ";mb=0;lr=sqrt", "out of bounds"),
        (GOOD + ";mb=2048;lr=cubic", "learning-rate rule"),
        (GOOD + ";mb=2048;lr=sqrt;mb=4096", "twice"),
        (GOOD + ";cb=512", "cb=512 must be a batch of an adaptive job"),
        (GOOD + ";mb=2048;lr=sqrt;cb=4096", "at most mb=2048"),
        (GOOD + ";mb=2048;lr=sqrt;cb=0", "out of bounds"),
    ],
)
def test_decode_rejects(text: str, fragment: str) -> None:
    with pytest.raises(ValueError, match=fragment) as e:
        CostSummary.decode(text)
    assert "\n" not in str(e.value)


def test_constructor_validates() -> None:
    s = CostSummary.decode(GOOD)
    with pytest.raises(ValueError, match="out of bounds"):
        dataclasses.replace(s, min_gpus=0)
    with pytest.raises(ValueError, match="finite"):
        dataclasses.replace(s, alpha=float("inf"))
    with pytest.raises(ValueError, match="integer"):
        dataclasses.replace(s, global_batch=True)
    with pytest.raises(ValueError, match="source"):
        dataclasses.replace(s, source="measured")


def test_adaptive_keys_are_optional_and_round_trip() -> None:
    s = CostSummary.decode(GOOD)
    assert not s.adaptive and "mb=" not in s.encode() and "lr=" not in s.encode()  # other jobs' summaries unchanged
    a = dataclasses.replace(s, max_batch=4096, lr_rule="adascale")
    assert a.adaptive and a.encode() == GOOD + ";mb=4096;lr=adascale"
    assert CostSummary.decode(a.encode()) == a
    assert CostSummary.decode(GOOD + ";lr=sqrt;mb=256").max_batch == 256  # mb = b: allowed, any order
    with pytest.raises(ValueError, match="go together"):
        dataclasses.replace(s, max_batch=512)


uids = st.text(alphabet="abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-", min_size=8, max_size=64)
sigs = st.text(alphabet="abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.:-", min_size=1, max_size=128)


@st.composite
def summaries(draw: st.DrawFn) -> CostSummary:
    gmin = draw(st.integers(1, 1024))
    return CostSummary(
        uid=draw(uids),
        sig=draw(sigs),
        global_batch=draw(st.integers(1, 1_048_576)),
        iterations=draw(st.integers(1, 1_000_000_000)),
        min_gpus=gmin,
        max_gpus=draw(st.integers(gmin, 1024)),
        alpha=draw(st.floats(0, 1000)),
        beta=draw(st.floats(0, 1000)),
        params=draw(st.integers(1, 10**12)),
        bytes_per_param=draw(st.integers(1, 8)),
        mem_base=draw(st.floats(0, 1e13)),
        mem_per_sample=draw(st.floats(0, 1e12)),
        source=draw(st.sampled_from("me")),
    )


@given(summaries())
def test_round_trip(s: CostSummary) -> None:
    text = s.encode()
    assert text.startswith(PREFIX)
    assert len(text) <= MAX_LEN
    assert " " not in text and '"' not in text and "'" not in text
    assert CostSummary.decode(text) == s


@settings(max_examples=300)
@given(st.text(max_size=300))
def test_garbage_never_decodes(junk: str) -> None:
    with pytest.raises(ValueError):
        CostSummary.decode(junk)
    with pytest.raises(ValueError):
        CostSummary.decode(PREFIX + junk)


@given(summaries(), st.sampled_from(["b", "it", "gmin", "gmax", "p", "bpp"]), st.integers(min_value=1))
def test_out_of_bounds_ints_rejected(s: CostSummary, key: str, over: int) -> None:
    hi = {"b": 1_048_576, "it": 1_000_000_000, "gmin": 1024, "gmax": 1024, "p": 10**12, "bpp": 8}[key]
    for bad in (hi + over, 1 - over):
        fields = [f if not f.startswith(key + "=") else f"{key}={bad}" for f in s.encode()[len(PREFIX):].split(";")]
        with pytest.raises(ValueError):
            CostSummary.decode(PREFIX + ";".join(fields))


@given(summaries(), st.sampled_from(["a", "bt", "m0", "m1"]), st.floats(min_value=1e-3, max_value=1e30))
def test_out_of_bounds_floats_rejected(s: CostSummary, key: str, over: float) -> None:
    hi = {"a": 1000, "bt": 1000, "m0": 1e13, "m1": 1e12}[key]
    for bad in (hi + over * hi, -over):
        fields = [f if not f.startswith(key + "=") else f"{key}={bad!r}" for f in s.encode()[len(PREFIX):].split(";")]
        with pytest.raises(ValueError):
            CostSummary.decode(PREFIX + ";".join(fields))


def test_the_chosen_batch_round_trips_and_is_written_after_the_adaptive_keys() -> None:
    s = CostSummary.decode(GOOD + ";mb=2048;lr=sqrt;cb=1024")
    assert s.chosen_batch == 1024 and s.adaptive
    assert s.encode().endswith(";mb=2048;lr=sqrt;cb=1024") and CostSummary.decode(s.encode()) == s
    assert dataclasses.replace(s, chosen_batch=0).encode() == CostSummary.decode(GOOD + ";mb=2048;lr=sqrt").encode()


def test_the_knee_is_optional_round_trips_and_reaches_the_profile() -> None:
    s = CostSummary.decode(GOOD)
    assert s.knee == 0.0 and "kn=" not in s.encode()  # a straight-line profile's summary is unchanged
    k = CostSummary.decode(GOOD + ";kn=48.0")
    assert k.knee == 48.0 and CostSummary.decode(k.encode()) == k
    p = k.to_profile()
    assert p.knee == 48.0 and p.step_time(32) == p.step_time(48) == k.alpha  # flat up to the knee
    assert p.step_time(64) == pytest.approx(k.alpha + k.beta * 16)
    back = CostSummary.from_profile(p, uid=new_uid(), sig="m:cpu", global_batch=64, iterations=10, min_gpus=1,
                                    max_gpus=4)
    assert back.knee == 48.0
    for bad in ("kn=-1", "kn=2e6", "kn=nan"):
        with pytest.raises(ValueError, match="kn="):
            CostSummary.decode(GOOD + ";" + bad)
    with pytest.raises(ValueError, match="kn="):
        dataclasses.replace(s, knee=-0.5)
