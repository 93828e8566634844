"""Whether a run marked running still has a process driving it."""

from __future__ import annotations

import os
import socket

from kscience.record.rows import CampaignRow, RunRow


def run_is_alive(row: RunRow | CampaignRow) -> bool:
    """Whether a run (or campaign) marked running still has its process (on this host; elsewhere assume so)."""
    if row.status != "running" or not row.pid:
        return False
    if row.host != socket.gethostname():
        return True
    try:
        os.kill(row.pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def display_status(row: RunRow | CampaignRow) -> str:
    """A run's status for people: one marked running whose process is gone was interrupted."""
    return "interrupted" if row.status == "running" and not run_is_alive(row) else row.status


def this_process() -> dict:
    """The pid and host stored with a run, so another process can tell whether it still runs."""
    return {"pid": os.getpid(), "host": socket.gethostname()}
