"""The results store that makes a sweep resumable: DIR/store.jsonl, one record per line.

A record's key is the hash of what decides its figures: vpuc's version, the model file's
bytes, the compile options and the point's whole target (not its name). A sweep run again
into the same DIR computes only the points whose key is not there yet; a line cut short by
an interrupted run is ignored (that point is computed again).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from vpuc.targets import Target

STORE = "store.jsonl"


def record_key(version: str, model_sha256: str, options_text: str, target: Target) -> str:
    data = target.to_json()
    data.pop("name", None)
    data.pop("description", None)
    text = json.dumps([version, model_sha256, options_text, data], sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()


def load(folder: Path) -> dict[str, dict]:
    """The records already in DIR's store, by key."""
    path = folder / STORE
    found: dict[str, dict] = {}
    if not path.is_file():
        return found
    for line in path.read_text().splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue  # the last line of an interrupted run
        if isinstance(record, dict) and "key" in record:
            found[record["key"]] = record
    return found


class Appender:
    """Appends each new record as it arrives (flushed: an interrupted sweep keeps them)."""

    def __init__(self, folder: Path) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        self.file = (folder / STORE).open("a")

    def add(self, record: dict) -> None:
        self.file.write(json.dumps(record, allow_nan=False) + "\n")
        self.file.flush()

    def close(self) -> None:
        self.file.close()
