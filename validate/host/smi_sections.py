"""Sections of an nvidia-smi capture whose spelling changed across driver generations, one
parser each (pure, stdlib only). Each returns None for a section the capture does not hold or
prints as "N/A": absence reads as "not reported", never as "none found".

Spellings read, with the public captures they were checked against (tests/validate/captures/,
whose README names each upstream: XML of drivers 570.148.08, 580.65.06 (NVIDIA's NVML mock),
580.105.08 and 580.173.02; text of 590.48.01, 595.71.05, 595.80 and 610.57.04):
- processes: `<processes>` / "Processes", each entry with a type C, G or C+G: every capture
  above; no capture between drivers 340 and 570 of this section is in the tests. The older
  `<compute_processes>` / "Compute Processes" (compute only, no type) was checked against driver
  340.24's `nvidia-smi -q -x` of a Tesla K20m listing eight processes, published in
  init-at/host-monitoring's nvidia-smi module (TEST_OUT), and 340.21's text ("Compute Processes :
  None"); tests replay it from variants of the captures above (tests/validate/host_variants.py);
- fabric: `<fabric><state>/<status>` and "Fabric / State / Status": every capture above (N/A on
  GPUs without an NVSwitch fabric, Completed/Success on the 8-GPU H100 and B200 boards); its
  states are those NVIDIA's Fabric Manager user guide names
  (https://docs.nvidia.com/datacenter/tesla/pdf/fabric-manager-user-guide.pdf). Drivers before
  the section existed print nothing, which reads as not reported.
"""

from __future__ import annotations

from typing import Any

from validate.host.smi_values import Node, error_of, not_available, number, to_bytes

#: NVML's nvmlGpuFabricState_t by nvidia-smi's words (NVML_GPU_FABRIC_STATE_*).
FABRIC_STATES = {"not supported": 0, "not started": 1, "in progress": 2, "completed": 3}


def _process_entries(section: Node) -> list[dict[str, Any]]:
    out = []
    for info in section.all("process_info"):  # XML, every generation
        out.append(
            {
                "pid": int(number(info.value("pid")) or 0),
                "type": info.value("type"),
                "name": info.value("process_name") or "",
                "used": to_bytes(info.value("used_memory")),
            }
        )
    for info in section.all("Process ID"):  # text: details nest under the pid
        out.append(
            {
                "pid": int(number(info.text) or 0),
                "type": info.value("Type"),
                "name": info.value("Name") or "",
                "used": to_bytes(info.value("Used GPU Memory")),
            }
        )
    return out


def processes(gpu: Node) -> dict[str, Any] | None:
    """The processes nvidia-smi lists on one GPU, or None when the capture does not report them.

    {"compute": [...], "graphics": [...] or None, "error": NVML error or None}. The old
    `<compute_processes>` section lists compute processes only and has no type, so graphics
    processes stay None (not reported) there.
    """
    modern = gpu.find("processes|Processes")
    old = gpu.find("compute_processes|Compute Processes")
    section = modern if modern is not None else old
    if section is None:
        return None
    error = error_of(section.text)
    if error:
        return {"compute": None, "graphics": None, "error": error}
    entries = _process_entries(section)
    if not entries and not_available(section.text):
        return None
    if modern is None:  # compute_processes: all compute
        return {"compute": [dict(e, type="C") for e in entries], "graphics": None, "error": None}
    typed = [dict(e, type=(e["type"] or "C")) for e in entries]
    return {
        "compute": [e for e in typed if "C" in e["type"].upper()],
        "graphics": [e for e in typed if "G" in e["type"].upper()],
        "error": None,
    }


def fabric(gpu: Node) -> dict[str, Any] | None:
    """The GPU's NVSwitch fabric registration as NVML's nvmlGpuFabricInfo_t would hold it:
    {"state": 1..3, "status": 0 (Success) or nvidia-smi's words}; None when the GPU has no
    fabric (N/A, Not Supported) or the capture's driver does not print the section."""
    section = gpu.find("fabric|Fabric")
    if section is None:
        return None
    state_text = (section.value("state|State") or "").strip()
    state = FABRIC_STATES.get(state_text.lower())
    if state is None or state == 0:
        return None
    status_text = (section.value("status|Status") or "").strip()
    status: int | str | None
    if status_text.lower() == "success":
        status = 0
    elif not status_text or not_available(status_text):
        status = None
    else:
        status = status_text
    return {"state": state, "status": status}


#: NVML's nvmlGpuVirtualizationMode_t by nvidia-smi's words (NVML_GPU_VIRTUALIZATION_MODE_*).
VIRTUALIZATION_MODES = {"none": 0, "pass-through": 1, "vgpu": 2, "host vgpu": 3, "host vsga": 4}
#: NVML's nvmlHostVgpuMode_t by nvidia-smi's words (NVML_HOST_VGPU_MODE_*).
HOST_VGPU_MODES = {"non sr-iov": 0, "sr-iov": 1}


def virtualization(gpu: Node) -> tuple[int | None, int | None]:
    """(virtualization mode, host vGPU mode) as NVML's enums; None where the capture does not
    say. XML `<gpu_virtualization_mode><virtualization_mode>` / `<host_vgpu_mode>`, text "GPU
    Virtualization Mode / Virtualization Mode" and "Host VGPU Mode": "None" (bare metal),
    "Pass-Through" (the A100 and H100 cloud VMs in tests/validate/captures), "VGPU" (a guest),
    "Host VGPU" with "SR-IOV" or "Non SR-IOV" (a hypervisor running the vGPU manager)."""
    section = gpu.find("gpu_virtualization_mode|GPU Virtualization Mode")
    if section is None:
        return None, None
    mode = VIRTUALIZATION_MODES.get(
        (section.value("virtualization_mode|Virtualization Mode") or "").strip().lower()
    )
    host = HOST_VGPU_MODES.get(
        (section.value("host_vgpu_mode|Host VGPU Mode") or "").strip().lower()
    )
    return mode, host


def vgpu_license(gpu: Node) -> dict[str, Any] | None:
    """A vGPU guest's licence as nvmlDeviceGetGridLicensableFeatures answers it (the one feature
    nvidia-smi prints): {"isGridLicenseSupported": 1, "licensableFeaturesCount": 1,
    "gridLicensableFeatures": [{"featureState": 1 licensed / 0 not, "productName", "licenseInfo":
    nvidia-smi's status words, "featureEnabled": 1}]}; None where the capture has no licence.

    XML `<vgpu_software_licensed_product><licensed_product_name>` / `<license_status>`, text
    "vGPU Software Licensed Product / Product Name, License Status". Status words as printed:
    "Licensed (Expiry: 2024-10-19 6:51:17 GMT)", "Unlicensed", "Unlicensed (Unrestricted)",
    "Unlicensed (Restricted)" (NVML's NVML_GRID_LICENSE_STATE_* names the same states)."""
    section = gpu.find("vgpu_software_licensed_product|vGPU Software Licensed Product")
    if section is None:
        return None
    status = (section.value("license_status|License Status") or "").strip()
    if not status or not_available(status):
        return None
    product = (section.value("licensed_product_name|Product Name") or "").strip()
    licensed = status.lower().startswith("licensed")
    feature = {
        "featureState": int(licensed),
        "productName": "" if not_available(product) else product,
        "licenseInfo": status,
        "featureEnabled": 1,
    }
    return {
        "isGridLicenseSupported": 1,
        "licensableFeaturesCount": 1,
        "gridLicensableFeatures": [feature],
    }
