"""An image reference checked by the grammar the Docker engine applies (distribution/reference),
before any engine call: `--tag`, `--base-image`, `--image` and the registry names of a push.
Apart from plan.py (what an image is) and share.py (registry names), which both use it."""

from __future__ import annotations

import re

from gpuenv.errors import BadInput

# The grammar of distribution/reference (reference.go / regexp.go), which the engine applies:
#   name      := [domain "/"] path-component ("/" path-component)*
#                (a domain has '.' or ':' or is localhost)
#   domain    := host [":" port]            host: DNS name, IPv4 or [IPv6]
#   path-component := [a-z0-9]+ (separator [a-z0-9]+)*    separator := [_.] | "__" | "-"+
#   tag       := [\w][\w.-]{0,127}          (upper case allowed in tags, never in paths)
# A name is at most 255 characters, and the engine refuses a 64-hex name (it is an image id).
_DOMAIN_COMPONENT = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_HOST = rf"(?:{_DOMAIN_COMPONENT}(?:\.{_DOMAIN_COMPONENT})*|\[[a-fA-F0-9:]+\])"
_DOMAIN = rf"{_HOST}(?::[0-9]+)?"
_PATH_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_REFERENCE = re.compile(
    rf"(?:(?P<domain>{_DOMAIN})/)?"
    rf"(?P<path>{_PATH_COMPONENT}(?:/{_PATH_COMPONENT})*)"
    r"(?::(?P<tag>[\w][\w.-]{0,127}))?",
    re.ASCII,  # Go's \w: [A-Za-z0-9_], not every Unicode letter
)
_IMAGE_ID = re.compile(r"[a-f0-9]{64}")
MAX_NAME_LENGTH = 255


def check_image_reference(value: str, option: str = "--tag") -> str:
    """`value` as a full reference (`repo:tag`, the tag `latest` when none), or BadInput naming it.

    Follows distribution/reference, so what passes here the engine accepts too: `x:Prod` and
    `registry.local:5000/team/torch:v1` pass; `foo:bar:baz`, `Team/torch`, `a b` do not.
    """
    match = _REFERENCE.fullmatch(value) if isinstance(value, str) else None
    fix = (
        "use [registry[:port]/]path[:tag]: a lower-case path such as myteam/torch, "
        "a tag of letters, digits, '_', '.', '-' (at most 128)"
    )
    if not match:
        raise BadInput(f"{option} {value!r} is not a valid image reference", fix=fix)
    domain = match.group("domain")
    if (
        domain
        and not ("." in domain or ":" in domain or domain == "localhost")
        and domain != domain.lower()
    ):
        # Not a host (no '.', ':' or localhost): engines before distribution/reference v0.5 read it
        # as the first path component, which must be lower case, and refuse it.
        raise BadInput(f"{option} {value!r}: the repository path must be lower case", fix=fix)
    name = value if match.group("tag") is None else value[: -len(match.group("tag")) - 1]
    if len(name) > MAX_NAME_LENGTH:
        raise BadInput(
            f"{option} {value[:40]!r}...: the name is {len(name)} characters, "
            f"the limit is {MAX_NAME_LENGTH}",
            fix="use a shorter name",
        )
    if _IMAGE_ID.fullmatch(match.group("path")) and not match.group("domain"):
        raise BadInput(
            f"{option} {value!r} is a 64-hex image id, which the engine refuses as a name",
            fix="use a name such as myteam/torch",
        )
    return value if match.group("tag") is not None else f"{value}:latest"
