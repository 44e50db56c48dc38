"""Group names for ``--socket-group``: checked when the configuration is read, used at bind."""

from __future__ import annotations

import grp


def group_id(group: str) -> int:
    """A group name or numeric id -> gid; ``KeyError`` for an unknown name."""
    return int(group) if group.isdigit() else grp.getgrnam(group).gr_gid
