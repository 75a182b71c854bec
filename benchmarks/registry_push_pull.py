"""Print how long a push and a pull by digest take against a local registry, and the bytes moved.

Needs Debian's docker-registry (scripts/install-test-servers.sh installs it) and a gpuenv image on
the engine, named as the first argument (default: the newest; build one with
`invoke build --cuda cpu ...`). The registry runs on 127.0.0.1:<free port> with storage in a
temporary folder and is stopped at the end; the image is pulled back under its own id, so the
engine ends as it began.
Run: .venv/bin/python benchmarks/registry_push_pull.py [IMAGE]
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))  # dockercases: the clean-up helpers tests use

import dockercases  # noqa: E402

from gpuenv.engine import Engine  # noqa: E402
from gpuenv.images import plan as images  # noqa: E402
from gpuenv.progress import format_bytes, format_size  # noqa: E402


def start_registry(folder: Path) -> tuple[subprocess.Popen, str]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    config = folder / "config.yml"
    config.write_text(
        "version: 0.1\nlog:\n  level: warn\nstorage:\n  filesystem:\n    rootdirectory: "
        f"{folder / 'data'}\nhttp:\n  addr: 127.0.0.1:{port}\n"
    )
    proc = subprocess.Popen(
        [shutil.which("docker-registry") or "docker-registry", "serve", str(config)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    for _ in range(100):
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/v2/", timeout=1).close()
            return proc, f"127.0.0.1:{port}"
        except OSError:
            time.sleep(0.2)
    proc.kill()
    raise SystemExit("the registry did not start")


def main() -> None:
    engine = Engine.local()
    if len(sys.argv) > 1:
        image = engine.image_info(sys.argv[1])
        if image is None or images.STACK_LABEL not in image.labels:
            raise SystemExit(f"{sys.argv[1]} is not a gpuenv image on this engine")
    else:
        found = images.built_images(engine)
        if not found:
            raise SystemExit("no gpuenv image on the engine: build one first")
        image = found[0]
    stack = image.labels[images.STACK_LABEL]
    tags = list(image.tags)
    with tempfile.TemporaryDirectory() as tmp:
        proc, host = start_registry(Path(tmp))
        try:
            repository = f"{host}/{images.REPOSITORY_PREFIX}/{stack}"
            moved: dict[str, int] = {}

            def count(event) -> None:
                if event.layer and event.total:
                    moved[event.layer] = max(moved.get(event.layer, 0), int(event.total))

            start = time.perf_counter()
            digest = engine.push_image(image.id, repository, ["bench"], progress=count)
            push_s = time.perf_counter() - start
            pushed = sum(moved.values())
            ref = f"{repository}@{digest}"
            dockercases.remove_image(engine, image.id)
            moved.clear()
            start = time.perf_counter()
            pulled = engine.pull_image(ref, progress=count)
            pull_s = time.perf_counter() - start
            for tag in tags:
                repo, _, name = tag.rpartition(":")
                engine.client.images.get(pulled.id).tag(repo, name)
            dockercases.untag(engine, f"{repository}:bench")
        finally:
            proc.terminate()
            proc.wait()
    print(f"image {stack} ({format_size(image.size)} unpacked), registry {host}")
    print(f"{'step':<22}{'seconds':>9}{'bytes':>12}{'rate':>12}")
    pulled_bytes = sum(moved.values())
    for step, seconds, moved_bytes in (
        ("push (cold registry)", push_s, pushed),
        ("pull by digest", pull_s, pulled_bytes),
    ):
        rate = format_bytes(moved_bytes / seconds) + "/s"
        print(f"{step:<22}{seconds:>9.1f}{format_bytes(moved_bytes):>12}{rate:>12}")
    print(f"same image id after the round trip: {pulled.id == image.id}")


if __name__ == "__main__":
    main()
