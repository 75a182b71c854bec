"""Fleet validation: run the suite on many servers through engines the team already runs
(Docker hosts over SSH, Slurm) and merge the per-host reports into one fleet report.

Each backend turns "these servers" into a list of `HostOutcome` (outcome.py); the report
(report/) analyses that list once into a `Fleet` and renders it per format, each a pure function;
after the nodes' own suites, multinode.py (Slurm) and sshmultinode.py (SSH hosts) run one job across
them, judged by multinode.py. See docs/fleet-backends.md for the shape a new
backend (a Kubernetes Job, say) follows.
"""
