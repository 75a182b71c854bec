"""Child side of the isolated checks: run as `python -m validate.measure.probe COMMAND ...` in a
fresh process.

Masking and memory checks need a process that has not touched CUDA yet, with its own
environment; TensorFlow also runs here so it never maps GPU memory inside the pytest process.
Each command prints one line `VALIDATE-RESULT {json}`; the memory commands also print
`VALIDATE-STEP name` and wait for a line on stdin, so the parent can measure from outside.
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
from typing import Any

RESULT = "VALIDATE-RESULT "
STEP = "VALIDATE-STEP "


def emit(data: dict[str, Any]) -> None:
    print(RESULT + json.dumps(data, default=str), flush=True)


def step(name: str) -> None:
    """Tell the parent we reached a state worth measuring, and wait until it has measured."""
    print(STEP + name, flush=True)
    sys.stdin.readline()


def _check_matmul(result: Any, a: Any, b: Any) -> float:
    """Largest error of a float32 product against numpy's float64 one, relative to its largest
    entry.

    TF32 (TensorFlow's default on Ampere and newer) stays near 1e-3; a wrong kernel is near 1.
    """
    import numpy as np

    expected = np.asarray(a, dtype=np.float64) @ np.asarray(b, dtype=np.float64)
    error = np.max(np.abs(np.asarray(result, dtype=np.float64) - expected))
    return float(error / np.max(np.abs(expected)))


def _inputs() -> tuple[Any, Any]:
    import numpy as np

    rng = np.random.default_rng(0)
    return rng.standard_normal((128, 64), dtype=np.float32), rng.standard_normal(
        (64, 32), dtype=np.float32
    )


_PCI = re.compile(r"pci bus id:\s*([0-9a-fA-F:.]+)")
_CC = re.compile(r"compute capability:\s*([0-9.]+)")


def tf_info(compute: bool) -> dict[str, Any]:
    """TensorFlow's build, the GPUs it sees (PCI bus ids) and a small product on every device."""
    import tensorflow as tf
    from tensorflow.python.client import device_lib

    build = dict(tf.sysconfig.get_build_info())
    devices = []
    for dev in device_lib.list_local_devices():
        if dev.device_type != "GPU":
            continue
        desc = dev.physical_device_desc or ""
        pci, cc = _PCI.search(desc), _CC.search(desc)
        devices.append(
            {
                "name": dev.name,
                "pci_bus_id": pci.group(1) if pci else None,
                "compute_capability": cc.group(1) if cc else None,
                "desc": desc,
            }
        )
    results = []
    if compute:
        a, b = _inputs()
        for name in ["/CPU:0"] + [f"/GPU:{i}" for i in range(len(devices))]:
            started = time.perf_counter()  # the first op on a GPU with only PTX JIT-compiles
            with tf.device(name):
                product = tf.matmul(tf.constant(a), tf.constant(b)).numpy()
            seconds = time.perf_counter() - started
            results.append(
                {
                    "device": name,
                    "relative_error": _check_matmul(product, a, b),
                    "first_op_seconds": round(seconds, 3),
                }
            )
    return {
        "version": tf.version.VERSION,
        "is_cuda_build": bool(build.get("is_cuda_build")),
        "cuda_version": build.get("cuda_version"),
        "cudnn_version": build.get("cudnn_version"),
        "compute_capabilities": build.get("cuda_compute_capabilities"),
        "gpus": devices,
        "compute": results,
    }


#: TensorFlow speed sizes: (matmul n, repeats, training steps, batch, image side). On a GPU the
#: matmul is the speed check's n (validate.measure.bench.MATMUL_N), so the same references judge it;
#: on the CPU (CI's tensorflow-cpu) the same code runs at sizes that take a second, and is not
#: judged.
TF_GPU_SIZES = {"quick": (8192, 3, 30, 64, 32), "full": (8192, 5, 60, 128, 32)}
TF_CPU_SIZES = (256, 2, 25, 16, 16)


def tf_matmul_tflops(
    tf: Any, device: str, precision: str, n: int, repeats: int, inner: int = 4
) -> float:
    """Dense n x n products on `device` in TensorFlow, TFLOPS (2 n^3 flops per product).

    precision as in validate.measure.bench: "fp32" (TF32 off), "tf32", "bf16", "fp16". The products
    are chained (c = c @ b, b scaled by 1/sqrt(n) so values stay near 1) inside one tf.function, so
    graph optimisation cannot merge them, and each timed call ends by reading one element back:
    the host clock then spans finished GPU work, not queued launches. Median of `repeats` calls."""
    import numpy as np

    dtype = {"fp32": tf.float32, "tf32": tf.float32, "bf16": tf.bfloat16, "fp16": tf.float16}[
        precision
    ]
    previous = tf.config.experimental.tensor_float_32_execution_enabled()
    tf.config.experimental.enable_tensor_float_32_execution(precision == "tf32")
    try:
        with tf.device(device):
            a = tf.cast(tf.random.normal((n, n), seed=1), dtype)
            b = tf.cast(tf.random.normal((n, n), seed=2) / float(np.sqrt(n)), dtype)

            @tf.function
            def chain(c: Any, b: Any) -> Any:
                for _ in range(inner):
                    c = tf.matmul(c, b)
                return c[0, 0]

            float(chain(a, b).numpy())  # trace, and warm up (cuBLAS picks its kernel here)
            samples = []
            for _ in range(repeats):
                started = time.perf_counter()
                float(chain(a, b).numpy())
                samples.append(time.perf_counter() - started)
    finally:
        tf.config.experimental.enable_tensor_float_32_execution(previous)
    samples.sort()
    return 2 * n**3 * inner / samples[len(samples) // 2] / 1e12


def tf_conv_training(
    tf: Any, device: str, steps: int, batch: int, image: int, classes: int = 10
) -> dict[str, Any]:
    """A short training run of a small convolutional network on `device` (on a GPU, Conv2D and its
    gradients run through cuDNN: a missing or broken cuDNN fails here, at run time). Synthetic,
    learnable data as in validate.measure.bench.train_cnn. Returns first/last loss (mean of 3
    steps), samples/s after warm-up, and the device the convolution's output was placed on."""
    with tf.device(device):
        generator = tf.random.Generator.from_seed(0)  # its state lives on this device too
        prototypes = generator.normal((classes, image, image, 3))
        weights = [  # plain variables: no Keras import (seconds) for five layers
            tf.Variable(generator.normal((3, 3, 3, 16)) * 0.2),
            tf.Variable(tf.zeros((16,))),
            tf.Variable(generator.normal((3, 3, 16, 32)) * 0.1),
            tf.Variable(tf.zeros((32,))),
            tf.Variable(generator.normal(((image // 2) * (image // 2) * 32, classes)) * 0.01),
            tf.Variable(tf.zeros((classes,))),
        ]
        velocity = [tf.Variable(tf.zeros_like(w)) for w in weights]
        batches = []
        for _ in range(min(steps, 8)):
            labels = generator.uniform((batch,), 0, classes, dtype=tf.int32)
            inputs = tf.gather(prototypes, labels) + 0.5 * generator.normal(
                (batch, image, image, 3)
            )
            batches.append((inputs, labels))

        def forward(x: Any) -> Any:
            x = tf.nn.relu(tf.nn.conv2d(x, weights[0], 1, "SAME") + weights[1])
            x = tf.nn.max_pool2d(x, 2, 2, "SAME")
            x = tf.nn.relu(tf.nn.conv2d(x, weights[2], 1, "SAME") + weights[3])
            x = tf.reshape(x, (tf.shape(x)[0], -1))
            return tf.matmul(x, weights[4]) + weights[5]

        @tf.function
        def train_step(x: Any, y: Any) -> Any:
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(
                    tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=forward(x))
                )
            for w, v, g in zip(weights, velocity, tape.gradient(loss, weights)):
                v.assign(0.9 * v + g)
                w.assign_sub(0.01 * v)
            return loss

        placed = tf.nn.conv2d(
            batches[0][0][:1], weights[0], 1, "SAME"
        ).device  # eager: where it ran
        losses = []
        timed_from = None
        for number in range(steps):
            if number == 3:
                float(losses[-1].numpy())
                timed_from = time.perf_counter()
            x, y = batches[number % len(batches)]
            losses.append(train_step(x, y))
        values = [float(loss.numpy()) for loss in losses]
        elapsed = time.perf_counter() - (timed_from or time.perf_counter())
    return {
        "first_loss": sum(values[:3]) / 3,
        "last_loss": sum(values[-3:]) / 3,
        "samples_per_s": (steps - 3) * batch / elapsed if elapsed > 0 else None,
        "conv_device": placed,
        "steps": steps,
        "batch": batch,
    }


def tf_speed(quick: bool) -> dict[str, Any]:
    """TensorFlow's matmul throughput in the dtypes each GPU supports and a short convolutional
    training run on each GPU (cuDNN at run time) and on the CPU. Errors are kept per device, so a
    broken cuDNN is a result to judge, not a crashed probe."""
    import tensorflow as tf

    from validate.measure.bench import precisions_for

    out: dict[str, Any] = {"gpus": [], "cpu": {}}
    gpus = tf.config.list_physical_devices("GPU")
    n, repeats, steps, batch, image = TF_GPU_SIZES["quick" if quick else "full"]
    for index, gpu in enumerate(gpus):
        name = f"/GPU:{index}"
        details = _gpu_details(tf, gpu)
        entry: dict[str, Any] = {"device": name, **details, "matmul": {}, "errors": {}}
        for precision in precisions_for(details.get("compute_capability")):
            try:
                entry["matmul"][precision] = tf_matmul_tflops(tf, name, precision, n, repeats)
            except (
                Exception
            ) as err:  # a kernel that cannot run is a finding, reported per precision
                entry["errors"][f"matmul {precision}"] = (
                    f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"
                )
        try:
            entry["conv"] = tf_conv_training(tf, name, steps, batch, image)
        except Exception as err:
            entry["errors"]["conv"] = (
                f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"
            )
        entry["n"] = n
        out["gpus"].append(entry)
    n, repeats, steps, batch, image = TF_CPU_SIZES
    out["cpu"] = {
        "n": n,
        "matmul": {"fp32": tf_matmul_tflops(tf, "/CPU:0", "fp32", n, repeats, inner=2)},
        "conv": tf_conv_training(tf, "/CPU:0", steps, batch, image),
    }
    return out


def _gpu_details(tf: Any, gpu: Any) -> dict[str, Any]:
    """Compute capability ("8.9") and device name of a TensorFlow GPU, where TensorFlow says them
    (the PCI bus id, which matches it to NVML, is in tf_info's device list, in the same order)."""
    try:
        details = tf.config.experimental.get_device_details(gpu)
    except Exception:
        details = {}
    capability = details.get("compute_capability")
    return {
        "compute_capability": f"{capability[0]}.{capability[1]}" if capability else None,
        "name": details.get("device_name"),
    }


def torch_devices() -> dict[str, Any]:
    """The GPUs PyTorch sees (UUIDs, as NVML writes them) and a small product on each."""
    import torch

    a, b = _inputs()
    gpus = []
    if torch.cuda.is_available():
        for index in range(torch.cuda.device_count()):
            uuid = str(torch.cuda.get_device_properties(index).uuid)
            product = (
                (torch.from_numpy(a).to(f"cuda:{index}") @ torch.from_numpy(b).to(f"cuda:{index}"))
                .cpu()
                .numpy()
            )
            # The bare UUID as PyTorch prints it: the parent writes it as NVML does (GPU- or MIG-).
            gpus.append(
                {"index": index, "uuid": uuid, "relative_error": _check_matmul(product, a, b)}
            )
    return {"version": torch.__version__, "cuda": torch.version.cuda, "gpus": gpus}


def tf_memory(mode: str) -> dict[str, Any]:
    """Hold a small TensorFlow computation on GPU 0 under one memory-growth mode."""
    import tensorflow as tf

    gpus = tf.config.list_physical_devices("GPU")
    if not gpus:
        return {"error": "TensorFlow sees no GPU in the child process"}
    if mode == "growth-code":
        for gpu in gpus:
            tf.config.experimental.set_memory_growth(gpu, True)
    with tf.device("/GPU:0"):
        x = tf.random.uniform((512, 512))
        float(tf.reduce_sum(tf.matmul(x, x)).numpy())
    step("small")
    return {"mode": mode, "gpus": len(gpus)}


def torch_memory(mode: str, alloc_bytes: int) -> dict[str, Any]:
    """Walk PyTorch's caching allocator through small work, a freed large block, and release."""
    import torch

    if not torch.cuda.is_available():
        return {"error": "PyTorch sees no GPU in the child process"}
    small = torch.ones((512, 512), device="cuda:0")
    float((small @ small).sum().item())
    torch.cuda.synchronize()
    step("small")
    block = torch.empty(alloc_bytes, dtype=torch.uint8, device="cuda:0")
    block.fill_(1)
    torch.cuda.synchronize()
    del block
    step("freed")
    torch.cuda.empty_cache()
    torch.cuda.synchronize()
    step("emptied")
    backend = (
        torch.cuda.get_allocator_backend() if hasattr(torch.cuda, "get_allocator_backend") else None
    )
    return {"mode": mode, "allocator_backend": backend}


def nccl_version_text(version: Any) -> str:
    """torch.cuda.nccl.version() is a tuple (2, 18, 1) in new releases, an int (2708) in old
    ones."""
    if isinstance(version, int):
        return f"{version // 1000}.{(version % 1000) // 100}.{version % 100}"
    return ".".join(str(part) for part in version)


def _allreduce_worker(
    rank: int, world: int, port: int, nbytes: int, iters: int, out_path: str
) -> None:
    import torch
    import torch.distributed as dist

    torch.cuda.set_device(rank)
    from validate.measure.ddp import rank_store

    dist.init_process_group("nccl", store=rank_store(dist, port, 600), rank=rank, world_size=world)
    tensor = torch.ones(nbytes // 4, dtype=torch.float32, device=f"cuda:{rank}")
    for _ in range(5):
        dist.all_reduce(tensor)
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        dist.barrier(device_ids=[rank])
        start.record()
        dist.all_reduce(tensor)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1000.0)
    if rank == 0:
        times.sort()
        seconds = times[len(times) // 2]
        algbw = nbytes / seconds / 1e9
        with open(out_path, "w", encoding="utf-8") as handle:
            json.dump(
                {
                    "seconds": seconds,
                    "algbw_gbs": algbw,
                    "busbw_gbs": algbw * 2 * (world - 1) / world,
                    "world": world,
                    "bytes": nbytes,
                    "nccl": nccl_version_text(torch.cuda.nccl.version()),
                },
                handle,
            )
    dist.destroy_process_group()


def allreduce(nbytes: int, iters: int) -> dict[str, Any]:
    """NCCL all-reduce over every visible GPU, one process per GPU; bus bandwidth as nccl-tests."""
    import tempfile

    import torch
    import torch.multiprocessing as mp

    from validate.measure.ddp import rendezvous_store

    world = torch.cuda.device_count()
    store = rendezvous_store(600)  # held until the workers are done: no free port to race for
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "allreduce.json")
        mp.spawn(
            _allreduce_worker, args=(world, store.port, nbytes, iters, out), nprocs=world, join=True
        )
        with open(out, encoding="utf-8") as handle:
            return json.load(handle)


def _gpu_batch(args: list[str]) -> int:
    """`--gpu-batch N`: the GPU ranks' batch (validate/measure/ddp.py gpu_batch); 0 when absent."""
    return int(args[args.index("--gpu-batch") + 1]) if "--gpu-batch" in args else 0


def main(argv: list[str]) -> int:
    command, args = argv[0], argv[1:]
    try:
        if command == "tf-info":
            data = tf_info(compute="--no-compute" not in args)
            if "--pause" in args:  # let the parent measure this process's GPU memory first
                step("small")
            if (
                "--speed" in args or "--speed-quick" in args
            ):  # after the memory step: one TensorFlow start for both
                data["speed"] = tf_speed(quick="--speed-quick" in args)
            emit(data)
        elif command == "torch-devices":
            emit(torch_devices())
        elif command == "tf-memory":
            emit(tf_memory(args[0]))
        elif command == "torch-memory":
            emit(torch_memory(args[0], int(args[1])))
        elif command == "allreduce":
            emit(allreduce(int(args[0]), int(args[1])))
        elif command == "ddp":  # WORLD BACKEND quick|full [--dataparallel] [--gpu-batch N]
            from validate.measure.ddp import probe as ddp_probe

            emit(
                ddp_probe(
                    int(args[0]),
                    args[1],
                    args[2] == "quick",
                    "--dataparallel" in args,
                    _gpu_batch(args),
                )
            )
        elif command == "dataparallel":  # WORLD quick|full [--gpu-batch N]
            from validate.measure.ddp import dataparallel_probe

            emit(dataparallel_probe(int(args[0]), args[1] == "quick", _gpu_batch(args)))
        elif command == "tf-mirrored":  # REPLICAS-ON-THE-CPU quick|full [--cpu]
            from validate.measure.mirrored import mirrored

            emit(mirrored(int(args[0]), args[1] == "quick", "--cpu" in args))
        else:
            emit({"error": f"unknown probe command {command!r}"})
            return 2
    except ModuleNotFoundError as err:
        if err.name in ("torch", "tensorflow"):
            emit({"error": f"{err.name} is not installed ({err})", "missing": err.name})
        else:
            emit({"error": f"import failed: {err}"})
        return 1
    except (
        ImportError
    ) as err:  # installed but broken, e.g. a CUDA library it links against is missing
        emit({"error": f"import failed: {err}"})
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
