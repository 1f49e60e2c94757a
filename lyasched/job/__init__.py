"""Code that runs inside a user's training job (and the batch script that starts it).

`steptimes` (StepTimes: the step-time report the service learns from) and `checkpoint`
(Checkpointer: resume on start, save on the move signal) and `goodput` (the adaptive batch: the
gradient noise scale, the learning-rate rules, the per-job batch agent) are the library a
training script imports; `launcher` renders lyasched/templates/launch.sbatch, the script every lyasched job
runs; `allreduce_bench` is a job of its own (torchrun -m lyasched.job.allreduce_bench). Nothing
here imports the scheduler's side: a job needs only this package (and torch).
"""
