"""Where the GPU runs: bare metal, passed through to a VM, a vGPU guest (licensed or not), or the
hypervisor that serves vGPUs (pure).

Sources:
- the modes: NVML's nvmlGpuVirtualizationMode_t (NONE "bare metal", PASSTHROUGH, VGPU "vGPU
  inside virtual machine", HOST_VGPU "VGX hypervisor in vGPU mode", HOST_VSGA),
  https://docs.nvidia.com/deploy/nvml-api/api/group__nvmlVirtualGpuEnums.html;
- a hypervisor: its driver is the NVIDIA vGPU manager, which serves vGPUs to VMs; nvidia-smi there
  prints "Host VGPU Mode" and "CUDA Version : Not Found" (as in public captures of vGPU hosts),
  and containers on it get no CUDA: CUDA runs inside the guests;
- the licence: NVIDIA's Virtual GPU Client Licensing User Guide, "Software Enforcement of NVIDIA
  vGPU Software Licensing" (https://docs.nvidia.com/vgpu/16.0/grid-licensing-user-guide/index.html)
  and its help page (https://www.nvidia.com/content/Control-Panel-Help/vLatest/en-gb/mergedProjects/nvlicENG/About_GRID_Licensing_-_Reference.htm):
  a vGPU boots with full capability, then while unlicensed it is progressively restricted (after
  20 minutes, the "Unlicensed (Unrestricted)" grace period that nvidia-smi prints): frame rate
  capped, GPU resource allocations limited, CUDA disabled on vGPUs that support it.
"""

from __future__ import annotations

from validate.host.virtualization import HYPERVISOR_MODES, hypervisor_reason
from validate.judge.verdict import FAIL, PASS, SKIP, WARN, Verdict

THRESHOLD = "not a hypervisor; licensed"
LICENSING_GUIDE = "https://docs.nvidia.com/vgpu/16.0/grid-licensing-user-guide/index.html"


def virtualization_text(mode: str | None, host_mode: str | None, license_text: str | None) -> str:
    """The measured cell: 'bare metal', 'pass-through', 'vGPU guest, licence: ...', 'vGPU
    hypervisor (SR-IOV)', or 'not reported'."""
    if mode is None:
        return "not reported"
    if mode == "None":
        return "bare metal"
    if mode == "Pass-Through":
        return "pass-through (a VM's whole GPU)"
    if mode in HYPERVISOR_MODES:
        return f"vGPU hypervisor ({mode}{', ' + host_mode if host_mode else ''})"
    if mode == "VGPU":
        return f"vGPU guest, licence {license_text or 'not reported'}"
    return mode


def virtualization_verdict(
    gpu_index: int,
    mode: str | None,
    host_mode: str | None,
    licensed: bool | None,
    license_text: str | None,
    cuda: str | None,
) -> Verdict:
    """Bare metal and pass-through pass; a licensed vGPU guest passes; an unlicensed guest fails
    (NVIDIA's software restricts it, CUDA included); a hypervisor fails (no CUDA for containers)."""
    if mode is None:
        return Verdict(
            SKIP,
            THRESHOLD,
            f"GPU {gpu_index}: the virtualization mode is not reported (a driver or "
            "capture without it)",
        )
    if mode in HYPERVISOR_MODES:
        return Verdict(FAIL, THRESHOLD, hypervisor_reason(gpu_index, mode, host_mode, cuda))
    if mode != "VGPU":
        return Verdict(PASS, THRESHOLD)
    if licensed:
        return Verdict(PASS, THRESHOLD)
    if licensed is None:
        return Verdict(
            WARN,
            THRESHOLD,
            f"GPU {gpu_index} is a vGPU guest whose licence state is not reported: "
            "check it (nvidia-smi -q | grep -i -A2 licensed); an unlicensed vGPU loses CUDA "
            f"({LICENSING_GUIDE})",
        )
    return Verdict(
        FAIL,
        THRESHOLD,
        (
            f"GPU {gpu_index} is an unlicensed vGPU guest ({license_text or 'Unlicensed'}): "
            "NVIDIA's vGPU software restricts an unlicensed vGPU after its grace period (20 "
            "minutes from boot): frame rate capped, resources limited, CUDA disabled; configure "
            "the licence (a client configuration token in /etc/nvidia/ClientConfigToken, "
            "FeatureType in /etc/nvidia/gridd.conf, restart nvidia-gridd) and check 'License "
            f"Status : Licensed' ({LICENSING_GUIDE})"
        ),
    )
