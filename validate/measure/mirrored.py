"""TensorFlow's multi-GPU training, tf.distribute.MirroredStrategy, as a probe command
(`python -m validate.measure.probe tf-mirrored REPLICAS quick|full [--cpu]`): one replica per GPU
with NCCL all-reduce, or several logical CPU devices on a machine without GPUs (CI), same code.

Gradients are summed across replicas with the replica context's all_reduce, then each replica's
copy of every variable is updated with its own copy of the sum (merge_call and
extended.update, as Keras' optimizers do): a broken all-reduce leaves the copies different, and
the per-replica checksums show it. Plain variables, no Keras: its import costs seconds."""

from __future__ import annotations

import hashlib
import time
from typing import Any

#: (timed steps, batch per replica, image side); 3 warm-up steps before (the first traces).
SIZES = {"quick": (20, 32, 16), "full": (50, 64, 32)}
WARMUP = 3
CLASSES = 10


def _devices(tf: Any, replicas: int, cpu: bool) -> tuple[list[str], Any, str]:
    """(devices, cross-device ops, their name): every GPU with NCCL, or with `cpu` (a machine
    without GPUs) `replicas` logical CPUs. Logical devices must be set before TensorFlow's
    runtime starts: this runs first."""
    gpus = tf.config.list_physical_devices("GPU")
    if gpus or not cpu:
        return [f"/gpu:{i}" for i in range(len(gpus))], tf.distribute.NcclAllReduce(), "nccl"
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(
        cpu, [tf.config.LogicalDeviceConfiguration() for _ in range(replicas)]
    )
    return (
        [f"/cpu:{i}" for i in range(replicas)],
        tf.distribute.ReductionToOneDevice(),
        "reduction to one device",
    )


def _train(tf: Any, strategy: Any, steps: int, batch: int, image: int) -> dict[str, Any]:
    """A small CNN trained under `strategy`; losses, samples/s after warm-up, per-replica
    checksums."""
    replicas = strategy.num_replicas_in_sync
    generator = tf.random.Generator.from_seed(0)
    prototypes = generator.normal((CLASSES, image, image, 3))
    labels = generator.uniform((batch * replicas * 8,), 0, CLASSES, dtype=tf.int32)
    inputs = tf.gather(prototypes, labels) + 0.5 * generator.normal(
        (batch * replicas * 8, image, image, 3)
    )
    data = (
        tf.data.Dataset.from_tensor_slices((inputs, labels))
        .repeat()
        .batch(batch * replicas, drop_remainder=True)
    )
    with strategy.scope():
        init = tf.random.Generator.from_seed(1)
        weights = [
            tf.Variable(init.normal((3, 3, 3, 16)) * 0.2),
            tf.Variable(tf.zeros((16,))),
            tf.Variable(init.normal(((image // 2) * (image // 2) * 16, CLASSES)) * 0.01),
            tf.Variable(tf.zeros((CLASSES,))),
        ]
    iterator = iter(strategy.experimental_distribute_dataset(data))

    def apply(distribution: Any, grads: list[Any]) -> None:
        for variable, grad in zip(weights, grads):
            distribution.extended.update(
                variable, lambda v, g: v.assign_sub(0.05 * g), args=(grad,)
            )

    def replica_step(x: Any, y: Any) -> Any:
        with tf.GradientTape() as tape:
            h = tf.nn.relu(tf.nn.conv2d(x, weights[0], 1, "SAME") + weights[1])
            h = tf.reshape(tf.nn.max_pool2d(h, 2, 2, "SAME"), (tf.shape(x)[0], -1))
            per_example = tf.nn.sparse_softmax_cross_entropy_with_logits(
                labels=y, logits=tf.matmul(h, weights[2]) + weights[3]
            )
            loss = tf.reduce_sum(per_example) / (batch * replicas)
        context = tf.distribute.get_replica_context()
        grads = context.all_reduce("sum", tape.gradient(loss, weights))
        context.merge_call(apply, args=(grads,))
        return loss

    @tf.function
    def step() -> Any:
        x, y = next(iterator)
        return strategy.reduce("sum", strategy.run(replica_step, args=(x, y)), axis=None)

    losses = []
    started = time.perf_counter()
    for number in range(WARMUP + steps):
        if number == WARMUP:
            float(losses[-1].numpy())
            started = time.perf_counter()
        losses.append(step())
    values = [float(v.numpy()) for v in losses]
    seconds = time.perf_counter() - started
    checksums = []
    for replica in range(replicas):
        digest = hashlib.sha256()
        for variable in weights:
            digest.update(variable.values[replica].numpy().tobytes())
        checksums.append(digest.hexdigest())
    return {
        "samples_per_s": steps * batch * replicas / seconds,
        "first_loss": sum(values[:3]) / 3,
        "last_loss": sum(values[-3:]) / 3,
        "checksums": checksums,
    }


def mirrored(replicas: int, quick: bool, cpu: bool) -> dict[str, Any]:
    """MirroredStrategy over every GPU (or, with `cpu`, `replicas` logical CPUs), then the same
    job on one replica: identical variables, speed on N and on 1, efficiency speedup / N. Fewer
    than two devices: only the device list (the check skips saying so)."""
    import tensorflow as tf

    devices, ops, reduction = _devices(tf, replicas, cpu)
    if len(devices) < 2:
        return {"replicas": len(devices), "devices": devices}
    steps, batch, image = SIZES["quick" if quick else "full"]
    many = _train(
        tf,
        tf.distribute.MirroredStrategy(devices=devices, cross_device_ops=ops),
        steps,
        batch,
        image,
    )
    one = _train(
        tf,
        tf.distribute.MirroredStrategy(devices=devices[:1], cross_device_ops=ops),
        steps,
        batch,
        image,
    )
    speedup = many["samples_per_s"] / one["samples_per_s"]
    return {
        "replicas": len(devices),
        "devices": devices,
        "reduction": reduction,
        **many,
        "single_samples_per_s": one["samples_per_s"],
        "speedup": speedup,
        "efficiency": speedup / len(devices),
    }
