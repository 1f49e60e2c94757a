"""lyasched: Lyapunov drift-plus-penalty scheduling of distributed DL training jobs on Slurm."""

__version__ = "0.1.0"
