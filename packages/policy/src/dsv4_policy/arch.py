"""GPU architecture names (``sm80``, ``sm90a``, ``sm120``...) and their compute capability.

Policy keys name the GPU by its SM architecture string. Some baseline behaviour
depends on the compute-capability major version (SM120 parts, 12.x, keep a full-width
decode view), so the string is parsed once and the answer cached: the launch
resolver asks on every model step.
"""

from __future__ import annotations

import re

ARCH_PATTERN = re.compile(r"^sm([1-9][0-9]*)([0-9])([a-z]?)$")
ARCH_ACCEPTED = (
    "an SM architecture name such as 'sm80', 'sm86', 'sm90', 'sm90a', 'sm100' or 'sm120': "
    "'sm', the major and one-digit minor compute capability, optionally one lowercase letter"
)

_MAJOR: dict[str, int] = {}


def arch_major(arch: str) -> int:
    """The compute-capability major version of ``arch`` (``sm120`` -> 12, ``sm86`` -> 8).

    Raises ``ValueError`` naming the accepted form when ``arch`` is not an SM name.
    """
    major = _MAJOR.get(arch)
    if major is not None:
        return major
    found = ARCH_PATTERN.fullmatch(arch) if isinstance(arch, str) else None
    if found is None:
        raise ValueError(f"arch {arch!r} is not {ARCH_ACCEPTED}")
    major = int(found.group(1))
    _MAJOR[arch] = major
    return major
