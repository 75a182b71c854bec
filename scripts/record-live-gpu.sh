#!/usr/bin/env bash
# Record a live NVIDIA GPU host for gpuenv's tests, in one bounded run (about 5 minutes):
#   nvidia-smi -q -x and -q, NVML's raw answers for the fields whose ids moved between driver
#   branches (clock-event counters), the suite's own recording (--record), then the suite on the
#   bare host in full (--json, --junit, --verbose) and once more with --quick.
# Everything lands in OUTDIR; bundle.tar.gz holds it all. Run from the repository root, with a
# python3 that has pytest and nvidia-ml-py (and PyTorch, to prove each GPU computes).
#
#   scripts/record-live-gpu.sh OUTDIR [FULL_SECONDS] [QUICK_SECONDS]
set -u
out=${1:?usage: scripts/record-live-gpu.sh OUTDIR [FULL_SECONDS] [QUICK_SECONDS]}
full_s=${2:-190}
quick_s=${3:-80}
py=${PYTHON:-python3}
mkdir -p "$out/run/recording"
export PYTHONUNBUFFERED=1
started=$SECONDS
say() { echo "record-live-gpu [$((SECONDS - started))s]: $*"; }

say "environment"
{
    date -u +%Y-%m-%dT%H:%M:%SZ
    uname -a
    nvidia-smi -L
    "$py" -c 'import sys, torch; print(sys.version); print("torch", torch.__version__, "cuda", torch.version.cuda, "available", torch.cuda.is_available(), "devices", torch.cuda.device_count())'
    "$py" -m pip list 2>/dev/null | grep -iE '^(torch|pytest|nvidia-ml-py|numpy|pyyaml|tensorflow|rich|jax) '
    nproc; free -g | head -2
} > "$out/run/env.txt" 2>&1

say "nvidia-smi captures"
nvidia-smi -q -x > "$out/run/nvidia-smi-q-x.xml" 2> "$out/run/nvidia-smi-q-x.err"
nvidia-smi -q > "$out/run/nvidia-smi-q.txt" 2> "$out/run/nvidia-smi-q.err"
nvidia-smi topo -m > "$out/run/nvidia-smi-topo.txt" 2>&1

say "raw NVML answers"
"$py" - > "$out/run/nvml-raw.txt" 2>&1 <<'PY'
import pynvml as n

def show(label, fn):
    try:
        print(label, "=", fn())
    except Exception as err:  # an unsupported query is an answer too
        print(label, "!", type(err).__name__, err)

n.nvmlInit()
show("driver", n.nvmlSystemGetDriverVersion)
show("nvml_version", n.nvmlSystemGetNVMLVersion)
show("cuda_driver_version", n.nvmlSystemGetCudaDriverVersion_v2)
print("nvidia_ml_py NVML_FI_MAX =", getattr(n, "NVML_FI_MAX", None))
for name in sorted(dir(n)):
    if name.startswith("NVML_FI_DEV_CLOCKS_EVENT") or name.startswith("NVML_FI_PWR_SMOOTHING") or name.startswith("NVML_FI_DEV_PERF_POLICY"):
        print("const", name, getattr(n, name))
VALUE = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal", 6: "usVal"}
for index in range(n.nvmlDeviceGetCount()):
    h = n.nvmlDeviceGetHandleByIndex(index)
    show(f"gpu{index} name", lambda: n.nvmlDeviceGetName(h))
    show(f"gpu{index} uuid", lambda: n.nvmlDeviceGetUUID(h))
    def pci():
        p = n.nvmlDeviceGetPciInfo(h)
        return {"busId": p.busId, "pciDeviceId": hex(p.pciDeviceId), "pciSubSystemId": hex(p.pciSubSystemId)}
    show(f"gpu{index} pci", pci)
    show(f"gpu{index} clocks_event_reasons", lambda: hex(n.nvmlDeviceGetCurrentClocksEventReasons(h)))
    for policy in range(6):
        def violation(policy=policy):
            v = n.nvmlDeviceGetViolationStatus(h, policy)
            return {"referenceTime": v.referenceTime, "violationTime": v.violationTime}
        show(f"gpu{index} violation_status policy {policy}", violation)
    for fid in (74, 75, 76, 77, 78, 193, 194, 195, 196, 249, 250, 251, 252, 253, 254, 255, 256, 266, 267, 268, 269, 270, 271, 272, 273, 274):
        try:
            v = n.nvmlDeviceGetFieldValues(h, [fid])[0]
            value = getattr(v.value, VALUE.get(v.valueType, "ullVal"), None) if v.nvmlReturn == 0 else None
            print(f"gpu{index} field {fid} return={v.nvmlReturn} type={v.valueType} value={value}")
        except Exception as err:
            print(f"gpu{index} field {fid} ! {type(err).__name__} {err}")
    show(f"gpu{index} nvlink_count_states", lambda: [n.nvmlDeviceGetNvLinkState(h, link) for link in range(18)])
n.nvmlShutdown()
PY

say "the suite, full, on the bare host (bound ${full_s} s)"
timeout -k 10 "$full_s" "$py" -m validate --verbose --json "$out/run/live-full.json" --junit "$out/run/live-full.xml" \
    --record "$out/run/recording" > "$out/run/live-full.txt" 2>&1
echo "exit status $?" >> "$out/run/live-full.txt"

say "the suite, --quick (bound ${quick_s} s)"
timeout -k 10 "$quick_s" "$py" -m validate --quick --verbose --json "$out/run/live-quick.json" > "$out/run/live-quick.txt" 2>&1
echo "exit status $?" >> "$out/run/live-quick.txt"

say "bundle"
tar -C "$out" -czf "$out/bundle.tar.gz" run
cp "$out/run/live-full.txt" "$out/run/live-quick.txt" "$out/run/nvml-raw.txt" "$out/run/env.txt" "$out/"
say "done"
