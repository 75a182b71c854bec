"""Is the GPU free for a job? Judged from what the GPU itself reports (utilisation, memory in
use), not only from the process list (pure).

The process list shows only the processes this host can see: processes of another container
(another PID namespace), of another VM (a vGPU guest sees none of its neighbours) or of another
MIG tenant hold memory and time that no list here names. Memory in use that no listed process
accounts for is such foreign work.

Thresholds, from the real captures in tests/validate/captures/ (idle hosts):
- nvidia-smi's "Used", which is NVML's version-2 `used` (the driver's reserve apart, in
  "Reserved"), on idle GPUs with no process: 0 MiB on every datacenter capture (A100, H100, H200,
  B200, GB200), 55 and 59 MiB on the MIG parents (H100, H200); on desktops the memory listed
  processes do not account for is 35 MiB (RTX 2080 Super) and 244 MiB (RTX 4080 Super: the
  compositor's surfaces). FOREIGN_MEMORY_MIN, 1 GiB, is four times the largest of these, and
  below what one more CUDA process holds once it has work on the GPU;
- NVML's version-1 `used` includes the reserve ("used: sum of reserved and allocated device memory",
  NVML API reference, nvmlMemory_t; an idle A100 reads 912 MB in v1 and 7.8 MB in v2,
  https://github.com/rust-nvml/nvml-wrapper/issues/57). The reserves seen are 400 to 742 MiB on
  physical GPUs and 2134 MiB on an RTX A6000-24Q vGPU guest (driver 535.183.06, pasted in a public
  README). Where only v1 is reported, RESERVE_ALLOWANCE (2.5 GiB) is allowed on top, so an idle GPU
  with its reserve still reads free;
- BUSY_UTILISATION: utilisation is "percent of time over the past sample period during which one
  or more kernels was executing" (nvml.h, nvmlUtilization_t); the L40S capture reads 100% with
  no memory in use and no process (its idle run, taken before the load), so utilisation alone,
  with no memory held, only warns;
- IN_USE_FAIL_FRACTION: other processes (listed ones too: a desktop's compute+graphics processes)
  holding half the memory or more leave a job sized for this GPU no room; the real desktops hold
  2.6% (RTX 2080 Super) and 3.6% (RTX 4080 Super).
"""

from __future__ import annotations

from validate.judge.verdict import FAIL, PASS, SKIP, WARN, Verdict

GIB = 2**30
FOREIGN_MEMORY_MIN = 1 * GIB
RESERVE_ALLOWANCE = int(2.5 * GIB)
BUSY_UTILISATION = 10
IN_USE_FAIL_FRACTION = 0.5
THRESHOLD = "no unlisted work, half free"


def _gib(n: int) -> str:
    return f"{n / GIB:.2f} GiB"


def in_use_text(
    utilisation: int | None, used: int | None, total: int | None, reserve_apart: bool
) -> str:
    """The measured cell: '65% busy, 9.00 of 10.00 GiB in use', each part 'not reported' when
    absent."""
    busy = "utilisation not reported" if utilisation is None else f"{utilisation}% busy"
    if used is None or total is None:
        return f"{busy}, memory not reported"
    return f"{busy}, {_gib(used)} of {_gib(total)} in use" + (
        "" if reserve_apart else " (with the driver's reserve)"
    )


def gpu_in_use_verdict(
    gpu_index: int,
    utilisation: int | None,
    used: int | None,
    total: int | None,
    reserve_apart: bool,
    listed_bytes: int | None,
    listed_count: int | None,
) -> Verdict:
    """Foreign work (memory, or memory and time, no listed process accounts for) fails, with the
    numbers and the likely cause; other processes holding half the memory or more fail (no job
    sized for this GPU fits); utilisation with no memory held warns.

    `used`: memory in use (NVML v2 / nvidia-smi's Used when `reserve_apart`, else v1's used,
    reserve included); `listed_bytes`: what the listed processes hold (None when the lists are
    not reported or say nothing of memory); `listed_count`: how many processes are listed."""
    if used is None or total is None or total <= 0:
        if utilisation is None:
            return Verdict(
                SKIP,
                THRESHOLD,
                f"GPU {gpu_index}: neither memory in use nor utilisation is reported",
            )
        used = None
    if listed_count is None:
        who = "the process list is not reported"
    elif listed_count == 0:
        who = "no process is listed"
    elif listed_bytes is None:
        who = f"{listed_count} process(es) listed, their memory not reported"
    else:
        who = f"the {listed_count} listed process(es) hold {_gib(listed_bytes)}"
    allowance = FOREIGN_MEMORY_MIN + (0 if reserve_apart else RESERVE_ALLOWANCE)
    if used is not None:
        # listed processes whose memory is not reported (Windows' WDDM) may hold all of it: not
        # foreign
        attributable = not listed_count or listed_bytes is not None
        foreign = used - (listed_bytes or 0)
        if attributable and foreign >= allowance:
            busy = "" if utilisation is None else f" at {utilisation}% utilisation"
            return Verdict(
                FAIL,
                THRESHOLD,
                (
                    f"GPU {gpu_index} is running work this host cannot see: {_gib(used)} of "
                    f"{_gib(total)} in use{busy}, {who}: another container's, VM's or MIG "
                    "tenant's processes (their PIDs are not in this namespace, or the GPU is "
                    "shared under vGPU): find the owner on the host or in the scheduler and "
                    "drain the GPU before validating"
                ),
            )
        if used >= IN_USE_FAIL_FRACTION * total:
            return Verdict(
                FAIL,
                THRESHOLD,
                (
                    f"GPU {gpu_index}: {_gib(used)} of {_gib(total)} in use, {who}: less than "
                    "half the memory is free, so no training job sized for this GPU fits: stop "
                    "them (a desktop session: run headless, or give this GPU a larger vGPU "
                    "profile) before validating"
                ),
            )
    if utilisation is not None and utilisation >= BUSY_UTILISATION and not listed_count:
        return Verdict(
            WARN,
            THRESHOLD,
            (
                f"GPU {gpu_index} reads {utilisation}% busy with no process listed and no memory "
                "held beyond the idle reserve: work that ended within the last sample period "
                "(up to a second), or another tenant's; read it again (nvidia-smi -q -d "
                "UTILIZATION) before trusting a speed figure"
            ),
        )
    return Verdict(PASS, THRESHOLD)
