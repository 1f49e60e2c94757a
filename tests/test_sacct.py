"""lyasched.slurm.sacct, the pure parser of sacct text (shared by `lyasched whatif` and the live
service's plain-job estimates), fed strings; the awkward cases are in test_whatif_sacct.py."""

from __future__ import annotations

import pytest

from lyasched.slurm import sacct

HEADER = "JobID|User|Account|Partition|Submit|Start|End|ElapsedRaw|State|NNodes|AllocTRES|JobName"


def test_parses_a_gpu_run_and_skips_steps():
    text = "\n".join([
        HEADER,
        "7|ann|ml|gpu|2026-10-01T08:00:00|2026-10-01T08:01:00|2026-10-01T09:01:00|3600|COMPLETED|1|cpu=8,gres/gpu=4|train",
        "7.batch|||gpu|2026-10-01T08:00:00|2026-10-01T08:01:00|2026-10-01T09:01:00|3600|COMPLETED|1|cpu=8|batch",
    ])
    got = sacct.parse_sacct(text, "s")
    assert got.steps == 1 and len(got.records) == 1
    r = got.records[0]
    assert (r.job_id, r.user, r.account, r.alloc_gpus, r.elapsed, r.name) == ("7", "ann", "ml", 4, 3600.0, "train")
    assert r.end is not None and r.start is not None and r.end - r.start == 3600
    assert set(got.missing) == {"Eligible", "NodeList", "Timelimit", "ReqTRES"}


def test_bad_value_is_one_line_naming_line_and_field():
    text = HEADER + "\n8|ann|ml|gpu|yesterday|Unknown|Unknown|0|PENDING|1||x"
    with pytest.raises(sacct.SacctError) as e:
        sacct.parse_sacct(text, "s")
    assert "s line 2: Submit" in str(e.value) and "\n" not in str(e.value)
