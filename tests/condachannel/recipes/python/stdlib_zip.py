"""Write the pure-Python standard library of SRC into one zip of bytecode (python311.zip).

Used by the stand-in python recipe. Test suites, GUI and 2to3 stay out; so does site-packages.
"""

import sys
import zipfile
from pathlib import Path

SKIP = {
    "test",
    "tests",
    "idlelib",
    "tkinter",
    "turtledemo",
    "lib2to3",
    "ensurepip",
    "site-packages",
    "lib-dynload",
    "__pycache__",
}


def main(src: str, out: str) -> None:
    root = Path(src)
    with zipfile.PyZipFile(out, "w", compression=zipfile.ZIP_DEFLATED, optimize=0) as zf:
        for path in sorted(root.iterdir()):
            if path.name in SKIP or path.name.startswith("config-"):
                continue
            if path.suffix == ".py":
                zf.writepy(str(path))
            elif path.is_dir() and (path / "__init__.py").is_file():
                zf.writepy(str(path), filterfunc=lambda p: not (set(Path(p).parts) & SKIP))
                # data files packages read (email's, importlib's...) beside the bytecode
                for data in path.rglob("*"):
                    if (
                        data.is_file()
                        and data.suffix not in (".py", ".pyc")
                        and not (set(data.relative_to(root).parts) & SKIP)
                    ):
                        zf.write(data, str(data.relative_to(root)))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
