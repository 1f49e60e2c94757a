"""Slurm's fair-share tree as tenant shares (lyasched.slurm.shares, live.tenants.SharesWatch)."""

from __future__ import annotations

import pytest

from lyasched.live.tenants import LiveTenants, SharesWatch
from lyasched.slurm import SlurmError
from lyasched.slurm.shares import SharesParseError, parse_sshare, sshare_command

# `sshare --all --parsable2 --format=Account,User,RawShares,NormShares` on Slurm 22.05 (shape of the
# docker cluster's tree: root, an account with two users at 3:1, and a second account)
TREE = """Account|User|RawShares|NormShares
root|||0.000000
 root|root|1|0.250000
 research||2|0.500000
  research|alice|3|0.750000
  research|bob|1|0.250000
 teaching||1|0.250000
  teaching|bob|1|0.500000
  teaching|carol|1|0.500000
"""


def test_a_users_share_is_the_product_down_the_tree_summed_over_its_accounts():
    got = parse_sshare(TREE)
    assert got == pytest.approx({"root": 0.25, "alice": 0.375, "bob": 0.125 + 0.125, "carol": 0.125})
    assert sum(got.values()) == pytest.approx(1.0)
    assert sshare_command()[-1] == "--format=Account,User,RawShares,NormShares"


def test_parent_shares_and_bad_text():
    assert parse_sshare("Account|User|RawShares|NormShares\nroot|||\n a||1|1.0\n  a|u|parent|\n") == {"u": 1.0}
    # what the docker cluster's sshare prints (priority/basic: NormShares left empty)
    real = "Account|User|RawShares|NormShares\nroot|||\n root|lyasched|1|\n root|root|1|\n research||1|\n  research|lyaother|1|\n  research|lyatest|3|\n"
    assert parse_sshare(real) == pytest.approx({"lyasched": 1 / 3, "root": 1 / 3, "lyaother": 1 / 12, "lyatest": 0.25})
    assert parse_sshare("") == {}
    with pytest.raises(SharesParseError, match="header"):
        parse_sshare("JobID|User\n")
    with pytest.raises(SharesParseError, match="not a number"):
        parse_sshare("Account|User|RawShares|NormShares\n a|u|lots|\n")


def test_the_watch_reads_every_minute_keeps_the_last_shares_and_never_asks_without_accounting():
    calls: list[list[str]] = []
    answers = [TREE, SlurmError(["sshare"], "Unable to contact slurm controller")]

    def run(argv: list[str]) -> str:
        calls.append(argv)
        a = answers.pop(0)
        if isinstance(a, Exception):
            raise a
        return a

    w = SharesWatch(run, accounting=lambda: True, refresh=60)
    first = w.read(0.0)
    assert first is not None and first["alice"] == pytest.approx(0.375)
    assert w.read(30.0) is first and len(calls) == 1  # within the minute: not asked again
    assert w.read(61.0) == first and len(calls) == 2  # a failed read keeps what was read
    off = SharesWatch(lambda argv: pytest.fail("sshare asked without accounting"), accounting=lambda: False)
    assert off.read(0.0) is None and off.read(100.0) is None


def test_new_shares_change_the_entitlements_from_then_on():
    t = LiveTenants()
    t.rebuild([], capacity=4)
    t.set_shares({"alice": 3, "bob": 1})
    assert t.ledger is not None and t.ledger.shares == {"alice": 3.0, "bob": 1.0}
    t.ledger.apply([(0.0, "alice", 0.0, 4.0), (0.0, "bob", 0.0, 4.0)])
    book = t.ledger.book(100.0)
    assert book.entitled["alice"] == pytest.approx(300.0) and book.entitled["bob"] == pytest.approx(100.0)
