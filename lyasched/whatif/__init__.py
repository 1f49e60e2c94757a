"""`lyasched whatif`: replay a site's own Slurm accounting history under lyasched and the
baselines and compare with what actually happened (docs/whatif.md).

Modules, one job each (`lyasched.slurm.sacct` parses sacct text into records), `history` turns records
into the GPU jobs to replay and counts the rest, `cluster` decides the replay cluster,
`replay` runs the simulator, `metrics` computes the figures, `report` the summary and
terminal tables, `html` the self-contained report, `live` talks to Slurm.
"""
