"""The sacct parser's old home: it is `lyasched.slurm.sacct` now (a parser of Slurm's output
belongs with the Slurm interface, and the live service reads it too). Re-exported for the
callers outside lyasched/whatif that still import it from here (lyasched.cli.whatif,
benchmarks/whatif_speed.py)."""

from lyasched.slurm.sacct import (ALTERNATIVES, EXTRA, FIELDS, OPTIONAL, SACCT_FORMAT, SacctError, SacctRecord,
                                  SacctText, parse_gpus, parse_sacct)

__all__ = ["ALTERNATIVES", "EXTRA", "FIELDS", "OPTIONAL", "SACCT_FORMAT", "SacctError", "SacctText", "SacctRecord",
           "parse_gpus", "parse_sacct"]
