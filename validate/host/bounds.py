"""What a capture or recording may hold, checked where it is read: nesting, counts against what
hardware can have, numbers NVML answers unsigned, and text safe for the terminal. Kept apart from
capture.py's parsers so that each rule is one function, and so that the parsers stay readable.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from typing import Any, Iterator

from validate.text import MAX_TEXT, safe_text

ERROR_KEY = "$error"


def call_key(function: str, *args: Any) -> str:
    """The recording's key of one NVML call: its name, and its arguments after the handle."""
    return f"{function}({','.join(str(a) for a in args)})" if args else function


class CaptureError(ValueError):
    """The file is not a capture this suite reads; the message names the file and what to give."""


#: An nvidia-smi capture of an 8-GPU server is about 360 kB; a recording with its records a few MB.
MAX_CAPTURE_BYTES = 16 * 2**20
#: nvidia-smi's XML and text are five levels deep, a recording four.
MAX_CAPTURE_DEPTH = 32
#: The longest decimal number a capture may hold (serial numbers have 13 digits).
MAX_DIGITS = 64
#: GPUs one host's NVML can list: the largest single-node systems (HGX-2, DGX-2) have 16.
MAX_GPUS_PER_HOST = 64
#: MIG instances one GPU can have (A100, H100, H200, B200: at most 7).
MAX_MIG_PER_GPU = 7
#: Elements, lines or JSON values one GPU's part of a capture may have. The largest measured is
#: 756 XML elements a GPU (b200x8-580.105.08.xml in /work/shared/records, 248 of them under one
#: <gpu>); text captures have about 300 lines a GPU. Five times that leaves room for a long
#: process list; counted while parsing, so 1.5 million <gpu> or 3.5 million children of one
#: section are refused after the first few thousand, not after building them all.
MAX_ITEMS_PER_GPU = 4096
#: Elements, lines or values a whole capture or recording may have (64 GPUs of 4,096).
MAX_CAPTURE_ITEMS = MAX_GPUS_PER_HOST * MAX_ITEMS_PER_GPU
#: The NVML answers that are signed: the T.Limit margin (degrees left below the GPU's limit, and
#: the margins at which it slows down or shuts down, which are below zero) and signed field values.
_SIGNED_ANSWER = re.compile(r"nvmlDeviceGetMarginTemperature$|\.(siVal|sllVal|dVal)$")
#: Sections of nvidia-smi's output that hold error and event counters, which are never negative.
_COUNTER_SECTIONS = re.compile(r"ecc|retired|remapped|error|replay|counter|violation", re.I)


def check_counts(recording: dict[str, Any], source: str, tree: Any = None) -> dict[str, Any]:
    """The one place a recording's counts are held to what hardware can have: GPUs per host, MIG
    instances per GPU, and no negative number among NVML's answers (NVML answers these in
    unsigned integers: ECC and other error counters, memory, clocks). A count of 10^7 GPUs or a
    MIG index of 10^9 would otherwise make every reader loop that long. With nvidia-smi's `tree`,
    its counter sections too, whose parts are summed into one answer (5 and -5 would read as 0).
    CaptureError otherwise, naming the first rule broken in the order of _COUNT_RULES."""
    for rule in _COUNT_RULES:
        what = rule(recording, tree)
        if what:
            raise CaptureError(
                f"{source}: {what}: capture it again on the server (nvidia-smi -q -x, or python "
                "-m validate --record DIR)"
            )
    return recording


def _negative_counter(recording: dict[str, Any], tree: Any) -> str | None:
    """A negative number in one of nvidia-smi's counter sections (summed, it would hide a count)."""
    stack = [(tree, False)] if tree is not None else []
    while stack:  # iteratively: the depth was bounded when the capture was read
        node, counting = stack.pop()
        counting = counting or bool(_COUNTER_SECTIONS.search(node.tag))
        if counting and re.match(r"^\s*-\s*\d", node.text):
            return (
                f"{node.tag} is {node.text.strip()[:40]}, but an error or event counter is never "
                "negative"
            )
        stack.extend((child, counting) for child in node.children)
    return None


def _gpu_count(recording: dict[str, Any], tree: Any) -> str | None:
    """More GPUs than a host can have, in NVML's count or in the recorded devices."""
    count = recording["system"].get("nvmlDeviceGetCount", 0)
    if isinstance(count, dict) and ERROR_KEY in count:
        count = 0
    if isinstance(count, bool) or not isinstance(count, int) or not 0 <= count <= MAX_GPUS_PER_HOST:
        return f"nvmlDeviceGetCount is {str(count)[:40]}; a host has 0 to {MAX_GPUS_PER_HOST} GPUs"
    if len(recording["devices"]) > MAX_GPUS_PER_HOST:
        return f"{len(recording['devices'])} GPUs; a host has at most {MAX_GPUS_PER_HOST}"
    return None


