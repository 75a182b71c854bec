"""`invoke verify --image REF`: does an image's environment hold exactly its lock's bytes?

The image is never run: its /opt/gpuenv/env is read through the engine from a container that
is created and never started (Engine.read_image_path), as a tar stream hashed as it passes
(gpuenv/envs/installed.py: TarTree). Nothing the image holds is executed or trusted beyond its
files: the lock the packages are compared with is this checkout's lock of the image's stack (from
the image's labels), used only when its sha256 is the one the image's label names. The label
io.gpuenv.env_layer is checked against the layers the engine records for the image.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from gpuenv.envs import verify as envs_verify
from gpuenv.envs.condalock import IMAGE_ENV_DIR
from gpuenv.envs.installed import TarTree
from gpuenv.errors import BadInput, DataError
from gpuenv.images import plan as images
from gpuenv.progress import format_size
from validate import intact

#: Labels of the container made to read an image, so a test can count and remove its own.
READ_LABEL = "io.gpuenv.verify"


def image_lock(labels: dict[str, str], lock_dir: Path | None = None) -> envs_verify.Compared:
    """The lock the image was built from, when this checkout still has it unchanged."""
    stack = images.stack_from_labels(labels)
    if stack is None:
        return envs_verify.Compared(
            None,
            "not compared with a lock: the image has no io.gpuenv.stack_json label "
            "(not built by gpuenv)",
        )
    if lock_dir is None:
        from gpuenv.envs.locking import lock_directory

        lock_dir = lock_directory(stack)
    want = labels.get(images.LOCK_HASH_LABEL, "")
    allowed = (
        envs_verify.ENSUREPIP
        if labels.get(images.LABEL_PREFIX + "lock_backend") == "uv"
        else frozenset()
    )
    try:
        compared = envs_verify.expected_from_lock(lock_dir, stack, allowed=allowed)
    except DataError as err:
        return envs_verify.Compared(None, f"not compared with a lock: {err.message}")
    if want and compared.sha256 != want:
        return envs_verify.Compared(
            None,
            f"not compared with a lock: {lock_dir} now holds another lock "
            f"than the image's ({want[:12]})",
        )
    return compared


def verify_image(
    engine: Any,
    ref: str,
    *,
    say: Callable[[str], None],
    lock_dir: Path | None = None,
    labels: dict[str, str] | None = None,
) -> intact.Verdict:
    """Every file of the image's environment against its package's record, and its packages
    against the lock of the image's labels."""
    info = engine.image_info(ref)
    if info is None:
        raise BadInput(
            f"no image {ref} on this engine", fix="build it (invoke build), or pull it first"
        )
    compared = image_lock(info.labels, lock_dir)
    where = f"{ref}:{IMAGE_ENV_DIR}"
    say(
        f"reading {where} through the engine (the image is not run; {format_size(info.size)} image)"
    )

    def read(stream: Any) -> TarTree:
        return TarTree(
            stream, strip=IMAGE_ENV_DIR.name, progress=envs_verify.byte_progress(say, None, where)
        )

    layer, wrong = env_layer_finding(info.labels, engine.layer_ids(info.id))
    say(layer)
    try:
        tree = engine.read_image_path(
            info.id, str(IMAGE_ENV_DIR), read, labels={READ_LABEL: "1", **(labels or {})}
        )
    except intact.TreeError as err:
        raise DataError(f"{where}: {err}", fix="check the engine, then run it again") from None
    verdict = intact.check(tree, where, expected=compared.expected, expected_from=compared.what)
    verdict.layer = layer
    if wrong:
        verdict.problems.append(
            intact.Problem("layer", str(IMAGE_ENV_DIR), images.ENV_LAYER_LABEL, layer)
        )
    return verdict


def env_layer_finding(labels: dict[str, str], layers: list[str]) -> tuple[str, bool]:
    """What the image's label io.gpuenv.env_layer says against the diff_ids of its layers (the
    engine's record of the image, base first; nothing is run), and whether that is a problem: the
    label names a layer the image does not have. An image built before gpuenv recorded the label
    has none, which is said and is no problem."""
    want = labels.get(images.ENV_LAYER_LABEL, "")
    if not want:
        return "environment layer: not recorded (no io.gpuenv.env_layer label)", False
    if want in layers:
        return (
            f"environment layer {want[:19]}: layer {layers.index(want) + 1} of {len(layers)} "
            "of the image, as its io.gpuenv.env_layer label records (read from the engine's "
            "record of the image; the image was not run)"
        ), False
    return (
        f"the image's layers do not include the environment layer {want[:19]} that its "
        f"io.gpuenv.env_layer label records (its last layers: "
        f"{', '.join(x[:19] for x in layers[-3:]) or 'none'})"
    ), True
