"""The cost model: what a job costs on a placement, and how lyasched learns it.

`cost` (per-iteration compute + ring all-reduce, run times), `jobspec` (a training job as the
model sees it), `commshape` and `calibration` (communication terms fitted to measurements),
`fit` (the least-squares helpers), `learn` (profiles refitted from the step times jobs report)
and `startup` (the seconds between a job's start and its first step). No Slurm, no service
state: the scheduler (lyasched.live, lyasched.policy, lyasched.sim) and lyasub build on it.
"""