def _mig_count(recording: dict[str, Any], tree: Any) -> str | None:
    """A MIG instance numbered, or a MIG maximum, beyond what one GPU can have."""
    for index, calls in enumerate(recording["devices"]):
        mig = calls.get("mig") or {}
        if not isinstance(mig, dict):
            return f"GPU {index}'s MIG instances are a {type(mig).__name__}, not a mapping"
        for slot, answers in mig.items():
            if (
                not (slot.isascii() and slot.isdigit())
                or int(slot[:4]) >= MAX_MIG_PER_GPU
                or not isinstance(answers, dict)
            ):
                return (
                    f"GPU {index} has MIG instance {slot[:40]}; a GPU's instances are numbered 0 "
                    f"to {MAX_MIG_PER_GPU - 1}"
                )
        most = calls.get("nvmlDeviceGetMaxMigDeviceCount", 0)
        if not isinstance(most, dict) and (
            isinstance(most, bool) or not isinstance(most, int) or most > MAX_MIG_PER_GPU
        ):
            return (
                f"GPU {index} claims {str(most)[:40]} MIG instances; a GPU has at most "
                f"{MAX_MIG_PER_GPU}"
            )
    return None


def _shared_uuid(recording: dict[str, Any], tree: Any) -> str | None:
    """Two GPUs, or two MIG instances, or a MIG instance and a GPU, with one UUID."""
    uuids = [calls.get("nvmlDeviceGetUUID") for calls in recording["devices"]]
    repeated = repeated_uuid(uuids)
    if repeated:
        uuid, first, second = repeated
        return (
            f"GPU {first} and GPU {second} share the UUID {safe_text(uuid, limit=80)}, but each "
            "GPU has its own"
        )
    mig_uuids = [
        (index, slot, answers.get("nvmlDeviceGetUUID"))
        for index, calls in enumerate(recording["devices"])
        for slot, answers in sorted((calls.get("mig") or {}).items())
    ]
    repeated = repeated_uuid([uuid for _, _, uuid in mig_uuids] + uuids)
    if repeated:
        uuid, first, second = repeated
        named = [
            f"GPU {mig_uuids[n][0]} MIG {mig_uuids[n][1]}"
            if n < len(mig_uuids)
            else f"GPU {n - len(mig_uuids)}"
            for n in (first, second)
        ]
        return (
            f"{named[0]} and {named[1]} share the UUID {safe_text(uuid, limit=80)}, but each "
            "device has its own"
        )
    return None


def _negative_answer(recording: dict[str, Any], tree: Any) -> str | None:
    """A negative number where NVML answers in an unsigned integer."""
    for where, value in _numbers(
        {"system": recording["system"], "devices": recording["devices"]}, ""
    ):
        if value < 0 and not _SIGNED_ANSWER.search(where):
            return (
                f"{where.lstrip('.')} is {value}, but NVML's counts and readings are never negative"
            )
    return None


#: check_counts' rules in the order it applies them: the counts first, so that the later rules
#: loop over at most MAX_GPUS_PER_HOST GPUs of MAX_MIG_PER_GPU instances.
_COUNT_RULES = (_negative_counter, _gpu_count, _mig_count, _shared_uuid, _negative_answer)


def repeated_uuid(uuids: list[Any]) -> tuple[str, int, int] | None:
    """The first UUID two devices share, with both positions: (uuid, first, second), or None.
    Non-text entries (an unreadable GPU) are skipped. A UUID is one GPU's or one MIG instance's
    own: two devices with one UUID is NVML listing a GPU twice or an edited capture, and every
    reader keyed by UUID (the report's GPU sections, the fleet) would silently keep only one."""
    seen: dict[str, int] = {}
    for position, uuid in enumerate(uuids):
        if not isinstance(uuid, str) or not uuid:
            continue
        key = uuid.strip().upper()  # nvidia-smi prints GPU-..., some tools lower-case it
        if key in seen:
            return uuid, seen[key], position
        seen[key] = position
    return None


def _numbers(value: Any, where: str) -> Iterator[tuple[str, float]]:
    """Every number in a recording's answers, with where it is (iteratively: depth was bounded when
    read)."""
    stack = [(where, value)]
    while stack:
        where, value = stack.pop()
        if isinstance(value, dict):
            stack.extend((f"{where}.{key}", item) for key, item in value.items())
        elif isinstance(value, list):
            stack.extend((f"{where}[{n}]", item) for n, item in enumerate(value))
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            yield where, value


