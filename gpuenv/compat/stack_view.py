"""How a resolved stack reads for people."""

from __future__ import annotations

from gpuenv.stack import LINUX_64, Stack


def format_stack(stack: Stack) -> str:
    rows = [
        ("stack", stack.stack_id),
        ("framework", f"{stack.framework} {stack.framework_version}"),
        *([("platform", stack.platform)] if stack.platform != LINUX_64 else []),
        (
            "install",
            stack.pip_requirement
            + (f"  (index {stack.index_url})" if stack.index_url else "  (PyPI)"),
        ),
        (
            "cuda",
            f"{stack.cuda}"
            + (f" (image {stack.cuda_version})" if stack.cuda_version else "")
            + (
                f"; build for CUDA {stack.framework_cuda}"
                if stack.framework_cuda and stack.framework_cuda != stack.cuda
                else ""
            ),
        ),
        ("min driver", stack.min_driver or "-"),
        ("base image", stack.base_image),
        ("python", stack.python),
    ]
    if stack.cudnn:
        rows.append(("cudnn", stack.cudnn))
    if stack.gpu_archs:
        rows.append(("gpu archs", " ".join("sm_" + a.replace(".", "") for a in stack.gpu_archs)))
    width = max(len(k) for k, _ in rows)
    lines = [f"{k.ljust(width)}  {v}" for k, v in rows]
    lines.append("why:")
    lines += [f"  - {r}" for r in stack.reasons]
    return "\n".join(lines)
