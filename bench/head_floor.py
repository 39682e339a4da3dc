"""The floor under a listing from the files' heads: read every session file's first
8 kB and parse its front matter with PyYAML (libyaml's CSafeLoader where installed).

This is the least a Python process can do to list sessions from their front
matter, with none of chatloop's checks, index or output: issue 49 holds the first
`chatloop sessions` after the index is lost to at most twice its CPU.
bench/listing.py runs it as a process of its own (its interpreter's start and
PyYAML's import counted, as chatloop's are), A B A B with the listing.

    python bench/head_floor.py FOLDER [FOLDER ...]
"""

from __future__ import annotations

import os
import sys

import yaml

HEAD_BYTES = 8192
LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def front_matter(head: bytes) -> object:
    """The YAML between a head's first two ``---`` lines, loaded (None without one)."""
    if not head.startswith(b"---\n"):
        return None
    end = head.find(b"\n---\n", 3)
    if end < 0:
        return None
    return yaml.load(head[4:end], Loader=LOADER)  # (a safe loader)


def main(folders: list[str]) -> int:
    """Print how many files had a front matter that loaded as a mapping."""
    found = 0
    for folder in folders:
        with os.scandir(folder) as entries:
            for entry in entries:
                if not entry.name.endswith(".md"):
                    continue
                with open(entry.path, "rb") as handle:
                    loaded = front_matter(handle.read(HEAD_BYTES))
                found += isinstance(loaded, dict)
    print(found)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
