"""The replay's queue plot (lyasched.sim.plots.queues) names what its axes show, in words an admin
reads without docs/model.md."""

from __future__ import annotations

from lyasched.sim import plots


def test_queue_plot_labels(monkeypatch, tmp_path):
    import numpy as np

    class R:
        policy = "lyapunov"
        slot_t = np.array([0.0, 30.0, 60.0])
        first_submit = 0.0
        slot_q = np.array([3600.0, 7200.0, 0.0])
        slot_z = np.array([0.0, 1800.0, 0.0])

    seen = {}

    def keep(fig, path):
        seen["labels"] = [ax.get_ylabel() for ax in fig.axes]
        seen["title"] = fig.axes[0].get_title()

    monkeypatch.setattr(plots, "_save", keep)
    plots.queues([R()], str(tmp_path / "q.png"))
    assert seen["labels"] == ["Q: waiting work (GPU-h)", "Z: waits of the waiting jobs, summed (h)"]
    assert "waiting time (h)" not in " ".join(seen["labels"]) and seen["title"].startswith("waiting work Q")