def bounded_xml(text: str, source: str) -> ET.Element:
    """The root element, parsed in slices so that nesting past MAX_CAPTURE_DEPTH, and counts past
    ItemCounts' bounds, are refused as soon as they are seen (nvidia-smi's XML is five levels
    deep; 5,000 would overflow the stack of every recursive reader). The whole file's tags are
    counted before parsing, in C: building 262,144 elements in Python already takes seconds."""
    count_items(text, source, xml=True)
    parser = ET.XMLPullParser(events=("start", "end"))
    root: ET.Element | None = None
    depth = 0
    counts = ItemCounts(
        source, "XML elements", "capture it again with nvidia-smi -q -x > server.xml"
    )
    try:
        for start in range(0, len(text), 1 << 16):
            parser.feed(text[start : start + (1 << 16)])
            for event, element in parser.read_events():
                if event == "start":
                    depth += 1
                    counts.opened(depth, element.tag)
                else:
                    depth -= 1
                    counts.closed()
                root = element if root is None else root
                if depth > MAX_CAPTURE_DEPTH:
                    raise CaptureError(
                        f"{source}: XML nested more than {MAX_CAPTURE_DEPTH} levels deep, which "
                        "no nvidia-smi output is: capture it again with nvidia-smi -q -x > "
                        "server.xml"
                    )
        parser.close()
    except ET.ParseError as err:
        raise CaptureError(
            f"{source}: not well-formed nvidia-smi XML ({err}): capture it again with nvidia-smi "
            "-q -x > server.xml"
        ) from None
    if root is None:
        raise CaptureError(
            f"{source}: no XML element: capture it again with nvidia-smi -q -x > server.xml"
        )
    return root


def count_items(text: str, source: str, *, xml: bool) -> None:
    """The whole file's XML tags or lines counted in C, before any parsing or other scan: building
    262,144 elements in Python already takes seconds. CaptureError past MAX_CAPTURE_ITEMS."""
    if xml:
        starts = text.count("<") - text.count(
            "</"
        )  # at least one per element (comments and the prolog add a few)
        if starts > MAX_CAPTURE_ITEMS:
            raise CaptureError(
                f"{source}: {starts:,} XML tags; a host of {MAX_GPUS_PER_HOST} GPUs has at most "
                f"{MAX_CAPTURE_ITEMS:,}: capture it again with nvidia-smi -q -x > server.xml"
            )
    else:
        lines = text.count("\n") + 1
        if lines > MAX_CAPTURE_ITEMS:
            raise CaptureError(
                f"{source}: {lines:,} lines; a host of {MAX_GPUS_PER_HOST} GPUs prints at most "
                f"{MAX_CAPTURE_ITEMS:,}: capture it again with nvidia-smi -q"
            )


class ItemCounts:
    """The counts a capture is held to while it is parsed, element by element (or line by line):
    all items, the children of any one item, and the GPUs at the top level. Refusing at the first
    item past a bound keeps the cost of a hostile file that of a real one."""

    def __init__(self, source: str, what: str, fix: str) -> None:
        self.source, self.what, self.fix = source, what, fix
        self.total = self.gpus = 0
        self.children: list[int] = [0]  # per open item, from the top: how many children so far

    def opened(self, depth: int, tag: str) -> None:
        """An item starts at `depth` (1: the root); CaptureError past a bound."""
        self.total += 1
        if self.total > MAX_CAPTURE_ITEMS:
            self._refuse(
                f"more than {MAX_CAPTURE_ITEMS:,} {self.what}; a host of {MAX_GPUS_PER_HOST} "
                "GPUs has at most that many"
            )
        del self.children[depth:]  # text captures close items by indentation, not by an end event
        self.children[-1] += 1
        if self.children[-1] > MAX_ITEMS_PER_GPU:
            self._refuse(
                f"more than {MAX_ITEMS_PER_GPU:,} {self.what} in one section (the last "
                f"<{safe_text(tag, limit=40)}>), which no nvidia-smi output has"
            )
        if depth == 2 and tag == "gpu":
            self.gpus += 1
            if self.gpus > MAX_GPUS_PER_HOST:
                self._refuse(
                    f"more than {MAX_GPUS_PER_HOST} GPUs; a host has at most {MAX_GPUS_PER_HOST}"
                )
        self.children.append(0)

    def closed(self) -> None:
        self.children.pop()

    def _refuse(self, what: str) -> None:
        raise CaptureError(f"{self.source}: {what}: {self.fix}")


def terminal_safe(recording: dict[str, Any]) -> dict[str, Any]:
    """Every text of a capture (GPU names, process names, the source line) through safe_text, once,
    where it enters: no reader, table or message downstream can then print an escape sequence."""
    stack: list[Any] = [recording]
    while stack:  # iteratively: the depth was bounded when the capture was read
        item = stack.pop()
        pairs = (
            list(item.items())
            if isinstance(item, dict)
            else list(enumerate(item))
            if isinstance(item, list)
            else []
        )
        for key, value in pairs:
            if isinstance(value, str):
                item[key] = safe_text(value, limit=MAX_TEXT)
            elif isinstance(value, (dict, list)):
                stack.append(value)
    return recording
