"""The live service's parts, one responsibility each (`lyasched.service.Service` wires them):

- `observe`: the slot's Slurm reads -> an `Observation` (GPU nodes, jobs, free GPUs, cluster
  view); the followed jobs sorted into the policy's waiting and running ones;
- `sync.RecordSync`: the records follow Slurm (listed jobs, then vanished ones), one transaction
  per batch, the cost table taught from finished jobs;
- `report`: the `SlotReport`, the slot's record, the outage log;
- `inputs.PolicyInputs`: each job as the policy's input (rows, running views, arrival history)
  and the slot's `ClusterSnapshot`;
- `context.SlotContext`: everything one slot carries (time, cluster, device, the decisions it
  records), passed through the slot instead of kept on the service;
- `step`: the job record state machine, a pure map (record, Slurm job) -> (record update,
  events), applied for the whole slot in one transaction;
- `starter.Starter`: the one place a decision becomes Slurm commands (intent, resize, release,
  hold again) and the reconciliation of starts a crash left open;
- `mover.Mover`: the same for moves of running checkpointable jobs (a moving policy's
  ``preempt``): the decision becomes a move (`carry_out`), carried out across slots;
- `learning`: what a finished job teaches the cost table (its step report, else its run time)
  and the learned inputs a slot predicts waiting jobs from;
- `loop`: one slot every ``slot_seconds`` until SIGTERM/SIGINT.

The slot's policy input is built in one place shared with the simulator,
`lyasched.policy.snapshot.SlotStateBuilder`. docs/service.md shows the path.
"""
