"""The one module that talks to PyPI over HTTP (for the drift check and doctor's freshness probe).

It honours pip's own configuration (`pip config list`, which includes PIP_INDEX_URL, PIP_CERT
and PIP_PROXY from the environment): the index URL, the CA bundle and the proxy. requests also
honours HTTPS_PROXY and REQUESTS_CA_BUNDLE. Releases come from the JSON API; a wheel's METADATA
is read with HTTP range requests on the zip's central directory, never by downloading the wheel
(PEP 658 `.metadata` files are not served by every mirror).
"""

from __future__ import annotations

import io
import subprocess
import sys
import zipfile
from dataclasses import dataclass, field
from typing import Any, Callable
from urllib.parse import urljoin

from gpuenv.errors import ToolError

PYPI_SIMPLE = "https://pypi.org/simple"
#: Most bytes one wheel's METADATA may cost: the zip's tail, central directory and one member.
MAX_METADATA_BYTES = 4 * 2**20
_TAIL = 64 * 1024


class IndexUnreachable(ToolError):
    """The package index did not answer; `url` is what failed."""

    def __init__(self, url: str, reason: str) -> None:
        self.url = url
        super().__init__(
            f"cannot reach the package index at {url} ({reason})",
            fix="check the network, pip's index-url/proxy/cert settings, or run it where PyPI "
            "is reachable",
        )


@dataclass(frozen=True)
class IndexSettings:
    """Where and how to reach the index, as pip is configured on this machine."""

    index_url: str = PYPI_SIMPLE
    cert: str | None = None
    proxy: str | None = None
    timeout: float = 20.0
    origin: dict[str, str] = field(
        default_factory=dict
    )  # setting -> where pip got it ("global", ":env:")

    @property
    def json_base(self) -> str:
        """The JSON API root that goes with the simple index (https://pypi.org/simple -> https://pypi.org/pypi)."""
        base = self.index_url.rstrip("/")
        if base.endswith("/simple"):
            base = base[: -len("/simple")]
        return base + "/pypi"


def parse_pip_config(text: str) -> dict[str, tuple[str, str]]:
    """`pip config list` lines (`global.index-url='https://…'`) -> {key: (value, scope)}; later
    lines win."""
    out: dict[str, tuple[str, str]] = {}
    for line in text.splitlines():
        if "=" not in line or "." not in line.split("=", 1)[0]:
            continue
        name, value = line.split("=", 1)
        scope, key = name.rsplit(".", 1)
        value = value.strip().strip("'\"")
        if scope in ("global", "install", "download", ":env:", ":env:.") or scope.startswith(
            ":env:"
        ):
            out[key] = (value, scope)
    return out


def settings_from_pip_config(
    config: dict[str, tuple[str, str]], timeout: float = 20.0
) -> IndexSettings:
    """Pure: pip's index-url, cert and proxy become the drift check's settings (file:// indexes are
    skipped)."""
    index = config.get("index-url", (PYPI_SIMPLE, "default"))
    index_url = index[0] if index[0].startswith(("https://", "http://")) else PYPI_SIMPLE
    return IndexSettings(
        index_url=index_url,
        cert=config.get("cert", (None, ""))[0],
        proxy=config.get("proxy", (None, ""))[0],
        timeout=timeout,
        origin={k: v[1] for k, v in config.items() if k in ("index-url", "cert", "proxy")},
    )


def read_index_settings(timeout: float = 20.0) -> IndexSettings:
    """pip's configuration on this machine (files and PIP_* variables), as `pip config list` shows
    it.

    pip's own Configuration class is read in-process when it imports (the `pip config list`
    subprocess costs seconds, too slow for doctor); the subprocess is the fallback.
    """
    try:
        from pip._internal.configuration import Configuration

        config = Configuration(isolated=False)
        config.load()
        lines = "\n".join(f"{key}={value!r}" for key, value in config.items())
        return settings_from_pip_config(parse_pip_config(lines), timeout)
    except Exception:  # pip's internals moved: ask the public command instead
        pass
    try:
        done = subprocess.run(
            [sys.executable, "-m", "pip", "config", "list"],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        text = done.stdout if done.returncode == 0 else ""
    except (OSError, subprocess.TimeoutExpired):
        text = ""
    return settings_from_pip_config(parse_pip_config(text), timeout)


class PyPI:
    """A requests session configured like pip; counts the bytes it fetched (the drift check prints
    them)."""

    def __init__(self, settings: IndexSettings | None = None) -> None:
        import requests

        self.settings = settings or read_index_settings()
        self.session = requests.Session()
        if self.settings.cert:
            self.session.verify = self.settings.cert
        if self.settings.proxy:
            self.session.proxies = {"http": self.settings.proxy, "https": self.settings.proxy}
        self.bytes_fetched = 0
        self.requests = 0

    def json_url(self, project: str) -> str:
        return f"{self.settings.json_base}/{project}/json"

    def _get(self, url: str, headers: dict[str, str] | None = None) -> Any:
        import requests

        self.requests += 1
        try:
            response = self.session.get(url, headers=headers or {}, timeout=self.settings.timeout)
        except requests.RequestException as err:
            # urllib3 buries the cause in a long text: keep its class ("Caused by
            # NameResolutionError(...)")
            import re

            causes = re.findall(r"Caused by (\w+)\(", str(err))
            reason = type(err).__name__ + (
                f": {causes[-1]}" if causes and causes[-1] != type(err).__name__ else ""
            )
            raise IndexUnreachable(url, reason) from None
        if response.status_code >= 400:
            raise IndexUnreachable(url, f"HTTP {response.status_code}")
        self.bytes_fetched += len(response.content)
        return response

    def project(self, name: str) -> dict[str, Any]:
        """The JSON API document of a project (releases with their files, and the latest's
        metadata)."""
        return self._get(self.json_url(name)).json()

    def file_url(self, name: str, url: str) -> str:
        """File URLs in the JSON API may be relative (mirrors): resolve them against the document's
        URL."""
        return urljoin(self.json_url(name), url)

    def wheel_metadata(self, url: str, size: int, pep658: bool = False) -> str:
        """The METADATA of a remote wheel: its PEP 658 file when the index says it has one, else
        read with range requests on the wheel's central directory."""
        if pep658:
            try:
                return self._get(url + ".metadata").text
            except IndexUnreachable:
                pass  # announced but not served (some mirrors): fall back to range requests
        return self.wheel_member(
            url,
            size,
            lambda n: n.count("/") == 1 and n.endswith(".dist-info/METADATA"),
            ".dist-info/METADATA",
        )

    def wheel_member(
        self, url: str, size: int, wanted: "Callable[[str], bool] | str", what: str | None = None
    ) -> str:
        """One text file of a remote wheel (the first whose name `wanted` accepts, or that ends with
        it), read with range requests on the zip's central directory and that member only."""
        match = wanted if callable(wanted) else (lambda n: n.endswith(wanted))  # type: ignore[operator]
        remote = _RangeFile(self, url, size)
        with zipfile.ZipFile(remote) as wheel:
            names = [n for n in wheel.namelist() if match(n)]
            if not names:
                raise ToolError(f"{url} has no {what or wanted}", fix="report it to the project")
            return wheel.read(names[0]).decode("utf-8", "replace")


class _RangeFile(io.RawIOBase):
    """A read-only, seekable view of a remote file that fetches only the byte ranges zipfile asks
    for."""

    def __init__(self, client: PyPI, url: str, size: int) -> None:
        self.client, self.url, self.size, self.pos = client, url, size, 0
        self.spent = 0
        start = max(0, size - _TAIL)
        self.cache_start, self.cache = start, self._fetch(start, size - 1)

    def _fetch(self, start: int, end: int) -> bytes:
        self.spent += end - start + 1
        if self.spent > MAX_METADATA_BYTES:
            raise ToolError(
                f"reading METADATA of {self.url} would fetch more than {MAX_METADATA_BYTES} bytes",
                fix="report it (gpuenv never downloads whole wheels)",
            )
        response = self.client._get(self.url, headers={"Range": f"bytes={start}-{end}"})
        if response.status_code != 206:
            raise IndexUnreachable(
                self.url,
                f"HTTP {response.status_code} instead of 206: the server ignores range requests",
            )
        return response.content

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.pos

    def seek(self, offset: int, whence: int = 0) -> int:
        self.pos = {0: offset, 1: self.pos + offset, 2: self.size + offset}[whence]
        return self.pos

    def read(self, n: int = -1) -> bytes:
        end = self.size if n is None or n < 0 else min(self.size, self.pos + n)
        if end <= self.pos:
            return b""
        if self.pos >= self.cache_start and end <= self.cache_start + len(self.cache):
            data = self.cache[self.pos - self.cache_start : end - self.cache_start]
        else:
            data = self._fetch(self.pos, end - 1)
        self.pos = end
        return data

    def readinto(self, buffer: Any) -> int:
        data = self.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)
